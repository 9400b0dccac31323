// Fuzzes the transfer protocol's frame decoder (transfer/internal/frame.h): the first bytes
// any peer, authenticated or not, gets us to parse.
//
// The first input byte picks a mode:
//  - raw (even): the rest is wire bytes. Whatever DecodeFrame accepts must be canonical
//    (EncodeFrame of the decoded fields gives back exactly the bytes consumed), within the
//    type's payload bound, with the payload inside the input; DecodeHeader must agree; a
//    refusal has one of the documented codes. Random bytes rarely pass the header check, so
//  - structured (odd): a frame built by EncodeFrame from fuzzed fields, then maybe cut short
//    or with one bit flipped. An intact frame must decode to its fields exactly when its
//    type and length are legal; a flipped header-check bit or a cut must be refused.

#include <fuzzer/FuzzedDataProvider.h>

#include <cstddef>
#include <cstdint>
#include <iterator>
#include <span>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "tests/fuzz/fuzz_check.h"
#include "transfer/internal/frame.h"

namespace gfrep::transfer::internal {
namespace {

constexpr std::uint32_t kDataLimits[] = {0, 16, 4096, kMaxControlPayload, 0xffffffffu};

bool KnownType(std::uint8_t type) { return type >= 1 && type <= 4; }

// The payload bound DecodeHeader documents for `type`.
std::uint64_t Limit(FrameType type, std::uint32_t max_data) {
  switch (type) {
    case FrameType::kControl:
      return kMaxControlPayload;
    case FrameType::kJoin:
      return 64;
    case FrameType::kData:
      return max_data;
    case FrameType::kEnd:
      return 0;
  }
  return 0;
}

void CheckAccepted(std::string_view input, const DecodedFrame& f, std::uint32_t max_data) {
  FUZZ_CHECK(KnownType(static_cast<std::uint8_t>(f.header.type)), "accepted an unknown frame type");
  FUZZ_CHECK(f.header.length <= Limit(f.header.type, max_data), "accepted an oversized payload");
  FUZZ_CHECK(f.consumed == kFrameHeaderSize + f.header.length, "consumed != header + length");
  FUZZ_CHECK(f.consumed <= input.size(), "consumed more bytes than given");
  FUZZ_CHECK(
      f.payload.data() == input.data() + kFrameHeaderSize && f.payload.size() == f.header.length,
      "payload does not follow the header inside the input");
  const std::string again =
      EncodeFrame(f.header.type, f.payload, f.header.offset, f.header.checksum);
  FUZZ_CHECK(again == input.substr(0, f.consumed),
             "decoder accepted bytes the encoder would not produce (not canonical)");
}

void CheckRefusal(const absl::Status& s) {
  FUZZ_CHECK(absl::IsOutOfRange(s) || absl::IsDataLoss(s) || absl::IsResourceExhausted(s),
             "refusal with an undocumented status code");
}

void Raw(std::string_view input, std::uint32_t max_data) {
  absl::StatusOr<DecodedFrame> f = DecodeFrame(input, max_data);
  if (input.size() < kFrameHeaderSize) {
    FUZZ_CHECK(absl::IsOutOfRange(f.status()), "a short header must be kOutOfRange");
    return;
  }
  std::span<const unsigned char, kFrameHeaderSize> head(
      reinterpret_cast<const unsigned char*>(input.data()), kFrameHeaderSize);
  absl::StatusOr<FrameHeader> h = DecodeHeader(head, max_data);
  if (!f.ok()) {
    CheckRefusal(f.status());
    // Only a short payload separates a good header from a refused frame.
    FUZZ_CHECK(h.ok() == absl::IsOutOfRange(f.status()), "DecodeFrame and DecodeHeader disagree");
    return;
  }
  FUZZ_CHECK(h.ok(), "DecodeFrame accepted a header DecodeHeader refuses");
  CheckAccepted(input, *f, max_data);
}

void Structured(FuzzedDataProvider& in, std::uint32_t max_data) {
  const auto type_byte = in.ConsumeIntegral<std::uint8_t>();
  const auto type = static_cast<FrameType>(type_byte);
  const auto offset = in.ConsumeIntegral<std::uint64_t>();
  const auto checksum = in.ConsumeIntegral<std::uint64_t>();
  const auto cut = in.ConsumeIntegral<std::uint16_t>();
  const auto flip = in.ConsumeIntegral<std::uint16_t>();
  const std::string payload = in.ConsumeRemainingBytesAsString();
  std::string wire = EncodeFrame(type, payload, offset, checksum);

  // Low bits choose what to damage: nothing, a cut, or one flipped bit.
  switch (cut % 3) {
    case 0: {
      absl::StatusOr<DecodedFrame> f = DecodeFrame(wire, max_data);
      if (!KnownType(type_byte)) {
        FUZZ_CHECK(absl::IsDataLoss(f.status()), "an unknown type must be kDataLoss");
      } else if (payload.size() > Limit(type, max_data)) {
        FUZZ_CHECK(absl::IsResourceExhausted(f.status()), "oversized must be kResourceExhausted");
      } else {
        FUZZ_CHECK(f.ok(), "refused a well-formed frame");
        FUZZ_CHECK(f->header.type == type && f->header.offset == offset &&
                       f->header.checksum == checksum && f->payload == payload &&
                       f->consumed == wire.size(),
                   "a well-formed frame decoded to other fields");
      }
      return;
    }
    case 1: {
      wire.resize(static_cast<std::size_t>(cut / 3) % wire.size());
      absl::StatusOr<DecodedFrame> f = DecodeFrame(wire, max_data);
      FUZZ_CHECK(!f.ok(), "accepted a truncated frame");
      CheckRefusal(f.status());
      return;
    }
    default: {
      const std::size_t bit = flip % (wire.size() * 8);
      wire[bit / 8] = static_cast<char>(wire[bit / 8] ^ (1 << (bit % 8)));
      absl::StatusOr<DecodedFrame> f = DecodeFrame(wire, max_data);
      if (bit / 8 >= 12 && bit / 8 < 16) {
        FUZZ_CHECK(absl::IsDataLoss(f.status()), "a damaged header check must be kDataLoss");
      }
      if (f.ok()) {
        CheckAccepted(wire, *f, max_data);
      } else {
        CheckRefusal(f.status());
      }
      return;
    }
  }
}

}  // namespace
}  // namespace gfrep::transfer::internal

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace gfrep::transfer::internal;
  if (size < 2) return 0;
  const std::uint32_t max_data = kDataLimits[data[1] % std::size(kDataLimits)];
  if (data[0] % 2 == 0) {
    Raw(std::string_view(reinterpret_cast<const char*>(data + 2), size - 2), max_data);
  } else {
    FuzzedDataProvider in(data + 2, size - 2);
    Structured(in, max_data);
  }
  return 0;
}
