#pragma once

// PullOptionsFor: the engine settings of one copy, decided in one place. What the planner
// decided for the task (its share of the route's budget: streams and rate), what the catalog
// knows of the route (measured or set: streams, stripe unit, buffers, congestion control,
// pacing, TLS), what the source asks (data in TLS), this node's disk profile (write size,
// journal interval) and how many copies run at once (connections to one source agent) meet
// here, and nowhere else. Pure: no clock, no I/O, no catalog call.

#include <cstdint>

#include "catalog/types.h"
#include "transfer/options.h"

namespace gfrep::replica::agent {

// This node's spool, as `gfprobe disk --store` measured it (0: not measured).
struct DiskHints {
  std::uint64_t write_io_size = 0;
  std::uint64_t flush_interval = 0;
};

struct PullSettings {
  transfer::TransferOptions options;
  // The streams the route or the task asked for, when more than the peer limit allowed (0:
  // none were cut). The agent logs it once.
  int streams_cut_from = 0;
};

// The settings of the copy of `task` from `source` over `route` (source's site -> this
// node's), starting from the agent's own `defaults` (flags: shared key, TLS material,
// timeouts, the route defaults the catalog's route overrides), with `copies_at_once` copies
// allowed now (at least 1). Rules, in order:
//   - the route's settings over the defaults (ToRouteOptions);
//   - data in TLS when the route asks for it or the source requires it;
//   - the disk profile's write size (4 KiB .. 1 GiB) and journal interval, when measured;
//   - streams: the task's share of the route budget when it has one; otherwise the route's,
//     but no more than the file has blocks of kMinStreamBytes (a 64 KiB file gets one);
//   - the task's rate share over the route's rate; a paced copy names its route
//     ("SRC->DST"), so that the source agent paces everything it sends there together;
//   - at most StreamsWithinPeerLimit(copies_at_once) streams, so that every copy allowed at
//     once can open its session to one source agent without passing its per-peer limit.
PullSettings PullOptionsFor(const transfer::TransferOptions& defaults, const catalog::Task& task,
                            const catalog::Route& route, const catalog::Node& source,
                            const DiskHints& disk, int copies_at_once);

// A copy without a route-budget share gets no more streams than its file has of these (the
// engine's smallest block, transfer/internal/sender.h BlockSize).
inline constexpr std::uint64_t kMinStreamBytes = 256 * 1024;

// The most streams per copy for which `copies` sessions to one source agent (1 + streams
// connections each) stay within transfer::kDefaultMaxConnectionsPerPeer. At least 1.
int StreamsWithinPeerLimit(int copies);

}  // namespace gfrep::replica::agent
