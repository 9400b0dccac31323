#include "replica/client/ramp.h"

#include <algorithm>
#include <cmath>

namespace gfrep::replica::client {

Ramp MeasureRamp(const std::vector<RampSample>& samples, double reference_bps, double window,
                 double bin) {
  Ramp out;
  if (samples.empty() || window <= 0 || bin <= 0) return out;
  // Received bytes never go down; the transfer starts at 0 s with none.
  std::vector<RampSample> s;
  if (samples.front().seconds > 0) s.push_back({0, 0});
  s.insert(s.end(), samples.begin(), samples.end());
  for (std::size_t i = 1; i < s.size(); ++i) s[i].bytes = std::max(s[i].bytes, s[i - 1].bytes);
  std::vector<double> rate(s.size(), -1);  // windowed goodput at each sample (-1: too early)
  std::size_t j = 0;
  for (std::size_t i = 0; i < s.size(); ++i) {
    // The last sample at or before the window's start.
    while (j + 1 < i && s[j + 1].seconds <= s[i].seconds - window) ++j;
    const double span = s[i].seconds - s[j].seconds;
    if (j >= i || span < window / 2) continue;
    rate[i] = static_cast<double>(s[i].bytes - s[j].bytes) * 8 / span;
    out.peak_bps = std::max(out.peak_bps, rate[i]);
  }
  const double reference = reference_bps > 0 ? reference_bps : out.peak_bps;
  if (reference > 0) {
    for (std::size_t i = 0; i < s.size(); ++i) {
      if (rate[i] >= 0.9 * reference) {
        out.seconds_to_90pct = s[i].seconds;
        break;
      }
    }
  }
  // Bins: bytes at each bin edge by linear interpolation between samples.
  auto bytes_at = [&](double t) {
    for (std::size_t k = 1; k < s.size(); ++k) {
      if (t <= s[k].seconds) {
        const double dt = s[k].seconds - s[k - 1].seconds;
        const double f = dt > 0 ? (t - s[k - 1].seconds) / dt : 1.0;
        return static_cast<double>(s[k - 1].bytes) +
               std::clamp(f, 0.0, 1.0) * static_cast<double>(s[k].bytes - s[k - 1].bytes);
      }
    }
    return static_cast<double>(s.back().bytes);
  };
  const std::size_t bins = static_cast<std::size_t>(std::ceil(s.back().seconds / bin));
  for (std::size_t b = 0; b < bins && b < 100000; ++b) {
    out.series_bps.push_back((bytes_at((b + 1) * bin) - bytes_at(b * bin)) * 8 / bin);
  }
  return out;
}

}  // namespace gfrep::replica::client
