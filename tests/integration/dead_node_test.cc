// A destination node that dies mid-copy and never comes back, with real processes on
// loopback (gfcatalogd running the planner, gfsited agents, gfreg and gfrep): the planner
// abandons the dead node's task once its heartbeat is older than the node timeout and places
// the copy on the other node of the requested site, so `gfrep -D B` finishes (review 3.4:
// it used to wait forever).
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <thread>

#include "tests/support/federation.h"

namespace gfrep {
namespace {

namespace fs = std::filesystem;
using testing::BinPath;
using testing::RunResult;
using testing::Subprocess;

constexpr int kLeaseSeconds = 3;
constexpr int kNodeTimeoutSeconds = 10;  // gfsited heartbeats every 2 s

class DeadNodeTest : public testing::FederationTest {
 protected:
  DeadNodeTest() : FederationTest("dead-node") {}
  void SetUp() override {
    testing::FederationOptions o;
    o.catalogd_flags = {"--node-timeout", std::to_string(kNodeTimeoutSeconds)};
    o.agent_flags = {"--lease", std::to_string(kLeaseSeconds)};
    StartFederation({{"a1", "A"}, {"b1", "B"}, {"b2", "B"}}, o);
  }

  // Bytes of partial files in `node`'s spool (a copy in progress).
  std::uintmax_t PartialBytes(const std::string& node) {
    std::uintmax_t total = 0;
    std::error_code ec;
    fs::recursive_directory_iterator it(Spool(node) / ".gfrep-tmp", ec), end;
    for (; !ec && it != end; it.increment(ec)) {
      if (it->is_regular_file(ec)) total += it->file_size(ec);
    }
    return total;
  }
};

TEST_F(DeadNodeTest, ADestinationKilledMidCopyIsReplacedByTheOtherNodeOfTheSite) {
  const std::string path = "/dead/f";
  std::string bytes = Store(path, 6 << 20, 7);
  // About 1 MB/s from A to B, so that a copy takes seconds and the kill lands in it.
  catalog::Route route;
  route.src_site = "A";
  route.dst_site = "B";
  route.route_rate_bps = 8'000'000;
  ASSERT_TRUE(client_->PutRoute(route).ok());

  std::uint64_t seq = *client_->LastEventSeq();
  auto gfrep = Subprocess::Start({BinPath("gfrep"), "-D", "B", "--json", path}, ToolOptions());
  ASSERT_TRUE(gfrep.ok()) << gfrep.status();

  // The node the planner chose claims the task...
  std::string victim;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (victim.empty() && std::chrono::steady_clock::now() < deadline) {
    auto ev = client_->ReadEvents(seq, 1000, std::chrono::milliseconds(500));
    ASSERT_TRUE(ev.ok()) << ev.status();
    for (const catalog::Event& e : *ev) {
      if (e.kind == catalog::EventKind::kTask && e.state == "leased") victim = e.node;
      seq = e.seq;
    }
  }
  ASSERT_TRUE(victim == "b1" || victim == "b2") << "leased by '" << victim << "'";
  const std::string survivor = victim == "b1" ? "b2" : "b1";
  // ...and has received some of the bytes, but not all, when it is killed for good.
  while (PartialBytes(victim) == 0 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ASSERT_GT(PartialBytes(victim), 0u);
  agents_[victim].Kill();
  auto killed = std::chrono::steady_clock::now();
  EXPECT_NE(States(path)[victim], "complete") << "the copy finished before the kill";

  RunResult r = gfrep->Wait(std::chrono::seconds(120));
  auto took = std::chrono::steady_clock::now() - killed;
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  nlohmann::json j = nlohmann::json::parse(r.out, nullptr, false);
  ASSERT_TRUE(j.is_object()) << r.out;
  EXPECT_EQ(j["state"], "done");
  // Lease + node timeout + a copy of ~6 s, with room for a loaded machine; without the
  // planner's abandonment it never finishes.
  EXPECT_LT(took, std::chrono::seconds(kLeaseSeconds + kNodeTimeoutSeconds + 60));

  auto states = States(path);
  EXPECT_EQ(states[survivor], "complete");
  EXPECT_EQ(states.count(victim), 0u) << "the dead node's pending record is dropped";
  EXPECT_TRUE(Replica(survivor, path) == bytes) << survivor << " holds other bytes";

  catalog::TaskFilter f;
  f.dst_node = victim;
  auto tasks = client_->ListTasks(f);
  ASSERT_TRUE(tasks.ok()) << tasks.status();
  ASSERT_EQ(tasks->size(), 1u);
  EXPECT_EQ(tasks->front().state, catalog::TaskState::kCancelled);
  EXPECT_EQ(tasks->front().last_error, "destination node " + victim + " is down");
}

}  // namespace
}  // namespace gfrep
