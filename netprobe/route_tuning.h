#pragma once

// Route settings from a measurement: what `gfprobe route` recommends and, with --apply,
// stores in the catalog's route table. Pure arithmetic, with the reasoning spelled out.
//
// From the round-trip time and the bottleneck rate (the best of one stream and many):
//   - bandwidth-delay product BDP = rate x RTT;
//   - streams per copy: 2 when one stream reached 90 % of the route (two keep it full
//     across one stream's loss recovery), else enough streams of the single-stream rate to
//     carry 1.25 x the route, 2..16;
//   - socket buffer per stream: 2 x BDP / streams (room for the window to grow past its
//     share and for loss recovery), at least 1 MiB, at most what the kernel grants; when the
//     kernel grants less, more streams instead, and a note naming the sysctl; a BDP under
//     2 MiB keeps the kernel's autotuning (0);
//   - stream budget of the route (all copies together, route_budget.h): 32 copies at full
//     width, 64..128 streams (open copies include those claimed ahead and those being
//     committed, so about half of them move bytes at a time; with a budget for 16 copies,
//     1,000 x 4 MiB on lfn-1g fell from 0.78 to 0.53 of iperf3);
//   - route rate (pacing of the whole route, shared by all source nodes): 97 % of the
//     measured rate, just under the bottleneck so that the copies together never fill its
//     queue (the SC2002 lesson: rate-controlled streams that add up to the route);
//   - stripe unit: BDP / streams / 4 rounded to a power of two, 1..16 MiB (a stream holds
//     a few blocks in flight);
//   - congestion control: with a comparison, the algorithm whose many-stream run reached the
//     highest rate (ties within 2 %: fewer retransmits), among those that really ran (the
//     sender reported the name asked for); without one, the one the measurement ran with.

#include <cstdint>
#include <string>
#include <vector>

#include "catalog/types.h"
#include "netprobe/iperf_probe.h"

namespace gfrep::netprobe {

struct RouteMeasurement {
  std::string src_site;
  std::string dst_site;
  double rtt_ms = 0;
  IperfResult one;   // one stream
  IperfResult many;  // many streams
  // Many-stream runs with the congestion controls compared (gfprobe route --compare-cc): what
  // was asked and what iperf3's sender reported using (they differ when it did not take).
  struct CongestionRun {
    std::string requested;
    IperfResult result;
    std::string error;  // non-empty: the source could not run it (then `result` is empty)
  };
  std::vector<CongestionRun> congestion_runs;
  // The largest socket buffer the kernel grants at the measuring end, 0: unknown.
  std::uint64_t max_socket_buffer = 0;
  std::int64_t measured_ns = 0;
};

struct RouteAdvice {
  catalog::Route route;              // settings and measurements, ready for PutRoute
  std::vector<std::string> reasons;  // one line per setting
};

inline constexpr double kPaceFraction = 0.97;

RouteAdvice Advise(const RouteMeasurement& m);

}  // namespace gfrep::netprobe
