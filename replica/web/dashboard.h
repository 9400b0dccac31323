#pragma once

// Dashboard: gfcatalogd's live web page of the federation (the SC2002 bandwidth-challenge
// view): sites and routes as a picture, throughput per route and per node pair at 0.1, 1 and
// 10 s, the transfer queue, replica counts per site, the policies' state and recent errors.
//
// Served by HttpServer (replica/web/http_server.h) from gfcatalogd --http HOST:PORT:
//   /, /dashboard.js, /dashboard.css   the page (replica/web/dashboard/, compiled in)
//   /lib/dygraph.min.{js,css}          the charting library, from Debian's libjs-dygraphs
//   /ws                                 WebSocket feed (JSON text frames, server -> page):
//       {"type":"history", ...}  once on connect: the last minutes of 0.1-s bins
//       {"type":"tick", ...}     every 100 ms: the bins completed since the last tick
//       {"type":"state", ...}    every second: sites, routes, queue, replicas, policies, errors
//       {"type":"streams", ...}  every 100 ms while the page watches a node pair: its streams'
//                                bins ("reset": true first, with the last minute)
//     page -> server: {"streams": "SRC_NODE->DST_NODE"} to watch a pair's streams ("" stops)
//   /api/request?id=N, /api/explain?path=P   what the page shows for a selected request or file
// The bins come from the TelemetryHub (replica/web/telemetry.h), fed by the agents' batches; one
// feed thread builds each message once and queues it to every page.
//
// Thread safety: AddRoutes before the server starts; Start/Stop from one thread. Stop (which
// lets the pages' connections go) before the HttpServer is destroyed.

#include <spdlog/logger.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <filesystem>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "catalog/catalog.h"
#include "catalog/event_cursor.h"
#include "replica/core/metrics.h"
#include "replica/web/http_server.h"
#include "replica/web/telemetry.h"

namespace gfrep::replica::web {

struct DashboardOptions {
  catalog::CatalogView* catalog = nullptr;  // REQUIRES non-null, outlives the dashboard
  TelemetryHub* hub = nullptr;          // REQUIRES non-null, outlives the dashboard
  // Where Debian's libjs-dygraphs puts dygraph.min.js and dygraph.min.css.
  std::filesystem::path library_dir = "/usr/share/javascript/dygraphs";
  std::chrono::milliseconds tick{100};
  std::chrono::milliseconds state_interval{1000};
  // Replica counts per site and the policies' state (each a walk of the catalog) this often.
  std::chrono::milliseconds slow_interval{10000};
  std::chrono::milliseconds node_timeout{30000};
  std::shared_ptr<spdlog::logger> logger;  // null: spdlog::default_logger()
};

class Dashboard {
 public:
  explicit Dashboard(DashboardOptions options);
  ~Dashboard();

  void AddRoutes(HttpRoutes& routes);
  void Start();
  void Stop();

  // gfcatalogd's /metrics: transfers (from the telemetry), tasks and requests by state,
  // task outcomes seen in the event log, connected pages.
  void AppendMetrics(MetricsText& m);

  // The state message (also what /api/state returns); built by the feed thread.
  nlohmann::json State();

 private:
  // The node pair whose streams a page watches (feed thread only).
  struct StreamWatch {
    std::string pair;         // "" none
    std::int64_t end_ms = 0;  // the end of the last bins sent
  };
  struct Page {
    std::shared_ptr<WebSocketPeer> peer;
    bool greeted = false;  // history and last state sent
    std::shared_ptr<StreamWatch> watch = std::make_shared<StreamWatch>();
  };
  void FeedStreams(const std::vector<Page>& pages);
  void Loop();
  // Loop's wait ends: stopping, or a page not greeted yet.
  bool WakeLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void ReadEvents();
  void RefreshSlow();
  HttpResponse ApiRequest(const HttpRequest& r);
  HttpResponse ApiExplain(const HttpRequest& r);

  DashboardOptions options_;
  std::shared_ptr<spdlog::logger> log_;
  std::map<std::string, std::string> library_;  // file name -> content (read at start)

  mutable absl::Mutex mu_;
  std::vector<Page> pages_ ABSL_GUARDED_BY(mu_);
  std::string last_state_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, std::uint64_t> task_events_ ABSL_GUARDED_BY(mu_);  // state -> count
  std::map<std::string, std::uint64_t> tasks_open_ ABSL_GUARDED_BY(mu_);   // state -> count
  std::map<std::string, std::uint64_t> requests_ ABSL_GUARDED_BY(mu_);     // state -> count
  std::uint64_t pages_served_ ABSL_GUARDED_BY(mu_) = 0;

  // Feed thread only.
  std::int64_t last_end_ms_ = 0;
  std::optional<catalog::EventCursor> events_;  // the event log from the first refresh on
  std::deque<nlohmann::json> errors_;
  nlohmann::json replicas_ = nlohmann::json::object();
  nlohmann::json policies_ = nlohmann::json::array();
  std::chrono::steady_clock::time_point last_slow_{};

  std::atomic<bool> stop_{false};  // set under mu_, so that Loop's wait ends at once
  std::thread thread_;
};

}  // namespace gfrep::replica::web
