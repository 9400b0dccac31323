// The dashboard, metrics and health checks with real processes on loopback: gfcatalogd
// --http (the page, /ws, /metrics, /healthz, /readyz), gfsited --http (/metrics, /healthz,
// /readyz), and a real browser (headless Chromium driven by Selenium,
// tests/replica/web/dashboard_browser.py) watching a replication: the route appears, its 0.1-s
// graph receives points while bytes move, the page's totals agree with the agents' own
// counters, the queue empties when the request ends, and a page that loses the catalog says
// "disconnected" and recovers by itself. Screenshots are kept under
// <build>/test-artifacts/dashboard/ (or $GFREP_TEST_ARTIFACTS/dashboard/).
#include <gtest/gtest.h>

#include <chrono>
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <regex>
#include <set>
#include <thread>

#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/websocket.hpp>

#include "tests/support/federation.h"
#include "tests/support/http_get.h"

namespace gfrep {
namespace {

namespace fs = std::filesystem;
using testing::RunResult;

// Why a browser cannot run here ("" if it can).
std::string NoBrowser() {
  for (const char* f : {"/usr/bin/chromium", "/usr/bin/chromedriver", "/usr/bin/python3"}) {
    if (!fs::exists(f)) return std::string(f) + " is missing (tools/setup-deps installs it)";
  }
  RunResult r = testing::RunCommand({"/usr/bin/python3", "-c", "import selenium"});
  if (r.exit_code != 0) return "python3-selenium is missing (tools/setup-deps installs it): " + r.err;
  return "";
}

class DashboardTest : public testing::FederationTest {
 protected:
  DashboardTest() : FederationTest("dashboard") {}

  void SetUp() override {
    http_ = "127.0.0.1:" + std::to_string(testing::FreeLoopbackPort());
    testing::FederationOptions o;
    o.catalogd_flags = {"--http", http_};
    o.agent_flags = {"--lease", "3", "--http", "127.0.0.1:0"};
    StartFederation({{"kek1", "kek"}, {"sdsc1", "sdsc"}}, o);
    for (const std::string node : {"kek1", "sdsc1"}) {
      auto line = agents_[node].WaitForOutput("metrics on http://", std::chrono::seconds(10));
      ASSERT_TRUE(line.ok()) << line.status();
      const std::size_t at = line->find("http://") + 7;
      agent_http_[node] = line->substr(at, line->find("/metrics") - at);
    }
    const char* base = std::getenv("GFREP_TEST_ARTIFACTS");
    artifacts_ = fs::path(base != nullptr ? base : "test-artifacts") / "dashboard";
    fs::create_directories(artifacts_);
  }

  testing::HttpReply Get(const std::string& host_port, const std::string& target) {
    absl::StatusOr<testing::HttpReply> r = testing::HttpGet(host_port, target);
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? *r : testing::HttpReply{};
  }

  // Runs dashboard_browser.py for `phases`; returns its result (stdout: one JSON line).
  testing::Subprocess Browser(const std::string& phases, int timeout_s = 60) {
    auto p = testing::Subprocess::Start(
        {"/usr/bin/python3", std::string(GFREP_SOURCE_DIR) + "/tests/replica/web/dashboard_browser.py", "--url",
         "http://" + http_ + "/", "--out", artifacts_.string(), "--phase", phases, "--route", "kek->sdsc",
         "--timeout", std::to_string(timeout_s)});
    EXPECT_TRUE(p.ok()) << p.status();
    return p.ok() ? std::move(*p) : testing::Subprocess();
  }

  // Opens /ws, asks for the streams of node pair `pair` and returns the first "streams" reply
  // (the last minute of its streams' bins).
  nlohmann::json WatchStreams(const std::string& pair) {
    namespace asio = boost::asio;
    asio::io_context io;
    testing::WebSocket ws = testing::OpenWebSocket(io, http_, "/ws");
    ws.text(true);
    ws.write(asio::buffer(nlohmann::json{{"streams", pair}}.dump()));
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    while (std::chrono::steady_clock::now() < until) {
      boost::beast::flat_buffer buffer;
      ws.read(buffer);
      nlohmann::json j = nlohmann::json::parse(boost::beast::buffers_to_string(buffer.data()), nullptr, false);
      if (!j.is_discarded() && j.value("type", "") == "streams") return j;
    }
    return nullptr;
  }

