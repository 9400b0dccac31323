// Multi-site replication with real processes on loopback: gfcatalogd (embedded RocksDB,
// running the planner) and three gfsited site agents (sites A, B, C), driven by gfreg,
// gfrep, gfwhere and gfexport exactly as a user would.
#include <signal.h>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <chrono>
#include <fstream>
#include <map>
#include <thread>

#include "catalog/client.h"
#include "tests/support/federation.h"
#include "tests/support/subprocess.h"
#include "tests/support/temp_dir.h"
#include "transfer/auth.h"

namespace gfrep {
namespace {

namespace fs = std::filesystem;
using testing::BinPath;
using testing::RunCommand;
using testing::RunResult;
using testing::Subprocess;

const std::map<std::string, std::string> kSiteOf = {{"a1", "A"}, {"b1", "B"}, {"c1", "C"}};

// The federation (gfcatalogd + one gfsited per node) and its helpers: tests/support/federation.h.
class ReplicationTest : public testing::FederationTest {
 protected:
  ReplicationTest() : FederationTest("replication") {}
  void SetUp() override { StartFederation(kSiteOf); }
};

// 20 files of mixed sizes, 0 bytes to 64 MiB (the issue says 256 MiB; scaled down to keep
// the suite fast on a shared 2-core machine: the code path is the same past a few stripes).
TEST_F(ReplicationTest, TwentyMixedFilesGetThreeCompleteReplicasWithMatchingBytes) {
  const std::vector<std::uint64_t> sizes = {
      0,         1,         511,       4096,       4097,       65536,     100000,
      1 << 20,   (1 << 20) + 1, 2 << 20, (3 << 20) + 5, 4 << 20, 5 << 20, 7 << 20,
      8 << 20,   10 << 20,  16 << 20,  24 << 20,  32 << 20,   64 << 20};
  ASSERT_EQ(sizes.size(), 20u);
  std::map<std::string, std::string> want;
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    std::string path = (i % 2 ? "/data/odd/f" : "/data/f") + std::to_string(i);
    want[path] = Store(path, sizes[i], 1000 + i);
  }
  RunResult r = Tool({"gfrep", "-N", "3", "-r", "--json", "/data"}, std::chrono::seconds(150));
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  nlohmann::json j = nlohmann::json::parse(r.out, nullptr, false);
  ASSERT_TRUE(j.is_object()) << r.out;
  EXPECT_EQ(j["state"], "done");
  EXPECT_EQ(j["files_done"], 20);
  EXPECT_EQ(j["files_failed"], 0);
  // Per route: the copies it carried (two per file: to B and to C), none left in flight.
  std::uint64_t copies = 0;
  for (const nlohmann::json& route : j["routes"]) {
    copies += route["files"].get<std::uint64_t>();
    EXPECT_EQ(route["in_flight"], 0) << route;
    EXPECT_TRUE(route.contains("peak_in_flight")) << route;
    EXPECT_GT(route["mbit_s"].get<double>(), 0) << route;
  }
  EXPECT_EQ(copies, 40u) << j["routes"];
  for (const auto& [path, bytes] : want) {
    EXPECT_EQ(Replica("b1", path), bytes) << path;
    EXPECT_EQ(Replica("c1", path), bytes) << path;
    auto states = States(path);
    EXPECT_EQ(states, (std::map<std::string, std::string>{
                          {"a1", "complete"}, {"b1", "complete"}, {"c1", "complete"}}))
        << path;
  }
}

// Issue 37: with --route-rate 8M, a route carrying ~45 small copies at once moved 38 Mbit/s:
// the source's token bucket of the route died with each wave of copies and the next came back
// with a full burst and no debt. The cap must hold for many small concurrent copies. (An upper
// bound on a rate: a loaded machine can only make the copies slower, never this test flaky.)
TEST_F(ReplicationTest, ARouteRateCapHoldsForManySmallCopiesAtOnce) {
  const fs::path local = dir_.Sub("small");
  constexpr int kFiles = 45;
  constexpr std::uint64_t kSize = 64 << 10;
  fs::create_directories(local);
  for (int i = 0; i < kFiles; ++i) {
    testing::WriteRandomFile(local / ("f" + std::to_string(i)), kSize, 500 + i);
  }
  RunResult stored = Tool({"gfreg", "-r", "-j", "8", "--node", "a1", local.string(), "/cap/"});
  ASSERT_EQ(stored.exit_code, 0) << stored.out << stored.err;
  RunResult set = Tool({"gfroute", "set", "A", "B", "--route-rate", "8M"});
  ASSERT_EQ(set.exit_code, 0) << set.out << set.err;
  const auto start = std::chrono::steady_clock::now();
  RunResult r = Tool({"gfrep", "-D", "B", "-r", "--json", "/cap"}, std::chrono::seconds(150));
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  // Its time to full rate is judged against the route's cap, its one route's rate.
  nlohmann::json ramp = nlohmann::json::parse(r.out, nullptr, false)["ramp"];
  ASSERT_TRUE(ramp.is_object()) << r.out;
  EXPECT_EQ(ramp["reference"], "the route's rate cap") << ramp;
  EXPECT_NEAR(ramp["reference_mbit_s"].get<double>(), 8.0, 1e-6) << ramp;
  EXPECT_GT(ramp["peak_mbit_s"].get<double>(), 0) << ramp;
  EXPECT_FALSE(ramp["series_mbit_s"].empty()) << ramp;
  // One burst of the bucket (256 KiB) may go at once; the rest at 8 Mbit/s, 10 % slack.
  const double paced_bits = static_cast<double>(kFiles * kSize - (256 << 10)) * 8;
  EXPECT_GE(seconds, paced_bits / 8e6 / 1.1)
      << "the route carried " << static_cast<double>(kFiles * kSize) * 8 / seconds / 1e6
      << " Mbit/s against its cap of 8";
}

TEST_F(ReplicationTest, GfregStoresADirectoryTreeAndReportsEachFailure) {
  // gfreg -r stores every regular file under a local directory at its relative path, several
  // at once; a file it can not store is named on stderr and in the exit status, and the
  // others are stored all the same.
  const fs::path local = dir_.Sub("tree");
  std::map<std::string, std::string> want;
  for (int i = 0; i < 12; ++i) {
    const std::string rel = (i % 3 == 0 ? "sub/deeper/f" : (i % 3 == 1 ? "sub/f" : "f")) + std::to_string(i);
    fs::create_directories((local / rel).parent_path());
    std::string bytes(1000 + 997 * i, '\0');
    for (std::size_t k = 0; k < bytes.size(); ++k) bytes[k] = static_cast<char>((k * 31 + i) & 0xff);
    std::ofstream(local / rel, std::ios::binary) << bytes;
    want["/tree/" + rel] = bytes;
  }
  fs::create_symlink(local / "f2", local / "link");  // not followed
  RunResult r = Tool({"gfreg", "-r", "-j", "3", "--node", "a1", "--json", local.string(), "/tree/"});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  nlohmann::json j = nlohmann::json::parse(r.out, nullptr, false);
  ASSERT_TRUE(j.is_object()) << r.out;
  EXPECT_EQ(j["files"], 12);
  EXPECT_TRUE(j["failed"].empty()) << j;
  for (const auto& [path, bytes] : want) {
    EXPECT_EQ(Replica("a1", path), bytes) << path;
    EXPECT_EQ(States(path), (std::map<std::string, std::string>{{"a1", "complete"}})) << path;
  }
  EXPECT_FALSE(client_->Stat("/tree/link").ok());

  // A catalog path that is a file where the tree needs a directory: those files fail, the
  // rest are stored, and the exit status says so.
  const fs::path second = dir_.Sub("second");
  fs::create_directories(second / "f2");  // /tree/f2 is a file: f2/x can not go under it
  std::ofstream(second / "f2" / "x") << "under a file";
  std::ofstream(second / "ok") << "fine";
  // (--node: without it gfreg places by free space and load, which differ between runs.)
  r = Tool({"gfreg", "-r", "--node", "a1", local.string() + "/../second", "/tree"});
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  EXPECT_NE(r.err.find("/tree/f2/x"), std::string::npos) << r.err;
  EXPECT_NE(r.out.find("1 failed"), std::string::npos) << r.out;
  EXPECT_EQ(Replica("a1", "/tree/ok"), "fine");
  // Not a directory, or a directory without -r: clear errors.
  r = Tool({"gfreg", "-r", (local / "f2").string(), "/x"});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("not a directory"), std::string::npos) << r.err;
  r = Tool({"gfreg", local.string(), "/x"});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("needs -r"), std::string::npos) << r.err;
}

