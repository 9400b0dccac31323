// Who may do what (the security issue): a federation with mutual TLS made with gfca —
// gfcatalogd requires client certificates, the agents present their node certificates, the
// tools an admin's or a user's. Certificates the catalog must refuse (none, another CA's,
// expired) and a catalog certificate that does not name the host dialled; identities acting
// beyond their role (a user changing the topology, a node acting for another node) get
// PERMISSION_DENIED naming the action and the identity; a replication runs end to end.
#include <gtest/gtest.h>

#include <chrono>
#include <csignal>
#include <filesystem>

#include "catalog/client.h"
#include "tests/support/federation.h"

namespace gfrep {
namespace {

namespace fs = std::filesystem;
using testing::RunResult;

class CatalogAuthTest : public testing::FederationTest {
 protected:
  CatalogAuthTest() : FederationTest("auth") {}

  void SetUp() override {
    testing::FederationOptions o;
    o.mutual_tls = true;
    StartFederation({{"kek1", "kek"}, {"sdsc1", "sdsc"}}, o);
  }

  std::unique_ptr<catalog::CatalogClient> As(const std::string& name) {
    catalog::ClientOptions co = ClientAs(name);
    co.timeout = std::chrono::seconds(5);
    auto c = catalog::CatalogClient::Create(co);
    EXPECT_TRUE(c.ok()) << c.status();
    return c.ok() ? std::move(*c) : nullptr;
  }

