#pragma once

// Validation of paths received from the network against an agent's spool directory.

#include <filesystem>
#include <string_view>

#include "absl/status/statusor.h"

namespace gfrep::transfer::internal {

// Name of the spool subdirectory holding partial files and journals (never a valid PATH).
inline constexpr std::string_view kTmpDirName = ".gfrep-tmp";
// Top-level spool names starting with this belong to the agents (.gfrep-tmp, the replica
// layer's .gfrep-index, .gfrep-staging, ...), see transfer/spool_names.h.
inline constexpr std::string_view kReservedPrefix = ".gfrep-";

// Resolves `relative` (a PATH of gf://HOST:PORT/PATH) inside `spool` (canonical).
// kInvalidArgument for empty, absolute, over-long paths, control characters (NUL
// included), "." or ".." components, empty components and a reserved first component
// (".gfrep-*"), except a replica name that IsReplicaRelativePath accepts; kPermissionDenied
// when a symlink makes the path leave the spool. Returns the absolute path.
absl::StatusOr<std::filesystem::path> ResolveSpoolPath(const std::filesystem::path& spool,
                                                       std::string_view relative);

}  // namespace gfrep::transfer::internal
