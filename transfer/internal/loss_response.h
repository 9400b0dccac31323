#pragma once

// A data stream's answer to random loss when nobody chose its congestion control.
//
// A loss-based congestion control (Reno, CUBIC: most hosts' default) takes every lost packet
// for a full queue and cuts its window. On a long fat route with a little random loss it
// spends the copy recovering: at 1e-4 on the 200 ms / 1 Gbit/s test route one CUBIC stream
// moved 0.14 of the link, one BBR stream 0.69 (tests/bench/RESULTS.md, lfn-1g-loss4).
//
// When a copy's congestion control was not chosen (RouteOptions::congestion empty: gfcp
// without --cc, an agent's copies on a route whose `cc` is not set), each data stream starts
// on the host's default and turns to BBR, which does not read loss as congestion, once its own
// connection shows loss that is not congestion: bytes re-sent on a long route (least RTT at
// least 10 ms, where a window cut costs seconds to regrow) between two looks (one per block
// sent) at both of which the smoothed RTT was within a quarter of the least. Loss from a full
// queue comes with the queue's delay, which the look before the loss already sees (a queue
// builds over round trips); after the window cut the queue may drain, which is why one look
// is not enough. Loss with no queue at either look is the path's. A control that was chosen
// is never changed, nor one that is not loss-based.
//
// Thread safety: a LossResponse belongs to one stream (one coroutine at a time); the
// process-wide memo of a refused switch is atomic.

#include <cstdint>
#include <string>
#include <string_view>

#include "transfer/internal/tcp_stats.h"

namespace gfrep::transfer::internal {

// Routes whose least RTT is below this are left alone (recovery there takes milliseconds).
inline constexpr std::uint32_t kLongRouteMinRttUs = 10'000;
// The control a stream turns to.
inline constexpr std::string_view kLossTolerantControl = "bbr";

// The congestion control socket `fd` runs now ("" if the kernel does not say).
std::string ControlOf(int fd);

// Whether `name` reads every loss as congestion: reno and cubic (the hosts' defaults).
bool IsLossBased(std::string_view name);

// Pure: whether a stream whose two latest looks were `before` and `now` shows random loss:
// bytes re-sent between them, a long route, and no queue at either (srtt <= 1.25 x least).
bool ShowsRandomLoss(const TcpSample& before, const TcpSample& now);

class LossResponse {
 public:
  // `fd`: the stream's socket; `chosen`: RouteOptions::congestion (non-empty: Check does
  // nothing).
  LossResponse(int fd, std::string_view chosen);

  enum class Verdict {
    kUnchanged,  // no random loss seen (or not watching)
    kTurned,     // the socket runs kLossTolerantControl from now on
    kRefused,    // random loss seen, but the kernel refused the switch (errno in `error`)
  };
  // Called after each block the stream sent: turns the socket to kLossTolerantControl when
  // ShowsRandomLoss. kTurned or kRefused once per stream at most (the caller logs them).
  Verdict Check();

  // The control the stream ran before it turned, and the sample that made it turn.
  const std::string& from() const { return from_; }
  const TcpSample& seen() const { return seen_; }
  int error() const { return error_; }

 private:
  int fd_;
  bool watching_;
  TcpSample last_;  // the previous look
  TcpSample seen_;
  std::string from_;
  int error_ = 0;
};

}  // namespace gfrep::transfer::internal
