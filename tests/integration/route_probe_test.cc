// gfprobe route: a probe between two site agents (libiperf in their helper processes)
// measures a route and, with --apply, stores the measurement and the recommended settings
// in the route table. On loopback (any user) and, as root, on an emulated 200 ms / 1 Gbit/s
// route, where the figures must match the emulator's settings.

#include <unistd.h>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

#include "tests/support/federation.h"
#include "tests/support/subprocess.h"
#include "tests/support/temp_dir.h"

namespace gfrep {
namespace {

using testing::BinPath;
using testing::RunCommand;
using testing::RunResult;
using testing::Subprocess;
using ::testing::HasSubstr;

std::string Describe(const RunResult& r) {
  return "exit " + std::to_string(r.exit_code) + "\nstdout: " + r.out + "\nstderr: " + r.err;
}

class RouteProbeLoopbackTest : public testing::FederationTest {
 protected:
  RouteProbeLoopbackTest() : FederationTest("route-probe") {}
  void SetUp() override { StartFederation({{"a1", "A"}, {"b1", "B"}}); }
};

TEST_F(RouteProbeLoopbackTest, ApplyStoresTheMeasurementAndTheSettings) {
  const RunResult r = Tool({"gfprobe", "route", "A", "B", "--seconds", "1", "--omit", "0", "--apply", "--json"});
  ASSERT_EQ(r.exit_code, 0) << Describe(r);
  const nlohmann::json j = nlohmann::json::parse(r.out, nullptr, false);
  ASSERT_TRUE(j.is_object()) << r.out;
  EXPECT_GT(j.value("rtt_ms", 0.0), 0.0);
  EXPECT_LT(j.value("rtt_ms", 1e9), 50.0);  // loopback
  EXPECT_GT(j.value("bandwidth_bps", 0.0), 100e6);
  EXPECT_GE(j.value("streams", 0), 2);
  EXPECT_GE(j.value("total_streams", 0), 16);
  EXPECT_GT(j.value("route_rate_bps", 0.0), 0.9 * j.value("bandwidth_bps", 0.0));
  EXPECT_LT(j.value("route_rate_bps", 0.0), j.value("bandwidth_bps", 0.0));
  EXPECT_TRUE(j["applied"].get<bool>());
  EXPECT_GE(j["reasons"].size(), 5u);

  const RunResult got = Tool({"gfroute", "get", "A", "B", "--json"});
  ASSERT_EQ(got.exit_code, 0) << Describe(got);
  const nlohmann::json route = nlohmann::json::parse(got.out, nullptr, false);
  ASSERT_TRUE(route.is_object()) << got.out;
  EXPECT_EQ(route["total_streams"], j["total_streams"]);
  EXPECT_EQ(route["route_rate_bps"], j["route_rate_bps"]);
  EXPECT_EQ(route["bandwidth_bps"], j["bandwidth_bps"]);
  EXPECT_GT(route.value("measured_ns", 0LL), 0LL);
}

TEST_F(RouteProbeLoopbackTest, WithoutApplyTheRouteTableIsUntouched) {
  const RunResult r = Tool({"gfprobe", "route", "A", "B", "--seconds", "1", "--omit", "0"});
  ASSERT_EQ(r.exit_code, 0) << Describe(r);
  EXPECT_THAT(r.out, HasSubstr("recommended: --streams"));
  EXPECT_THAT(r.out, HasSubstr("not applied"));
  const RunResult got = Tool({"gfroute", "get", "A", "B"});
  EXPECT_NE(got.exit_code, 0) << Describe(got);  // no such route
}

// --compare-cc: one many-stream run per algorithm, each reporting what the sender really
// used; one the source cannot have is a row that says why, and the route gets the fastest
// of those that ran. As root the source agent provides highspeed (gfrep's BPF program) for
// its probe server; without root that row is "unavailable".
TEST_F(RouteProbeLoopbackTest, CompareCcRunsEachAlgorithmAndPicksOneThatRan) {
  const RunResult r = Tool({"gfprobe", "route", "A", "B", "--seconds", "1", "--omit", "0", "--streams", "2",
                            "--compare-cc", "reno,nosuchcc,highspeed", "--apply", "--json"});
  ASSERT_EQ(r.exit_code, 0) << Describe(r);
  const nlohmann::json j = nlohmann::json::parse(r.out, nullptr, false);
  ASSERT_TRUE(j.is_object()) << r.out;
  ASSERT_EQ(j["congestion_runs"].size(), 3u) << r.out;
  const nlohmann::json& reno = j["congestion_runs"][0];
  EXPECT_EQ(reno["requested"], "reno");
  EXPECT_EQ(reno["used"], "reno");
  EXPECT_GT(reno["bps"].get<double>(), 0);
  const nlohmann::json& none = j["congestion_runs"][1];
  EXPECT_EQ(none["used"], "");
  EXPECT_THAT(none["error"].get<std::string>(), HasSubstr("nosuchcc"));
  const nlohmann::json& hs = j["congestion_runs"][2];
  if (::geteuid() == 0) {
    EXPECT_EQ(hs["used"], "highspeed") << r.out;
    EXPECT_EQ(hs["error"], "") << r.out;
  } else {
    EXPECT_NE(hs["error"], "") << r.out;
  }
  const std::string chosen = j.value("congestion_control", "");
  EXPECT_TRUE(chosen == "reno" || (chosen == "highspeed" && ::geteuid() == 0)) << r.out;
  EXPECT_THAT(j["reasons"].dump(), HasSubstr("the fastest of the algorithms compared"));
  const RunResult got = Tool({"gfroute", "get", "A", "B", "--json"});
  ASSERT_EQ(got.exit_code, 0) << Describe(got);
  EXPECT_EQ(nlohmann::json::parse(got.out, nullptr, false).value("congestion_control", ""), chosen);
}

TEST_F(RouteProbeLoopbackTest, AnAgentWithoutAHelperRefusesClearly) {
  agents_.at("a1").Kill();
  agents_.erase("a1");
  // Restart a1 at a new port without a probe helper; wait until the catalog has its address.
  auto p = Subprocess::Start({BinPath("gfsited"), "--listen", "127.0.0.1:0", "--spool", Spool("a1").string(),
                              "--site", "A", "--node", "a1", "--catalog", catalog_, "--key-file", key_,
                              "--probe-helper", "none"});
  ASSERT_TRUE(p.ok()) << p.status();
  absl::StatusOr<std::string> addr = p->WaitForListen(std::chrono::seconds(30));
  ASSERT_TRUE(addr.ok()) << addr.status();
  agents_["a1"] = std::move(*p);
  for (int i = 0; i < 100; ++i) {
    absl::StatusOr<std::vector<catalog::Node>> nodes = client_->ListNodes("A");
    if (nodes.ok() && !nodes->empty() && nodes->front().address == *addr) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  const RunResult r = Tool({"gfprobe", "route", "A", "B", "--seconds", "1", "--omit", "0"});
  EXPECT_NE(r.exit_code, 0) << Describe(r);
  EXPECT_THAT(r.err, HasSubstr("no probe helper"));
}

TEST_F(RouteProbeLoopbackTest, UnknownSitesAndBadFlagsFailWithAMessage) {
  RunResult r = Tool({"gfprobe", "route", "A", "nowhere", "--seconds", "1"});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_THAT(r.err, HasSubstr("nowhere"));
  r = Tool({"gfprobe", "route", "A", "B", "--streams", "0"});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_THAT(r.err, HasSubstr("streams"));
}

// Root: sites in network namespaces joined by gfwanem at 200 ms / 1 Gbit/s, the reference
// route (tools/topologies/lfn-1g.topo under its own names).
constexpr char kTopology[] = R"(topology gfrep-rp
buffer 128M
site rpa nodes=1
site rpb nodes=1
route wan rpa rpb rtt=200ms rate=1G
)";
constexpr double kRttMs = 200;
constexpr double kRateBps = 1e9;

class RouteProbeEmulatedTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (::geteuid() != 0) GTEST_SKIP() << "needs root (network namespaces and TUN devices)";
    if (!std::filesystem::exists("/dev/net/tun")) GTEST_SKIP() << "/dev/net/tun is missing";
    topology_ = dir_.path() / "rp.topo";
    std::ofstream(topology_) << kTopology;
    Gftopo("down");  // leftovers of an interrupted run
    const RunResult up = Gftopo("up");
    ASSERT_EQ(up.exit_code, 0) << Describe(up);
    brought_up_ = true;
  }

