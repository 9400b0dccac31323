#include "netprobe/internal/ip_packet.h"

#include <fmt/format.h>

namespace gfrep::netprobe::internal {

absl::Status CheckIpPacket(std::span<const std::uint8_t> packet) {
  if (packet.empty()) return absl::InvalidArgumentError("empty packet");
  if (packet.size() > kMaxPacketBytes) {
    return absl::InvalidArgumentError(fmt::format("packet of {} bytes is too long", packet.size()));
  }
  const int version = packet[0] >> 4;
  if (version == 4) {
    if (packet.size() < 20) {
      return absl::InvalidArgumentError(fmt::format("IPv4 packet of {} bytes", packet.size()));
    }
    const std::size_t header = static_cast<std::size_t>(packet[0] & 0x0f) * 4;
    const std::size_t total = (std::size_t{packet[2]} << 8) | packet[3];
    if (header < 20 || header > total || total != packet.size()) {
      return absl::InvalidArgumentError(fmt::format(
          "IPv4 header length {} / total length {} inconsistent with {} bytes read", header, total,
          packet.size()));
    }
    return absl::OkStatus();
  }
  if (version == 6) {
    if (packet.size() < 40) {
      return absl::InvalidArgumentError(fmt::format("IPv6 packet of {} bytes", packet.size()));
    }
    const std::size_t payload = (std::size_t{packet[4]} << 8) | packet[5];
    if (payload + 40 != packet.size()) {
      return absl::InvalidArgumentError(fmt::format(
          "IPv6 payload length {} inconsistent with {} bytes read", payload, packet.size()));
    }
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(fmt::format("IP version {}", version));
}

}  // namespace gfrep::netprobe::internal
