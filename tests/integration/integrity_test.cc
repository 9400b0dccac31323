// Damage to replicas on disk, with real processes on loopback (gfcatalogd running the planner
// and the repairer, gfsited agents with their checks, gfreg, gfrep, gfexport, gfwhere, gfsck):
// the reproduction (a byte flipped in the replica at one site, the replica at another
// deleted: gfexport served the damaged bytes with exit status 0, gfwhere kept calling both
// complete) and gfsck on demand.
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>

#include "tests/support/federation.h"

namespace gfrep {
namespace {

namespace fs = std::filesystem;
using testing::RunResult;

class IntegrityTest : public testing::FederationTest {
 protected:
  IntegrityTest() : FederationTest("integrity") {}

  void Start(std::vector<std::string> agent_flags) {
    testing::FederationOptions o;
    o.agent_flags = {"--lease", "3"};
    o.agent_flags.insert(o.agent_flags.end(), agent_flags.begin(), agent_flags.end());
    StartFederation({{"a1", "A"}, {"b1", "B"}, {"c1", "C"}}, o);
  }

  fs::path FileOf(const std::string& node, const std::string& path) {
    auto a = client_->Stat(path);
    EXPECT_TRUE(a.ok()) << a.status();
    return Spool(node) / ".gfrep-data" / std::to_string(a->inode) / std::to_string(a->generation);
  }

  // Waits (bounded) until `path` has a complete replica with the right bytes on each node.
  bool WaitHealed(const std::string& path, const std::vector<std::string>& nodes,
                  const std::string& bytes, std::chrono::seconds timeout) {
    auto deadline = std::chrono::steady_clock::now() + timeout;
    while (std::chrono::steady_clock::now() < deadline) {
      std::map<std::string, std::string> states = States(path);
      bool all = true;
      for (const std::string& n : nodes) {
        all = all && states[n] == "complete" && Replica(n, path) == bytes;
      }
      if (all) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }
    ADD_FAILURE() << "not healed: " << Where(path).dump();
    return false;
  }
};

TEST_F(IntegrityTest, AFlippedByteAndADeletedReplicaAreNeverServedAndAreRepaired) {
  Start({"--check-interval", "1"});
  const std::string path = "/exp/run001";
  const std::string bytes = Store(path, 3 << 20, 21);
  RunResult r = Tool({"gfrep", "-N", "3", path});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  ASSERT_EQ(Replica("b1", path), bytes);
  ASSERT_EQ(Replica("c1", path), bytes);
  std::uint64_t seq = *client_->LastEventSeq();
  std::this_thread::sleep_for(std::chrono::milliseconds(20));

  testing::FlipByte(FileOf("b1", path), 123456);
  fs::remove(FileOf("c1", path));

  // gfexport at b never writes the damaged bytes: its local replica is refused.
  r = Tool({"gfexport", "--site", "B", "--node", "b1", path});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(r.out == bytes) << "gfexport wrote " << r.out.size() << " bytes, not the file's";

  // Found by the agents (or the reader), repaired by gfcatalogd, with nobody typing.
  EXPECT_TRUE(WaitHealed(path, {"a1", "b1", "c1"}, bytes, std::chrono::seconds(60)));
  auto events = client_->ReadEvents(seq, 10000, std::chrono::milliseconds(0));
  ASSERT_TRUE(events.ok());
  bool b_corrupt = false, c_lost = false;
  for (const catalog::Event& e : *events) {
    if (e.kind != catalog::EventKind::kReplica) continue;
    b_corrupt = b_corrupt || (e.node == "b1" && e.state == "corrupt");
    c_lost = c_lost || (e.node == "c1" && e.state == "lost");
  }
  EXPECT_TRUE(b_corrupt);
  EXPECT_TRUE(c_lost);
  // And b reads its own replica again.
  r = Tool({"gfexport", "--site", "B", "--node", "b1", "--verify", "--log-level", "info", path});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(r.out == bytes);
  EXPECT_NE(r.err.find("local replica"), std::string::npos) << r.err;
}

TEST_F(IntegrityTest, GfsckReportsThenRepairsWhatTheAgentsDidNotLookAt) {
  Start({"--check-interval", "0", "--scrub-rate", "0"});  // no checks of their own
  const std::string path = "/sim/f";
  const std::string bytes = Store(path, 1 << 20, 22);
  RunResult r = Tool({"gfrep", "-N", "1", "-D", "B", path});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  ASSERT_EQ(Replica("b1", path), bytes);
  // Bit rot at b (mtime put back: only a checksum finds it), and a dark file in b's spool.
  fs::path file = FileOf("b1", path);
  auto mtime = fs::last_write_time(file);
  testing::FlipByte(file, 1000);
  fs::last_write_time(file, mtime);
  fs::path dark = Spool("b1") / ".gfrep-data" / "999999" / "1";
  fs::create_directories(dark.parent_path());
  std::ofstream(dark) << "nobody's bytes";

  // A stat check sees nothing wrong with the replica; the dark file is reported.
  r = Tool({"gfsck", "--node", "b1"});
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  EXPECT_NE(r.out.find("dark"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("0 corrupt"), std::string::npos) << r.out;
  // With -c the checksum finds the rot; report-only changes nothing.
  r = Tool({"gfsck", "--node", "b1", "-c", "--json"});
  EXPECT_EQ(r.exit_code, 1) << r.err;
  nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["corrupt"], 1);
  EXPECT_EQ(j["reported"], 0);
  ASSERT_EQ(j["bad"].size(), 1u);
  EXPECT_EQ(j["bad"][0]["path"], path);
  EXPECT_EQ(States(path)["b1"], "complete");
  EXPECT_TRUE(fs::exists(dark));
  // --repair reports it (gfcatalogd's repairer copies the file again) and removes the dark
  // file past its grace.
  r = Tool({"gfsck", "--node", "b1", "-c", "--repair", "--grace", "0"});
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  EXPECT_NE(r.out.find("1 reported"), std::string::npos) << r.out;
  EXPECT_FALSE(fs::exists(dark));
  EXPECT_TRUE(WaitHealed(path, {"a1", "b1"}, bytes, std::chrono::seconds(60)));
  r = Tool({"gfsck", "--node", "b1", "-c"});
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
}

}  // namespace
}  // namespace gfrep
