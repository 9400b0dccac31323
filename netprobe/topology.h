#pragma once

// A test-bed topology: sites (one network namespace per node plus a router namespace
// per site) joined by routes (one gfwanem link emulator each), read from a small text
// file. Parsing and naming are pure; testbed.h builds it.
//
// File format, one statement per line, '#' starts a comment, values have units:
//   topology NAME                      # required first statement: [a-z0-9-]{1,24}
//   site NAME nodes=N                  # [a-z0-9]{1,8}; 1 <= N <= 32
//   route NAME SITE_A SITE_B rtt=199ms rate=622M [loss=1e-5] [queue=4M]
//                                      # [a-z0-9]{1,12}; rtt in us/ms/s, rate in bit/s (k/M/G
//                                      # decimal), queue in bytes (K/M/G binary, default 1 BDP)
//   pin NODE ROUTE                     # NODE = SITE-nI; that node's traffic leaves its site on
//                                      # ROUTE (default: the first route listed between the sites)
//   buffer 64M                         # max socket buffer (tcp_rmem/wmem max in the node
//                                      # namespaces, host rmem_max/wmem_max floor); default 64M
//   mtu 9000                           # MTU of every link; default 9000
//   cc reno                            # default congestion control in the node namespaces;
//                                      # default: leave the host's (inherited). Only algorithms
//                                      # in the host's tcp_allowed_congestion_control can be set
//                                      # here; programs can still pick any per socket as root.
//
// Names and addresses (private ranges, only inside our namespaces):
//   node SITE-nI      namespace gfrep-SITE-nI, address 10.99.S.(10+I)  (S = site index, 1-based)
//   site router       namespace gfrep-SITE-rt, address 10.99.S.1 on bridge br0
//   route R           TUN devices "r-NAME", 10.98.R.1 (site A) <-> 10.98.R.2 (site B)

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace gfrep::netprobe {

struct SiteSpec {
  std::string name;
  int nodes = 1;
};

struct RouteSpec {
  std::string name;
  std::string site_a;
  std::string site_b;
  std::chrono::microseconds rtt{0};
  std::uint64_t rate_bps = 0;
  double loss = 0.0;
  std::uint64_t queue_bytes = 0;  // 0: one BDP
};

struct PinSpec {
  std::string node;   // "jp-n4"
  std::string route;  // "south"
};

struct Topology {
  std::string name;
  std::vector<SiteSpec> sites;
  std::vector<RouteSpec> routes;
  std::vector<PinSpec> pins;
  std::uint64_t buffer_bytes = 64ULL << 20;
  int mtu = 9000;
  std::string congestion_control;  // empty: inherited from the host
};

struct NodeInfo {
  std::string name;       // "jp-n1"
  std::string site;       // "jp"
  int index = 0;          // 1-based within the site
  std::string netns;      // "gfrep-jp-n1"
  std::string address;    // "10.99.1.11"
};

// Parses and checks a topology file's text. kInvalidArgument with "line N: ..." on the
// first error (unknown statement or key, bad value, duplicate or unknown name, limits).
absl::StatusOr<Topology> ParseTopology(std::string_view text);

// Every node, site by site in file order.
std::vector<NodeInfo> Nodes(const Topology& topology);

// kNotFound if `node` ("jp-n1") is not in the topology.
absl::StatusOr<NodeInfo> FindNode(const Topology& topology, std::string_view node);

// 1-based index of a site / route in file order, or 0 if absent.
int SiteIndex(const Topology& topology, std::string_view site);
int RouteIndex(const Topology& topology, std::string_view route);

std::string RouterNamespace(std::string_view site);
std::string NodeNamespace(std::string_view site, int index);
std::string RouteDevice(std::string_view route);

// Parsers for the value syntax, exposed for tests and tools.
absl::StatusOr<std::chrono::microseconds> ParseDuration(std::string_view text);  // 200ms
absl::StatusOr<std::uint64_t> ParseBitRate(std::string_view text);               // 622M
absl::StatusOr<std::uint64_t> ParseByteSize(std::string_view text);              // 64M

}  // namespace gfrep::netprobe
