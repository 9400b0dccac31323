#pragma once

// `gfprobe route SRC DST`: measures the route between two sites with a probe between two of
// their agents (transfer::StartProbeServer on a source node, transfer::RunProbe on a
// destination node; the agents run libiperf in helper processes). Two runs, one stream and
// then many, each with its slow start left out, then one many-stream run per congestion
// control to compare; the RTT is the least TCP handshake time from the destination node to
// the source agent. Blocks for about (2 + compared) x (omit + seconds) + 2 s.

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "catalog/catalog.h"
#include "netprobe/route_tuning.h"
#include "transfer/options.h"

namespace gfrep::netprobe {

struct RouteProbeOptions {
  std::string src_node;  // empty: the source site's first node
  std::string dst_node;  // empty: the destination site's first node
  int streams = 8;       // of the second run
  int seconds = 4;       // measured, per run
  int omit_seconds = 2;  // slow start, per run
  // Congestion controls to compare: one more many-stream run with each (the source agent
  // provides an algorithm its kernel lacks, transfer/congestion.h). Empty: no comparison, the
  // route gets the algorithm the many-stream run used.
  std::vector<std::string> compare_congestion;
  // How to reach and authenticate to the agents (shared key or TLS).
  transfer::TransferOptions transfer;
};

// kNotFound: a site without nodes or an unknown node; the agents' errors otherwise.
absl::StatusOr<RouteMeasurement> ProbeRoute(catalog::Catalog& catalog, const std::string& src_site,
                                            const std::string& dst_site, const RouteProbeOptions& options);

// The helper's report of one run: IperfResult plus "rtt_ms" and "max_socket_buffer".
struct ProbeReport {
  IperfResult iperf;
  double rtt_ms = 0;
  std::uint64_t max_socket_buffer = 0;
};
std::string ToJson(const ProbeReport& r);
absl::StatusOr<ProbeReport> ProbeReportFromJson(const std::string& text);

}  // namespace gfrep::netprobe
