// Integration: two gfcatalogd --shared front ends on one PostgreSQL database serve one
// federation (three gfsited agents and the tools, given both addresses). What one front end
// acknowledges the other serves; the planner runs in one of them (the leader); the leader
// killed with SIGKILL in the middle of a replication request: the other takes the planner
// over within seconds, the request finishes with the right bytes, nothing acknowledged is
// lost. Skipped, saying why, where PostgreSQL cannot start.
#include <gtest/gtest.h>

#include <chrono>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "catalog/client.h"
#include "tests/support/federation.h"
#include "tests/support/postgres_server.h"

namespace gfrep {
namespace {

using namespace std::chrono_literals;
using testing::BinPath;
using testing::RunCommand;
using testing::RunResult;

class CatalogFrontEndsTest : public testing::FederationTest {
 protected:
  CatalogFrontEndsTest() : FederationTest("front-ends") {}

  void SetUp() override {
    absl::StatusOr<std::string> db = testing::SharedPostgres().CreateDatabase();
    if (!db.ok()) GFREP_SKIP_OR_FAIL_WITHOUT_POSTGRES(db.status());
    testing::FederationOptions o;
    o.db = *db;
    o.front_ends = 2;
    o.catalogd_flags = {"--no-policies"};
    o.mutual_tls = true;  // as deployed: the client checks each front end's certificate
    StartFederation({{"a1", "A"}, {"b1", "B"}, {"c1", "C"}}, o);
  }

  // A tool talking to front end `i` only.
  RunResult ToolAt(int i, std::vector<std::string> argv) {
    testing::SubprocessOptions o = ToolOptions();
    o.env["GFREP_CATALOG"] = FrontEndAddress(i);
    argv[0] = BinPath(argv[0]);
    return RunCommand(argv, o, 60s);
  }

