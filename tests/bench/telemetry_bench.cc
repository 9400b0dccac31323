// Cost of the dashboard's telemetry (issue 11): a real gfcatalogd --http receives the batches
// of N simulated site agents (each with C copies running, sampled every 100 ms, sent every
// `interval`, over its own gRPC channel) while a page (a WebSocket client) takes the 10-Hz
// feed. Measures gfcatalogd's CPU (utime + stime from /proc, % of one core) with the page
// connected and no traffic, then under the load; and the latency from a byte count sampled
// on an "agent" to the tick that carries it to the page (a marker route, one point per
// second). Each copy reports per-stream counts for `streams` data streams, and the page
// watches the streams of one node pair (src0->n0: one copy's streams). Prints one
// JSON object; see tests/bench/RESULTS.md "Dashboard telemetry".
//
//   build/bin/telemetry_bench [--agents 100] [--copies 16] [--streams 4] [--seconds 30]
//                             [--interval-ms 250] [--idle-seconds 10]
// --idle-seconds is how long the idle CPU is measured (a small value only for a smoke run).
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/websocket.hpp>
#include <chrono>
#include <cstring>
#include <fstream>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>
#include <vector>

#include "catalog/client.h"
#include "tests/support/http_get.h"
#include "tests/support/subprocess.h"
#include "tests/support/temp_dir.h"

namespace {

using namespace gfrep;
using Clock = std::chrono::steady_clock;

}  // namespace

