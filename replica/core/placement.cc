#include "replica/core/placement.h"

#include <algorithm>
#include <tuple>

namespace gfrep::replica {

std::vector<catalog::Node> PlaceReplicas(const PlacementRequest& request,
                                         const Topology& topology,
                                         const LivenessOptions& liveness) {
  std::vector<const catalog::Node*> candidates;
  for (const catalog::Node& n : topology.nodes) {
    if (!IsLive(n, liveness)) continue;
    if (n.mode != catalog::NodeMode::kNormal) continue;  // read-only or draining: no new replica
    if (request.exclude_nodes.count(n.name)) continue;
    if (!request.dst_sites.empty() &&
        std::find(request.dst_sites.begin(), request.dst_sites.end(), n.site) ==
            request.dst_sites.end()) {
      continue;
    }
    if (n.free_bytes < request.file_size) continue;
    candidates.push_back(&n);
  }
  std::map<std::string, int> per_site = request.replicas_per_site;
  BusyMap busy = request.planned;
  std::vector<catalog::Node> out;
  while (static_cast<int>(out.size()) < request.count && !candidates.empty()) {
    auto key = [&](const catalog::Node* n) {
      int b = static_cast<int>(n->active_transfers);
      if (auto it = busy.find(n->name); it != busy.end()) b += it->second;
      return std::make_tuple(per_site[n->site], b, n->load,
                             -static_cast<double>(n->free_bytes), n->name);
    };
    auto best = std::min_element(candidates.begin(), candidates.end(),
                                 [&](const catalog::Node* a, const catalog::Node* b) {
                                   return key(a) < key(b);
                                 });
    const catalog::Node* chosen = *best;
    candidates.erase(best);
    per_site[chosen->site] += 1;
    busy[chosen->name] += 1;
    out.push_back(*chosen);
  }
  return out;
}

}  // namespace gfrep::replica