  void TearDown() override {
    daemons_.clear();  // killed and reaped before their namespaces go
    if (brought_up_) {
      const RunResult down = Gftopo("down");
      EXPECT_EQ(down.exit_code, 0) << Describe(down);
    }
  }

  RunResult Gftopo(const std::string& command) {
    return RunCommand({BinPath("gftopo"), command, topology_.string()}, {}, std::chrono::seconds(30));
  }
  std::string Addr(const std::string& node) {
    RunResult r = RunCommand({BinPath("gftopo"), "addr", topology_.string(), node}, {}, std::chrono::seconds(10));
    EXPECT_EQ(r.exit_code, 0) << Describe(r);
    while (!r.out.empty() && (r.out.back() == '\n' || r.out.back() == ' ')) r.out.pop_back();
    return r.out;
  }
  static std::vector<std::string> InNs(const std::string& node, std::vector<std::string> argv) {
    argv.insert(argv.begin(), {"/usr/sbin/ip", "netns", "exec", "gfrep-" + node});
    return argv;
  }
  std::string StartDaemon(const std::string& node, std::vector<std::string> argv) {
    auto p = Subprocess::Start(InNs(node, std::move(argv)));
    EXPECT_TRUE(p.ok()) << p.status();
    if (!p.ok()) return "";
    absl::StatusOr<std::string> addr = p->WaitForListen(std::chrono::seconds(30));
    EXPECT_TRUE(addr.ok()) << addr.status();
    daemons_.push_back(std::move(*p));
    return addr.ok() ? *addr : "";
  }

