// A node lost for good, with real processes on loopback (gfcatalogd running the planner, the
// repairer and a policy, gfsited agents with their checks, gfreg, gfwhere, gfnode): issue 40's
// test. A rule keeps two copies of every file under /exp on three nodes; one holder is killed
// with SIGKILL and never answers again. Nothing is marked while it is only suspect; once it is
// dead (gfcatalogd --node-dead-after) its replicas stop counting and every file is back at two
// live copies by itself. Then the node returns with one replica damaged on disk (its mtime
// put back, as bit rot looks): the damaged one never counts again, the good ones count again
// once read, and the copies beyond the rule's count are trimmed, never below two. And a node
// taken out of service: gfnode rm refuses it while it holds replicas, gfnode drain moves them
// (the node serving them meanwhile), then gfnode rm takes it.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <thread>

#include "tests/support/federation.h"

namespace gfrep {
namespace {

namespace fs = std::filesystem;
using testing::RunResult;
using Clock = std::chrono::steady_clock;

constexpr int kNodeTimeoutSeconds = 3;  // gfsited heartbeats every 2 s
constexpr int kDeadAfterSeconds = 8;
constexpr int kFiles = 6;

class NodeLossTest : public testing::FederationTest {
 protected:
  NodeLossTest() : FederationTest("node-loss") {}

  void SetUp() override {
    const std::string policies = dir_.Sub("policies.yaml");
    std::ofstream(policies) << "rules:\n  - name: two-copies\n    paths: [\"/exp/**\"]\n    copies: 2\n    sites: \"*\"\n";
    testing::FederationOptions o;
    o.catalogd_flags = {"--policies", policies, "--node-timeout", std::to_string(kNodeTimeoutSeconds),
                        "--node-dead-after", std::to_string(kDeadAfterSeconds)};
    o.agent_flags = {"--lease", "3", "--check-interval", "1"};
    StartFederation({{"a1", "A"}, {"b1", "B"}, {"c1", "C"}}, o);
  }

  // Nodes with a complete replica of `path`.
  std::set<std::string> Complete(const std::string& path) {
    std::set<std::string> out;
    for (const auto& [node, state] : States(path)) {
      if (state == "complete") out.insert(node);
    }
    return out;
  }

  // gfnode list --json: each node's liveness as the catalog server judges it.
  std::map<std::string, std::string> Liveness() {
    RunResult r = Tool({"gfnode", "list", "--json"});
    EXPECT_EQ(r.exit_code, 0) << r.err;
    std::map<std::string, std::string> out;
    for (const auto& n : nlohmann::json::parse(r.out, nullptr, false)) {
      out[n.value("name", "")] = n.value("liveness", "");
    }
    return out;
  }

  fs::path FileOf(const std::string& node, const std::string& path) {
    auto a = client_->Stat(path);
    EXPECT_TRUE(a.ok()) << a.status();
    return Spool(node) / ".gfrep-data" / std::to_string(a->inode) / std::to_string(a->generation);
  }

