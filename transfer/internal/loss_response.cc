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
// The same for the loss-based start (CUBIC is often not on the allowed list where BBR is the
// default).
std::atomic<bool> start_refused{false};

bool Select(int fd, std::string_view name) {
  return ::setsockopt(fd, IPPROTO_TCP, TCP_CONGESTION, name.data(),
                      static_cast<socklen_t>(name.size())) == 0;
}

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

LossResponse::LossResponse(int fd, std::string_view chosen, bool first_stream)
    : fd_(fd), watching_(chosen.empty()) {
  if (!watching_) return;
  from_ = ControlOf(fd);
  last_ = ReadTcpSample(fd);
  if (first_stream && !from_.empty() && !IsLossBased(from_) &&
      last_.min_rtt_us >= kLongRouteMinRttUs && !start_refused.load(std::memory_order_relaxed)) {
    if (Select(fd, kLossBasedStart)) {
      started_from_ = from_;
      from_ = std::string(kLossBasedStart);
    } else {
      start_refused.store(true, std::memory_order_relaxed);
    }
  }
  watching_ = IsLossBased(from_) && !switch_refused.load(std::memory_order_relaxed);
}

LossResponse::Verdict LossResponse::Check() {
  if (!watching_) return Verdict::kUnchanged;
  const TcpSample now = ReadTcpSample(fd_);
  const bool random = ShowsRandomLoss(last_, now);
  last_ = now;
  if (!random) return Verdict::kUnchanged;
  watching_ = false;
  seen_ = now;
  if (!Select(fd_, kLossTolerantControl)) {
    error_ = errno;
    // Only the first refusal is reported; no stream of this process asks again.
    return switch_refused.exchange(true, std::memory_order_relaxed) ? Verdict::kUnchanged
                                                             : Verdict::kRefused;
  }
  return Verdict::kTurned;
}

}  // namespace gfrep::transfer::internal
