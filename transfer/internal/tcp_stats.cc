#include "transfer/internal/tcp_stats.h"

#include <linux/sockios.h>
#include <linux/tcp.h>
#include <netinet/in.h>
#include <sys/ioctl.h>
#include <sys/socket.h>

#include <algorithm>
#include <cstddef>

namespace gfrep::transfer::internal {

TcpSample ReadTcpSample(int fd) {
  struct tcp_info info {};
  socklen_t len = sizeof(info);
  TcpSample s;
  if (::getsockopt(fd, IPPROTO_TCP, TCP_INFO, &info, &len) != 0) return s;
  // Older kernels fill a shorter struct: read a field only if it was filled.
  auto has = [&](std::size_t end) { return static_cast<std::size_t>(len) >= end; };
  if (has(offsetof(struct tcp_info, tcpi_rtt) + sizeof(info.tcpi_rtt))) s.srtt_us = info.tcpi_rtt;
  if (has(offsetof(struct tcp_info, tcpi_min_rtt) + sizeof(info.tcpi_min_rtt))) {
    s.min_rtt_us = info.tcpi_min_rtt == ~0u ? 0 : info.tcpi_min_rtt;
  }
  if (has(offsetof(struct tcp_info, tcpi_bytes_retrans) + sizeof(info.tcpi_bytes_retrans))) {
    s.bytes_sent = info.tcpi_bytes_sent;
    s.bytes_retrans = info.tcpi_bytes_retrans;
  }
  return s;
}

std::uint64_t UnsentBytes(int fd) {
  int unsent = 0;
  if (::ioctl(fd, SIOCOUTQNSD, &unsent) != 0 || unsent < 0) return 0;
  return static_cast<std::uint64_t>(unsent);
}

bool SetUnsentLowWater(int fd, std::uint64_t bytes) {
  const int v = static_cast<int>(std::min<std::uint64_t>(bytes, 1u << 30));
  return ::setsockopt(fd, IPPROTO_TCP, TCP_NOTSENT_LOWAT, &v, sizeof(v)) == 0;
}

TcpFigures Difference(const std::vector<TcpSample>& before, const std::vector<TcpSample>& after) {
  TcpFigures f;
  double srtt_sum = 0;
  int srtt_n = 0;
  std::uint32_t min_rtt = 0;
  for (std::size_t i = 0; i < after.size(); ++i) {
    const TcpSample& b = i < before.size() ? before[i] : TcpSample{};
    const TcpSample& a = after[i];
    // Counters only grow on one connection; a smaller one means another connection.
    f.bytes_sent += a.bytes_sent >= b.bytes_sent ? a.bytes_sent - b.bytes_sent : a.bytes_sent;
    f.bytes_retrans +=
        a.bytes_retrans >= b.bytes_retrans ? a.bytes_retrans - b.bytes_retrans : a.bytes_retrans;
    if (a.srtt_us > 0) {
      srtt_sum += a.srtt_us;
      ++srtt_n;
    }
    if (a.min_rtt_us > 0) min_rtt = min_rtt == 0 ? a.min_rtt_us : std::min(min_rtt, a.min_rtt_us);
  }
  f.srtt_ms = srtt_n > 0 ? srtt_sum / srtt_n / 1000.0 : 0;
  f.min_rtt_ms = min_rtt / 1000.0;
  return f;
}

}  // namespace gfrep::transfer::internal
