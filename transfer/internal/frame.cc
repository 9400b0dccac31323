#include "transfer/internal/frame.h"

#include <cstring>

#include <fmt/format.h>

#include "absl/status/status.h"
#include "transfer/internal/xxh.h"

namespace gfrep::transfer::internal {
namespace {

void Put32(unsigned char* p, std::uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<unsigned char>(v >> (8 * i));
}
void Put64(unsigned char* p, std::uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = static_cast<unsigned char>(v >> (8 * i));
}
std::uint32_t Get32(const unsigned char* p) {
  std::uint32_t v = 0;
  for (int i = 3; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}
std::uint64_t Get64(const unsigned char* p) {
  std::uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

std::uint32_t HeaderCheck(const unsigned char* bytes) {
  unsigned char copy[kFrameHeaderSize];
  std::memcpy(copy, bytes, kFrameHeaderSize);
  std::memset(copy + 12, 0, 4);
  return static_cast<std::uint32_t>(XXH3_64bits(copy, sizeof(copy)));
}

}  // namespace

HeaderBytes EncodeHeader(const FrameHeader& h) {
  HeaderBytes b{};
  Put32(b.data(), kFrameMagic);
  b[4] = static_cast<unsigned char>(h.type);
  Put32(b.data() + 8, h.length);
  Put64(b.data() + 16, h.offset);
  Put64(b.data() + 24, h.checksum);
  Put32(b.data() + 12, HeaderCheck(b.data()));
  return b;
}

absl::StatusOr<FrameHeader> DecodeHeader(std::span<const unsigned char, kFrameHeaderSize> b,
                                         std::uint32_t max_data_payload) {
  if (Get32(b.data()) != kFrameMagic) {
    return absl::DataLossError("bad frame magic (peer is not speaking the gfrep protocol)");
  }
  if (Get32(b.data() + 12) != HeaderCheck(b.data())) {
    return absl::DataLossError("frame header check mismatch (damaged header)");
  }
  if (b[5] != 0 || b[6] != 0 || b[7] != 0) {
    return absl::DataLossError("frame header has non-zero reserved bits");
  }
  FrameHeader h;
  h.length = Get32(b.data() + 8);
  h.offset = Get64(b.data() + 16);
  h.checksum = Get64(b.data() + 24);
  std::uint32_t limit = 0;
  switch (b[4]) {
    case static_cast<unsigned char>(FrameType::kControl):
      limit = kMaxControlPayload;
      break;
    case static_cast<unsigned char>(FrameType::kJoin):
      limit = 64;
      break;
    case static_cast<unsigned char>(FrameType::kData):
      limit = max_data_payload;
      break;
    case static_cast<unsigned char>(FrameType::kEnd):
      limit = 0;
      break;
    default:
      return absl::DataLossError(fmt::format("unknown frame type {}", b[4]));
  }
  h.type = static_cast<FrameType>(b[4]);
  if (h.length > limit) {
    return absl::ResourceExhaustedError(
        fmt::format("oversized frame: type {} length {} > limit {}", b[4], h.length, limit));
  }
  return h;
}

std::string EncodeFrame(FrameType type, std::string_view payload, std::uint64_t offset,
                        std::uint64_t checksum) {
  FrameHeader h{type, static_cast<std::uint32_t>(payload.size()), offset, checksum};
  HeaderBytes b = EncodeHeader(h);
  std::string out(reinterpret_cast<const char*>(b.data()), b.size());
  out.append(payload);
  return out;
}

absl::StatusOr<DecodedFrame> DecodeFrame(std::string_view bytes, std::uint32_t max_data_payload) {
  if (bytes.size() < kFrameHeaderSize) {
    return absl::OutOfRangeError(
        fmt::format("truncated frame header: {} of {} bytes", bytes.size(), kFrameHeaderSize));
  }
  std::span<const unsigned char, kFrameHeaderSize> hb(
      reinterpret_cast<const unsigned char*>(bytes.data()), kFrameHeaderSize);
  absl::StatusOr<FrameHeader> h = DecodeHeader(hb, max_data_payload);
  if (!h.ok()) return h.status();
  if (bytes.size() - kFrameHeaderSize < h->length) {
    return absl::OutOfRangeError(fmt::format("truncated frame payload: {} of {} bytes",
                                             bytes.size() - kFrameHeaderSize, h->length));
  }
  return DecodedFrame{*h, bytes.substr(kFrameHeaderSize, h->length), kFrameHeaderSize + h->length};
}

}  // namespace gfrep::transfer::internal
