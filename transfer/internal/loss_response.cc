#include "transfer/internal/loss_response.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

#include <atomic>
#include <cerrno>
#include <cstring>

#include "transfer/congestion.h"

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

// Selects gfrep_cubic on `fd`, providing it first if no process has (a BPF load, once; a
// refusal is remembered for a minute by EnsureCongestionControl). False where it cannot be
// had (no root, no BPF congestion controls): the stream runs the kernel's CUBIC instead.
bool SelectGfrepCubic(int fd) {
  static std::atomic<bool> refused{false};  // offered, but not to this process
  if (refused.load(std::memory_order_relaxed)) return false;
  if (Select(fd, kGfrepCubic)) return true;
  // Not registered yet, or the process that registered it has gone.
  if (!EnsureCongestionControl(kGfrepCubic).ok()) return false;
  if (Select(fd, kGfrepCubic)) return true;
  refused.store(true, std::memory_order_relaxed);
  return false;
}

}  // namespace

void LossyPeers::Mark(const std::string& peer, Clock::time_point now) {
  {
    absl::MutexLock lock(&mu_);
    until_[peer] = now + memory_;
    std::erase_if(until_, [&](const auto& e) { return e.second <= now; });  // the lapsed
  }
  marks_.fetch_add(1, std::memory_order_release);
}

bool LossyPeers::IsLossy(const std::string& peer, Clock::time_point now) const {
  absl::MutexLock lock(&mu_);
  auto it = until_.find(peer);
  return it != until_.end() && now < it->second;
}

LossyPeers& ProcessLossyPeers() {
  static LossyPeers* peers = new LossyPeers();  // never destroyed: streams may outlive main
  return *peers;
}

std::string PeerAddressOf(int fd) {
  sockaddr_storage a{};
  socklen_t len = sizeof(a);
  if (::getpeername(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0) return "";
  char text[INET6_ADDRSTRLEN] = {};
  const void* addr = nullptr;
  if (a.ss_family == AF_INET) addr = &reinterpret_cast<const sockaddr_in*>(&a)->sin_addr;
  if (a.ss_family == AF_INET6) addr = &reinterpret_cast<const sockaddr_in6*>(&a)->sin6_addr;
  if (addr == nullptr || ::inet_ntop(a.ss_family, addr, text, sizeof(text)) == nullptr) return "";
  return text;
}

std::string ControlOf(int fd) {
  char name[32] = {};
  socklen_t len = sizeof(name);
  if (::getsockopt(fd, IPPROTO_TCP, TCP_CONGESTION, name, &len) != 0) return "";
  return std::string(name, strnlen(name, sizeof(name)));
}

bool IsLossBased(std::string_view name) {
  return name == "reno" || name == "cubic" || name == kGfrepCubic;
}

bool ShowsRandomLoss(const TcpSample& before, const TcpSample& now) {
  if (now.bytes_retrans <= before.bytes_retrans) return false;
  if (now.min_rtt_us < kLongRouteMinRttUs) return false;
  auto no_queue = [&](std::uint32_t srtt) {
    return srtt > 0 && static_cast<std::uint64_t>(srtt) * 4 <= static_cast<std::uint64_t>(now.min_rtt_us) * 5;
  };
  return no_queue(before.srtt_us) && no_queue(now.srtt_us);
}

LossResponse::LossResponse(int fd, std::string_view chosen, bool first_stream, LossyPeers& peers)
    : fd_(fd), watching_(chosen.empty()), peers_(peers) {
  if (!watching_) return;
  from_ = ControlOf(fd);
  last_ = ReadTcpSample(fd);
  // The peer's address is looked up (a system call) only once some stream of the process
  // marked a peer.
  peers_seen_ = peers_.marks();
  if (peers_seen_ != 0) {
    peer_ = PeerAddressOf(fd);
    peer_lossy_ = !peer_.empty() && peers_.IsLossy(peer_, LossyPeers::Clock::now());
  }
  // A peer known to lose packets at random is not started on CUBIC: the stream keeps the
  // host's tolerant default. Otherwise a long route's first stream runs CUBIC, gfrep's own
  // that keeps its window over idle where it can be had, the kernel's where not.
  const bool long_route = first_stream && !peer_lossy_ && !from_.empty() && last_.min_rtt_us >= kLongRouteMinRttUs;
  if (long_route && (from_ == "cubic" || !IsLossBased(from_))) {
    if (SelectGfrepCubic(fd)) {
      started_from_ = from_;
      from_ = std::string(kGfrepCubic);
    } else if (!IsLossBased(from_) && !start_refused.load(std::memory_order_relaxed)) {
      if (Select(fd, kLossBasedStart)) {
        started_from_ = from_;
        from_ = std::string(kLossBasedStart);
      } else {
        start_refused.store(true, std::memory_order_relaxed);
      }
    }
  }
  watching_ = IsLossBased(from_) && !switch_refused.load(std::memory_order_relaxed);
}

LossResponse::Verdict LossResponse::Check() {
  if (!watching_) return Verdict::kUnchanged;
  const LossyPeers::Clock::time_point now = LossyPeers::Clock::now();
  if (const std::uint64_t marks = peers_.marks(); marks != peers_seen_) {
    peers_seen_ = marks;
    if (peer_.empty()) peer_ = PeerAddressOf(fd_);
    peer_lossy_ = !peer_.empty() && peers_.IsLossy(peer_, now);
  }
  if (peer_lossy_) {
    followed_peer_ = true;
    return Turn();
  }
  const TcpSample sample = ReadTcpSample(fd_);
  const bool random = ShowsRandomLoss(last_, sample);
  last_ = sample;
  if (!random) return Verdict::kUnchanged;
  seen_ = sample;
  if (peer_.empty()) peer_ = PeerAddressOf(fd_);
  if (!peer_.empty()) peers_.Mark(peer_, now);
  return Turn();
}

LossResponse::Verdict LossResponse::Turn() {
  watching_ = false;
  if (!Select(fd_, kLossTolerantControl)) {
    error_ = errno;
    // Only the first refusal is reported; no stream of this process asks again.
    return switch_refused.exchange(true, std::memory_order_relaxed) ? Verdict::kUnchanged
                                                             : Verdict::kRefused;
  }
  return Verdict::kTurned;
}

}  // namespace gfrep::transfer::internal
