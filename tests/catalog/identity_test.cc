#include "catalog/identity.h"

#include <gtest/gtest.h>

namespace gfrep::catalog {
namespace {

TEST(IdentityTest, FromTheCertificatesUri) {
  std::optional<Identity> n = IdentityFromUri("gfrep://node/kek1");
  ASSERT_TRUE(n.has_value());
  EXPECT_EQ(n->role, Role::kNode);
  EXPECT_EQ(n->ToString(), "node kek1");
  EXPECT_EQ(IdentityFromUri("gfrep://admin/ops")->role, Role::kAdmin);
  for (const char* bad : {"", "gfrep://", "gfrep://node", "gfrep://node/", "gfrep://root/x", "http://node/kek1",
                          "gfrep://node/a/b", "spiffe://node/kek1"}) {
    EXPECT_FALSE(IdentityFromUri(bad).has_value()) << bad;
  }
  EXPECT_EQ(NodeOfOwner("kek1/1234-abcd#7"), "kek1");
  EXPECT_EQ(NodeOfOwner("kek1"), "kek1");
}

Identity Id(Role role, std::string name) {
  Identity id;
  id.role = role;
  id.name = std::move(name);
  return id;
}

TEST(IdentityTest, GroupsComeFromGroupUrisAndScopesLimitATokensHolder) {
  std::optional<Identity> id = IdentityFromUris(
      {"gfrep://group/phys", "gfrep://user/alice", "gfrep://group/bad/name", "gfrep://group/sim", "gfrep://user/bob"});
  ASSERT_TRUE(id.has_value());
  EXPECT_EQ(id->name, "alice") << "the first identity URI";
  EXPECT_EQ(id->groups, (std::vector<std::string>{"phys", "sim"}));
  EXPECT_FALSE(IdentityFromUris({"gfrep://group/phys"}).has_value()) << "a group alone is nobody";
  EXPECT_FALSE(ParseRoles("group").ok());

  Identity reader = Id(Role::kUser, "alice");
  reader.scopes = std::vector<std::string>{"read"};
  reader.token_id = "ab12";
  EXPECT_TRUE(Authorize(reader, "Stat", Access::kRead).ok());
  absl::Status s = Authorize(reader, "Mkdir", Access::kNamespace);
  EXPECT_TRUE(absl::IsPermissionDenied(s)) << s;
  EXPECT_EQ(s.message(), "Mkdir: user alice (token ab12) may not (its token lacks the scope 'write')");
  s = Authorize(reader, "CreateRequest", Access::kReplicate);
  EXPECT_NE(s.message().find("lacks the scope 'replicate'"), absl::string_view::npos) << s;
  reader.scopes->push_back("replicate");
  EXPECT_TRUE(Authorize(reader, "CreateRequest", Access::kReplicate).ok());
  EXPECT_TRUE(Authorize(Id(Role::kNode, "kek1"), "Mkdir", Access::kReplicate).code() == absl::StatusCode::kPermissionDenied);
}

TEST(IdentityTest, EachRoleMayDoWhatItsRoleAllows) {
  const Identity alice = Id(Role::kUser, "alice"), kek1 = Id(Role::kNode, "kek1"), ops = Id(Role::kAdmin, "ops"),
                 cat = Id(Role::kCatalog, "catalog");
  for (const Identity& who : {alice, kek1, ops, cat}) {
    EXPECT_TRUE(Authorize(who, "Stat", Access::kRead).ok()) << who.ToString();
  }
  for (const Identity& who : {alice, ops, cat}) {
    EXPECT_TRUE(Authorize(who, "Remove", Access::kNamespace).ok()) << who.ToString();
  }
  // A node's certificate cannot touch the namespace.
  absl::Status rm = Authorize(kek1, "Remove", Access::kNamespace);
  EXPECT_TRUE(absl::IsPermissionDenied(rm));
  EXPECT_EQ(rm.message(), "Remove: node kek1 may not (users and admins)");
  EXPECT_TRUE(Authorize(ops, "PutSite", Access::kAdmin).ok());
  EXPECT_TRUE(Authorize(cat, "PutSite", Access::kAdmin).ok());
  absl::Status s = Authorize(alice, "PutSite", Access::kAdmin);
  EXPECT_TRUE(absl::IsPermissionDenied(s));
  EXPECT_EQ(s.message(), "PutSite: user alice may not (admin only)");
  EXPECT_TRUE(absl::IsPermissionDenied(Authorize(kek1, "PutRoute", Access::kAdmin)));
  // A node for itself only; a user not at all; an admin for anyone.
  EXPECT_TRUE(Authorize(kek1, "ClaimTasks", Access::kOwnNode, {"kek1"}).ok());
  s = Authorize(kek1, "ClaimTasks", Access::kOwnNode, {"kek1", "kek2"});
  EXPECT_TRUE(absl::IsPermissionDenied(s));
  EXPECT_NE(s.message().find("not for node 'kek2'"), absl::string_view::npos) << s;
  EXPECT_TRUE(absl::IsPermissionDenied(Authorize(alice, "ClaimTasks", Access::kOwnNode, {"alice"})));
  EXPECT_TRUE(Authorize(ops, "ClaimTasks", Access::kOwnNode, {"kek2"}).ok());
  // A verified certificate without a gfrep identity: nothing.
  s = Authorize(std::nullopt, "Stat", Access::kRead);
  EXPECT_TRUE(absl::IsPermissionDenied(s));
  EXPECT_NE(s.message().find("gfrep://ROLE/NAME"), absl::string_view::npos) << s;
}

TEST(IdentityTest, TransferPeersAreServedByRole) {
  absl::StatusOr<std::vector<Role>> roles = ParseRoles("node,admin");
  ASSERT_TRUE(roles.ok()) << roles.status();
  EXPECT_EQ(roles->size(), 2u);
  EXPECT_FALSE(ParseRoles("").ok());
  EXPECT_FALSE(ParseRoles("node,").ok());
  absl::StatusOr<std::vector<Role>> bad = ParseRoles("node,robot");
  EXPECT_TRUE(absl::IsInvalidArgument(bad.status()));
  EXPECT_NE(bad.status().message().find("'robot'"), absl::string_view::npos);
  // The first gfrep identity among the URIs counts; others are ignored.
  EXPECT_TRUE(AuthorizeTransferPeer({"https://example.org/x", "gfrep://node/kek1"}, *roles).ok());
  EXPECT_TRUE(AuthorizeTransferPeer({"gfrep://admin/ops"}, *roles).ok());
  absl::Status user = AuthorizeTransferPeer({"gfrep://user/alice"}, *roles);
  EXPECT_TRUE(absl::IsPermissionDenied(user));
  EXPECT_EQ(user.message(), "transfer session: user alice may not open one here (this agent serves node, admin)");
  absl::Status none = AuthorizeTransferPeer({}, *roles);
  EXPECT_TRUE(absl::IsPermissionDenied(none));
  EXPECT_NE(none.message().find("gfrep://ROLE/NAME"), absl::string_view::npos);
  EXPECT_TRUE(absl::IsPermissionDenied(AuthorizeTransferPeer({"gfrep://robot/r2"}, *roles)));
}

}  // namespace
}  // namespace gfrep::catalog
