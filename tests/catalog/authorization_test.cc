// AuthorizedCatalog (catalog/authorization.h) over a real RocksDB catalog, without gRPC: what
// each role may call, what is reported as a refusal, and the rules that depend on the caller
// (ownership and default modes of new content, a user's requests, its quota). The same rules
// over gRPC, with certificates and tokens: tests/integration/auth_test.cc.
#include "catalog/authorization.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "catalog/internal/kv_catalog.h"
#include "tests/support/temp_dir.h"

namespace gfrep::catalog {
namespace {

Identity Who(Role role, std::string name) {
  Identity id;
  id.role = role;
  id.name = std::move(name);
  return id;
}

class AuthorizationTest : public ::testing::Test {
 protected:
  void SetUp() override {
    CatalogOptions o;
    o.path = dir_.Sub("db");
    absl::StatusOr<std::unique_ptr<Catalog>> c = OpenRocksCatalog(o);
    ASSERT_TRUE(c.ok()) << c.status();
    catalog_ = std::move(*c);
    authorizer_ =
        std::make_unique<Authorizer>(*catalog_, AuthorizerOptions{.max_open_requests_per_user = 2});
    MkdirOptions home;
    home.owner = "alice";
    home.mode = 0755;
    ASSERT_TRUE(catalog_->Mkdir("/home", {}).ok());
    ASSERT_TRUE(catalog_->Mkdir("/home/alice", home).ok());
  }

  AuthorizedCatalog As(const std::optional<Identity>& who, bool enforce = true) {
    return authorizer_->As(who, enforce, [this](const absl::Status& s) { refusals_.push_back(s); });
  }

  testing::TempDir dir_{"authz"};
  std::unique_ptr<Catalog> catalog_;
  std::unique_ptr<Authorizer> authorizer_;
  std::vector<absl::Status> refusals_;
};

TEST_F(AuthorizationTest, EachRoleCallsOnlyWhatItMayAndEveryRefusalIsReportedOnce) {
  AuthorizedCatalog node = As(Who(Role::kNode, "n1"));
  absl::Status s = node.PutSite({"A", {}});
  EXPECT_TRUE(absl::IsPermissionDenied(s)) << s;
  EXPECT_NE(s.message().find("PutSite"), std::string_view::npos) << s;
  ASSERT_EQ(refusals_.size(), 1u);
  EXPECT_EQ(refusals_.front(), s);
  EXPECT_FALSE(catalog_->ListSites()->size() > 0) << "a refused call changed the catalog";

  // A node may not touch the namespace, and acts only for itself.
  EXPECT_TRUE(absl::IsPermissionDenied(node.Mkdir("/x", {}).status()));
  Heartbeat other;
  other.node = "n2";
  EXPECT_TRUE(absl::IsPermissionDenied(node.SendHeartbeat(other)));
  EXPECT_TRUE(
      absl::IsPermissionDenied(node.RenewLease(1, "n2/w0", std::chrono::seconds(1)).status()));
  EXPECT_TRUE(absl::IsPermissionDenied(
      node.RenewLeases({{1, "n1/w0"}, {2, "n2/w0"}}, std::chrono::seconds(1)).status()));
  EXPECT_TRUE(absl::IsPermissionDenied(node.YieldTask(1, "n2/w0", "straggler").status()));
  EXPECT_EQ(refusals_.size(), 6u);
  // Reads are anyone's; a node's own call reaches the catalog (which says the node is unknown).
  EXPECT_TRUE(node.Stat("/home").ok());
  Heartbeat own;
  own.node = "n1";
  EXPECT_TRUE(absl::IsNotFound(node.SendHeartbeat(own)));
  EXPECT_EQ(refusals_.size(), 6u) << "a refusal of the catalog itself is not an authorization's";

  // No identity where the server checks them: nothing but refusals.
  AuthorizedCatalog nobody = As(std::nullopt);
  EXPECT_TRUE(absl::IsPermissionDenied(nobody.Stat("/home").status()));

  AuthorizedCatalog admin = As(Who(Role::kAdmin, "root"));
  EXPECT_TRUE(admin.PutSite({"A", {}}).ok());
}

TEST_F(AuthorizationTest, AUsersNewContentIsItsOwnWithDefaultModesAndSomeoneElsesKeepsItsOwner) {
  AuthorizedCatalog alice = As(Who(Role::kUser, "alice"));
  MkdirOptions asked;
  asked.owner = "mallory";  // a user does not choose the owner
  asked.mode = 0;           // unset: the default
  absl::StatusOr<Attributes> d = alice.Mkdir("/home/alice/data", asked);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->owner, "alice");
  EXPECT_EQ(d->mode, 0755u);
  FileContent f;
  f.owner = "mallory";
  f.mode = 0;
  absl::StatusOr<Attributes> a = alice.CreateFile("/home/alice/data/f", f);
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->owner, "alice");
  EXPECT_EQ(a->mode, 0644u);

  // bob may not create in alice's home: refused by the namespace's permissions.
  AuthorizedCatalog bob = As(Who(Role::kUser, "bob"));
  EXPECT_TRUE(absl::IsPermissionDenied(bob.CreateFile("/home/alice/x", f).status()));
  EXPECT_EQ(refusals_.size(), 1u);

  // New content of a file someone else owns (an admin's group-writable file) keeps its owner
  // and mode.
  FileContent shared;
  shared.owner = "carol";
  shared.mode = 0666;
  ASSERT_TRUE(catalog_->CreateFile("/home/alice/data/shared", shared).ok());
  FileContent update;
  update.size = 5;
  update.mode = 0600;
  absl::StatusOr<Attributes> c =
      alice.CommitFile("/home/alice/data/shared", update, "", std::nullopt);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->owner, "carol");
  EXPECT_EQ(c->mode, 0666u);

  // Without identities (no client CA) a call goes through as asked, but for default modes.
  AuthorizedCatalog open = As(std::nullopt, /*enforce=*/false);
  absl::StatusOr<Attributes> o = open.CreateFile("/home/open", f);
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->owner, "mallory");
  EXPECT_EQ(o->mode, 0644u);
}

TEST_F(AuthorizationTest, AUsersRequestIsItsOwnBoundedByItsQuotaAndOnlyItCancelsIt) {
  AuthorizedCatalog alice = As(Who(Role::kUser, "alice"));
  RequestSpec spec;
  spec.paths = {"/home/alice"};
  spec.copies = 1;
  spec.owner = "policy-rule";
  spec.origin = RequestOrigin::kPolicy;  // a user never speaks for a policy
  absl::StatusOr<Request> r = alice.CreateRequest(spec);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->spec.owner, "alice");
  EXPECT_EQ(r->spec.origin, RequestOrigin::kUser);

  spec.priority = kMaxUserRequestPriority + 1;
  EXPECT_TRUE(absl::IsPermissionDenied(alice.CreateRequest(spec).status()));
  spec.priority = 0;
  ASSERT_TRUE(alice.CreateRequest(spec).ok());
  // The quota is 2 open requests.
  absl::Status third = alice.CreateRequest(spec).status();
  EXPECT_TRUE(absl::IsResourceExhausted(third)) << third;

  AuthorizedCatalog bob = As(Who(Role::kUser, "bob"));
  EXPECT_TRUE(absl::IsPermissionDenied(bob.CancelRequest(r->id)));
  EXPECT_TRUE(alice.CancelRequest(r->id).ok());
  EXPECT_TRUE(alice.CreateRequest(spec).ok()) << "a cancelled request no longer counts";
}

}  // namespace
}  // namespace gfrep::catalog
