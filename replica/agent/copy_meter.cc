#include "replica/agent/copy_meter.h"

#include <fmt/format.h>

#include <algorithm>

namespace gfrep::replica::agent {

std::shared_ptr<CopyCounters> CopyMeter::Begin(const catalog::TelemetryCopy& copy) {
  absl::MutexLock lock(&mu_);
  Entry& e = entries_[copy.task_id];
  e.copy = copy;
  e.copy.streams = std::min(copy.streams, catalog::kMaxTelemetryStreams);
  e.counters = std::make_shared<CopyCounters>(e.copy.streams);
  e.sampled = 0;
  e.stream_sampled.assign(e.copy.streams, 0);
  e.ended = false;
  return e.counters;
}

void CopyMeter::End(std::uint64_t task_id) {
  absl::MutexLock lock(&mu_);
  if (auto it = entries_.find(task_id); it != entries_.end()) it->second.ended = true;
}

void CopyMeter::Sample(std::int64_t now_ns) {
  absl::MutexLock lock(&mu_);
  std::map<std::uint64_t, Delta> deltas;
  auto delta = [](std::uint64_t now, std::uint64_t& sampled) {
    const std::uint64_t d = now > sampled ? now - sampled : 0;
    sampled = std::max(sampled, now);
    return d;
  };
  for (auto it = entries_.begin(); it != entries_.end();) {
    Entry& e = it->second;
    Delta& d = deltas[it->first];
    d.bytes = delta(e.counters->received.load(std::memory_order_relaxed), e.sampled);
    d.streams.resize(e.stream_sampled.size());
    for (std::size_t k = 0; k < e.stream_sampled.size(); ++k) {
      d.streams[k] =
          delta(e.counters->stream[k].load(std::memory_order_relaxed), e.stream_sampled[k]);
    }
    e.copy.received = e.sampled;
    in_points_[it->first] = e.copy;
    it = e.ended ? entries_.erase(it) : std::next(it);
  }
  if (points_.size() >= catalog::kMaxTelemetryPoints)
    points_.erase(points_.begin());  // nobody takes them
  if (!points_.empty() && now_ns <= points_.back().first) now_ns = points_.back().first + 1;
  points_.emplace_back(now_ns, std::move(deltas));
}

std::optional<catalog::TelemetryBatch> CopyMeter::Take(const std::string& node,
                                                       const std::string& site,
                                                       std::int64_t now_ns) {
  absl::MutexLock lock(&mu_);
  bool moved = false;
  for (const auto& [t, deltas] : points_) {
    for (const auto& [id, d] : deltas) moved = moved || d.bytes > 0;
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
  std::vector<std::size_t> first_stream;  // per copy: where its streams start in stream_bytes
  std::size_t streams = 0;
  for (const auto& [id, copy] : in_points_) {
    if (b.copies.size() >= catalog::kMaxTelemetryCopies) break;
    index[id] = b.copies.size();
    b.copies.push_back(copy);
    first_stream.push_back(streams);
    streams += copy.streams;
  }
  for (const auto& [t, deltas] : points_) {
    catalog::TelemetryPoint p;
    p.time_ns = t;
    p.bytes.assign(b.copies.size(), 0);
    p.stream_bytes.assign(streams, 0);
    for (const auto& [id, d] : deltas) {
      auto it = index.find(id);
      if (it == index.end()) continue;
      p.bytes[it->second] = d.bytes;
      const std::size_t n = std::min<std::size_t>(d.streams.size(), b.copies[it->second].streams);
      for (std::size_t k = 0; k < n; ++k)
        p.stream_bytes[first_stream[it->second] + k] = d.streams[k];
    }
    b.points.push_back(std::move(p));
  }
  points_.clear();
  in_points_.clear();
  return b;
}

}  // namespace gfrep::replica::agent
