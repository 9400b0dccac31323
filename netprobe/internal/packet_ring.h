#pragma once

// PacketRing is the delay line of one link direction: a FIFO of packets with their
// delivery times, stored back to back in one preallocated byte ring (no allocation
// per packet). Each record is a 16-byte header plus the packet, padded to 16 bytes.
//
// Thread safety: none; owned by the emulator loop.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>

namespace gfrep::netprobe::internal {

class PacketRing {
 public:
  // `capacity_bytes` is rounded up to a multiple of 16.
  explicit PacketRing(std::size_t capacity_bytes);

  // Appends a copy of `packet`. Returns false (and stores nothing) when there is no room.
  bool Push(std::int64_t deliver_ns, std::span<const std::uint8_t> packet);

  bool empty() const { return used_ == 0; }
  std::size_t packets() const { return packets_; }
  std::size_t used_bytes() const { return used_; }
  std::size_t capacity() const { return capacity_; }

  // REQUIRES: !empty().
  std::int64_t FrontDeliverNs() const;
  std::span<const std::uint8_t> Front() const;
  void Pop();

 private:
  struct Header {
    std::int64_t deliver_ns;
    std::uint32_t length;  // kWrapMarker: the rest of the buffer is unused, go to 0
    std::uint32_t unused;
  };
  static constexpr std::uint32_t kWrapMarker = 0xffffffffu;
  static constexpr std::size_t kAlign = 16;
  static std::size_t RecordBytes(std::size_t length) {
    return sizeof(Header) + (length + kAlign - 1) / kAlign * kAlign;
  }
  const Header& HeaderAt(std::size_t offset) const;
  void SkipWrap();

  const std::size_t capacity_;
  std::unique_ptr<std::uint8_t[]> buffer_;
  std::size_t head_ = 0;  // oldest record
  std::size_t tail_ = 0;  // where the next record goes
  std::size_t used_ = 0;  // bytes of records and of wasted tails
  std::size_t packets_ = 0;
};

}  // namespace gfrep::netprobe::internal
