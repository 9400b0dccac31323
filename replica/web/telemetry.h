#pragma once

// TelemetryHub: the last minutes of what moved where, at 0.1-s resolution, for the dashboard
// (replica/web/dashboard.h) and /metrics, fed by the site agents' telemetry batches
// (catalog::TelemetryBatch via the catalog server's Telemetry service, sampled every 100 ms by each
// agent).
//
// Each point's per-copy byte counts go into 100-ms bins (by the point's time, corrected by
// the batch's send time against the hub's clock, so agents' clock offsets do not matter) of
// two series: "route:SRC_SITE->DST_SITE" and "pair:SRC_NODE->DST_NODE", and its per-stream
// counts (when the agent reports them) into one series per stream, "task-ID#K" (data stream K
// of task ID's copy), kept per node pair for `stream_history` and handed out per pair
// (StreamsSince; the page asks for one pair at a time). A bin is complete
// (handed out by Since) once `settle` has passed after its end: the agents send a batch every
// few hundred ms, so a younger bin may still grow. History: `history` (5 min) per series.
//
// Thread safety: all methods may be called from any thread (one mutex; Add is O(points x
// copies), Since O(series x new bins)).

#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "catalog/catalog.h"

namespace gfrep::replica::web {

struct TelemetryHubOptions {
  std::chrono::milliseconds bin{100};
  std::chrono::milliseconds history{std::chrono::minutes(5)};
  std::chrono::milliseconds settle{400};
  // Per-stream bins are kept this long (100 agents x 16 copies x 4 streams: 6,400 series).
  std::chrono::milliseconds stream_history{std::chrono::seconds(60)};
  // A copy not reported for this long has ended (its bytes leave the in-flight counts).
  std::chrono::milliseconds copy_timeout{std::chrono::seconds(3)};
  catalog::Clock clock;  // Unix ns; null: the system clock
};

// Completed bins of every series with bytes in them, ending at `end_ms` (Unix ms): series ->
// bytes per bin, oldest first, the last ending at end_ms; a series missing had none.
struct TelemetryBins {
  std::int64_t bin_ms = 100;
  std::int64_t end_ms = 0;
  std::map<std::string, std::vector<std::uint64_t>> series;
};

// What is moving now, from the copies the agents reported lately.
struct TelemetryNow {
  std::map<std::string, std::uint64_t> route_bytes_total;  // "SRC->DST" -> bytes, since start
  std::map<std::string, std::uint64_t> route_copies;       // "SRC->DST" -> copies running
  std::map<std::string, std::uint64_t> route_files_total;  // "SRC->DST" -> copies seen whole
  std::map<std::uint64_t, std::uint64_t> request_in_flight_bytes;  // request -> received so far
  std::uint64_t copies = 0;
  std::uint64_t streams = 0;
  std::uint64_t bytes_total = 0;
  std::uint64_t batches = 0;
};

class TelemetryHub {
 public:
  explicit TelemetryHub(TelemetryHubOptions options = {});

  // REQUIRES catalog::Validate(batch).ok() (the gRPC service checks it).
  absl::Status Add(const catalog::TelemetryBatch& batch);

  // The bins completed after `after_end_ms` (0: the whole history) up to now - settle.
  TelemetryBins Since(std::int64_t after_end_ms) const;
  // The same for the streams of node pair `pair` ("SRC_NODE->DST_NODE"): series "task-ID#K",
  // at most `stream_history` back.
  TelemetryBins StreamsSince(const std::string& pair, std::int64_t after_end_ms) const;

  TelemetryNow Now() const;
  // What the running copies of request `id` received so far (Request::in_flight_bytes).
  std::uint64_t InFlightBytes(std::uint64_t request_id) const;

 private:
  struct Series {
    std::int64_t first_bin = 0;  // bin index (Unix ms / bin) of bins.front()
    std::deque<std::uint64_t> bins;
    void Add(std::int64_t bin, std::uint64_t bytes);
  };
  using SeriesMap = std::map<std::string, Series>;

  std::int64_t NowMs() const;
  void Prune(std::int64_t now_bin) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The bins of `series` after `after_end_ms`, at most `keep_bins` back. REQUIRES mu_ unless
  // `series` is local.
  TelemetryBins Collect(const SeriesMap& series, std::int64_t after_end_ms, std::int64_t keep_bins,
                        std::int64_t now_ms) const;
  struct Copy {
    std::uint64_t request_id = 0;
    std::string route;
    std::uint64_t received = 0;
    std::uint32_t streams = 0;
    std::int64_t seen_ms = 0;
    bool whole = false;  // counted in route_files_ (all its bytes were reported)
  };

  TelemetryHubOptions options_;
  std::int64_t bin_ms_;
  std::int64_t history_bins_;
  std::int64_t stream_history_bins_;
  mutable absl::Mutex mu_;
  SeriesMap series_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, SeriesMap> streams_ ABSL_GUARDED_BY(mu_);  // node pair -> "task-ID#K" ->
  std::map<std::pair<std::string, std::uint64_t>, Copy> copies_
      ABSL_GUARDED_BY(mu_);  // (node, task) -> latest
  std::map<std::string, std::uint64_t> route_bytes_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, std::uint64_t> route_files_ ABSL_GUARDED_BY(mu_);
  std::uint64_t bytes_total_ ABSL_GUARDED_BY(mu_) = 0;
  std::uint64_t batches_ ABSL_GUARDED_BY(mu_) = 0;
  std::int64_t pruned_bin_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace gfrep::replica::web
