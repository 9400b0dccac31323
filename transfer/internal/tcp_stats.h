#pragma once

// What the kernel's TCP knows about a connection (getsockopt TCP_INFO), for the figures a
// transfer reports about its route: round-trip times and how much was sent and re-sent.
// Kept apart from engine.h because <linux/tcp.h> (the full struct tcp_info) cannot be
// included beside glibc's <netinet/tcp.h>, which Asio pulls in.

#include <cstdint>
#include <vector>

#include "transfer/tcp_figures.h"

namespace gfrep::transfer::internal {

struct TcpSample {
  std::uint64_t bytes_sent = 0;     // data bytes sent, re-sent ones included
  std::uint64_t bytes_retrans = 0;  // data bytes re-sent
  std::uint32_t srtt_us = 0;        // smoothed RTT now (0: no sample yet)
  std::uint32_t min_rtt_us = 0;     // least RTT seen (0: none)
};

// TCP_INFO of socket `fd`; all zero when the kernel does not say (not TCP, or too old).
TcpSample ReadTcpSample(int fd);

// Bytes written to socket `fd` that TCP has not sent yet (SIOCOUTQNSD); 0 if unknown.
std::uint64_t UnsentBytes(int fd);

// Makes `fd` report writable only while fewer than `bytes` are unsent (TCP_NOTSENT_LOWAT),
// so a wait for writability ends when the socket's backlog has drained to that. False if
// the kernel refused.
bool SetUnsentLowWater(int fd, std::uint64_t bytes);

// A file's share of its data connections' counters: the difference between samples taken
// before and after it, summed; RTTs from the later samples (mean smoothed RTT, least minimum).
TcpFigures Difference(const std::vector<TcpSample>& before, const std::vector<TcpSample>& after);

}  // namespace gfrep::transfer::internal
