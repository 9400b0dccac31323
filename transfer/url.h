#pragma once

// Agent addresses and gf:// URLs as users and peers write them: "HOST:PORT", "[V6]:PORT",
// "gf://HOST:PORT/PATH". Kept apart from client.h (which declares the copies that use them)
// so that code needing only the syntax does not pull in the transfer engine.
//
// Thread safety: pure functions.

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace gfrep::transfer {

// The longest host ParseEndpoint accepts (a DNS name has at most 253 bytes).
inline constexpr std::size_t kMaxHostBytes = 255;

struct Endpoint {
  std::string host;
  std::uint16_t port = 0;
  // "HOST:PORT", or "[HOST]:PORT" if the host has a ':' (IPv6); ParseEndpoint reads it back.
  std::string ToString() const;
};

// "HOST:PORT" (split at the last ':') or "[HOST]:PORT" (for IPv6). HOST is 1 to
// kMaxHostBytes of printable ASCII other than space, '[', ']' and '/' (DNS names, IP
// literals, an IPv6 %zone): what ToString() and a gf:// URL carry back unchanged. PORT is
// decimal, at most 65535. kInvalidArgument for anything else.
absl::StatusOr<Endpoint> ParseEndpoint(std::string_view text);

// "gf://HOST:PORT/PATH" (PATH relative to that agent's spool).
struct GfUrl {
  Endpoint endpoint;
  std::string path;
};
// kInvalidArgument unless `text` is such a URL with a valid endpoint and a non-empty PATH.
absl::StatusOr<GfUrl> ParseGfUrl(std::string_view text);
// True if `text` starts with "gf://" (it may still be a bad URL).
bool IsGfUrl(std::string_view text);

}  // namespace gfrep::transfer