int main(int argc, char** argv) {
  int agents = 100, copies = 16, streams = 4, seconds = 30, interval_ms = 250, idle_seconds = 10;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    const int v = std::atoi(argv[i + 1]);
    if (a == "--agents") agents = v;
    if (a == "--copies") copies = v;
    if (a == "--streams") streams = v;
    if (a == "--seconds") seconds = v;
    if (a == "--interval-ms") interval_ms = v;
    if (a == "--idle-seconds") idle_seconds = std::max(1, v);
  }
  testing::TempDir dir("telemetry-bench");
  const std::string http = fmt::format("127.0.0.1:{}", testing::FreeLoopbackPort());
  auto cat = testing::Subprocess::Start({testing::BinPath("gfcatalogd"), "--db", dir.Sub("db"), "--listen",
                                         "127.0.0.1:0", "--http", http, "--unsafe-no-sync", "--log-level", "warn"});
  if (!cat.ok()) return std::fprintf(stderr, "%s\n", cat.status().ToString().c_str()), 1;
  auto listen = cat->WaitForListen(std::chrono::seconds(30));
  if (!listen.ok()) return std::fprintf(stderr, "%s\n", listen.status().ToString().c_str()), 1;
  if (!cat->WaitForOutput("dashboard on", std::chrono::seconds(10)).ok()) return 1;

  // The page: a WebSocket client reading the feed.
  std::mutex mu;
  std::map<std::uint64_t, Clock::time_point> marks;  // marker value -> when sampled
  std::vector<double> latencies_ms;
  std::atomic<std::uint64_t> ticks{0}, feed_bytes{0}, stream_messages{0};
  std::atomic<bool> stop{false};
  const auto page_start = Clock::now();
  std::thread page([&] {
    namespace asio = boost::asio;
    asio::io_context io;
    gfrep::testing::WebSocket ws = gfrep::testing::OpenWebSocket(io, http, "/ws");
    ws.text(true);
    ws.write(asio::buffer(std::string(R"({"streams":"src0->n0"})")));  // one pair's streams
    boost::beast::flat_buffer buffer;
    while (!stop) {
      buffer.clear();
      boost::system::error_code ec;
      ws.read(buffer, ec);
      if (ec) break;
      const auto now = Clock::now();
      const std::string text = boost::beast::buffers_to_string(buffer.data());
      feed_bytes += text.size();
      nlohmann::json j = nlohmann::json::parse(text, nullptr, false);
      if (!j.is_discarded() && j.value("type", "") == "streams") stream_messages += 1;
      if (j.is_discarded() || j.value("type", "") != "tick") continue;
      ticks += 1;
      auto it = j["bins"].find("route:marker->sink");
      if (it == j["bins"].end()) continue;
      std::lock_guard<std::mutex> lock(mu);
      for (const auto& v : *it) {
        auto m = marks.find(v.get<std::uint64_t>());
        if (m == marks.end()) continue;
        latencies_ms.push_back(std::chrono::duration<double, std::milli>(now - m->second).count());
        marks.erase(m);
      }
    }
  });

  auto settle = [&](int s) { std::this_thread::sleep_for(std::chrono::seconds(s)); };
  settle(2);
  double cpu0 = testing::ProcessCpuSeconds(cat->pid());
  settle(idle_seconds);
  const double idle_cpu = (testing::ProcessCpuSeconds(cat->pid()) - cpu0) / idle_seconds;

  // The agents.
  std::atomic<std::uint64_t> sent{0}, failed{0}, batch_bytes{0};
  std::vector<std::thread> threads;
  const auto start = Clock::now();
  const auto end = start + std::chrono::seconds(seconds);
  for (int a = 0; a < agents; ++a) {
    threads.emplace_back([&, a] {
      catalog::ClientOptions co;
      co.address = *listen;
      auto client = catalog::CatalogClient::Create(co);
      if (!client.ok()) return;
      catalog::TelemetryBatch b;
      b.node = fmt::format("n{}", a);
      b.site = fmt::format("s{}", a % 10);
      for (int c = 0; c < copies; ++c) {
        b.copies.push_back({static_cast<std::uint64_t>(a * 1000 + c), 1, fmt::format("src{}", c),
                            fmt::format("s{}", (a + 1 + c) % 10), 1ull << 30,
                            static_cast<std::uint32_t>(streams), 0});
      }
      auto next = start + std::chrono::milliseconds(a * interval_ms / agents);  // spread
      while (Clock::now() < end) {
        std::this_thread::sleep_until(next);
        next += std::chrono::milliseconds(interval_ms);
        const std::int64_t now_ns = catalog::SystemNowNs();
        b.sent_ns = now_ns;
        b.points.clear();
        const int n = interval_ms / 100;
        for (int p = n - 1; p >= 0; --p) {  // 100-ms samples, 1 Gbit/s per copy
          b.points.push_back({now_ns - p * 100'000'000LL, std::vector<std::uint64_t>(b.copies.size(), 12'500'000),
                              std::vector<std::uint64_t>(b.copies.size() * static_cast<std::size_t>(streams),
                                                         12'500'000 / std::max(1, streams))});
        }
        for (auto& c : b.copies) c.received += 12'500'000ull * static_cast<std::uint64_t>(n);
        batch_bytes += b.copies.size() * 40 +
                       b.points.size() * (b.copies.size() * (4 + 3 * static_cast<std::size_t>(streams)) + 12);
        absl::Status s = (*client)->Publish(b);
        (s.ok() ? sent : failed) += 1;
      }
    });
  }
  // The marker: one point per second on a route of its own, sent at once.
  threads.emplace_back([&] {
    catalog::ClientOptions co;
    co.address = *listen;
    auto client = catalog::CatalogClient::Create(co);
    if (!client.ok()) return;
    std::uint64_t value = 1000;
    while (Clock::now() < end) {
      std::this_thread::sleep_for(std::chrono::seconds(1));
      value += 1;
      catalog::TelemetryBatch b;
      b.node = "sink1";
      b.site = "sink";
      b.copies.push_back({1, 1, "marker1", "marker", 1, 1, value});
      const std::int64_t now_ns = catalog::SystemNowNs();
      b.sent_ns = now_ns;
      b.points.push_back({now_ns, {value}, {}});
      {
        std::lock_guard<std::mutex> lock(mu);
        marks[value] = Clock::now();
      }
      (void)(*client)->Publish(b);
    }
  });
  settle(2);  // channels set up
  cpu0 = testing::ProcessCpuSeconds(cat->pid());
  const auto t0 = Clock::now();
  for (auto& t : threads) t.join();
  const double load_s = std::chrono::duration<double>(Clock::now() - t0).count();
  const double load_cpu = (testing::ProcessCpuSeconds(cat->pid()) - cpu0) / load_s;
  settle(2);
  stop = true;
  cat->Signal(SIGTERM);
  cat->Wait(std::chrono::seconds(20));
  page.join();

  std::sort(latencies_ms.begin(), latencies_ms.end());
  auto pct = [&](double q) {
    return latencies_ms.empty() ? 0.0 : latencies_ms[static_cast<std::size_t>(q * (latencies_ms.size() - 1))];
  };
  const double elapsed = std::chrono::duration<double>(Clock::now() - page_start).count();
  nlohmann::json out = {{"agents", agents},
                        {"copies_per_agent", copies},
                        {"streams_per_copy", streams},
                        {"stream_messages_per_s", static_cast<double>(stream_messages.load()) / elapsed},
                        {"interval_ms", interval_ms},
                        {"seconds", seconds},
                        {"batches_sent", sent.load()},
                        {"batches_failed", failed.load()},
                        {"batches_per_s", static_cast<double>(sent.load()) / seconds},
                        {"approx_payload_bytes_per_s", static_cast<double>(batch_bytes.load()) / seconds},
                        {"catalog_cpu_idle_with_page", idle_cpu},
                        {"catalog_cpu_under_load", load_cpu},
                        {"feed_ticks_per_s", static_cast<double>(ticks.load()) / elapsed},
                        {"feed_bytes_per_s", static_cast<double>(feed_bytes.load()) / elapsed},
                        {"marker_latency_ms_p50", pct(0.5)},
                        {"marker_latency_ms_p95", pct(0.95)},
                        {"marker_samples", latencies_ms.size()}};
  std::printf("%s\n", out.dump(2).c_str());
  return failed.load() == 0 ? 0 : 1;
}
