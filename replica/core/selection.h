#pragma once

// Source selection: which complete replica a reader or a destination node should copy
// from. Gfarm's rule, made explicit:
//   1. a replica on the same node (no network at all),
//   2. else one on a node of the same site,
//   3. else the site with the best route to the reader (highest measured bandwidth, then
//      lowest RTT, measured or else learned from earlier copies (Route::observed);
//      unmeasured routes rank after measured ones), and within that site the
//      least busy node (active transfers + transfers already planned from it, then load).
// Only complete replicas of the file's current generation count; nodes that are not
// registered or whose heartbeat is older than `heartbeat_timeout` are skipped.
//
// Pure functions over values fetched from the catalog; no I/O. Thread safety: none needed.

#include <chrono>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "catalog/types.h"

namespace gfrep::replica {

// A snapshot of the topology, as ListNodes/ListRoutes return it.
struct Topology {
  std::vector<catalog::Node> nodes;
  std::vector<catalog::Route> routes;

  const catalog::Node* FindNode(std::string_view name) const;
  // The route src_site -> dst_site, or null.
  const catalog::Route* FindRoute(std::string_view src_site, std::string_view dst_site) const;
};

struct LivenessOptions {
  // Unix time now, ns.
  std::int64_t now_ns = 0;
  // A node whose last heartbeat is older than this is considered down.
  std::chrono::milliseconds heartbeat_timeout{30000};
};

// True if the node heartbeat is recent enough.
bool IsLive(const catalog::Node& node, const LivenessOptions& options);

// Who wants the bytes. An empty site means a client outside every site.
struct Reader {
  std::string site;
  std::string node;
};

enum class SourceTier : std::uint8_t { kSameNode = 0, kSameSite = 1, kRemoteSite = 2 };
std::string_view ToString(SourceTier tier);

struct SourceChoice {
  catalog::Replica replica;
  catalog::Node node;
  SourceTier tier = SourceTier::kRemoteSite;
  // The route from the source's site to the reader's site, when the catalog has one.
  bool has_route = false;
  catalog::Route route;
};

// Extra busyness per node name (e.g. transfers a planner is about to assign to it).
using BusyMap = std::map<std::string, int>;

// All usable sources, best first (see the file comment). Empty if none.
std::vector<SourceChoice> RankSources(const catalog::Location& location, const Reader& reader,
                                      const Topology& topology, const LivenessOptions& liveness,
                                      const BusyMap& planned = {});

// The best source. kNotFound if the file has no complete replica of its current
// generation at all; kUnavailable (naming the nodes) if it has some but all of their nodes
// are down; kFailedPrecondition if the file has no content yet (generation 0).
absl::StatusOr<SourceChoice> SelectSource(const catalog::Location& location,
                                          const Reader& reader, const Topology& topology,
                                          const LivenessOptions& liveness,
                                          const BusyMap& planned = {});

// Complete replicas of the current generation, whatever the state of their nodes.
std::vector<catalog::Replica> CurrentReplicas(const catalog::Location& location);

}  // namespace gfrep::replica
