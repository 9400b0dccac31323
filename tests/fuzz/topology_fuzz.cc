// Fuzzes the test-bed topology parser (netprobe/topology.h), which gftopo runs on .topo
// files as root before it creates namespaces and devices named after what it read.
//
// The input is the file's text. Asserts, for every topology ParseTopology accepts:
//  - the limits of the format hold: names of the documented characters and lengths (they
//    become namespace and device names), 1..16 sites of 1..32 nodes, at most 32 routes
//    between two different declared sites, rate >= 1k and <= 400G, RTT <= 20 s,
//    loss in [0, 1), queue <= 4G, buffer in [64K, 1G], MTU in [1280, 65000], pins to a
//    declared node on a route touching its site, at most one pin per node;
//  - every node has a unique name and address and FindNode finds it;
//  - the topology written back in the file format (exact units: us, bit/s, bytes) parses to
//    the same topology.

#include <fmt/format.h>

#include <cstddef>
#include <cstdint>
#include <set>
#include <string>
#include <string_view>

#include "netprobe/topology.h"
#include "tests/fuzz/fuzz_check.h"

namespace gfrep::netprobe {
namespace {

bool NameOf(std::string_view s, std::size_t max, bool dash) {
  if (s.empty() || s.size() > max) return false;
  for (char c : s) {
    if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || (dash && c == '-'))) return false;
  }
  return true;
}

std::string Write(const Topology& t) {
  std::string out = fmt::format("topology {}\nbuffer {}\nmtu {}\n", t.name, t.buffer_bytes, t.mtu);
  if (!t.congestion_control.empty()) out += fmt::format("cc {}\n", t.congestion_control);
  for (const SiteSpec& s : t.sites) out += fmt::format("site {} nodes={}\n", s.name, s.nodes);
  for (const RouteSpec& r : t.routes) {
    // fmt's shortest round-trip form of the loss reads back exactly with from_chars.
    out += fmt::format("route {} {} {} rtt={}us rate={} loss={}", r.name, r.site_a, r.site_b,
                       r.rtt.count(), r.rate_bps, r.loss);
    if (r.queue_bytes != 0) out += fmt::format(" queue={}", r.queue_bytes);
    out += '\n';
  }
  for (const PinSpec& p : t.pins) out += fmt::format("pin {} {}\n", p.node, p.route);
  return out;
}

bool Same(const Topology& a, const Topology& b) {
  if (a.name != b.name || a.buffer_bytes != b.buffer_bytes || a.mtu != b.mtu ||
      a.congestion_control != b.congestion_control || a.sites.size() != b.sites.size() ||
      a.routes.size() != b.routes.size() || a.pins.size() != b.pins.size()) {
    return false;
  }
  for (std::size_t i = 0; i < a.sites.size(); ++i) {
    if (a.sites[i].name != b.sites[i].name || a.sites[i].nodes != b.sites[i].nodes) return false;
  }
  for (std::size_t i = 0; i < a.routes.size(); ++i) {
    const RouteSpec& x = a.routes[i];
    const RouteSpec& y = b.routes[i];
    if (x.name != y.name || x.site_a != y.site_a || x.site_b != y.site_b || x.rtt != y.rtt ||
        x.rate_bps != y.rate_bps || x.loss != y.loss || x.queue_bytes != y.queue_bytes) {
      return false;
    }
  }
  for (std::size_t i = 0; i < a.pins.size(); ++i) {
    if (a.pins[i].node != b.pins[i].node || a.pins[i].route != b.pins[i].route) return false;
  }
  return true;
}

