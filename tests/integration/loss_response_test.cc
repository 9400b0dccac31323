// transfer/internal/loss_response.h over emulated routes (gftopo: two namespaces joined by
// gfwanem): a gfcp without --cc turns its streams to BBR when the route loses packets at
// random, keeps the hosts' loss-based default when the only losses are a full queue's, and
// never changes a control that was chosen; where the namespaces' default is BBR or CUBIC, an
// unchosen stream on the long route starts on gfrep_cubic (CUBIC keeping its window over idle)
// and turns to BBR only on random loss. gfcp pushes,
// so its own sockets are the senders that decide. The namespaces' default is otherwise Reno,
// which every host allows a namespace to make its default (CUBIC may not be on
// net.ipv4.tcp_allowed_congestion_control); the two differ in how they grow, not in reading
// loss as congestion.

#include <unistd.h>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

#include "tests/support/subprocess.h"
#include "tests/support/temp_dir.h"

namespace gfrep {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using gfrep::testing::BinPath;
using gfrep::testing::RunCommand;
using gfrep::testing::RunResult;
using gfrep::testing::Subprocess;

std::string Describe(const RunResult& r) {
  return "exit " + std::to_string(r.exit_code) + "\nstdout: " + r.out + "\nstderr: " + r.err;
}

class LossResponseTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (::geteuid() != 0) GTEST_SKIP() << "needs root (network namespaces and TUN devices)";
    if (!std::filesystem::exists("/dev/net/tun")) GTEST_SKIP() << "/dev/net/tun is missing";
  }

  void TearDown() override {
    agent_.reset();  // killed and reaped before its namespace goes
    if (brought_up_) {
      const RunResult down = Gftopo("down");
      EXPECT_EQ(down.exit_code, 0) << Describe(down);
    }
  }

  // Two nodes (lra-n1, lrb-n1) on a 40 ms / 500 Mbit/s route with `loss` each way, `cc` as
  // the namespaces' default, and a gfsited in lrb-n1.
  void BringUp(const std::string& loss, const std::string& cc = "reno") {
    topology_ = dir_.path() / "lr.topo";
    std::ofstream(topology_) << "topology gfrep-lr\nbuffer 32M\ncc " << cc << "\nsite lra nodes=1\n"
                                "site lrb nodes=1\nroute wan lra lrb rtt=40ms rate=500M loss="
                             << loss << "\n";
    Gftopo("down");  // leftovers of an interrupted run
    const RunResult up = Gftopo("up");
    ASSERT_EQ(up.exit_code, 0) << Describe(up);
    brought_up_ = true;
    RunResult addr = RunCommand({BinPath("gftopo"), "addr", topology_.string(), "lrb-n1"}, {},
                                std::chrono::seconds(10));
    ASSERT_EQ(addr.exit_code, 0) << Describe(addr);
    const std::string host = addr.out.substr(0, addr.out.find_first_of(" \n"));
    absl::StatusOr<Subprocess> p = Subprocess::Start(
        InNs("lrb-n1", {BinPath("gfsited"), "--listen", host + ":0", "--spool", dir_.Sub("spool"),
                        "--key-file", key_, "--insecure"}));  // the test's own namespaces
    ASSERT_TRUE(p.ok()) << p.status();
    agent_ = std::make_unique<Subprocess>(std::move(*p));
    absl::StatusOr<std::string> listen = agent_->WaitForListen(std::chrono::seconds(30));
    ASSERT_TRUE(listen.ok()) << listen.status() << agent_->Stderr();
    agent_addr_ = *listen;
    gfrep::testing::WriteRandomFile(dir_.path() / "src", 64 << 20, 11);
  }

  // gfcp src -> the agent from lra-n1, with `flags`; its --json.
  nlohmann::json Push(const std::string& name, std::vector<std::string> flags, RunResult& r) {
    std::vector<std::string> argv{BinPath("gfcp"), "--key-file", key_, "--json", "--log-level", "info"};
    argv.insert(argv.end(), flags.begin(), flags.end());
    argv.push_back(dir_.Sub("src"));
    argv.push_back("gf://" + agent_addr_ + "/" + name);
    r = RunCommand(InNs("lra-n1", argv), {}, std::chrono::seconds(120));
    std::cout << name << ": " << r.out;  // the figures, for the log
    return nlohmann::json::parse(r.out, nullptr, false);
  }

  RunResult Gftopo(const std::string& command) {
    return RunCommand({BinPath("gftopo"), command, topology_.string()}, {}, std::chrono::seconds(30));
  }
  static std::vector<std::string> InNs(const std::string& node, std::vector<std::string> argv) {
    argv.insert(argv.begin(), {"/usr/sbin/ip", "netns", "exec", "gfrep-" + node});
    return argv;
  }

  gfrep::testing::TempDir dir_{"loss-response"};
  std::string key_ = dir_.Sub("key");
  std::filesystem::path topology_;
  bool brought_up_ = false;
  std::unique_ptr<Subprocess> agent_;
  std::string agent_addr_;
};

