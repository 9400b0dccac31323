#include "replica/core/selection.h"

#include <fmt/format.h>

#include <algorithm>
#include <limits>
#include <tuple>

namespace gfrep::replica {

const catalog::Node* Topology::FindNode(std::string_view name) const {
  for (const catalog::Node& n : nodes) {
    if (n.name == name) return &n;
  }
  return nullptr;
}

const catalog::Route* Topology::FindRoute(std::string_view src_site,
                                          std::string_view dst_site) const {
  for (const catalog::Route& r : routes) {
    if (r.src_site == src_site && r.dst_site == dst_site) return &r;
  }
  return nullptr;
}

bool IsLive(const catalog::Node& node, const LivenessOptions& options) {
  std::int64_t timeout_ns =
      std::chrono::duration_cast<std::chrono::nanoseconds>(options.heartbeat_timeout).count();
  return node.last_heartbeat_ns > 0 && options.now_ns - node.last_heartbeat_ns <= timeout_ns;
}

std::string_view ToString(SourceTier tier) {
  switch (tier) {
    case SourceTier::kSameNode:
      return "same-node";
    case SourceTier::kSameSite:
      return "same-site";
    case SourceTier::kRemoteSite:
      return "remote-site";
  }
  return "unknown";
}

std::vector<catalog::Replica> CurrentReplicas(const catalog::Location& location) {
  std::vector<catalog::Replica> out;
  for (const catalog::Replica& r : location.replicas) {
    if (r.state == catalog::ReplicaState::kComplete &&
        r.generation == location.attributes.generation && location.attributes.generation > 0) {
      out.push_back(r);
    }
  }
  return out;
}

namespace {

struct Ranked {
  SourceChoice choice;
  // Sort key: tier, then route quality, then busyness.
  std::tuple<int, int, double, double, int, double, std::string> key;
};

}  // namespace

std::vector<SourceChoice> RankSources(const catalog::Location& location, const Reader& reader,
                                      const Topology& topology, const LivenessOptions& liveness,
                                      const BusyMap& planned) {
  std::vector<Ranked> ranked;
  for (const catalog::Replica& r : CurrentReplicas(location)) {
    const catalog::Node* node = topology.FindNode(r.node);
    if (node == nullptr || !IsLive(*node, liveness)) continue;
    Ranked x;
    x.choice.replica = r;
    x.choice.node = *node;
    if (!reader.node.empty() && node->name == reader.node) {
      x.choice.tier = SourceTier::kSameNode;
    } else if (!reader.site.empty() && node->site == reader.site) {
      x.choice.tier = SourceTier::kSameSite;
    } else {
      x.choice.tier = SourceTier::kRemoteSite;
    }
    int measured = 1;  // 0 sorts first: measured routes before unmeasured ones
    double neg_bandwidth = 0;
    double rtt = std::numeric_limits<double>::max();
    if (const catalog::Route* route = topology.FindRoute(node->site, reader.site)) {
      x.choice.has_route = true;
      x.choice.route = *route;
      if (route->bandwidth_bps > 0) {
        measured = 0;
        neg_bandwidth = -static_cast<double>(route->bandwidth_bps);
      }
      // Measured (gfprobe, gfroute set), else learned from earlier copies on the route.
      if (route->rtt_ms > 0) {
        rtt = route->rtt_ms;
      } else if (route->observed.rtt_ms > 0) {
        rtt = route->observed.rtt_ms;
      }
    }
    int busy = static_cast<int>(node->active_transfers);
    if (auto it = planned.find(node->name); it != planned.end()) busy += it->second;
    x.key = {static_cast<int>(x.choice.tier), measured, neg_bandwidth, rtt, busy, node->load,
             node->name};
    ranked.push_back(std::move(x));
  }
  std::sort(ranked.begin(), ranked.end(),
            [](const Ranked& a, const Ranked& b) { return a.key < b.key; });
  std::vector<SourceChoice> out;
  out.reserve(ranked.size());
  for (Ranked& x : ranked) out.push_back(std::move(x.choice));
  return out;
}

absl::StatusOr<SourceChoice> SelectSource(const catalog::Location& location,
                                          const Reader& reader, const Topology& topology,
                                          const LivenessOptions& liveness,
                                          const BusyMap& planned) {
  if (location.attributes.generation == 0) {
    return absl::FailedPreconditionError(fmt::format("{}: file has no content", location.path));
  }
  std::vector<SourceChoice> ranked = RankSources(location, reader, topology, liveness, planned);
  if (!ranked.empty()) return std::move(ranked.front());
  std::vector<catalog::Replica> current = CurrentReplicas(location);
  if (current.empty()) {
    // Say what became of the copies there were: found damaged or missing, and why.
    std::string bad;
    for (const catalog::Replica& r : location.replicas) {
      if (!catalog::IsBad(r.state) || r.generation != location.attributes.generation) continue;
      bad += fmt::format("{}{} {}{}{}", bad.empty() ? "" : "; ", r.node, catalog::ToString(r.state),
                         r.note.empty() ? "" : ": ", r.note);
    }
    return absl::NotFoundError(fmt::format("{}: no complete replica of generation {}{}{}",
                                           location.path, location.attributes.generation,
                                           bad.empty() ? "" : " (", bad.empty() ? "" : bad + ")"));
  }
  std::string nodes;
  for (const catalog::Replica& r : current) {
    nodes += nodes.empty() ? r.node : "," + r.node;
  }
  return absl::UnavailableError(
      fmt::format("{}: every node holding a complete replica is down ({})", location.path, nodes));
}

}  // namespace gfrep::replica
