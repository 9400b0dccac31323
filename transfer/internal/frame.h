#pragma once

// Wire format of the transfer protocol: every message is a 32-byte header followed by
// `length` payload bytes. All integers little-endian.
//
//   0  u32 magic "GFRP"      8  u32 payload length      16 u64 offset (data frames)
//   4  u8  type              12 u32 header check        24 u64 payload checksum
//   5  u8  flags (0)            (xxh3-64 of the header with this field zero, low 32 bits)
//   6  u16 reserved (0)
//
// Control frames carry a JSON object (bounded by kMaxControlPayload, and by
// kMaxPreAuthControlPayload before authentication). Data frames carry
// file bytes at `offset` with a block checksum; the payload is bounded by the session's
// stripe unit. Pure functions; no I/O.

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace gfrep::transfer::internal {

inline constexpr std::uint32_t kFrameMagic = 0x50524647;  // "GFRP" little-endian
inline constexpr std::size_t kFrameHeaderSize = 32;
inline constexpr std::uint32_t kMaxControlPayload = 1u << 20;
// Bound on a control payload read before the peer has authenticated (a hello, auth or join
// is < 200 bytes): a 32-byte header then costs the reader at most this much memory.
inline constexpr std::uint32_t kMaxPreAuthControlPayload = 4096;

enum class FrameType : std::uint8_t {
  kControl = 1,  // JSON message on the control connection
  kJoin = 2,     // first frame of a data connection: payload = session token
  kData = 3,     // file bytes at offset
  kEnd = 4,      // no more data on this connection for this round
};

struct FrameHeader {
  FrameType type = FrameType::kControl;
  std::uint32_t length = 0;
  std::uint64_t offset = 0;
  std::uint64_t checksum = 0;
};

using HeaderBytes = std::array<unsigned char, kFrameHeaderSize>;

HeaderBytes EncodeHeader(const FrameHeader& header);

// Validates magic, header check, type, reserved bits and the payload bound
// (`max_data_payload` for kData, kMaxControlPayload for kControl, 64 for kJoin, 0 for kEnd).
// kDataLoss for a damaged or foreign header, kResourceExhausted for an oversized frame.
absl::StatusOr<FrameHeader> DecodeHeader(std::span<const unsigned char, kFrameHeaderSize> bytes,
                                         std::uint32_t max_data_payload);

// A whole frame (header + payload) as one byte string; for control messages and tests.
std::string EncodeFrame(FrameType type, std::string_view payload, std::uint64_t offset = 0,
                        std::uint64_t checksum = 0);

struct DecodedFrame {
  FrameHeader header;
  std::string_view payload;  // points into the input
  std::size_t consumed = 0;  // header + payload bytes
};

// Decodes the first frame of `bytes`. kOutOfRange when `bytes` is truncated (more bytes
// needed), otherwise as DecodeHeader.
absl::StatusOr<DecodedFrame> DecodeFrame(std::string_view bytes, std::uint32_t max_data_payload);

}  // namespace gfrep::transfer::internal