  // A denial that names the action and the identity.
  static void ExpectDenied(const absl::Status& s, const std::string& action, const std::string& who) {
    EXPECT_TRUE(absl::IsPermissionDenied(s)) << s;
    EXPECT_NE(s.message().find(action), absl::string_view::npos) << s;
    EXPECT_NE(s.message().find(who), absl::string_view::npos) << s;
  }
};

TEST_F(CatalogAuthTest, AReplicationRunsEndToEndWithMutualTls) {
  const std::string bytes = Store("/exp/f", 3 << 20, 7, "kek1");
  RunResult r = Tool({"gfrep", "-N", "2", "/exp/f"});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_EQ(Replica("sdsc1", "/exp/f"), bytes);
  // The tools without a certificate are refused by the handshake, with the catalog's address.
  testing::SubprocessOptions bare;
  bare.env = {{"GFREP_CATALOG", catalog_}, {"GFREP_CATALOG_CA", Ca("ca.pem")}};
  RunResult anon = testing::RunCommand({testing::BinPath("gfwhere"), "/exp/f", "--timeout", "5"}, bare);
  EXPECT_NE(anon.exit_code, 0);
  EXPECT_FALSE(anon.err.empty());
}

TEST_F(CatalogAuthTest, CertificatesTheCatalogMustRefuse) {
  // No client certificate.
  catalog::ClientOptions none = ClientAs("root");
  none.tls_cert_pem.clear();
  none.tls_key_pem.clear();
  none.timeout = std::chrono::seconds(5);
  auto c = catalog::CatalogClient::Create(none);
  ASSERT_TRUE(c.ok());
  EXPECT_FALSE((*c)->ListSites().ok()) << "a client without a certificate";

  // An expired one.
  IssueCert("admin", "old", {"--days", "-1"});
  auto old = As("old");
  ASSERT_NE(old, nullptr);
  EXPECT_FALSE(old->ListSites().ok()) << "an expired certificate";

  // One from another CA (same names).
  const std::string other = (fs::path(Ca("")).parent_path().parent_path() / "other-ca").string();
  ASSERT_EQ(testing::RunCommand({testing::BinPath("gfca"), "init", "--dir", other}).exit_code, 0);
  ASSERT_EQ(testing::RunCommand({testing::BinPath("gfca"), "issue", "admin", "root", "--dir", other}).exit_code, 0);
  catalog::ClientOptions foreign = ClientAs("root");
  foreign.tls_cert_pem = testing::ReadFile(fs::path(other) / "root.pem");
  foreign.tls_key_pem = testing::ReadFile(fs::path(other) / "root.key");
  foreign.timeout = std::chrono::seconds(5);
  auto f = catalog::CatalogClient::Create(foreign);
  ASSERT_TRUE(f.ok());
  EXPECT_FALSE((*f)->ListSites().ok()) << "a certificate from another CA";

  // A certificate of our CA without a gfrep identity in it is refused per call.
  // (gfca always writes one; an organisation's CA might not.) Covered by the unit test of
  // Authorize; here: the admin still works after all these refusals.
  auto root = As("root");
  ASSERT_NE(root, nullptr);
  EXPECT_TRUE(root->ListSites().ok());
}

TEST_F(CatalogAuthTest, TheClientChecksTheCatalogsHostName) {
  // A catalog whose certificate names another host: the client refuses it.
  IssueCert("catalog", "elsewhere", {"--host", "192.0.2.1"});
  StopCatalog();
  for (std::string& f : federation_options().catalogd_flags) {
    if (f == Ca("catalog.pem")) f = Ca("elsewhere.pem");
    if (f == Ca("catalog.key")) f = Ca("elsewhere.key");
  }
  StartCatalog();
  auto root = As("root");
  ASSERT_NE(root, nullptr);
  absl::StatusOr<std::vector<catalog::Site>> sites = root->ListSites();
  EXPECT_FALSE(sites.ok()) << "the catalog's certificate does not name 127.0.0.1";
}

TEST_F(CatalogAuthTest, EachIdentityMayDoOnlyWhatItsRoleAllows) {
  IssueCert("user", "alice");
  auto alice = As("alice");
  auto kek1 = As("kek1");
  auto root = As("root");
  ASSERT_TRUE(alice && kek1 && root);

  // A user writes the namespace and asks for replication, but not the topology or policies.
  catalog::MkdirOptions mk;
  mk.parents = true;
  EXPECT_TRUE(alice->Mkdir("/alice/data", mk).ok());
  ExpectDenied(alice->PutSite({"evil", {}}), "PutSite", "user alice");
  ExpectDenied(alice->RemoveNode("kek1"), "RemoveNode", "user alice");
  ExpectDenied(alice->PutPolicies("rules: []\n", "alice", std::nullopt).status(), "PutPolicies", "user alice");
  ExpectDenied(alice->SendHeartbeat({"kek1", 0, 0, 0, {}}), "SendHeartbeat", "user alice");
  // The same through a tool: a clear one-line error.
  testing::SubprocessOptions as_alice = ToolOptions();
  as_alice.env["GFREP_CERT"] = Ca("alice.pem");
  as_alice.env["GFREP_KEY"] = Ca("alice.key");
  RunResult r = testing::RunCommand({testing::BinPath("gfsite"), "add", "evil"}, as_alice);
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("PERMISSION_DENIED"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("user alice"), std::string::npos) << r.err;

  // A node acts only for itself.
  absl::StatusOr<catalog::Node> me = kek1->GetNode("kek1");
  ASSERT_TRUE(me.ok()) << me.status();
  catalog::Node other = *me;
  other.name = "sdsc1";
  other.site = "sdsc";
  ExpectDenied(kek1->RegisterNode(other), "RegisterNode", "node kek1");
  EXPECT_TRUE(kek1->RegisterNode(*me).ok()) << "its own record";
  ExpectDenied(kek1->ClaimTasks("sdsc1", {"sdsc1/1-x#1"}, std::chrono::seconds(5)).status(), "ClaimTasks",
               "node kek1");
  ExpectDenied(kek1->CompleteTask(1, "sdsc1/1-x#1").status(), "CompleteTask", "node kek1");
  ExpectDenied(kek1->FailTask(1, "sdsc1/1-x#1", "no", false, std::chrono::milliseconds(0)).status(), "FailTask",
               "node kek1");
  catalog::Replica forged;
  forged.inode = 1;
  forged.node = "sdsc1";
  forged.state = catalog::ReplicaState::kComplete;
  ExpectDenied(kek1->PutReplica(forged), "PutReplica", "node kek1");
  ExpectDenied(kek1->RemoveReplica(1, "sdsc1"), "RemoveReplica", "node kek1");
  ExpectDenied(kek1->PutRoute(catalog::Route{}), "PutRoute", "node kek1");
  ExpectDenied(kek1->Remove("/alice", true), "Remove", "node kek1");
  // Its reads work.
  EXPECT_TRUE(kek1->ListSites().ok());

  // The admin may do all of it; the refusals were counted.
  EXPECT_TRUE(root->PutSite({"lab", {}}).ok());
}

TEST(CatalogAuthStartTest, APublicAddressWithoutMutualTlsIsRefusedUnlessInsecure) {
  testing::TempDir dir("auth-start");
  RunResult r = testing::RunCommand(
      {testing::BinPath("gfcatalogd"), "--db", dir.Sub("db"), "--listen", "0.0.0.0:0", "--no-planner"});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("--tls-client-ca"), std::string::npos) << r.err;
  auto p = testing::Subprocess::Start(
      {testing::BinPath("gfcatalogd"), "--db", dir.Sub("db"), "--listen", "0.0.0.0:0", "--insecure"});
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_TRUE(p->WaitForListen(std::chrono::seconds(30)).ok());
  p->Signal(SIGTERM);
  RunResult done = p->Wait(std::chrono::seconds(20));
  EXPECT_NE(done.err.find("UNAUTHENTICATED"), std::string::npos) << "says loudly that nobody is authenticated";
}

}  // namespace
}  // namespace gfrep
