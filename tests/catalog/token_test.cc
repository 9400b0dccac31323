#include "catalog/token.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <fstream>

#include "tests/support/temp_dir.h"

namespace gfrep::catalog {
namespace {

constexpr std::int64_t kNow = 1'800'000'000;

TokenClaims Alice() {
  TokenClaims c;
  c.user = "alice";
  c.groups = {"phys"};
  c.scopes = {"read", "write"};
  c.issued_unix = kNow;
  c.expires_unix = kNow + 3600;
  return c;
}

TEST(TokenTest, AMintedTokenVerifiesWithItsClaims) {
  const std::string key = "0123456789abcdef0123456789abcdef";
  absl::StatusOr<std::string> t = MintToken(Alice(), key);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_TRUE(t->starts_with("gfrep1."));
  absl::StatusOr<TokenClaims> c = VerifyToken(*t, key, kNow + 10);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->user, "alice");
  EXPECT_EQ(c->groups, std::vector<std::string>{"phys"});
  EXPECT_EQ(c->scopes, (std::vector<std::string>{"read", "write"}));
  EXPECT_EQ(c->expires_unix, kNow + 3600);
  EXPECT_EQ(c->id.size(), 32u);
  // Two tokens for the same claims have different ids (each is revocable on its own).
  EXPECT_NE(VerifyToken(*MintToken(Alice(), key), key, kNow)->id, c->id);
}

TEST(TokenTest, ForgedAlteredExpiredAndMalformedTokensAreRefused) {
  const std::string key = "0123456789abcdef0123456789abcdef";
  const std::string t = *MintToken(Alice(), key);
  auto refused = [](const absl::StatusOr<TokenClaims>& c, const std::string& why) {
    EXPECT_TRUE(absl::IsUnauthenticated(c.status())) << c.status();
    EXPECT_NE(c.status().message().find(why), absl::string_view::npos) << c.status();
  };
  refused(VerifyToken(t, "another key of thirty-two bytes!", kNow), "bad signature");
  // A payload changed to another user keeps the old MAC: refused.
  TokenClaims bob = Alice();
  bob.user = "bob";
  const std::string other = *MintToken(bob, "another key of thirty-two bytes!");
  const std::string spliced = other.substr(0, other.rfind('.')) + t.substr(t.rfind('.'));
  refused(VerifyToken(spliced, key, kNow), "bad signature");
  refused(VerifyToken(t, key, kNow + 3600), "expired");
  refused(VerifyToken(t, key, kNow - 3600), "not valid yet");
  refused(VerifyToken("gfrep1.abc", key, kNow), "malformed");
  refused(VerifyToken("Bearer x", key, kNow), "not a gfrep token");
  refused(VerifyToken(std::string(5000, 'a'), key, kNow), "longer than");
}

TEST(TokenTest, BadClaimsAreNotMinted) {
  const std::string key = "0123456789abcdef0123456789abcdef";
  TokenClaims c = Alice();
  c.scopes = {"root"};
  EXPECT_TRUE(absl::IsInvalidArgument(MintToken(c, key).status()));
  c = Alice();
  c.user = "a/b";
  EXPECT_TRUE(absl::IsInvalidArgument(MintToken(c, key).status()));
  c = Alice();
  c.expires_unix = c.issued_unix;
  EXPECT_TRUE(absl::IsInvalidArgument(MintToken(c, key).status()));
  EXPECT_TRUE(absl::IsInvalidArgument(ParseScopes("read,admin").status()));
  EXPECT_EQ(*ParseScopes("replicate,read,read"), (std::vector<std::string>{"replicate", "read"}));
}

TEST(TokenTest, TheKeyFileMustBePrivateAndHex) {
  testing::TempDir dir("token");
  const std::string path = dir.Sub("token.key");
  std::ofstream(path) << NewTokenKey() << "\n";
  ::chmod(path.c_str(), 0644);
  absl::StatusOr<std::string> k = ReadTokenKey(path);
  EXPECT_TRUE(absl::IsInvalidArgument(k.status()));
  EXPECT_NE(k.status().message().find("readable by others"), absl::string_view::npos) << k.status();
  ::chmod(path.c_str(), 0600);
  k = ReadTokenKey(path);
  ASSERT_TRUE(k.ok()) << k.status();
  EXPECT_EQ(k->size(), 32u);
  std::ofstream(path) << "not hex\n";
  EXPECT_TRUE(absl::IsInvalidArgument(ReadTokenKey(path).status()));
  EXPECT_TRUE(absl::IsInvalidArgument(ReadTokenKey(dir.Sub("missing")).status()));
}

}  // namespace
}  // namespace gfrep::catalog