// Loss 1e-3 each way, and socket buffers (256 KiB a stream, 4 streams: about 2 MB in flight
// against the route's BDP of 2.5 MB) that never fill the queue: every loss is the path's, and
// the streams turn to BBR; gfcp says so and reports BBR. (Stripe units of 1 MiB: a look after
// each, 16 per stream.)
TEST_F(LossResponseTest, RandomLossTurnsAnUnchosenControlToBbr) {
  ASSERT_NO_FATAL_FAILURE(BringUp("1e-3"));
  RunResult r;
  const nlohmann::json j = Push("random", {"--buffer", "256K", "--stripe", "1M"}, r);
  ASSERT_EQ(r.exit_code, 0) << Describe(r);
  ASSERT_TRUE(j.is_object()) << r.out;
  EXPECT_GT(j["tcp"].value("bytes_retrans", 0), 0) << "no loss on a route with 1e-3 loss";
  EXPECT_EQ(j.value("congestion", ""), "bbr") << Describe(r);
  EXPECT_THAT(r.err, HasSubstr("congestion control reno -> bbr"));
  EXPECT_THAT(r.err, HasSubstr("(loss without a queue)"));

  // Chosen: the same Reno stays, loss or not.
  RunResult chosen;
  const nlohmann::json c = Push("chosen", {"--buffer", "256K", "--stripe", "1M", "--cc", "reno"}, chosen);
  ASSERT_EQ(chosen.exit_code, 0) << Describe(chosen);
  EXPECT_GT(c["tcp"].value("bytes_retrans", 0), 0);
  EXPECT_EQ(c.value("congestion", ""), "reno") << Describe(chosen);
  EXPECT_THAT(chosen.err, Not(HasSubstr("-> bbr")));
}

// No random loss, and buffers (16 MiB a stream, 4 streams) far above the route's BDP (2.5 MB)
// and its one-BDP queue: every loss is the full queue's, seen with the queue's delay. The
// control stays Reno.
TEST_F(LossResponseTest, AFullQueuesLossKeepsTheDefault) {
  ASSERT_NO_FATAL_FAILURE(BringUp("0"));
  RunResult r;
  const nlohmann::json j = Push("queue", {"--buffer", "16M"}, r);
  ASSERT_EQ(r.exit_code, 0) << Describe(r);
  ASSERT_TRUE(j.is_object()) << r.out;
  EXPECT_GT(j["tcp"].value("bytes_retrans", 0), 0) << "the queue never overflowed: nothing tested";
  EXPECT_EQ(j.value("congestion", ""), "reno") << Describe(r);
  EXPECT_THAT(r.err, Not(HasSubstr("-> bbr")));
}

// The namespaces' default is BBR and nothing is lost: the streams of a gfcp without --cc
// start on CUBIC (the route's least RTT is 40 ms), gfrep's that keeps its window over idle
// (root provides it), and stay there; chosen, BBR stays.
TEST_F(LossResponseTest, AnUnchosenStreamOnALongRouteStartsOnCubicWhereBbrIsTheDefault) {
  ASSERT_NO_FATAL_FAILURE(BringUp("0", "bbr"));
  RunResult r;
  const nlohmann::json j = Push("clean", {"--buffer", "4M"}, r);
  ASSERT_EQ(r.exit_code, 0) << Describe(r);
  ASSERT_TRUE(j.is_object()) << r.out;
  EXPECT_EQ(j.value("congestion", ""), "gfrep_cubic") << Describe(r);
  EXPECT_THAT(r.err, HasSubstr("data streams start on gfrep_cubic (the host's default is bbr)"));

  RunResult chosen;
  const nlohmann::json c = Push("chosen", {"--buffer", "4M", "--cc", "bbr"}, chosen);
  ASSERT_EQ(chosen.exit_code, 0) << Describe(chosen);
  EXPECT_EQ(c.value("congestion", ""), "bbr") << Describe(chosen);
}

// BBR the default and 1e-3 random loss (buffers that never fill the queue, as above): the
// streams start on CUBIC, see loss without a queue and turn to BBR.
TEST_F(LossResponseTest, AStreamThatStartedOnCubicTurnsBackToBbrOnRandomLoss) {
  ASSERT_NO_FATAL_FAILURE(BringUp("1e-3", "bbr"));
  RunResult r;
  const nlohmann::json j = Push("random", {"--buffer", "256K", "--stripe", "1M"}, r);
  ASSERT_EQ(r.exit_code, 0) << Describe(r);
  ASSERT_TRUE(j.is_object()) << r.out;
  EXPECT_GT(j["tcp"].value("bytes_retrans", 0), 0) << "no loss on a route with 1e-3 loss";
  EXPECT_EQ(j.value("congestion", ""), "bbr") << Describe(r);
  EXPECT_THAT(r.err, HasSubstr("congestion control gfrep_cubic -> bbr"));
}

}  // namespace
}  // namespace gfrep
