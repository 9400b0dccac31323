#include "netprobe/link_options.h"

#include <fmt/format.h>

#include <algorithm>

namespace gfrep::netprobe {

absl::Status Validate(const DirectionOptions& options) {
  if (options.delay < std::chrono::nanoseconds(0) || options.delay > std::chrono::seconds(10)) {
    return absl::InvalidArgumentError(
        fmt::format("delay must be within [0, 10s], got {} ns", options.delay.count()));
  }
  if (options.rate_bps > 400'000'000'000ULL) {
    return absl::InvalidArgumentError(
        fmt::format("rate must be at most 400 Gbit/s, got {} bit/s", options.rate_bps));
  }
  if (options.queue_bytes > (std::uint64_t{4} << 30)) {
    return absl::InvalidArgumentError(
        fmt::format("queue must be at most 4 GiB, got {} bytes", options.queue_bytes));
  }
  if (!(options.loss >= 0.0 && options.loss < 1.0)) {
    return absl::InvalidArgumentError(
        fmt::format("loss must be within [0, 1), got {}", options.loss));
  }
  return absl::OkStatus();
}

std::uint64_t EffectiveQueueBytes(const DirectionOptions& options) {
  if (options.queue_bytes != 0) return options.queue_bytes;
  const double rtt_s = 2.0 * std::chrono::duration<double>(options.delay).count();
  const auto bdp = static_cast<std::uint64_t>(static_cast<double>(options.rate_bps) / 8.0 * rtt_s);
  return std::max<std::uint64_t>(bdp, 64 * 1024);
}

}  // namespace gfrep::netprobe
