#include "replica/agent/straggler.h"

#include <fmt/format.h>

#include <algorithm>

namespace gfrep::replica::agent {

std::vector<StragglerWatch::Verdict> StragglerWatch::Tick(Clock::time_point now,
                                                          const std::vector<Copy>& copies) {
  std::map<std::uint64_t, Track> kept;
  for (const Copy& c : copies) {
    auto it = tracks_.find(c.id);
    Track t = it != tracks_.end() ? std::move(it->second) : Track{now, {}, false};
    t.samples.emplace_back(now, c.received);
    const Clock::time_point edge = now - options_.window;
    while (t.samples.size() > 1 && t.samples[1].first <= edge) t.samples.pop_front();
    kept.emplace(c.id, std::move(t));
  }
  tracks_ = std::move(kept);
  // Goodput over the window of each copy that ran all of it.
  std::map<std::uint64_t, double> goodput;
  for (const auto& [id, t] : tracks_) {
    const auto& [since, base] = t.samples.front();
    if (t.judged || t.first > now - options_.window || since >= now) continue;
    const double seconds = std::chrono::duration<double>(now - since).count();
    goodput[id] = static_cast<double>(t.samples.back().second - base) * 8 / seconds;
  }
  std::vector<Verdict> out;
  const double window_s = std::chrono::duration<double>(options_.window).count();
  for (const Copy& c : copies) {
    auto g = goodput.find(c.id);
    if (g == goodput.end()) continue;
    std::vector<double> others;
    for (const auto& [id, bps] : goodput) {
      if (id != c.id) others.push_back(bps);
    }
    if (others.empty()) continue;
    std::nth_element(others.begin(), others.begin() + others.size() / 2, others.end());
    const double reference = others[others.size() / 2];
    if (reference <= 0 || g->second >= options_.fraction * reference) continue;
    Verdict v;
    v.id = c.id;
    v.goodput_bps = g->second;
    v.reference_bps = reference;
    v.reason = fmt::format(
        "straggler: {:.2f} Mbit/s over {:.0f} s, under {:.0f} % of the median of the {} other "
        "copies ({:.2f} Mbit/s)",
        g->second / 1e6, window_s, options_.fraction * 100, others.size(), reference / 1e6);
    tracks_[c.id].judged = true;
    out.push_back(std::move(v));
  }
  return out;
}

}  // namespace gfrep::replica::agent
