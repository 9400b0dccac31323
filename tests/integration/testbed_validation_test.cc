// Validates the long-fat-network test bed end to end (root only): a topology of four
// namespaces and two gfwanem routes, checked with ping and real iperf3 runs.

#include <unistd.h>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <regex>
#include <string>
#include <vector>

#include "tests/support/subprocess.h"
#include "tests/support/temp_dir.h"

namespace gfrep {
namespace {

using testing::BinPath;
using testing::RunCommand;
using testing::RunResult;
using testing::Subprocess;

// Two routes between the same sites: node pair 1 uses "clean" (the default), node pair 2
// is pinned to "lossy", so the test also checks per-node route selection.
constexpr char kTopology[] = R"(topology gfrep-vt
site vta nodes=2
site vtb nodes=2
route clean vta vtb rtt=40ms rate=150M
route lossy vta vtb rtt=10ms rate=300M loss=0.01
pin vta-n2 lossy
pin vtb-n2 lossy
)";
constexpr double kCleanRttMs = 40;
constexpr double kLossyRttMs = 10;
// Modest, so that CPU contention from tests running in parallel on 2 cores cannot make
// the endpoints (rather than the emulated bottleneck) the limit.
constexpr double kRateBps = 150e6;
constexpr double kLoss = 0.01;
constexpr char kClientA[] = "gfrep-vta-n1";
constexpr char kServerA[] = "gfrep-vtb-n1";
constexpr char kAddrA[] = "10.99.2.11";
constexpr char kClientB[] = "gfrep-vta-n2";
constexpr char kServerB[] = "gfrep-vtb-n2";
constexpr char kAddrB[] = "10.99.2.12";

std::string Describe(const RunResult& r) {
  return "exit " + std::to_string(r.exit_code) + "\nstdout: " + r.out + "\nstderr: " + r.err;
}

class TestbedValidationTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (::geteuid() != 0) GTEST_SKIP() << "needs root (network namespaces and TUN devices)";
    if (!std::filesystem::exists("/dev/net/tun")) GTEST_SKIP() << "/dev/net/tun is missing";
    if (!std::filesystem::exists("/usr/bin/iperf3")) GTEST_SKIP() << "iperf3 is not installed";
    topology_ = dir_.path() / "vt.topo";
    std::ofstream(topology_) << kTopology;
    Gftopo("down");  // leftovers of an interrupted run
    const RunResult up = Gftopo("up");
    ASSERT_EQ(up.exit_code, 0) << Describe(up);
    brought_up_ = true;
  }

  void TearDown() override {
    servers_.clear();  // kills and reaps the iperf3 servers before their namespaces go
    if (brought_up_) {
      const RunResult down = Gftopo("down");
      EXPECT_EQ(down.exit_code, 0) << Describe(down);
      EXPECT_FALSE(std::filesystem::exists(std::string("/run/netns/") + kClientA));
    }
  }

  RunResult Gftopo(const std::string& command) {
    return RunCommand({BinPath("gftopo"), command, topology_.string()}, {},
                      std::chrono::seconds(30));
  }

  static std::vector<std::string> InNs(const std::string& ns, std::vector<std::string> argv) {
    argv.insert(argv.begin(), {"/usr/sbin/ip", "netns", "exec", ns});
    return argv;
  }

  void StartIperfServer(const std::string& ns) {
    auto server = Subprocess::Start(InNs(ns, {"/usr/bin/iperf3", "-s", "--forceflush"}));
    ASSERT_TRUE(server.ok()) << server.status();
    ASSERT_TRUE(server->WaitForOutput("Server listening", std::chrono::seconds(10)).ok());
    servers_.push_back(std::move(*server));
  }

  // Runs an iperf3 client with -J and returns its JSON report.
  nlohmann::json Iperf(const std::string& ns, const std::string& server,
                       std::vector<std::string> args) {
    std::vector<std::string> argv = {"/usr/bin/iperf3", "-c", server, "-J"};
    argv.insert(argv.end(), args.begin(), args.end());
    const RunResult r = RunCommand(InNs(ns, argv), {}, std::chrono::seconds(40));
    EXPECT_EQ(r.exit_code, 0) << Describe(r);
    nlohmann::json j = nlohmann::json::parse(r.out, nullptr, /*allow_exceptions=*/false);
    EXPECT_TRUE(j.is_object()) << r.out;
    return j.is_object() ? j : nlohmann::json::object();
  }

  static double ReceivedBps(const nlohmann::json& report) {
    return report.value(nlohmann::json::json_pointer("/end/sum_received/bits_per_second"), 0.0);
  }

  // Average RTT reported by ping, in ms.
  // The median of 10 pings' round trips: the route's emulated delay. (The average let one
  // reply delayed by a busy machine, 650 ms late under CI's load, move the figure past the
  // tolerance; the emulator's delay is what is asserted, not the host's scheduling.)
  double PingMs(const std::string& ns, const std::string& address) {
    const RunResult r =
        RunCommand(InNs(ns, {"/usr/bin/ping", "-n", "-c", "10", "-i", "0.2", address}), {},
                   std::chrono::seconds(30));
    EXPECT_EQ(r.exit_code, 0) << Describe(r);
    std::vector<double> rtts;
    const std::regex re(R"(time=([0-9.]+) ms)");
    for (auto it = std::sregex_iterator(r.out.begin(), r.out.end(), re); it != std::sregex_iterator(); ++it) {
      rtts.push_back(std::stod((*it)[1].str()));
    }
    if (rtts.size() < 5) {
      ADD_FAILURE() << "fewer than 5 of 10 replies in: " << r.out;
      return -1;
    }
    std::sort(rtts.begin(), rtts.end());
    return rtts[rtts.size() / 2];
  }

  gfrep::testing::TempDir dir_;
  std::filesystem::path topology_;
  bool brought_up_ = false;
  std::vector<Subprocess> servers_;
};

