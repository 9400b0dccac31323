#include "replica/web/telemetry.h"

#include <fmt/format.h>

#include <algorithm>

namespace gfrep::replica::web {

TelemetryHub::TelemetryHub(TelemetryHubOptions options)
    : options_(std::move(options)),
      bin_ms_(std::max<std::int64_t>(1, options_.bin.count())),
      history_bins_(std::max<std::int64_t>(1, options_.history.count() / bin_ms_)),
      stream_history_bins_(std::max<std::int64_t>(1, options_.stream_history.count() / bin_ms_)) {}

void TelemetryHub::Series::Add(std::int64_t bin, std::uint64_t bytes) {
  if (bins.empty()) first_bin = bin;
  while (bin < first_bin) {
    bins.push_front(0);
    first_bin -= 1;
  }
  const auto at = static_cast<std::size_t>(bin - first_bin);
  if (at >= bins.size()) bins.resize(at + 1, 0);
  bins[at] += bytes;
}

std::int64_t TelemetryHub::NowMs() const {
  return (options_.clock ? options_.clock() : catalog::SystemNowNs()) / 1'000'000;
}

absl::Status TelemetryHub::Add(const catalog::TelemetryBatch& b) {
  const std::int64_t now_ms = NowMs();
  // The agent's clock -> ours: its send time is (about) our receive time.
  const std::int64_t offset_ms = now_ms - b.sent_ns / 1'000'000;
  std::vector<std::string> routes, pairs;
  routes.reserve(b.copies.size());
  pairs.reserve(b.copies.size());
  for (const catalog::TelemetryCopy& c : b.copies) {
    routes.push_back(fmt::format("{}->{}", c.src_site, b.site));
    pairs.push_back(fmt::format("{}->{}", c.src_node, b.node));
  }
  absl::MutexLock lock(&mu_);
  batches_ += 1;
  const std::int64_t now_bin = now_ms / bin_ms_;
  auto add = [&](SeriesMap& series, const std::string& name, std::int64_t bin,
                 std::uint64_t bytes) {
    if (bin <= now_bin - history_bins_ || bin > now_bin + 1) return;  // outside the window
    series[name].Add(bin, bytes);
  };
  // Where each copy's stream counts start in a point's stream_bytes.
  std::vector<std::size_t> first_stream(b.copies.size(), 0);
  for (std::size_t i = 1; i < b.copies.size(); ++i) {
    first_stream[i] = first_stream[i - 1] + b.copies[i - 1].streams;
  }
  std::vector<SeriesMap*> pair_streams(b.copies.size(), nullptr);  // found on first use
  for (const catalog::TelemetryPoint& p : b.points) {
    // A sample ending at t covers the bin t falls in (its 100 ms end on a bin boundary
    // belong to the bin before).
    const std::int64_t bin = (p.time_ns / 1'000'000 + offset_ms - 1) / bin_ms_;
    for (std::size_t i = 0; i < b.copies.size(); ++i) {
      const std::uint64_t bytes = p.bytes[i];
      if (bytes == 0) continue;
      add(series_, "route:" + routes[i], bin, bytes);
      add(series_, "pair:" + pairs[i], bin, bytes);
      route_bytes_[routes[i]] += bytes;
      bytes_total_ += bytes;
    }
    if (p.stream_bytes.empty() || bin <= now_bin - stream_history_bins_ || bin > now_bin + 1) continue;
    for (std::size_t i = 0; i < b.copies.size(); ++i) {
      for (std::uint32_t k = 0; k < b.copies[i].streams; ++k) {
        const std::uint64_t bytes = p.stream_bytes[first_stream[i] + k];
        if (bytes == 0) continue;
        if (pair_streams[i] == nullptr) pair_streams[i] = &streams_[pairs[i]];
        (*pair_streams[i])[fmt::format("task-{}#{}", b.copies[i].task_id, k)].Add(bin, bytes);
      }
    }
  }
  for (std::size_t i = 0; i < b.copies.size(); ++i) {
    const catalog::TelemetryCopy& c = b.copies[i];
    Copy& copy = copies_[{b.node, c.task_id}];
    copy.request_id = c.request_id;
    copy.route = routes[i];
    copy.received = c.received;
    copy.streams = c.streams;
    copy.seen_ms = now_ms;
    if (!copy.whole && c.size > 0 && c.received >= c.size) {
      copy.whole = true;
      route_files_[routes[i]] += 1;
    }
  }
  if (now_bin != pruned_bin_) {  // once per bin, not per batch (a walk of every series)
    pruned_bin_ = now_bin;
    Prune(now_bin);
  }
  if (batches_ % 64 == 0) {  // ended copies, long after they left the in-flight counts
    for (auto it = copies_.begin(); it != copies_.end();) {
      it = now_ms - it->second.seen_ms > 10 * options_.copy_timeout.count() ? copies_.erase(it) : std::next(it);
    }
  }
  return absl::OkStatus();
}

namespace {

// Drops the bins before `keep_from`, and the series left empty.
template <typename SeriesMap>
void DropBefore(SeriesMap& series, std::int64_t keep_from) {
  for (auto it = series.begin(); it != series.end();) {
    auto& s = it->second;
    while (!s.bins.empty() && s.first_bin < keep_from) {
      s.bins.pop_front();
      s.first_bin += 1;
    }
    it = s.bins.empty() ? series.erase(it) : std::next(it);
  }
}

}  // namespace

void TelemetryHub::Prune(std::int64_t now_bin) {
  DropBefore(series_, now_bin - history_bins_ + 1);
  for (auto it = streams_.begin(); it != streams_.end();) {
    DropBefore(it->second, now_bin - stream_history_bins_ + 1);
    it = it->second.empty() ? streams_.erase(it) : std::next(it);
  }
}

TelemetryBins TelemetryHub::Since(std::int64_t after_end_ms) const {
  const std::int64_t now_ms = NowMs();
  absl::MutexLock lock(&mu_);
  return Collect(series_, after_end_ms, history_bins_, now_ms);
}

TelemetryBins TelemetryHub::StreamsSince(const std::string& pair, std::int64_t after_end_ms) const {
  const std::int64_t now_ms = NowMs();
  absl::MutexLock lock(&mu_);
  auto it = streams_.find(pair);
  static const SeriesMap kNone;
  return Collect(it == streams_.end() ? kNone : it->second, after_end_ms, stream_history_bins_, now_ms);
}

TelemetryBins TelemetryHub::Collect(const SeriesMap& series, std::int64_t after_end_ms,
                                    std::int64_t keep_bins, std::int64_t now_ms) const {
  TelemetryBins out;
  out.bin_ms = bin_ms_;
  // The last complete bin: ends at least `settle` ago.
  const std::int64_t last_bin = (now_ms - options_.settle.count()) / bin_ms_ - 1;
  out.end_ms = (last_bin + 1) * bin_ms_;
  std::int64_t first_bin = after_end_ms <= 0 ? last_bin - keep_bins + 1 : after_end_ms / bin_ms_;
  first_bin = std::max(first_bin, last_bin - keep_bins + 1);
  if (first_bin > last_bin) return out;
  for (const auto& [name, s] : series) {
    const std::int64_t end = s.first_bin + static_cast<std::int64_t>(s.bins.size());
    if (end <= first_bin || s.first_bin > last_bin) continue;
    std::vector<std::uint64_t> bins(static_cast<std::size_t>(last_bin - first_bin + 1), 0);
    bool any = false;
    for (std::int64_t b = std::max(first_bin, s.first_bin); b < std::min(end, last_bin + 1); ++b) {
      const std::uint64_t v = s.bins[static_cast<std::size_t>(b - s.first_bin)];
      bins[static_cast<std::size_t>(b - first_bin)] = v;
      any = any || v > 0;
    }
    if (any) out.series.emplace(name, std::move(bins));
  }
  return out;
}

TelemetryNow TelemetryHub::Now() const {
  TelemetryNow out;
  const std::int64_t now_ms = NowMs();
  absl::MutexLock lock(&mu_);
  out.route_bytes_total = route_bytes_;
  out.route_files_total = route_files_;
  out.bytes_total = bytes_total_;
  out.batches = batches_;
  for (const auto& [key, c] : copies_) {
    if (c.whole || now_ms - c.seen_ms > options_.copy_timeout.count()) continue;  // ended
    out.copies += 1;
    out.streams += c.streams;
    out.route_copies[c.route] += 1;
    if (c.request_id != 0) out.request_in_flight_bytes[c.request_id] += c.received;
  }
  return out;
}

std::uint64_t TelemetryHub::InFlightBytes(std::uint64_t request_id) const {
  const std::int64_t now_ms = NowMs();
  std::uint64_t sum = 0;
  absl::MutexLock lock(&mu_);
  for (const auto& [key, c] : copies_) {
    if (c.request_id == request_id && !c.whole && now_ms - c.seen_ms <= options_.copy_timeout.count()) {
      sum += c.received;
    }
  }
  return sum;
}

}  // namespace gfrep::replica::web
