#include "replica/agent/slow_source.h"

#include <fmt/format.h>

#include <algorithm>

namespace gfrep::replica::agent {

std::vector<SlowSourceWatch::Verdict> SlowSourceWatch::Tick(Clock::time_point now,
                                                            const std::vector<Source>& sources) {
  const bool first_tick = !ticked_;
  const Clock::time_point before = last_;
  ticked_ = true;
  last_ = now;
  std::map<std::string, std::uint64_t> received;
  for (const Source& c : sources) received[c.name] = c.received;
  std::swap(received, received_);  // `received`: the tick before
  if (first_tick || now <= before) return {};
  const double dt = std::chrono::duration<double>(now - before).count();

  // This tick's sample of each source that is not idle: the bytes since the tick before, and
  // its copies running now over that time.
  std::map<std::string, Sample> step;
  for (const Source& c : sources) {
    auto was = received.find(c.name);
    const std::uint64_t base = was != received.end() ? was->second : c.received;
    const std::uint64_t bytes = c.received > base ? c.received - base : 0;
    if (c.copies <= 0 && bytes == 0) continue;
    Sample& s = step[c.name];
    s.at = now;
    s.bytes += static_cast<double>(bytes);
    s.copy_seconds += std::max(c.copies, 1) * dt;
  }
  // A source idle for half a window starts again.
  std::erase_if(tracks_, [&](const auto& t) {
    return !step.contains(t.first) && now - t.second.last > window_ / 2;
  });
  const Clock::time_point edge = now - window_;
  for (auto& [source, s] : step) {
    auto [it, added] = tracks_.try_emplace(source, Track{before, {}, now});
    it->second.samples.push_back(s);
    it->second.last = now;
  }
  for (auto& [source, t] : tracks_) {
    while (!t.samples.empty() && t.samples.front().at <= edge) t.samples.pop_front();
  }

  // Goodput per copy, and copies at once, over the window of each source seen for all of it.
  struct Figure {
    double per_copy_bps = 0;
    double copies = 0;
  };
  std::map<std::string, Figure> figures;
  for (const auto& [source, t] : tracks_) {
    if (t.first > edge || t.samples.empty()) continue;
    double bytes = 0, copy_seconds = 0;
    for (const Sample& s : t.samples) {
      bytes += s.bytes;
      copy_seconds += s.copy_seconds;
    }
    const double span = std::chrono::duration<double>(now - t.samples.front().at).count() + dt;
    if (copy_seconds > 0) figures[source] = Figure{bytes * 8 / copy_seconds, copy_seconds / span};
  }
  // Levels: the best goodput per copy over half a window (shorter than the judged window, so
  // that a source slowed early in a request has a level from before).
  const Clock::time_point half_edge = now - window_ / 2;
  for (const auto& [source, t] : tracks_) {
    if (t.first > half_edge) continue;
    double bytes = 0, copy_seconds = 0;
    for (const Sample& s : t.samples) {
      if (s.at <= half_edge) continue;
      bytes += s.bytes;
      copy_seconds += s.copy_seconds;
    }
    if (copy_seconds <= 0) continue;
    const double span = std::chrono::duration<double>(window_ / 2).count();
    Level& level = levels_[source];
    if (const double total = bytes * 8 / span; total > level.total_bps) {
      level.total_bps = total;
      level.copies = copy_seconds / span;
    }
  }
  for (const auto& [source, s] : step) levels_[source].seen = now;
  std::erase_if(levels_, [&](const auto& l) { return now - l.second.seen > 6 * window_; });

  std::vector<Verdict> out;
  const double window_s = std::chrono::duration<double>(window_).count();
  auto mbit = [](double bps) { return bps / 1e6; };
  for (const auto& [source, f] : figures) {
    Level& level = levels_[source];
    std::vector<double> others;
    for (const auto& [s, g] : figures) {
      if (s != source) others.push_back(g.per_copy_bps);
    }
    Verdict v;
    v.source = source;
    v.per_copy_bps = f.per_copy_bps;
    if (!others.empty()) {
      std::nth_element(others.begin(), others.begin() + others.size() / 2, others.end());
      const double reference = others[others.size() / 2];
      if (reference > 0 && f.per_copy_bps < fraction_ * reference) {
        v.reference_bps = reference;
        v.reason = fmt::format(
            "source {} slow: {:.2f} Mbit/s per copy over {:.0f} s, under {:.0f} % of the median "
            "of the {} other source{} ({:.2f} Mbit/s per copy)",
            source, mbit(f.per_copy_bps), window_s, fraction_ * 100, others.size(),
            others.size() == 1 ? "" : "s", mbit(reference));
      }
    }
    const double total = f.per_copy_bps * f.copies;
    if (v.reason.empty() && level.total_bps > 0 && total < fraction_ * level.total_bps &&
        f.copies >= level.copies / 2) {
      v.reference_bps = level.total_bps;
      v.reason = fmt::format(
          "source {} slow: {:.2f} Mbit/s in all over {:.0f} s, under {:.0f} % of its best "
          "{:.2f} Mbit/s earlier, with {:.1f} copies at once now and {:.1f} then",
          source, mbit(total), window_s, fraction_ * 100, mbit(level.total_bps), f.copies,
          level.copies);
    }
    if (!v.reason.empty()) out.push_back(std::move(v));
  }
  for (const Verdict& v : out) tracks_[v.source] = Track{now, {}, now};  // a new window first
  return out;
}

}  // namespace gfrep::replica::agent
