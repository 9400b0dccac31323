#include "replica/telemetry.h"

#include <fmt/format.h>

#include <algorithm>

namespace gfrep::replica {

TelemetryHub::TelemetryHub(TelemetryHubOptions options)
    : options_(std::move(options)),
      bin_ms_(std::max<std::int64_t>(1, options_.bin.count())),
      history_bins_(std::max<std::int64_t>(1, options_.history.count() / bin_ms_)) {}

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
  std::lock_guard<std::mutex> lock(mu_);
  batches_ += 1;
  const std::int64_t now_bin = now_ms / bin_ms_;
  auto add = [&](const std::string& name, std::int64_t bin, std::uint64_t bytes) {
    if (bin <= now_bin - history_bins_ || bin > now_bin + 1) return;  // outside the window
    Series& s = series_[name];
    if (s.bins.empty()) s.first_bin = bin;
    while (bin < s.first_bin) {
      s.bins.push_front(0);
      s.first_bin -= 1;
    }
    const auto at = static_cast<std::size_t>(bin - s.first_bin);
    if (at >= s.bins.size()) s.bins.resize(at + 1, 0);
    s.bins[at] += bytes;
  };
  for (const catalog::TelemetryPoint& p : b.points) {
    // A sample ending at t covers the bin t falls in (its 100 ms end on a bin boundary
    // belong to the bin before).
    const std::int64_t bin = (p.time_ns / 1'000'000 + offset_ms - 1) / bin_ms_;
    for (std::size_t i = 0; i < b.copies.size(); ++i) {
      const std::uint64_t bytes = p.bytes[i];
      if (bytes == 0) continue;
      add("route:" + routes[i], bin, bytes);
      add("pair:" + pairs[i], bin, bytes);
      route_bytes_[routes[i]] += bytes;
      bytes_total_ += bytes;
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

void TelemetryHub::Prune(std::int64_t now_bin) {
  for (auto it = series_.begin(); it != series_.end();) {
    Series& s = it->second;
    while (!s.bins.empty() && s.first_bin <= now_bin - history_bins_) {
      s.bins.pop_front();
      s.first_bin += 1;
    }
    it = s.bins.empty() ? series_.erase(it) : std::next(it);
  }
}

TelemetryBins TelemetryHub::Since(std::int64_t after_end_ms) const {
  TelemetryBins out;
  out.bin_ms = bin_ms_;
  const std::int64_t now_ms = NowMs();
  // The last complete bin: ends at least `settle` ago.
  const std::int64_t last_bin = (now_ms - options_.settle.count()) / bin_ms_ - 1;
  out.end_ms = (last_bin + 1) * bin_ms_;
  std::int64_t first_bin = after_end_ms <= 0 ? last_bin - history_bins_ + 1 : after_end_ms / bin_ms_;
  first_bin = std::max(first_bin, last_bin - history_bins_ + 1);
  if (first_bin > last_bin) return out;
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& [name, s] : series_) {
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
  std::lock_guard<std::mutex> lock(mu_);
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
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& [key, c] : copies_) {
    if (c.request_id == request_id && !c.whole && now_ms - c.seen_ms <= options_.copy_timeout.count()) {
      sum += c.received;
    }
  }
  return sum;
}

std::shared_ptr<std::atomic<std::uint64_t>> CopyMeter::Begin(const catalog::TelemetryCopy& copy) {
  std::lock_guard<std::mutex> lock(mu_);
  Entry& e = entries_[copy.task_id];
  e.copy = copy;
  e.received = std::make_shared<std::atomic<std::uint64_t>>(0);
  e.sampled = 0;
  e.ended = false;
  return e.received;
}

void CopyMeter::End(std::uint64_t task_id) {
  std::lock_guard<std::mutex> lock(mu_);
  if (auto it = entries_.find(task_id); it != entries_.end()) it->second.ended = true;
}

void CopyMeter::Sample(std::int64_t now_ns) {
  std::lock_guard<std::mutex> lock(mu_);
  std::map<std::uint64_t, std::uint64_t> deltas;
  for (auto it = entries_.begin(); it != entries_.end();) {
    Entry& e = it->second;
    const std::uint64_t v = e.received->load(std::memory_order_relaxed);
    const std::uint64_t d = v > e.sampled ? v - e.sampled : 0;
    e.sampled = std::max(e.sampled, v);
    deltas[it->first] = d;
    e.copy.received = e.sampled;
    in_points_[it->first] = e.copy;
    it = e.ended ? entries_.erase(it) : std::next(it);
  }
  if (points_.size() >= catalog::kMaxTelemetryPoints) points_.erase(points_.begin());  // nobody takes them
  if (!points_.empty() && now_ns <= points_.back().first) now_ns = points_.back().first + 1;
  points_.emplace_back(now_ns, std::move(deltas));
}

std::optional<catalog::TelemetryBatch> CopyMeter::Take(const std::string& node, const std::string& site,
                                                       std::int64_t now_ns) {
  std::lock_guard<std::mutex> lock(mu_);
  bool moved = false;
  for (const auto& [t, deltas] : points_) {
    for (const auto& [id, d] : deltas) moved = moved || d > 0;
  }
  if (!moved && entries_.empty()) {
    points_.clear();
    in_points_.clear();
    return std::nullopt;
  }
  catalog::TelemetryBatch b;
  b.node = node;
  b.site = site;
  b.sent_ns = now_ns;
  std::map<std::uint64_t, std::size_t> index;
  for (const auto& [id, copy] : in_points_) {
    if (b.copies.size() >= catalog::kMaxTelemetryCopies) break;
    index[id] = b.copies.size();
    b.copies.push_back(copy);
  }
  for (const auto& [t, deltas] : points_) {
    catalog::TelemetryPoint p;
    p.time_ns = t;
    p.bytes.assign(b.copies.size(), 0);
    for (const auto& [id, d] : deltas) {
      if (auto it = index.find(id); it != index.end()) p.bytes[it->second] = d;
    }
    b.points.push_back(std::move(p));
  }
  points_.clear();
  in_points_.clear();
  return b;
}

}  // namespace gfrep::replica
