#pragma once

// A route's budget, shared by every copy on it across all nodes of both sites: the planner
// (the one place that sees every open task) hands each new task its share when it creates
// it, and the destination agent uses exactly that share.
//
// Streams: a route with `total_streams` S (route table; gfprobe route recommends it) never
// has more than S data streams in its open tasks together. A new copy asks for the route's
// per-copy streams (Route::streams, else kDefaultCopyStreams), but no more than one per
// kBytesPerStream of the file (a 64 KiB file needs one stream, not eight), and gets what is
// left of S; with nothing left the copy waits for a later step, like a route at its
// max_concurrent_tasks.
//
// Rate: a route with `route_rate_bps` R is paced as a whole: each source agent keeps one
// token bucket per route, and a task carries the rate its source agent should use for the
// route, R x (open tasks from that source node on the route) / (open tasks on the route),
// computed once a planner step has planned everything, so the shares given in one step add
// up to R. A source agent takes the share of the latest task it serves; a source that got
// no new task in a step keeps its older share until it does (tasks are created as others
// end, so it follows the mix within a few files).

#include <cstdint>
#include <map>
#include <string>
#include <utility>

#include "catalog/types.h"

namespace gfrep::replica {

// Streams of one copy when the route does not say (the engine's default, RouteOptions).
inline constexpr std::uint32_t kDefaultCopyStreams = 4;
// A copy gets at most one stream per this many bytes of its file.
inline constexpr std::uint64_t kBytesPerStream = 1024 * 1024;

// What one copy would ask of route `r` for a file of `size` bytes (>= 1).
std::uint32_t StreamsWanted(const catalog::Route& r, std::uint64_t size);

// Open tasks on every route, as the planner counts them during one step.
class RouteLoad {
 public:
  using Key = std::pair<std::string, std::string>;  // source site, destination site

  // Counts an open task (existing or just planned) from `src_node` with `streams` streams.
  void Add(const Key& route, const std::string& src_node, std::uint32_t streams);

  // The streams a new copy of `size` bytes gets on route `r` now: 0 when the route's stream
  // budget is spent, StreamsWanted-capped share of what is left, or 0 with `ok` true when the
  // route has no stream budget (then the copy uses the route's own settings).
  struct Share {
    bool ok = true;              // false: the budget is spent; plan this copy later
    std::uint32_t streams = 0;   // 0: no budget on this route
  };
  Share StreamShare(const catalog::Route& r, std::uint64_t size) const;

  // Rate for `src_node`'s agent on route `r`: R x its open tasks / all open tasks on the
  // route (R when none are counted); 0 when the route has no rate.
  std::uint64_t RateShare(const catalog::Route& r, const std::string& src_node) const;

  std::uint64_t streams(const Key& route) const;
  int tasks(const Key& route) const;

 private:
  struct Load {
    std::uint64_t streams = 0;
    int tasks = 0;
    std::map<std::string, int> tasks_from;  // source node -> open tasks
  };
  std::map<Key, Load> load_;
};

}  // namespace gfrep::replica
