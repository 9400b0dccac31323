// Fuzzes agent addresses and gf:// URLs (transfer/url.h): what gfcp's arguments, a daemon's
// --listen, the catalog's node addresses and a peer's pull_from "source" are parsed with.
//
// The first input byte picks the mode ('0' ParseEndpoint, '1' ParseGfUrl, '2' parts); the
// rest is the text, or in mode 2 a port (2 bytes), then a host and a path separated by the
// first newline. Asserts, against an oracle written here from the header's grammar:
//  - ParseEndpoint accepts exactly "HOST:PORT" (split at the last ':') and "[HOST]:PORT",
//    with HOST of 1..kMaxHostBytes printable ASCII bytes other than space, '[', ']' and '/',
//    and PORT decimal digits of a value <= 65535; it returns that host and port; refusals
//    are kInvalidArgument;
//  - ParseGfUrl accepts exactly "gf://" ENDPOINT "/" PATH with a non-empty PATH (anything),
//    and returns those parts; IsGfUrl is the "gf://" prefix;
//  - round trips: an accepted endpoint's ToString() parses back to the same endpoint (and
//    formats the same again); an accepted URL written back as "gf://" + ToString() + "/" +
//    PATH parses to the same parts; an endpoint made from any host and port (a URL made from
//    any host, port and path) parses back to exactly them when the host is valid (and the
//    path is not empty), and never otherwise.

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "tests/fuzz/fuzz_check.h"
#include "transfer/url.h"

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

// Decimal digits only (no sign, no space), any number of leading zeros, value <= 65535.
std::optional<std::uint16_t> OraclePort(std::string_view text) {
  if (text.empty()) return std::nullopt;
  for (char c : text) {
    if (c < '0' || c > '9') return std::nullopt;
  }
  const std::size_t first = text.find_first_not_of('0');
  if (first == std::string_view::npos) return 0;
  const std::string_view digits = text.substr(first);
  if (digits.size() > 5) return std::nullopt;
  unsigned value = 0;
  for (char c : digits) value = value * 10 + static_cast<unsigned>(c - '0');
  if (value > 65535) return std::nullopt;
  return static_cast<std::uint16_t>(value);
}

std::optional<Endpoint> OracleEndpoint(std::string_view text) {
  std::string_view host, port;
  if (text.starts_with('[')) {
    const std::size_t close = text.find(']');
    if (close == std::string_view::npos || text.substr(close + 1, 1) != ":") return std::nullopt;
    host = text.substr(1, close - 1);
    port = text.substr(close + 2);
  } else {
    const std::size_t colon = text.rfind(':');
    if (colon == std::string_view::npos) return std::nullopt;
    host = text.substr(0, colon);
    port = text.substr(colon + 1);
  }
  std::optional<std::uint16_t> p = OraclePort(port);
  if (!ValidHost(host) || !p) return std::nullopt;
  return Endpoint{std::string(host), *p};
}

bool Same(const Endpoint& a, const Endpoint& b) { return a.host == b.host && a.port == b.port; }

void CheckEndpoint(std::string_view text) {
  absl::StatusOr<Endpoint> e = ParseEndpoint(text);
  std::optional<Endpoint> want = OracleEndpoint(text);
  if (!e.ok()) {
    FUZZ_CHECK(absl::IsInvalidArgument(e.status()),
               "ParseEndpoint refusal must be kInvalidArgument");
    FUZZ_CHECK(!want, "ParseEndpoint refused an address the grammar allows");
    return;
  }
  FUZZ_CHECK(want, "ParseEndpoint accepted an address the grammar does not allow");
  FUZZ_CHECK(Same(*e, *want), "ParseEndpoint returned other parts than the grammar's");
  const std::string once = e->ToString();
  absl::StatusOr<Endpoint> again = ParseEndpoint(once);
  FUZZ_CHECK(again.ok() && Same(*again, *e), "ToString() does not parse back to the endpoint");
  FUZZ_CHECK(again->ToString() == once, "ToString() is not stable");
}

void CheckUrl(std::string_view text) {
  FUZZ_CHECK(IsGfUrl(text) == text.starts_with("gf://"), "IsGfUrl is not the gf:// prefix");
  absl::StatusOr<GfUrl> u = ParseGfUrl(text);
  std::optional<GfUrl> want;
  if (text.starts_with("gf://")) {
    const std::string_view rest = text.substr(5);
    const std::size_t slash = rest.find('/');
    if (slash != std::string_view::npos && slash + 1 < rest.size()) {
      if (std::optional<Endpoint> e = OracleEndpoint(rest.substr(0, slash))) {
        want = GfUrl{*e, std::string(rest.substr(slash + 1))};
      }
    }
  }
  if (!u.ok()) {
    FUZZ_CHECK(absl::IsInvalidArgument(u.status()), "ParseGfUrl refusal must be kInvalidArgument");
    FUZZ_CHECK(!want, "ParseGfUrl refused a URL the grammar allows");
    return;
  }
  FUZZ_CHECK(want, "ParseGfUrl accepted a URL the grammar does not allow");
  FUZZ_CHECK(Same(u->endpoint, want->endpoint) && u->path == want->path,
             "ParseGfUrl returned other parts than the grammar's");
  const std::string again_text = "gf://" + u->endpoint.ToString() + "/" + u->path;
  absl::StatusOr<GfUrl> again = ParseGfUrl(again_text);
  FUZZ_CHECK(again.ok() && Same(again->endpoint, u->endpoint) && again->path == u->path,
             "a URL written back from its parts parses to other parts");
}

void CheckParts(std::string_view in) {
  if (in.size() < 2) return;
  const Endpoint e{"", static_cast<std::uint16_t>(static_cast<unsigned char>(in[0]) << 8 |
                                                  static_cast<unsigned char>(in[1]))};
  in.remove_prefix(2);
  const std::size_t nl = in.find('\n');
  Endpoint made = e;
  made.host = std::string(in.substr(0, nl));
  const std::string path = nl == std::string_view::npos ? "" : std::string(in.substr(nl + 1));

  // Made from a bad host, the text may still parse, as other parts: host "[0]" and port 80
  // give "[0]:80", host "0"; a URL from host ":1]:9/x" is host ":1", port 9, path "x]:80/...".
  absl::StatusOr<Endpoint> back = ParseEndpoint(made.ToString());
  FUZZ_CHECK((back.ok() && Same(*back, made)) == ValidHost(made.host),
             "ToString() of an endpoint parses back to it exactly when its host is valid");

  absl::StatusOr<GfUrl> url = ParseGfUrl("gf://" + made.ToString() + "/" + path);
  const bool same = url.ok() && Same(url->endpoint, made) && url->path == path;
  FUZZ_CHECK(same == (ValidHost(made.host) && !path.empty()),
             "a URL made from parts parses back to them exactly when the host is valid and the "
             "path not empty");
}

}  // namespace
}  // namespace gfrep::transfer

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace gfrep::transfer;
  if (size < 1) return 0;
  const std::string_view in(reinterpret_cast<const char*>(data + 1), size - 1);
  switch (data[0] % 3) {
    case 0:
      CheckEndpoint(in);
      break;
    case 1:
      CheckUrl(in);
      break;
    default:
      CheckParts(in);
      break;
  }
  return 0;
}
