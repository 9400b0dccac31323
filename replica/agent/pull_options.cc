#include "replica/agent/pull_options.h"

#include <algorithm>

#include "fmt/format.h"
#include "replica/core/spool.h"
#include "transfer/agent.h"

namespace gfrep::replica::agent {

int StreamsWithinPeerLimit(int copies) {
  return std::max(1, transfer::kDefaultMaxConnectionsPerPeer / std::max(1, copies) - 1);
}

PullSettings PullOptionsFor(const transfer::TransferOptions& defaults, const catalog::Task& task,
                            const catalog::Route& route, const catalog::Node& source,
                            const DiskHints& disk, int copies_at_once) {
  PullSettings out;
  transfer::TransferOptions& o = out.options;
  o = defaults;
  o.route = ToRouteOptions(route, o.route);
  if (route.data_tls || source.requires_data_tls) o.tls = true;
  if (disk.write_io_size >= 4096 && disk.write_io_size <= (1ull << 30)) {
    o.write_io_size = disk.write_io_size;
  }
  if (disk.flush_interval > 0) o.journal_interval = disk.flush_interval;
  if (task.spec.streams > 0) {
    o.route.streams =
        static_cast<int>(std::min<std::uint32_t>(task.spec.streams, transfer::kMaxStreams));
  } else {
    // Without a share: no stream without a block of its own (a 64 KiB file over 4 streams
    // was one block and three idle connections to set up and keep).
    const std::uint64_t blocks =
        std::max<std::uint64_t>(1, (task.size + kMinStreamBytes - 1) / kMinStreamBytes);
    o.route.streams = static_cast<int>(
        std::min<std::uint64_t>(static_cast<std::uint64_t>(std::max(1, o.route.streams)), blocks));
  }
  if (task.spec.route_rate_bps > 0) o.route.route_rate_bps = task.spec.route_rate_bps;
  if (o.route.route_rate_bps > 0) {
    o.route.route_name = fmt::format("{}->{}", route.src_site, route.dst_site);
  }
  const int most = StreamsWithinPeerLimit(copies_at_once);
  if (o.route.streams > most) {
    out.streams_cut_from = o.route.streams;
    o.route.streams = most;
  }
  return out;
}

}  // namespace gfrep::replica::agent
