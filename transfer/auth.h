#pragma once

// Shared-key authentication as Gfarm does it: every host of a deployment holds the same
// secret key file (created on first use, mode 0600, then copied to the other hosts). The
// control connection runs a mutual challenge-response (HMAC-SHA256 over both sides'
// random nonces); the key itself never crosses the network.

#include <filesystem>
#include <string>

#include "absl/status/statusor.h"

namespace gfrep::transfer {

// $HOME/.gfrep/shared_key.
std::filesystem::path DefaultKeyPath();

// Reads the key file (64 hex digits), creating it with a fresh random key (directory 0700,
// file 0600) when missing. Returns the raw key bytes. kPermissionDenied if the file is
// readable or writable by group/others; kInvalidArgument if its content is malformed.
absl::StatusOr<std::string> LoadOrCreateSharedKey(const std::filesystem::path& path);

}  // namespace gfrep::transfer
