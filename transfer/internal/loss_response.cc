#include "transfer/internal/loss_response.h"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

#include <atomic>
#include <cerrno>
#include <cstring>

namespace gfrep::transfer::internal {
namespace {

// Set when the kernel refused the switch (a user without CAP_NET_ADMIN, BBR not in
// net.ipv4.tcp_allowed_congestion_control): no stream of this process asks again.
std::atomic<bool> switch_refused{false};

}  // namespace

std::string ControlOf(int fd) {
  char name[32] = {};
  socklen_t len = sizeof(name);
  if (::getsockopt(fd, IPPROTO_TCP, TCP_CONGESTION, name, &len) != 0) return "";
  return std::string(name, strnlen(name, sizeof(name)));
}

bool IsLossBased(std::string_view name) { return name == "reno" || name == "cubic"; }

bool ShowsRandomLoss(const TcpSample& before, const TcpSample& now) {
  if (now.bytes_retrans <= before.bytes_retrans) return false;
  if (now.min_rtt_us < kLongRouteMinRttUs) return false;
  auto no_queue = [&](std::uint32_t srtt) {
    return srtt > 0 && static_cast<std::uint64_t>(srtt) * 4 <= static_cast<std::uint64_t>(now.min_rtt_us) * 5;
  };
  return no_queue(before.srtt_us) && no_queue(now.srtt_us);
}

LossResponse::LossResponse(int fd, std::string_view chosen) : fd_(fd), watching_(chosen.empty()) {
  if (!watching_) return;
  from_ = ControlOf(fd);
  watching_ = IsLossBased(from_) && !switch_refused.load(std::memory_order_relaxed);
  if (watching_) last_ = ReadTcpSample(fd);
}

LossResponse::Verdict LossResponse::Check() {
  if (!watching_) return Verdict::kUnchanged;
  const TcpSample now = ReadTcpSample(fd_);
  const bool random = ShowsRandomLoss(last_, now);
  last_ = now;
  if (!random) return Verdict::kUnchanged;
  watching_ = false;
  seen_ = now;
  if (::setsockopt(fd_, IPPROTO_TCP, TCP_CONGESTION, kLossTolerantControl.data(),
                   static_cast<socklen_t>(kLossTolerantControl.size())) != 0) {
    error_ = errno;
    // Only the first refusal is reported; no stream of this process asks again.
    return switch_refused.exchange(true, std::memory_order_relaxed) ? Verdict::kUnchanged
                                                             : Verdict::kRefused;
  }
  return Verdict::kTurned;
}

}  // namespace gfrep::transfer::internal
