#pragma once

// The site agent's side of the dashboard's live telemetry: what each running copy receives,
// sampled every 100 ms and sent as catalog::TelemetryBatch (the catalog server's Telemetry service)
// to the catalog's TelemetryHub (replica/web/telemetry.h).

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "catalog/catalog.h"

namespace gfrep::replica::agent {

// What one running copy received: in all and per data stream (copy.streams counters).
struct CopyCounters {
  explicit CopyCounters(std::uint32_t streams) : stream(streams) {}
  std::atomic<std::uint64_t> received{0};
  std::vector<std::atomic<std::uint64_t>> stream;
};

// CopyMeter: the site agent's side. Each running copy counts the bytes it receives, in all and
// per stream; every 100 ms Sample() records what each received since the previous sample, and
// Take() hands the samples over as one batch (the agent sends it with
// the catalog server's Telemetry service).
//
// Thread safety: all methods from any thread (copies count with atomic adds, no lock).
class CopyMeter {
 public:
  // A copy begins (copy.streams at most catalog::kMaxTelemetryStreams); add received bytes to
  // the returned counters (kept alive by the meter until the copy has ended and its last bytes
  // were sampled).
  std::shared_ptr<CopyCounters> Begin(const catalog::TelemetryCopy& copy);
  void End(std::uint64_t task_id);
  void Sample(std::int64_t now_ns);
  // The samples since the last Take (nullopt: none, or nothing running and nothing moved).
  std::optional<catalog::TelemetryBatch> Take(const std::string& node, const std::string& site,
                                              std::int64_t now_ns);

 private:
  struct Entry {
    catalog::TelemetryCopy copy;
    std::shared_ptr<CopyCounters> counters;
    std::uint64_t sampled = 0;
    std::vector<std::uint64_t> stream_sampled;
    bool ended = false;
  };
  struct Delta {
    std::uint64_t bytes = 0;
    std::vector<std::uint64_t> streams;
  };
  absl::Mutex mu_;
  std::map<std::uint64_t, Entry> entries_ ABSL_GUARDED_BY(mu_);  // task id ->
  std::vector<std::pair<std::int64_t, std::map<std::uint64_t, Delta>>> points_ ABSL_GUARDED_BY(mu_);
  std::map<std::uint64_t, catalog::TelemetryCopy> in_points_
      ABSL_GUARDED_BY(mu_);  // copies the points name
};

}  // namespace gfrep::replica::agent
