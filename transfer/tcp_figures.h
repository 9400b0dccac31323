#pragma once

// How TCP fared on a transfer's data connections, as the sending side's kernel saw them
// (TCP_INFO), over one file: what TransferStats::tcp reports and what a site agent learns a
// route from. Zero fields mean "not known" (a peer that did not say, or a kernel too old).
// The counters are read when the sender has handed the file's last block to its sockets:
// bytes still in the socket buffers then (up to a window per connection) have not been sent
// by TCP yet and count toward the next file of a warm session. So the ratios are right and
// no byte is counted twice, but bytes_sent of one file may be less than its size.

#include <cstdint>

namespace gfrep::transfer {

struct TcpFigures {
  std::uint64_t bytes_sent = 0;     // data bytes sent, re-sent ones included
  std::uint64_t bytes_retrans = 0;  // data bytes re-sent: loss on the route
  double srtt_ms = 0;               // smoothed RTT at the end, mean over the connections
  double min_rtt_ms = 0;            // least RTT seen: the route's propagation delay

  // Re-sent share of what was sent (0 when nothing was sent).
  double LossRatio() const {
    return bytes_sent == 0 ? 0 : static_cast<double>(bytes_retrans) / static_cast<double>(bytes_sent);
  }
  // Smoothed over least RTT: 1 on an empty path; about 2 when a bottleneck queue of one
  // bandwidth-delay product stays full. 0 when either is unknown.
  double RttInflation() const { return min_rtt_ms > 0 && srtt_ms > 0 ? srtt_ms / min_rtt_ms : 0; }
};

}  // namespace gfrep::transfer
