#pragma once

// A data stream's answer to random loss when nobody chose its congestion control.
//
// A loss-based congestion control (Reno, CUBIC: most hosts' default) takes every lost packet
// for a full queue and cuts its window. On a long fat route with a little random loss it
// spends the copy recovering: at 1e-4 on the 200 ms / 1 Gbit/s test route one CUBIC stream
// moved 0.14 of the link, one BBR stream 0.69 (tests/bench/RESULTS.md, lfn-1g-loss4).
//
// When a copy's congestion control was not chosen (RouteOptions::congestion empty: gfcp
// without --cc, an agent's copies on a route whose `cc` is not set), each data stream on a
// long route starts loss-based and turns to BBR, which does not read loss as congestion, once
// its own connection shows loss that is not congestion: bytes re-sent on a long route (least
// RTT at least 10 ms, where a window cut costs seconds to regrow) between two looks (one per
// block sent) at both of which the smoothed RTT was within a quarter of the least. Loss from
// a full queue comes with the queue's delay, which the look before the loss already sees (a
// queue builds over round trips); after the window cut the queue may drain, which is why one
// look is not enough. Loss with no queue at either look is the path's.
//
// Why start loss-based where the host's default is BBR (this project's test machines): many
// BBR (v1) streams sharing a route overfill a drop-tail queue of one BDP (each probes for 1.25
// x its share) and drain for 200 ms of every 10 s (ProbeRTT); on the 200 ms / 1 Gbit/s test
// route, copies on CUBIC moved 200 x 4 MiB at 0.77 of iperf3's best against 0.73 on BBR,
// 8 x 512 MiB at 0.92 against 0.89, and re-sent nothing (tests/bench/RESULTS.md). So a
// stream's first block on a connection whose least RTT is long, under a control that is not
// loss-based, turns it to kLossBasedStart (CUBIC) if the kernel allows this process to; a
// route that then shows random loss turns it to BBR as above, for the rest of the
// connection's life. A control that was chosen is never changed; short routes keep the
// host's default.
//
// The CUBIC a long route's stream starts on (from the host's CUBIC or from a tolerant default)
// is gfrep's own, "gfrep_cubic" (transfer/congestion.h), where this process can provide it: the
// kernel's CUBIC without Linux's restart from the initial window after an idle longer than the
// retransmission timeout, which cost a warm session's next request two seconds of ramp on the
// 200 ms test route. Where it cannot be had (no root, no BPF), the kernel's CUBIC.
//
// The verdict is the route's, not only the stream's: random loss is a property of the path,
// and a stream that turned to BBR fills the route's queue, behind which the streams still on
// CUBIC see their losses with a queue's delay and never judge them random. On the lossy test
// route 5 of 16 streams turned and the rest stayed on CUBIC, at a quarter of the turned ones'
// rate (tests/bench/RESULTS.md, the lossy row). So a verdict marks the peer's address in
// LossyPeers for kRandomLossMemory: every unchosen stream to that peer turns to BBR at its next
// look, and a new connection to it is not started on CUBIC. After the memory lapses new
// connections start loss-based again and judge afresh.
//
// Thread safety: a LossResponse belongs to one stream (one coroutine at a time); LossyPeers is
// locked; the process-wide memo of a refused switch is atomic.

#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "transfer/internal/tcp_stats.h"

namespace gfrep::transfer::internal {

// Routes whose least RTT is below this are left alone (recovery there takes milliseconds).
inline constexpr std::uint32_t kLongRouteMinRttUs = 10'000;
// The control a stream turns to on random loss.
inline constexpr std::string_view kLossTolerantControl = "bbr";
// The control an unchosen stream on a long route starts with when the host's default is not
// loss-based and gfrep_cubic cannot be had.
inline constexpr std::string_view kLossBasedStart = "cubic";

// How long a peer stays marked after a stream to it saw random loss.
inline constexpr std::chrono::minutes kRandomLossMemory{5};

// The peers (by address, the port aside) on which a stream saw random loss lately.
class LossyPeers {
 public:
  using Clock = std::chrono::steady_clock;
  explicit LossyPeers(Clock::duration memory = kRandomLossMemory) : memory_(memory) {}

  void Mark(const std::string& peer, Clock::time_point now);
  bool IsLossy(const std::string& peer, Clock::time_point now) const;
  // Counts the marks ever made: a stream looks the peer up only when it moved (one load per
  // block instead of a lock).
  std::uint64_t marks() const { return marks_.load(std::memory_order_acquire); }

 private:
  const Clock::duration memory_;
  mutable absl::Mutex mu_;
  std::map<std::string, Clock::time_point> until_ ABSL_GUARDED_BY(mu_);
  std::atomic<std::uint64_t> marks_{0};
};

// The process's peers: what every LossResponse reads and marks unless given its own.
LossyPeers& ProcessLossyPeers();

// The address socket `fd` is connected to, without the port ("" if not connected).
std::string PeerAddressOf(int fd);

// The congestion control socket `fd` runs now ("" if the kernel does not say).
std::string ControlOf(int fd);

// Whether `name` reads every loss as congestion: reno and cubic (the hosts' defaults), and
// gfrep_cubic.
bool IsLossBased(std::string_view name);

// Pure: whether a stream whose two latest looks were `before` and `now` shows random loss:
// bytes re-sent between them, a long route, and no queue at either (srtt <= 1.25 x least).
bool ShowsRandomLoss(const TcpSample& before, const TcpSample& now);

class LossResponse {
 public:
  // `fd`: the stream's socket; `chosen`: RouteOptions::congestion (non-empty: nothing
  // changes); `first_stream`: no stream ran on this connection before (Conn::TakeFirstStream):
  // only then may the control turn to gfrep_cubic or kLossBasedStart (a switch resets CUBIC's
  // state); `peers`: where verdicts are shared
  // (ProcessLossyPeers(), or a test's own).
  LossResponse(int fd, std::string_view chosen, bool first_stream,
               LossyPeers& peers = ProcessLossyPeers());

  enum class Verdict {
    kUnchanged,  // no random loss seen (or not watching)
    kTurned,     // the socket runs kLossTolerantControl from now on
    kRefused,    // random loss seen, but the kernel refused the switch (errno in `error`)
  };
  // Called after each block the stream sent: turns the socket to kLossTolerantControl when
  // ShowsRandomLoss (and marks the peer), or when the peer was marked by another stream.
  // kTurned or kRefused once per stream at most (the caller logs them).
  Verdict Check();
  // Whether the turn followed another stream's verdict on the same peer (seen() is then
  // that stream's look, not this one's: empty).
  bool followed_peer() const { return followed_peer_; }

  // The control the stream ran before it turned, and the sample that made it turn.
  const std::string& from() const { return from_; }
  // The host's default this stream turned from to gfrep_cubic or kLossBasedStart ("" if it
  // did not); from() is then the control it started on.
  const std::string& started_from() const { return started_from_; }
  const TcpSample& seen() const { return seen_; }
  int error() const { return error_; }

 private:
  Verdict Turn();  // selects kLossTolerantControl; stops watching

  int fd_;
  bool watching_;
  LossyPeers& peers_;
  std::string peer_;
  std::uint64_t peers_seen_ = 0;  // peers_.marks() at the last lookup
  bool peer_lossy_ = false;       // the peer was marked (by this stream or another)
  bool followed_peer_ = false;
  TcpSample last_;  // the previous look
  TcpSample seen_;
  std::string from_;
  std::string started_from_;
  int error_ = 0;
};

}  // namespace gfrep::transfer::internal
