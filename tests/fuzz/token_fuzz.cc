// Fuzzes what a caller of the catalog sends to say who it is: the user token in
// "authorization: Bearer TOKEN" (catalog/token.h, VerifyToken) and the URI subject
// alternative names of a client certificate (catalog/identity.h, IdentityFromUris).
//
// The first input byte picks the parser; the rest is the input. Properties beside "never
// crashes":
//  - a token verifies only if its MAC is right: the input as given is checked against a key
//    the fuzzer cannot know (so nothing verifies), and a token minted from the input's
//    claims with the fuzzer's key verifies to exactly those claims, while the same token
//    with any one byte of its MAC changed does not;
//  - an identity parsed from URIs has a valid role and a 1-64 byte name without '/', and
//    every group it carries came from a gfrep://group/ URI of the input.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "catalog/identity.h"
#include "catalog/token.h"
#include "tests/fuzz/fuzz_check.h"

namespace gfrep {
namespace {

constexpr std::int64_t kNow = 1'800'000'000;

void Token(std::string_view in) {
  const std::string secret = "a key no fuzz input was minted with";
  absl::StatusOr<catalog::TokenClaims> c = catalog::VerifyToken(in, secret, kNow);
  FUZZ_CHECK(!c.ok(), "a token the fuzzer made up verified with a key it does not know");
  FUZZ_CHECK(absl::IsUnauthenticated(c.status()), "a refused token is UNAUTHENTICATED");

  // Claims from the input: user and one group from its halves, all scopes.
  catalog::TokenClaims claims;
  const std::size_t half = in.size() / 2;
  claims.user = std::string(in.substr(0, half));
  claims.groups = {std::string(in.substr(half))};
  claims.scopes = {"read", "write"};
  claims.issued_unix = kNow - 10;
  claims.expires_unix = kNow + 10;
  const std::string key = "the fuzzer's own key, 32 bytes..";
  absl::StatusOr<std::string> t = catalog::MintToken(claims, key);
  if (!t.ok()) {
    FUZZ_CHECK(absl::IsInvalidArgument(t.status()), "a refused mint is INVALID_ARGUMENT");
    return;
  }
  absl::StatusOr<catalog::TokenClaims> back = catalog::VerifyToken(*t, key, kNow);
  FUZZ_CHECK(back.ok(), "a freshly minted token verifies");
  FUZZ_CHECK(back->user == claims.user && back->groups == claims.groups && back->scopes == claims.scopes,
             "a token carries its claims unchanged");
  FUZZ_CHECK(!catalog::VerifyToken(*t, key, kNow + 10).ok(), "a token is refused at its expiry");
  std::string altered = *t;
  char& last = altered[altered.size() - 2];  // inside the MAC's base64
  last = last == 'A' ? 'B' : 'A';
  FUZZ_CHECK(!catalog::VerifyToken(altered, key, kNow).ok(), "an altered MAC is refused");
}

void Uris(std::string_view in) {
  std::vector<std::string> uris;
  for (std::size_t start = 0; start <= in.size();) {
    const std::size_t nl = in.find('\n', start);
    uris.emplace_back(in.substr(start, nl == std::string_view::npos ? std::string_view::npos : nl - start));
    if (nl == std::string_view::npos) break;
    start = nl + 1;
  }
  std::optional<catalog::Identity> id = catalog::IdentityFromUris(uris);
  if (!id) return;
  FUZZ_CHECK(!id->name.empty() && id->name.size() <= 64 && id->name.find('/') == std::string::npos,
             "an identity's name is 1-64 bytes without '/'");
  for (const std::string& g : id->groups) {
    bool found = false;
    for (const std::string& u : uris) found |= u == "gfrep://group/" + g;
    FUZZ_CHECK(found, "every group comes from a gfrep://group/ URI");
  }
  FUZZ_CHECK(!id->scopes.has_value(), "a certificate's holder is not scope-limited");
}

}  // namespace
}  // namespace gfrep

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const std::string_view in(reinterpret_cast<const char*>(data) + 1, size - 1);
  if (data[0] % 2 == 0) {
    gfrep::Token(in);
  } else {
    gfrep::Uris(in);
  }
  return 0;
}
