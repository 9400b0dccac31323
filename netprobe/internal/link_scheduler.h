#pragma once

// LinkScheduler decides, for one direction of an emulated link, what happens to a
// packet arriving at time `now`: random loss, drop-tail when the bottleneck queue is
// full, or forwarding at a delivery time = end of its serialisation on the bottleneck
// + propagation delay. Delivery times never decrease, so a FIFO delay line keeps
// packets in order. Pure arithmetic on an injected clock and a seeded RNG: no I/O.
//
// Thread safety: none; owned by the emulator loop.

#include <cstdint>
#include <random>

#include "netprobe/link_options.h"

namespace gfrep::netprobe::internal {

enum class Verdict { kForward, kDropQueue, kDropLoss };

struct Decision {
  Verdict verdict = Verdict::kForward;
  std::int64_t deliver_ns = 0;  // only for kForward
};

class LinkScheduler {
 public:
  // REQUIRES: Validate(options).ok().
  LinkScheduler(const DirectionOptions& options, std::uint64_t seed);

  // Times are nanoseconds on any monotonic clock; calls must not go back in time.
  Decision Offer(std::int64_t now_ns, std::size_t bytes);

  // Bytes waiting for (or on) the bottleneck at `now_ns`.
  std::uint64_t BacklogBytes(std::int64_t now_ns) const;

  std::uint64_t queue_limit() const { return queue_limit_; }

 private:
  std::int64_t SerialisationNs(std::size_t bytes) const;

  // Constant after construction.
  const std::int64_t delay_ns_;
  const std::uint64_t rate_bps_;
  const std::uint64_t queue_limit_;
  const double loss_;

  std::int64_t busy_until_ns_ = 0;  // the bottleneck is sending until then
  std::mt19937_64 rng_;
  std::uniform_real_distribution<double> uniform_{0.0, 1.0};
};

}  // namespace gfrep::netprobe::internal