TEST_F(ReplicationTest, KilledDestinationAgentRestartsAndTheRequestFinishesWithRightBytes) {
  std::map<std::string, std::string> want;
  for (int i = 0; i < 8; ++i) {
    std::string path = "/k/f" + std::to_string(i);
    want[path] = Store(path, 12 << 20, 2000 + i);
  }
  std::uint64_t seq = *client_->LastEventSeq();
  RunResult detach = Tool({"gfrep", "-N", "3", "-r", "--detach", "/k"});
  ASSERT_EQ(detach.exit_code, 0) << detach.err;
  std::uint64_t id = std::stoull(detach.out);
  // Kill b1 as soon as it holds a lease (mid-copy), with SIGKILL.
  bool leased = false;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (!leased && std::chrono::steady_clock::now() < deadline) {
    auto ev = client_->ReadEvents(seq, 1000, std::chrono::milliseconds(500));
    ASSERT_TRUE(ev.ok());
    for (const auto& e : *ev) {
      leased = leased || (e.kind == catalog::EventKind::kTask && e.node == "b1" &&
                          e.state == "leased");
      seq = e.seq;
    }
  }
  ASSERT_TRUE(leased);
  agents_["b1"].Kill();
  StartAgent("b1");
  catalog::Request r = WaitRequest(id, std::chrono::seconds(120));
  ASSERT_EQ(r.state, catalog::RequestState::kDone) << r.error;
  for (const auto& [path, bytes] : want) {
    auto states = States(path);
    for (const auto& [node, state] : states) {
      if (state == "complete") {
        EXPECT_EQ(Replica(node, path), bytes) << node << path;
      }
    }
    EXPECT_EQ(states.size(), 3u) << path;
    EXPECT_EQ(Replica("b1", path), bytes) << path;
  }
}

