#pragma once

// Minimal checks on an IP packet read from a TUN device before the emulator queues it:
// the version nibble, the header length and the length field must agree with the
// number of bytes read. The kernel hands us well-formed packets; this guards the
// emulator's arithmetic against anything else.

#include <cstdint>
#include <span>

#include "absl/status/status.h"

namespace gfrep::netprobe::internal {

// Largest packet the emulator accepts (the TUN MTU is at most this).
inline constexpr std::size_t kMaxPacketBytes = 65535;

// OK for a consistent IPv4 or IPv6 packet; kInvalidArgument saying what is wrong.
absl::Status CheckIpPacket(std::span<const std::uint8_t> packet);

}  // namespace gfrep::netprobe::internal
