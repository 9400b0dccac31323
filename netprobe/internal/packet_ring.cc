#include "netprobe/internal/packet_ring.h"

#include <cassert>
#include <cstring>

namespace gfrep::netprobe::internal {


PacketRing::PacketRing(std::size_t capacity_bytes)
    : capacity_((capacity_bytes + kAlign - 1) / kAlign * kAlign),
      buffer_(new std::uint8_t[capacity_ == 0 ? kAlign : capacity_]) {}

const PacketRing::Header& PacketRing::HeaderAt(std::size_t offset) const {
  return *reinterpret_cast<const Header*>(buffer_.get() + offset);
}

bool PacketRing::Push(std::int64_t deliver_ns, std::span<const std::uint8_t> packet) {
  const std::size_t need = RecordBytes(packet.size());
  if (need > capacity_ || packet.size() >= kWrapMarker) return false;
  if (used_ == 0) {
    head_ = tail_ = 0;
  }
  if (used_ != 0 && tail_ <= head_) {
    // Wrapped: the free space is [tail_, head_).
    if (head_ - tail_ < need) return false;
  } else if (capacity_ - tail_ < need) {
    // Not enough room before the end: waste the tail and continue at 0 if [0, head_) fits.
    const std::size_t waste = capacity_ - tail_;
    if (head_ < need) return false;
    if (waste != 0) {
      auto* marker = reinterpret_cast<Header*>(buffer_.get() + tail_);
      marker->deliver_ns = 0;
      marker->length = kWrapMarker;
    }
    used_ += waste;
    tail_ = 0;
  }
  auto* header = reinterpret_cast<Header*>(buffer_.get() + tail_);
  header->deliver_ns = deliver_ns;
  header->length = static_cast<std::uint32_t>(packet.size());
  header->unused = 0;
  if (!packet.empty()) {
    std::memcpy(buffer_.get() + tail_ + sizeof(Header), packet.data(), packet.size());
  }
  tail_ += need;
  if (tail_ == capacity_) tail_ = 0;
  used_ += need;
  ++packets_;
  return true;
}

std::int64_t PacketRing::FrontDeliverNs() const {
  assert(!empty());
  return HeaderAt(head_).deliver_ns;
}

std::span<const std::uint8_t> PacketRing::Front() const {
  assert(!empty());
  return {buffer_.get() + head_ + sizeof(Header), HeaderAt(head_).length};
}

void PacketRing::Pop() {
  assert(!empty());
  const std::size_t bytes = RecordBytes(HeaderAt(head_).length);
  head_ += bytes;
  used_ -= bytes;
  --packets_;
  if (head_ == capacity_) head_ = 0;
  SkipWrap();
}

void PacketRing::SkipWrap() {
  if (used_ == 0) {
    head_ = tail_ = 0;
    return;
  }
  if (HeaderAt(head_).length == kWrapMarker) {
    used_ -= capacity_ - head_;
    head_ = 0;
  }
}

}  // namespace gfrep::netprobe::internal
