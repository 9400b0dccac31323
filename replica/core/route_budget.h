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
//
// Bytes in flight: every task also carries its destination node's part of the open tasks on
// its route (TaskSpec::dst_share_ppm). A destination agent that gets work while idle starts
// with enough copies for 1.3 bandwidth-delay products of the route; with two nodes of a site
// pulling on one route, each started 1.3 and the route's queue overflowed (200 x 4 MiB over
// two nodes per site: 2,000-4,000 segments re-sent, 0.59-0.71 of the link against 0.87 with
// one node: tests/bench/RESULTS.md). With its part, each starts at its share of the 1.3.

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

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

  // Counts an open task (existing or just planned) from `src_node` to `dst_node` with
  // `streams` streams.
  void Add(const Key& route, const std::string& src_node, const std::string& dst_node,
           std::uint32_t streams);

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

  // `dst_node`'s open tasks on `route` / all open tasks on it, in parts per million
  // (catalog::kWholeRoutePpm when none are counted).
  std::uint32_t DstSharePpm(const Key& route, const std::string& dst_node) const;

  std::uint64_t streams(const Key& route) const;
  int tasks(const Key& route) const;

 private:
  struct Load {
    std::uint64_t streams = 0;
    int tasks = 0;
    std::map<std::string, int> tasks_from;  // source node -> open tasks
    std::map<std::string, int> tasks_to;    // destination node -> open tasks
  };
  std::map<Key, Load> load_;
};

// Copies at once that keep 1.3 bandwidth-delay products of `route` in flight (measured RTT
// and bandwidth, else those learnt from copies; `default_in_flight_bytes` when `route` is null
// or says neither), times the node's part of the route (`share_ppm`, 0: all of it), with files
// of `mean_size` bytes; between `min_copies` and `max_copies`.
int RouteShareCopies(const catalog::Route* route, std::uint64_t default_in_flight_bytes,
                     std::uint32_t share_ppm, double mean_size, int min_copies, int max_copies);

// Copies at once a destination agent starts a burst of work with (work that came to it
// idle): RouteShareCopies with the node's part of the route from the first task's
// dst_share_ppm and `tasks`' mean size. More than one BDP, for the gaps between a copy's
// files; not much more, because small files put all their bytes in flight within a few round
// trips and what the link does not hold queues at its bottleneck, then overflows (on the
// 200 ms / 1 Gbit/s route, 8 copies of 4 MiB, 1.3 BDP, re-sent nothing; 16 re-sent 2.8 % and
// were slower: tests/bench/RESULTS.md, 2026-11-30).
// REQUIRES: !tasks.empty().
int BurstStartCopies(const catalog::Route* route, const std::vector<catalog::Task>& tasks,
                     std::uint64_t default_in_flight_bytes, int min_copies, int max_copies);

}  // namespace gfrep::replica
