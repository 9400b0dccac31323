#pragma once

// Small helpers shared by the catalog benchmarks (catalog_amga_bench, catalog_claim_bench).

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "absl/status/status.h"

namespace gfrep::bench {

using SteadyClock = std::chrono::steady_clock;

inline double Ms(SteadyClock::duration d) { return std::chrono::duration<double, std::milli>(d).count(); }

// Exits with the message when `s` is not OK (a benchmark has nothing to recover).
inline void Check(const absl::Status& s, const char* what) {
  if (!s.ok()) {
    std::fprintf(stderr, "%s: %s\n", what, s.ToString().c_str());
    std::exit(1);
  }
}

struct Percentiles {
  double p50 = 0, p99 = 0;
};

inline Percentiles Summarise(std::vector<double> v) {
  if (v.empty()) return {};
  std::sort(v.begin(), v.end());
  return {v[v.size() / 2], v[std::min(v.size() - 1, v.size() * 99 / 100)]};
}

}  // namespace gfrep::bench