  gfrep::testing::TempDir dir_{"route-probe-lfn"};
  std::filesystem::path topology_;
  bool brought_up_ = false;
  std::vector<Subprocess> daemons_;
};

TEST_F(RouteProbeEmulatedTest, ProbeReportsTheEmulatedRttAndRate) {
  const std::string key = dir_.Sub("key");
  const std::string cat = StartDaemon(
      "rpa-n1", {BinPath("gfcatalogd"), "--db", dir_.Sub("db"), "--listen", Addr("rpa-n1") + ":0",
                 "--insecure"});  // the test's own namespaces: no certificates needed
  ASSERT_FALSE(cat.empty());
  for (const std::string site : {"rpa", "rpb"}) {
    const std::string node = site + "-n1";
    ASSERT_FALSE(StartDaemon(node, {BinPath("gfsited"), "--listen", Addr(node) + ":0", "--spool",
                                    dir_.Sub("spool-" + node), "--site", site, "--node", node, "--catalog",
                                    cat, "--key-file", key, "--insecure"})
                     .empty());
  }
  for (int i = 0; i < 100; ++i) {
    RunResult n = RunCommand(InNs("rpa-n1", {BinPath("gfnode"), "list", "--catalog", cat}), {}, std::chrono::seconds(10));
    if (n.out.find("rpb-n1") != std::string::npos && n.out.find("rpa-n1") != std::string::npos) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  const RunResult r = RunCommand(InNs("rpa-n1", {BinPath("gfprobe"), "route", "rpa", "rpb", "--catalog", cat,
                                                 "--key-file", key, "--apply", "--json"}),
                                 {}, std::chrono::seconds(90));
  ASSERT_EQ(r.exit_code, 0) << Describe(r);
  const nlohmann::json j = nlohmann::json::parse(r.out, nullptr, false);
  ASSERT_TRUE(j.is_object()) << r.out;
  std::cout << "gfprobe route: " << r.out;  // the figures, for the log
  EXPECT_NEAR(j.value("rtt_ms", 0.0), kRttMs, 0.05 * kRttMs) << r.out;
  EXPECT_NEAR(j.value("bandwidth_bps", 0.0), kRateBps, 0.10 * kRateBps) << r.out;
  // The settings follow from them: pacing just under the rate, buffers for the BDP.
  EXPECT_NEAR(j.value("route_rate_bps", 0.0), 0.97 * j.value("bandwidth_bps", 0.0), 1e6);
  const double bdp = kRateBps / 8 * kRttMs / 1000;
  EXPECT_GE(j.value("socket_buffer_bytes", 0.0) * j.value("streams", 0), 1.5 * bdp) << r.out;
  const RunResult got = RunCommand(InNs("rpa-n1", {BinPath("gfroute"), "get", "rpa", "rpb", "--json", "--catalog", cat}),
                                   {}, std::chrono::seconds(10));
  ASSERT_EQ(got.exit_code, 0) << Describe(got);
  const nlohmann::json route = nlohmann::json::parse(got.out, nullptr, false);
  ASSERT_TRUE(route.is_object()) << got.out;
  EXPECT_EQ(route["bandwidth_bps"], j["bandwidth_bps"]);
  EXPECT_EQ(route["total_streams"], j["total_streams"]);
}

}  // namespace
}  // namespace gfrep
