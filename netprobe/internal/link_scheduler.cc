#include "netprobe/internal/link_scheduler.h"

#include <algorithm>

namespace gfrep::netprobe::internal {

LinkScheduler::LinkScheduler(const DirectionOptions& options, std::uint64_t seed)
    : delay_ns_(options.delay.count()),
      rate_bps_(options.rate_bps),
      queue_limit_(EffectiveQueueBytes(options)),
      loss_(options.loss),
      rng_(seed) {}

std::int64_t LinkScheduler::SerialisationNs(std::size_t bytes) const {
  if (rate_bps_ == 0) return 0;
  // bytes <= 64 KiB and rate >= 1, so bytes * 8e9 fits easily in 64 bits.
  return static_cast<std::int64_t>((static_cast<std::uint64_t>(bytes) * 8'000'000'000ULL +
                                    rate_bps_ - 1) /
                                   rate_bps_);
}

std::uint64_t LinkScheduler::BacklogBytes(std::int64_t now_ns) const {
  if (rate_bps_ == 0 || busy_until_ns_ <= now_ns) return 0;
  // In floating point: busy time (up to seconds) x rate (up to 4e11) overflows 64 bits.
  const double busy_s = static_cast<double>(busy_until_ns_ - now_ns) * 1e-9;
  return static_cast<std::uint64_t>(busy_s * static_cast<double>(rate_bps_) / 8.0);
}

Decision LinkScheduler::Offer(std::int64_t now_ns, std::size_t bytes) {
  if (loss_ > 0.0 && uniform_(rng_) < loss_) {
    return {Verdict::kDropLoss, 0};
  }
  if (rate_bps_ != 0 && BacklogBytes(now_ns) + bytes > queue_limit_) {
    return {Verdict::kDropQueue, 0};
  }
  const std::int64_t start = std::max(now_ns, busy_until_ns_);
  busy_until_ns_ = start + SerialisationNs(bytes);
  return {Verdict::kForward, busy_until_ns_ + delay_ns_};
}

}  // namespace gfrep::netprobe::internal
