#pragma once

// Time to full rate: how long a transfer took from its start until its goodput first reached
// 90 % of a reference rate (the route's measured bandwidth, its rate cap, or failing those
// the transfer's own peak), from samples of the bytes received so far. gfrep --json reports
// it for a request (bytes done plus the running copies' received bytes, sampled as gfrep
// follows it); the benchmarks compare it with iperf3's best on the same route.
//
// The goodput at a sample is over the trailing `window` (the sample at or before its start to
// this one; at least half a window of samples); the received count is taken as never going
// down (a finished copy may leave the in-flight count before the done count has it).
//
// Thread safety: pure functions.

#include <cstdint>
#include <optional>
#include <vector>

namespace gfrep::replica::client {

struct RampSample {
  double seconds = 0;       // since the transfer started
  std::uint64_t bytes = 0;  // received by then
};

struct Ramp {
  double peak_bps = 0;  // the highest windowed goodput
  // When the windowed goodput first reached 90 % of the reference (the end of that window);
  // nullopt if it never did.
  std::optional<double> seconds_to_90pct;
  // The goodput per `bin` seconds (bytes received in each bin, as bits per second), from the
  // start to the last sample.
  std::vector<double> series_bps;
};

// REQUIRES: samples in time order. `reference_bps` <= 0: the peak is the reference.
Ramp MeasureRamp(const std::vector<RampSample>& samples, double reference_bps, double window = 1.0,
                 double bin = 0.5);

}  // namespace gfrep::replica::client