  // Stores kFiles files of `size` bytes under /exp/PREFIX<i> at a1 and waits until the rule
  // made their second copies (on b1 or c1). Returns the node of b1, c1 holding more of them
  // (at least half: kFiles / 2).
  std::string StoreAndWaitForTheRule(const std::string& prefix, std::uint64_t size, std::uint64_t seed) {
    for (int i = 0; i < kFiles; ++i) {
      const std::string path = "/exp/" + prefix + std::to_string(i);
      paths_.push_back(path);
      bytes_[path] = Store(path, size, seed + static_cast<std::uint64_t>(i));
    }
    auto deadline = Clock::now() + std::chrono::seconds(60);
    std::map<std::string, int> held;
    for (;;) {
      held.clear();
      bool all = true;
      for (const std::string& p : paths_) {
        std::set<std::string> c = Complete(p);
        all = all && c.size() == 2;
        for (const std::string& n : c) held[n] += 1;
      }
      if (all) break;
      if (Clock::now() >= deadline) {
        ADD_FAILURE() << "the rule's copies were not made";
        return "";
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }
    return held["b1"] >= held["c1"] ? "b1" : "c1";
  }

  std::vector<std::string> paths_;
  std::map<std::string, std::string> bytes_;
};

TEST_F(NodeLossTest, ADeadNodesCopiesAreRestoredAndItsReturnIsCheckedAndTrimmed) {
  const std::string victim = StoreAndWaitForTheRule("f", 256 << 10, 100);
  ASSERT_FALSE(victim.empty());
  const std::string other = victim == "b1" ? "c1" : "b1";
  std::vector<std::string> on_victim;
  for (const std::string& p : paths_) {
    if (Complete(p).count(victim) > 0) on_victim.push_back(p);
  }
  ASSERT_GE(on_victim.size(), 3u);

  // Killed for good.
  agents_.at(victim).Kill();
  const auto killed = Clock::now();

  // Suspect (past the node timeout, not yet dead): its copies still count, nothing is made.
  auto deadline = Clock::now() + std::chrono::seconds(kDeadAfterSeconds);
  while (Liveness()[victim] != "suspect") {
    ASSERT_LT(Clock::now(), deadline) << "never suspect";
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  for (const std::string& p : on_victim) {
    EXPECT_EQ(States(p)[victim], "complete") << p << ": touched while its node was only suspect";
  }

  // Dead: every file back at two live copies by itself, within the bound.
  deadline = killed + std::chrono::seconds(kDeadAfterSeconds + 60);
  for (;;) {
    bool all = true;
    for (const std::string& p : paths_) {
      std::set<std::string> c = Complete(p);
      all = all && c.size() == 2 && c.count(victim) == 0;
    }
    if (all) break;
    ASSERT_LT(Clock::now(), deadline) << Where(on_victim.front()).dump();
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  const double restored_s = std::chrono::duration<double>(Clock::now() - killed).count();
  std::printf("every file at two live copies %.1f s after the kill (dead after %d s)\n", restored_s,
              kDeadAfterSeconds);
  EXPECT_EQ(Liveness()[victim], "dead");
  for (const std::string& p : on_victim) {
    EXPECT_EQ(States(p)[victim], "unverified") << Where(p).dump();
    EXPECT_EQ(Complete(p), (std::set<std::string>{"a1", other}));
    EXPECT_EQ(Replica(other, p), bytes_[p]);
  }
  RunResult where = Tool({"gfwhere", on_victim.front()});
  EXPECT_NE(where.out.find(victim + " (dead)"), std::string::npos) << where.out;

  // It comes back with one replica rotted on disk (size and mtime kept).
  const std::string rotted = on_victim.front();
  const fs::path rotted_file = FileOf(victim, rotted);
  struct stat before {};
  ASSERT_EQ(::stat(rotted_file.c_str(), &before), 0);
  testing::FlipByte(rotted_file, 1000);
  const struct timespec times[2] = {before.st_atim, before.st_mtim};
  ASSERT_EQ(::utimensat(AT_FDCWD, rotted_file.c_str(), times, 0), 0);
  const std::uint64_t seq = *client_->LastEventSeq();
  StartAgent(victim);

  // Until its records are settled: never below two complete copies meanwhile, the rotted one
  // never complete, and no copy of it left beyond the rule's count.
  deadline = Clock::now() + std::chrono::seconds(60);
  for (;;) {
    bool settled = true;
    for (const std::string& p : paths_) {
      const std::map<std::string, std::string> states = States(p);
      const auto mine = states.find(victim);
      const std::string state = mine == states.end() ? "" : mine->second;  // "": no record
      std::set<std::string> c = Complete(p);
      ASSERT_GE(c.size(), 2u) << p << " fell below the rule's count: " << Where(p).dump();
      if (p == rotted) {
        ASSERT_NE(state, "complete") << "the rotted replica counted";
      }
      settled = settled && c.size() == 2 && (state.empty() || state == "deleting");
    }
    if (settled) break;
    if (Clock::now() >= deadline) {
      for (const std::string& p : paths_) ADD_FAILURE() << Where(p).dump();
      FAIL() << "the returned node's records did not settle (the rotted one: " << rotted << ")";
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  // The good ones counted again once read (complete, rechecked), then went as the third copy.
  auto inode_of = [&](const std::string& p) { return client_->Stat(p)->inode; };
  auto events = client_->ReadEvents(seq, 100000, std::chrono::milliseconds(0));
  ASSERT_TRUE(events.ok()) << events.status();
  std::set<catalog::InodeId> rechecked, trimmed;
  for (const catalog::Event& e : *events) {
    if (e.kind != catalog::EventKind::kReplica || e.node != victim) continue;
    if (e.state == "complete" && e.detail == catalog::kRecheckedNote) rechecked.insert(e.id);
    if (e.state == "deleting" && e.detail.find("trimmed") != std::string::npos) trimmed.insert(e.id);
  }
  for (const std::string& p : on_victim) {
    const bool good = p != rotted;
    EXPECT_EQ(rechecked.count(inode_of(p)), good ? 1u : 0u) << p;
    EXPECT_EQ(trimmed.count(inode_of(p)), good ? 1u : 0u) << p;
    EXPECT_EQ(Complete(p), (std::set<std::string>{"a1", other})) << Where(p).dump();
  }
}

TEST_F(NodeLossTest, DrainMovesEveryReplicaAwayAndThenTheNodeCanBeRemoved) {
  const std::string victim = StoreAndWaitForTheRule("d", 128 << 10, 200);
  ASSERT_FALSE(victim.empty());
  const std::string other = victim == "b1" ? "c1" : "b1";
  RunResult r = Tool({"gfnode", "rm", victim});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("still holds"), std::string::npos) << r.err;

  r = Tool({"gfnode", "drain", victim, "--wait", "60"});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("drained"), std::string::npos) << r.out;
  for (const std::string& p : paths_) {
    EXPECT_EQ(Complete(p), (std::set<std::string>{"a1", other})) << Where(p).dump();
    EXPECT_EQ(Replica(other, p), bytes_[p]) << p;
  }
  EXPECT_EQ(Liveness()[victim], "live") << "a draining node stays in service";
  r = Tool({"gfnode", "list"});
  EXPECT_NE(r.out.find("draining"), std::string::npos) << r.out;
  // Taken out of service: its agent stopped (a running agent registers again), then removed.
  agents_.at(victim).Kill();
  r = Tool({"gfnode", "rm", victim});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(Liveness().count(victim), 0u);
}

}  // namespace
}  // namespace gfrep