  bool WaitFile(const fs::path& f, std::chrono::seconds timeout) {
    auto deadline = std::chrono::steady_clock::now() + timeout;
    while (!fs::exists(f) && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    return fs::exists(f);
  }

  std::string http_;
  std::map<std::string, std::string> agent_http_;
  fs::path artifacts_;
};

TEST_F(DashboardTest, HealthAndMetricsAreServedByBothDaemons) {
  for (const std::string& where : {http_, agent_http_["kek1"], agent_http_["sdsc1"]}) {
    testing::HttpReply r = Get(where, "/healthz");
    EXPECT_EQ(r.status, 200) << where;
    r = Get(where, "/readyz");
    EXPECT_EQ(r.status, 200) << where << ": " << r.body;
    r = Get(where, "/metrics");
    EXPECT_EQ(r.status, 200) << where;
    EXPECT_EQ(r.content_type, "text/plain; version=0.0.4; charset=utf-8");
    EXPECT_NE(r.body.find("# TYPE gfrep_"), std::string::npos) << r.body;
  }
  EXPECT_GE(testing::MetricValue(Get(agent_http_["kek1"], "/metrics").body, "gfrep_agent_received_bytes_total"), 0);
  // The catalog's RPC latencies (the agents have registered and heartbeat by now) and RocksDB.
  const std::string cm = Get(http_, "/metrics").body;
  EXPECT_GT(testing::MetricValue(cm, "gfrep_catalog_rpc_duration_seconds_count{method=\"RegisterNode\"}"), 0) << cm;
  EXPECT_GT(testing::MetricValue(cm, "gfrep_catalog_rpc_duration_seconds_bucket{method=\"RegisterNode\",le=\"+Inf\"}"), 0);
  EXPECT_GT(testing::MetricValue(cm, "gfrep_catalog_rocksdb_estimated_keys"), 0);
  // A page connected to /ws gets the history first, then ticks at 10 Hz and the state every
  // second (not only when it connects).
  {
    boost::asio::io_context io;
    testing::WebSocket ws = testing::OpenWebSocket(io, http_, "/ws");
    std::map<std::string, int> kinds;
    std::string first;
    const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(3500);
    while (std::chrono::steady_clock::now() < until) {
      boost::beast::flat_buffer buffer;
      ws.read(buffer);
      nlohmann::json j = nlohmann::json::parse(boost::beast::buffers_to_string(buffer.data()), nullptr, false);
      ASSERT_FALSE(j.is_discarded());
      if (first.empty()) first = j.value("type", "");
      kinds[j.value("type", "")] += 1;
    }
    EXPECT_EQ(first, "history");
    EXPECT_GE(kinds["tick"], 20) << "10 Hz";
    EXPECT_GE(kinds["state"], 3) << "every second, to a page already connected";
  }
  EXPECT_EQ(Get(http_, "/nothing").status, 404);
  EXPECT_EQ(Get(http_, "/api/request?id=x").status, 400);
  EXPECT_EQ(Get(http_, "/api/request?id=999").status, 404);
  EXPECT_EQ(Get(http_, "/api/explain?path=/no/such").status, 404);
  testing::HttpReply page = Get(http_, "/");
  EXPECT_EQ(page.status, 200);
  EXPECT_NE(page.body.find("dashboard.js"), std::string::npos);
  EXPECT_EQ(Get(http_, "/lib/dygraph.min.js").status, 200) << "from Debian's libjs-dygraphs";

  // A malformed telemetry batch is refused with a clear error; the catalog goes on.
  catalog::TelemetryBatch bad;
  bad.node = "kek1";
  bad.site = "kek";
  bad.copies.push_back({1, 1, "sdsc1", "sdsc", 10, 1, 0});
  bad.points.push_back({1, {1, 2, 3}, {}});
  catalog::ClientOptions co;
  co.address = catalog_;
  auto raw = catalog::CatalogClient::Create(co);
  ASSERT_TRUE(raw.ok());
  // The client checks it first; the server checks it too (a client that does not).
  EXPECT_TRUE(absl::IsInvalidArgument((*raw)->Publish(bad)));
  EXPECT_EQ(Get(http_, "/healthz").status, 200);

  // A public address without --http-public is refused at start.
  RunResult r = testing::RunCommand({testing::BinPath("gfcatalogd"), "--db", dir_.Sub("db2"), "--listen",
                                     "127.0.0.1:0", "--http", "0.0.0.0:0"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("--http-public"), std::string::npos) << r.err;
}

TEST_F(DashboardTest, ABrowserWatchesAReplicationLiveAndTheNumbersAgree) {
  if (std::string why = NoBrowser(); !why.empty()) GTEST_SKIP() << "no browser: " << why;
  // A route slow enough to watch: 3 x 32 MiB at 100 Mbit/s is about 8 s.
  RunResult r = Tool({"gfroute", "set", "kek", "sdsc", "--route-rate", "100M"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::uint64_t total = 0;
  for (int i = 0; i < 3; ++i) {
    Store("/exp/f" + std::to_string(i), 32u << 20, 40 + i, "kek1");
    total += 32u << 20;
  }
  // The page is open (and waiting for the route) before the request starts.
  fs::remove(artifacts_ / "moving.ready");
  testing::Subprocess moving = Browser("moving");
  ASSERT_TRUE(WaitFile(artifacts_ / "moving.ready", std::chrono::seconds(60))) << moving.Stderr();
  auto rep = testing::Subprocess::Start({testing::BinPath("gfrep"), "-N", "1", "-D", "sdsc", "--", "/exp/f0",
                                         "/exp/f1", "/exp/f2"},
                                        ToolOptions());
  ASSERT_TRUE(rep.ok()) << rep.status();
  // gfrep shows the bytes its running copies received, not only finished files.
  std::uint64_t in_flight = 0;
  auto until = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (in_flight == 0 && std::chrono::steady_clock::now() < until) {
    RunResult st = Tool({"gfrep", "list", "--json"});
    nlohmann::json j = nlohmann::json::parse(st.out, nullptr, false);
    if (!j.is_discarded() && j.is_array() && !j.empty()) in_flight = j[0].value("in_flight_bytes", 0ull);
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  EXPECT_GT(in_flight, 0u) << "gfrep list --json never showed bytes in flight";
  RunResult m = moving.Wait(std::chrono::seconds(90));
  EXPECT_EQ(m.exit_code, 0) << m.out << m.err;
  nlohmann::json seen = nlohmann::json::parse(m.out, nullptr, false);
  ASSERT_FALSE(seen.is_discarded()) << m.out;
  EXPECT_GE(seen.value("ticks_per_s", 0.0), 5.0) << "the feed runs at 10 Hz";
  EXPECT_GT(seen.value("max_recent_mbps", 0.0), 0.0);
  // The page picked the busy node pair by itself and drew its streams.
  EXPECT_EQ(seen.value("stream_pair", ""), "kek1->sdsc1") << m.out;
  EXPECT_GE(seen.value("streams", 0), 1) << m.out;
  EXPECT_GT(seen.value("stream_points", 0), 0) << m.out;

  RunResult done = rep->Wait(std::chrono::seconds(120));
  ASSERT_EQ(done.exit_code, 0) << done.out << done.err;
  // Per stream: every byte of the three files, counted on the stream that carried it, is in
  // the pair's stream series (the last minute), each series named task-ID#K.
  {
    // The agents send their last samples within a telemetry interval; the hub settles 400 ms.
    std::this_thread::sleep_for(std::chrono::milliseconds(1500));
    nlohmann::json streams = WatchStreams("kek1->sdsc1");
    ASSERT_TRUE(streams.is_object()) << "no streams message";
    EXPECT_TRUE(streams.value("reset", false));
    EXPECT_EQ(streams.value("pair", ""), "kek1->sdsc1");
    std::uint64_t sum = 0;
    std::set<std::string> tasks;
    for (const auto& [name, bins] : streams["series"].items()) {
      EXPECT_TRUE(std::regex_match(name, std::regex("task-[0-9]+#[0-9]+"))) << name;
      tasks.insert(name.substr(0, name.find('#')));
      for (const auto& b : bins) sum += b.get<std::uint64_t>();
    }
    EXPECT_EQ(sum, total) << streams.dump().substr(0, 2000);
    EXPECT_EQ(tasks.size(), 3u) << "one copy per file";
    EXPECT_TRUE(WatchStreams("kek9->sdsc1")["series"].empty()) << "a pair with no streams";
  }
  testing::Subprocess idle = Browser("idle,detail");
  RunResult i = idle.Wait(std::chrono::seconds(90));
  EXPECT_EQ(i.exit_code, 0) << i.out << i.err;
  nlohmann::json phases = nlohmann::json::parse(i.out, nullptr, false);
  ASSERT_FALSE(phases.is_discarded()) << i.out;
  const nlohmann::json& idle_seen = phases["phases"][0];
  // The page's total, the catalog's /metrics and the destination agent's own counter agree.
  const double agent = testing::MetricValue(Get(agent_http_["sdsc1"], "/metrics").body,
                                            "gfrep_agent_received_bytes_total");
  const double route = testing::MetricValue(Get(http_, "/metrics").body,
                                            "gfrep_route_received_bytes_total{src_site=\"kek\",dst_site=\"sdsc\"}");
  EXPECT_EQ(agent, static_cast<double>(total));
  EXPECT_EQ(testing::MetricValue(Get(http_, "/metrics").body, "gfrep_route_files_total{src_site=\"kek\",dst_site=\"sdsc\"}"), 3);
  EXPECT_NEAR(route, agent, agent * 0.03);
  EXPECT_NEAR(idle_seen.value("total_bytes", 0.0), agent, agent * 0.03);
  EXPECT_EQ(idle_seen["routes"], nlohmann::json::array({"kek->sdsc"}));
  EXPECT_NE(phases["phases"][1].value("text", "").find("request"), std::string::npos) << i.out;
}

TEST_F(DashboardTest, APageShowsDisconnectedWhileTheCatalogIsDownAndRecoversByItself) {
  if (std::string why = NoBrowser(); !why.empty()) GTEST_SKIP() << "no browser: " << why;
  fs::remove(artifacts_ / "disconnected.ready");
  fs::remove(artifacts_ / "reconnected.ready");
  testing::Subprocess page = Browser("disconnected,reconnected");
  ASSERT_TRUE(WaitFile(artifacts_ / "disconnected.ready", std::chrono::seconds(60))) << page.Stderr();
  StopCatalog();
  ASSERT_TRUE(WaitFile(artifacts_ / "reconnected.ready", std::chrono::seconds(60))) << page.Stderr();
  StartCatalog();
  RunResult r = page.Wait(std::chrono::seconds(90));
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
}

}  // namespace
}  // namespace gfrep
