#pragma once

// Placement: on which nodes new replicas go. Candidates are live nodes in the requested
// destination sites (any site when none is given) with room for the file and without a
// replica (or a planned one) already: never two replicas of a file on one node. Among
// them, sites that hold fewer replicas of the file come first (so `-N 3` spreads over
// sites), then the least busy node (active transfers + transfers planned to it), then
// the lower load, then more free space, then the name (deterministic).
//
// Pure function; no I/O. Thread safety: none needed.

#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "catalog/types.h"
#include "replica/core/selection.h"

namespace gfrep::replica {

struct PlacementRequest {
  // Wanted number of new replicas.
  int count = 1;
  // Allowed sites; empty: any.
  std::vector<std::string> dst_sites;
  // Bytes each new replica needs.
  std::uint64_t file_size = 0;
  // Nodes that already hold (or are about to receive) a replica of the file.
  std::set<std::string> exclude_nodes;
  // Replicas of the file already present per site (for spreading over sites).
  std::map<std::string, int> replicas_per_site;
  // Extra busyness per node (transfers planned but not yet visible in heartbeats).
  BusyMap planned;
};

// Up to `count` destination nodes, best first. Fewer (possibly none) when not enough
// nodes qualify; the caller decides whether that is an error.
std::vector<catalog::Node> PlaceReplicas(const PlacementRequest& request,
                                         const Topology& topology,
                                         const LivenessOptions& liveness);

}  // namespace gfrep::replica
