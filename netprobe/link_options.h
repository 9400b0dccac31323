#pragma once

// Settings of one direction of an emulated WAN link (gfwanem): propagation delay,
// bottleneck rate, drop-tail queue and random loss. Plain values, no behaviour.

#include <chrono>
#include <cstdint>

#include "absl/status/status.h"

namespace gfrep::netprobe {

struct DirectionOptions {
  // One-way propagation delay added to every packet (half the RTT for a symmetric link).
  std::chrono::nanoseconds delay{0};

  // Bottleneck rate in bit/s: each packet occupies the link for bytes*8/rate.
  // 0 means unlimited (no serialisation time, no queue).
  std::uint64_t rate_bps = 1'000'000'000;

  // Drop-tail queue limit in bytes (packets waiting for the bottleneck).
  // 0 means one bandwidth-delay product, rate * 2 * delay, at least 64 KiB.
  std::uint64_t queue_bytes = 0;

  // Probability in [0, 1) that a packet is dropped at random before the queue.
  double loss = 0.0;
};

// kInvalidArgument naming the bad field.
absl::Status Validate(const DirectionOptions& options);

// The queue limit actually used (resolves queue_bytes == 0 to one BDP).
std::uint64_t EffectiveQueueBytes(const DirectionOptions& options);

// Counters of one direction. forwarded + dropped_* == packets_in.
struct DirectionStats {
  std::uint64_t packets_in = 0;
  std::uint64_t bytes_in = 0;
  std::uint64_t forwarded = 0;
  std::uint64_t bytes_forwarded = 0;
  std::uint64_t dropped_queue = 0;      // drop-tail: the queue was full
  std::uint64_t dropped_loss = 0;       // random loss
  std::uint64_t dropped_malformed = 0;  // not an IPv4/IPv6 packet of consistent length
  std::uint64_t dropped_nobuf = 0;      // the delay line's memory was full
  std::uint64_t dropped_write = 0;      // the egress TUN device refused the packet
};

}  // namespace gfrep::netprobe
