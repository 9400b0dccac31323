#include "transfer/url.h"

#include <fmt/format.h>

#include <charconv>

#include "absl/status/status.h"

namespace gfrep::transfer {
namespace {

bool ValidHost(std::string_view host) {
  if (host.empty() || host.size() > kMaxHostBytes) return false;
  for (char c : host) {
    const auto u = static_cast<unsigned char>(c);
    if (u <= 0x20 || u >= 0x7f || c == '[' || c == ']' || c == '/') return false;
  }
  return true;
}

}  // namespace

std::string Endpoint::ToString() const {
  if (host.find(':') != std::string::npos) return fmt::format("[{}]:{}", host, port);
  return fmt::format("{}:{}", host, port);
}

absl::StatusOr<Endpoint> ParseEndpoint(std::string_view text) {
  Endpoint e;
  std::string_view port;
  if (text.starts_with('[')) {
    std::size_t close = text.find(']');
    if (close == std::string_view::npos || close + 1 >= text.size() || text[close + 1] != ':') {
      return absl::InvalidArgumentError(fmt::format("bad address '{}': expected [V6]:PORT", text));
    }
    e.host = std::string(text.substr(1, close - 1));
    port = text.substr(close + 2);
  } else {
    std::size_t colon = text.rfind(':');
    if (colon == std::string_view::npos || colon == 0) {
      return absl::InvalidArgumentError(fmt::format("bad address '{}': expected HOST:PORT", text));
    }
    e.host = std::string(text.substr(0, colon));
    port = text.substr(colon + 1);
  }
  if (!ValidHost(e.host)) {
    return absl::InvalidArgumentError(
        fmt::format("bad host in '{}': expected 1 to {} printable ASCII bytes other than space, "
                    "'[', ']' and '/'",
                    text, kMaxHostBytes));
  }
  unsigned value = 0;
  auto [p, ec] = std::from_chars(port.data(), port.data() + port.size(), value);
  if (ec != std::errc() || p != port.data() + port.size() || value > 65535 || port.empty()) {
    return absl::InvalidArgumentError(fmt::format("bad port in '{}'", text));
  }
  e.port = static_cast<std::uint16_t>(value);
  return e;
}

bool IsGfUrl(std::string_view text) { return text.starts_with("gf://"); }

absl::StatusOr<GfUrl> ParseGfUrl(std::string_view text) {
  if (!IsGfUrl(text)) {
    return absl::InvalidArgumentError(fmt::format("'{}' is not a gf:// URL", text));
  }
  std::string_view rest = text.substr(5);
  std::size_t slash = rest.find('/');
  if (slash == std::string_view::npos || slash + 1 >= rest.size()) {
    return absl::InvalidArgumentError(fmt::format("'{}': expected gf://HOST:PORT/PATH", text));
  }
  absl::StatusOr<Endpoint> e = ParseEndpoint(rest.substr(0, slash));
  if (!e.ok()) return e.status();
  return GfUrl{*e, std::string(rest.substr(slash + 1))};
}

}  // namespace gfrep::transfer