  // The running front end (other than `not_this`) whose log says it leads, waiting up to
  // `timeout`; -1 if none does by then.
  int WaitForLeader(std::chrono::milliseconds timeout, int not_this = -1) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    do {
      for (int i = 0; i < 2; ++i) {
        if (i == not_this || !FrontEnd(i).running()) continue;
        if (FrontEnd(i).Stderr().find("leader: the planner") != std::string::npos) return i;
      }
      std::this_thread::sleep_for(50ms);
    } while (std::chrono::steady_clock::now() < deadline);
    return -1;
  }
};

TEST_F(CatalogFrontEndsTest, EitherServesAndARequestFinishesWhenTheLeaderIsKilledMidway) {
  const int leader = WaitForLeader(30s);
  ASSERT_GE(leader, 0) << FrontEnd(0).Stderr() << FrontEnd(1).Stderr();
  const int follower = 1 - leader;
  EXPECT_EQ(FrontEnd(follower).Stderr().find("leader: the planner"), std::string::npos)
      << "both front ends run the planner";

  // What one front end acknowledged, the other serves, both ways.
  RunResult r = ToolAt(leader, {"gfmkdir", "-p", "/made/by/leader"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  r = ToolAt(follower, {"gfls", "/made/by"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("leader"), std::string::npos) << r.out;
  r = ToolAt(follower, {"gfmkdir", "/made/by/follower"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  r = ToolAt(leader, {"gfstat", "/made/by/follower"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  // The same name made through both at once: one wins, the other is told it exists.
  r = ToolAt(follower, {"gfmkdir", "/made/by/leader"});
  EXPECT_NE(r.exit_code, 0);

  // A replication request, one copy at a time, and the leader killed once the first copy
  // is done (the request is then midway: planned, partly copied).
  std::map<std::string, std::string> want;
  for (int i = 0; i < 10; ++i) {
    const std::string path = "/data/f" + std::to_string(i);
    want[path] = Store(path, 2 << 20, 300 + i);
  }
  absl::StatusOr<std::uint64_t> seq = client_->LastEventSeq();
  ASSERT_TRUE(seq.ok()) << seq.status();
  r = Tool({"gfrep", "-N", "3", "-r", "-j", "1", "--detach", "/data"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::uint64_t id = std::stoull(r.out);
  bool copied = false;
  std::uint64_t after = *seq;
  const auto deadline = std::chrono::steady_clock::now() + 60s;
  while (!copied && std::chrono::steady_clock::now() < deadline) {
    auto ev = client_->ReadEvents(after, 1000, 500ms);
    if (!ev.ok()) continue;
    for (const catalog::Event& e : *ev) {
      copied = copied || (e.kind == catalog::EventKind::kTask && e.state == "done");
      after = e.seq;
    }
  }
  ASSERT_TRUE(copied) << "no copy finished";
  absl::StatusOr<catalog::Request> midway = client_->GetRequest(id);
  ASSERT_TRUE(midway.ok()) << midway.status();
  // Midway: files_done counts files with all their copies; 10 files x 2 copies at -j 1.
  EXPECT_LT(midway->files_done, want.size()) << "the request ended before the kill";
  RecordProperty("files_done_at_kill", static_cast<int>(midway->files_done));
  FrontEnd(leader).Kill();
  const auto killed = std::chrono::steady_clock::now();

  // The survivor takes the planner over within seconds.
  const int next = WaitForLeader(20s, leader);
  const auto took = std::chrono::duration_cast<std::chrono::milliseconds>(
      std::chrono::steady_clock::now() - killed);
  ASSERT_EQ(next, follower) << FrontEnd(follower).Stderr();
  RecordProperty("takeover_ms", static_cast<int>(took.count()));
  EXPECT_LT(took, 10s) << "the planner moved after " << took.count() << " ms";

  catalog::Request done = WaitRequest(id, 180s);
  ASSERT_EQ(done.state, catalog::RequestState::kDone)
      << done.error << "; it was " << static_cast<int>(midway->state) << " when the leader died";
  for (const auto& [path, bytes] : want) {
    std::map<std::string, std::string> states = States(path);
    EXPECT_EQ(states.size(), 3u) << path;
    for (const auto& [node, state] : states) {
      EXPECT_EQ(state, "complete") << path << " at " << node;
      EXPECT_EQ(Replica(node, path), bytes) << path << " at " << node;
    }
  }
  // Everything acknowledged before the kill is there, through the survivor alone.
  for (const std::string p : {"/made/by/leader", "/made/by/follower"}) {
    r = ToolAt(follower, {"gfstat", p});
    EXPECT_EQ(r.exit_code, 0) << p << ": " << r.err;
  }
}

TEST_F(CatalogFrontEndsTest, ATokenRevokedThroughOneIsRefusedByTheOtherWithinSeconds) {
  RunResult minted = RunCommand({BinPath("gfauth"), "token", "create", "root", "--scope", "read",
                                 "--ttl", "1h", "--key", Ca("token.key")});
  ASSERT_EQ(minted.exit_code, 0) << minted.err;
  const std::string token = minted.out.substr(0, minted.out.find('\n'));
  auto at = [&](int i) {
    catalog::ClientOptions co = ClientAs("root");
    co.address = FrontEndAddress(i);
    co.tls_cert_pem.clear();
    co.tls_key_pem.clear();
    co.token = token;
    co.timeout = 5s;
    return std::move(*catalog::CatalogClient::Create(co));
  };
  auto first = at(0), second = at(1);
  ASSERT_TRUE(second->ListSites().ok()) << "the token works at front end 1";
  RunResult revoke = ToolAt(0, {"gfauth", "token", "revoke", token});
  ASSERT_EQ(revoke.exit_code, 0) << revoke.err;
  EXPECT_TRUE(absl::IsUnauthenticated(first->ListSites().status()));
  absl::Status s;
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  do {
    s = second->ListSites().status();
    if (absl::IsUnauthenticated(s)) break;
    std::this_thread::sleep_for(100ms);
  } while (std::chrono::steady_clock::now() < deadline);
  EXPECT_TRUE(absl::IsUnauthenticated(s)) << s << " (front end 1 still takes a token revoked at 0)";
  EXPECT_NE(s.message().find("was revoked"), absl::string_view::npos) << s;
}

}  // namespace
}  // namespace gfrep