TEST_F(ReplicationTest, RewriteMakesOtherReplicasStaleNeverServedAndGfrepRefreshesThem) {
  Store("/w/file", 3 << 20, 1);
  RunResult r = Tool({"gfrep", "-N", "3", "/w/file"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::string new_bytes = Store("/w/file", (2 << 20) + 7, 2);  // rewritten at site A
  auto states = States("/w/file");
  EXPECT_EQ(states["a1"], "complete");
  EXPECT_EQ(states["b1"], "stale");
  EXPECT_EQ(states["c1"], "stale");
  RunResult exp = Tool({"gfexport", "--site", "B", "--node", "b1", "/w/file"});
  ASSERT_EQ(exp.exit_code, 0) << exp.err;
  EXPECT_TRUE(exp.out == new_bytes) << "gfexport at B served " << exp.out.size() << " bytes";

  r = Tool({"gfrep", "-N", "3", "/w/file"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  states = States("/w/file");
  EXPECT_EQ(states["b1"], "complete");
  EXPECT_EQ(states["c1"], "complete");
  EXPECT_TRUE(Replica("b1", "/w/file") == new_bytes);
  exp = Tool({"gfexport", "--site", "C", "--node", "c1", "/w/file"});
  ASSERT_EQ(exp.exit_code, 0) << exp.err;
  EXPECT_TRUE(exp.out == new_bytes);
}

TEST_F(ReplicationTest, AFileWhoseOnlySourceIsDownFailsClearlyAfterItsRetries) {
  Store("/solo/f", 100000, 3);
  agents_["a1"].Kill();
  RunResult r = Tool({"gfrep", "-N", "2", "/solo/f"}, std::chrono::seconds(150));
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  EXPECT_NE(r.err.find("failed: /solo/f: copy a1 -> "), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("UNAVAILABLE"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("after 5 attempts"), std::string::npos) << r.err;
}

TEST_F(ReplicationTest, ARequestForAMissingPathFailsClearly) {
  RunResult r = Tool({"gfrep", "-N", "2", "/does/not/exist"});
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  EXPECT_NE(r.err.find("/does/not/exist: no such file or directory"), std::string::npos) << r.err;
  // The failed files are the catalog's (a path that never got a task is one of them).
  r = Tool({"gfrep", "--json", "-N", "2", "/does/not/exist", "/nor/this"});
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["files_failed"], 2) << j;
  ASSERT_EQ(j["failed"].size(), 2u) << j;
  EXPECT_EQ(j["failed"][0]["path"], "/does/not/exist") << j;
  EXPECT_EQ(j["failed"][0]["error"], "no such file or directory") << j;
}

// A site agent whose catalog nobody answers keeps retrying its registration; SIGTERM
// must still stop it promptly (it used to block signals until registered).
TEST(ReplicationSiteAgentTest, GfsitedStopsPromptlyOnSigtermWhileTheCatalogIsUnreachable) {
  testing::TempDir dir("gfsited-stop");
  std::string key = dir.Sub("key");
  ASSERT_TRUE(transfer::LoadOrCreateSharedKey(key).ok());
  auto p = Subprocess::Start({BinPath("gfsited"), "--listen", "127.0.0.1:0", "--spool",
                              dir.Sub("spool"), "--site", "A", "--node", "a1", "--catalog",
                              "127.0.0.1:1", "--key-file", key, "--log-level", "info"});
  ASSERT_TRUE(p.ok()) << p.status();
  ASSERT_TRUE(p->WaitForListen(std::chrono::seconds(30)).ok());
  p->Signal(SIGTERM);
  RunResult r = p->Wait(std::chrono::seconds(10));  // SIGKILL past it: exit_code -1
  EXPECT_EQ(r.exit_code, 0) << "signal " << r.signal << "\n" << r.err;
}


// gfmv is a catalog-only operation: every node reads the renamed file (a spool keyed by
// path could not find it), and a new file stored at the old path leaves it alone.
TEST_F(ReplicationTest, RequestsAreListedExplainedFollowedAndCancelled) {
  Store("/slow/f", 4 << 20, 41);
  // About 1 MB/s from A to B: the copy is still running while we look.
  catalog::Route route;
  route.src_site = "A";
  route.dst_site = "B";
  route.route_rate_bps = 8'000'000;
  ASSERT_TRUE(client_->PutRoute(route).ok());
  RunResult r = Tool({"gfrep", "-D", "B", "--detach", "/slow/f"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::string id = r.out.substr(0, r.out.find('\n'));

  r = Tool({"gfrep", "list"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("/slow/f"), std::string::npos) << r.out;
  // Status says what the copy is doing (waiting for its claim, or copying now).
  bool copying = false;
  for (int i = 0; i < 50 && !copying; ++i) {
    r = Tool({"gfrep", "status", id});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    copying = r.out.find("/slow/f -> b1: copying now from a1") != std::string::npos;
    if (!copying) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  EXPECT_TRUE(copying) << r.out;
  r = Tool({"gfrep", "status", id, "--json"});
  nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["state"], "running");
  ASSERT_EQ(j["copies"].size(), 1u);
  EXPECT_EQ(j["copies"][0]["state"], "leased");
  ASSERT_EQ(j["files"].size(), 1u) << j;  // the request's file, as the catalog follows it
  EXPECT_EQ(j["files"][0]["path"], "/slow/f");
  EXPECT_EQ(j["files"][0]["state"], "copying");
  EXPECT_EQ(j["files"][0]["open_copies"], 1);

  r = Tool({"gfrep", "cancel", id});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  r = Tool({"gfrep", "attach", id});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("was cancelled"), std::string::npos) << r.err;
  r = Tool({"gfrep", "list"});
  EXPECT_EQ(r.out.find("/slow/f"), std::string::npos) << "no longer active: " << r.out;
  r = Tool({"gfrep", "list", "--all", "--json"});
  EXPECT_EQ(nlohmann::json::parse(r.out)[0]["state"], "cancelled");
  r = Tool({"gfrep", "status", "999999"});
  EXPECT_EQ(r.exit_code, 2);
  r = Tool({"gfrep", "status"});
  EXPECT_EQ(r.exit_code, 2) << "a verb without its id is a usage error";
}

TEST_F(ReplicationTest, RenamedFilesAreReadEverywhereAndTheOldPathCanBeReused) {
  std::string old_bytes = Store("/mv/a", 300000, 11);
  RunResult rep = Tool({"gfrep", "-N", "3", "/mv/a"});
  ASSERT_EQ(rep.exit_code, 0) << rep.err;
  RunResult mv = Tool({"gfmv", "/mv/a", "/mv/b"});
  ASSERT_EQ(mv.exit_code, 0) << mv.err;
  for (const auto& [node, site] : kSiteOf) {
    RunResult exp = Tool({"gfexport", "--site", site, "--node", node, "/mv/b"});
    ASSERT_EQ(exp.exit_code, 0) << node << ": " << exp.err;
    EXPECT_TRUE(exp.out == old_bytes) << node << " served " << exp.out.size() << " bytes";
  }
  std::string new_bytes = Store("/mv/a", 300000, 12);
  rep = Tool({"gfrep", "-N", "3", "/mv/a"});
  ASSERT_EQ(rep.exit_code, 0) << rep.err;
  for (const auto& [node, site] : kSiteOf) {
    RunResult b = Tool({"gfexport", "--site", site, "--node", node, "/mv/b"});
    ASSERT_EQ(b.exit_code, 0) << node << ": " << b.err;
    EXPECT_TRUE(b.out == old_bytes) << node << ": the renamed file's bytes changed";
    RunResult a = Tool({"gfexport", "--site", site, "--node", node, "/mv/a"});
    ASSERT_EQ(a.exit_code, 0) << node << ": " << a.err;
    EXPECT_TRUE(a.out == new_bytes) << node;
  }
}

}  // namespace
}  // namespace gfrep