TEST_F(TestbedValidationTest, PingRttMatchesEachRouteWithinThreeMs) {
  EXPECT_NEAR(PingMs(kClientA, kAddrA), kCleanRttMs, 3.0);
  EXPECT_NEAR(PingMs(kClientB, kAddrB), kLossyRttMs, 3.0);
}

TEST_F(TestbedValidationTest, UpIsIdempotentAndStatusReportsUp) {
  const RunResult again = Gftopo("up");
  EXPECT_EQ(again.exit_code, 0) << Describe(again);
  const RunResult status = Gftopo("status");
  EXPECT_EQ(status.exit_code, 0) << Describe(status);
  EXPECT_THAT(status.out, ::testing::HasSubstr("state: up"));
}

TEST_F(TestbedValidationTest, SingleStreamWithSmallWindowIsWindowLimited) {
  StartIperfServer(kServerA);
  constexpr double kWindowBytes = 64 * 1024;
  const double expected = kWindowBytes * 8 / (kCleanRttMs / 1000);  // ~13 Mbit/s
  const double bps = ReceivedBps(Iperf(kClientA, kAddrA, {"-t", "3", "-w", "64K"}));
  // Linux lets about 1.3 x the requested buffer be in flight (it doubles SO_RCVBUF and
  // advertises a fraction of it), hence the asymmetric band.
  EXPECT_GT(bps, 0.7 * expected);
  EXPECT_LT(bps, 1.6 * expected);
  EXPECT_LT(bps, 0.2 * kRateBps);
}

TEST_F(TestbedValidationTest, ManyStreamsWithLargeWindowsApproachTheBottleneck) {
  StartIperfServer(kServerA);
  const double bps =
      ReceivedBps(Iperf(kClientA, kAddrA, {"-t", "5", "-O", "1", "-P", "8", "-w", "4M"}));
  EXPECT_GT(bps, 0.85 * kRateBps);
  // The emulator enforces the rate (without it the bridge carries ~10 Gbit/s). The band is
  // 5 %, not 2 %: iperf3's measured interval is not aligned with the emulator's queue, and
  // one run at 153.9 Mbit/s of 150 failed a 2 % band in a full CI run.
  EXPECT_LT(bps, 1.05 * kRateBps);
}

TEST_F(TestbedValidationTest, ConfiguredLossFractionIsDroppedByTheEmulator) {
  StartIperfServer(kServerB);
  const nlohmann::json report =
      Iperf(kClientB, kAddrB, {"-u", "-b", "100M", "-l", "1400", "-t", "2"});
  const RunResult stats = Gftopo("stats");
  ASSERT_EQ(stats.exit_code, 0) << Describe(stats);
  const nlohmann::json j = nlohmann::json::parse(stats.out, nullptr, false);
  ASSERT_TRUE(j.is_object()) << stats.out;
  const double in = j.value(nlohmann::json::json_pointer("/lossy/a_to_b/packets_in"), 0.0);
  const double lost = j.value(nlohmann::json::json_pointer("/lossy/a_to_b/dropped_loss"), 0.0);
  ASSERT_GT(in, 10000) << stats.out;  // ~17800 datagrams: sigma of the count ~7.5 %
  EXPECT_NEAR(lost / in, kLoss, 0.3 * kLoss) << stats.out;
  EXPECT_EQ(j.value(nlohmann::json::json_pointer("/clean/a_to_b/dropped_loss"), -1), 0);  // the other route is clean
  // iperf3's receiver sees the same loss.
  EXPECT_NEAR(report.value(nlohmann::json::json_pointer("/end/sum/lost_percent"), 0.0) / 100,
              kLoss, 0.3 * kLoss);
}

}  // namespace
}  // namespace gfrep