void CheckLimits(const Topology& t) {
  FUZZ_CHECK(NameOf(t.name, 24, true), "topology name outside [a-z0-9-]{1,24}");
  FUZZ_CHECK(!t.sites.empty() && t.sites.size() <= 16, "site count outside 1..16");
  FUZZ_CHECK(t.routes.size() <= 32, "more than 32 routes");
  FUZZ_CHECK(t.buffer_bytes >= 65536 && t.buffer_bytes <= (1ull << 30), "buffer outside [64K, 1G]");
  FUZZ_CHECK(t.mtu >= 1280 && t.mtu <= 65000, "MTU outside [1280, 65000]");
  FUZZ_CHECK(t.congestion_control.empty() || NameOf(t.congestion_control, 16, false),
             "congestion control name outside [a-z0-9]{1,16}");
  std::set<std::string> sites;
  for (const SiteSpec& s : t.sites) {
    FUZZ_CHECK(NameOf(s.name, 8, false), "site name outside [a-z0-9]{1,8}");
    FUZZ_CHECK(s.nodes >= 1 && s.nodes <= 32, "nodes outside 1..32");
    FUZZ_CHECK(sites.insert(s.name).second, "duplicate site");
  }
  std::set<std::string> routes;
  for (const RouteSpec& r : t.routes) {
    FUZZ_CHECK(NameOf(r.name, 12, false), "route name outside [a-z0-9]{1,12}");
    FUZZ_CHECK(routes.insert(r.name).second, "duplicate route");
    FUZZ_CHECK(sites.contains(r.site_a) && sites.contains(r.site_b) && r.site_a != r.site_b,
               "route between undeclared or equal sites");
    FUZZ_CHECK(r.rate_bps >= 1000 && r.rate_bps <= 400'000'000'000ull, "rate outside [1k, 400G]");
    FUZZ_CHECK(r.rtt.count() >= 0 && r.rtt.count() <= 20'000'000, "RTT outside [0, 20 s]");
    FUZZ_CHECK(r.loss >= 0 && r.loss < 1, "loss outside [0, 1)");
    FUZZ_CHECK(r.queue_bytes <= (4ull << 30), "queue over 4G");
  }
  std::set<std::string> pinned;
  for (const PinSpec& p : t.pins) {
    absl::StatusOr<NodeInfo> node = FindNode(t, p.node);
    FUZZ_CHECK(node.ok(), "pin of an unknown node");
    const int route = RouteIndex(t, p.route);
    FUZZ_CHECK(route > 0, "pin to an unknown route");
    const RouteSpec& r = t.routes[static_cast<std::size_t>(route - 1)];
    FUZZ_CHECK(r.site_a == node->site || r.site_b == node->site, "pin to a route off its site");
    FUZZ_CHECK(pinned.insert(p.node).second, "node pinned twice");
  }
}

void CheckNodes(const Topology& t) {
  std::set<std::string> names, addresses, namespaces;
  for (const NodeInfo& n : Nodes(t)) {
    FUZZ_CHECK(names.insert(n.name).second, "two nodes with one name");
    FUZZ_CHECK(addresses.insert(n.address).second, "two nodes with one address");
    FUZZ_CHECK(namespaces.insert(n.netns).second, "two nodes with one namespace");
    absl::StatusOr<NodeInfo> found = FindNode(t, n.name);
    FUZZ_CHECK(found.ok() && found->address == n.address, "FindNode misses a node");
    FUZZ_CHECK(SiteIndex(t, n.site) > 0, "node of an unknown site");
  }
}

}  // namespace
}  // namespace gfrep::netprobe

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace gfrep::netprobe;
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  absl::StatusOr<Topology> t = ParseTopology(text);
  if (!t.ok()) {
    FUZZ_CHECK(absl::IsInvalidArgument(t.status()), "a refused topology must be kInvalidArgument");
    return 0;
  }
  CheckLimits(*t);
  CheckNodes(*t);
  const std::string written = Write(*t);
  absl::StatusOr<Topology> again = ParseTopology(written);
  FUZZ_CHECK(again.ok(), "the parser refused a topology written from what it accepted");
  FUZZ_CHECK(Same(*t, *again), "topology changed when written and read back");
  return 0;
}
