#include "netprobe/internal/packet_ring.h"

#include <gtest/gtest.h>

#include <deque>
#include <vector>

namespace gfrep::netprobe::internal {
namespace {

std::vector<std::uint8_t> Packet(std::size_t size, std::uint8_t fill) {
  return std::vector<std::uint8_t>(size, fill);
}

TEST(PacketRingTest, FifoWithTimesAndContents) {
  PacketRing ring(4096);
  EXPECT_TRUE(ring.empty());
  ASSERT_TRUE(ring.Push(10, Packet(100, 1)));
  ASSERT_TRUE(ring.Push(20, Packet(7, 2)));
  EXPECT_EQ(ring.packets(), 2u);
  EXPECT_EQ(ring.FrontDeliverNs(), 10);
  EXPECT_EQ(ring.Front().size(), 100u);
  EXPECT_EQ(ring.Front()[99], 1);
  ring.Pop();
  EXPECT_EQ(ring.FrontDeliverNs(), 20);
  EXPECT_EQ(ring.Front().size(), 7u);
  EXPECT_EQ(ring.Front()[0], 2);
  ring.Pop();
  EXPECT_TRUE(ring.empty());
}

TEST(PacketRingTest, RefusesWhenFullAndAcceptsAfterPop) {
  PacketRing ring(1024);  // 16-byte header + 240 bytes = 256 per record: 4 fit
  for (int i = 0; i < 4; ++i) ASSERT_TRUE(ring.Push(i, Packet(240, 0)));
  EXPECT_FALSE(ring.Push(9, Packet(1, 0)));
  EXPECT_EQ(ring.packets(), 4u);
  ring.Pop();
  EXPECT_TRUE(ring.Push(9, Packet(240, 0)));
  EXPECT_FALSE(ring.Push(10, Packet(1, 0)));
}

TEST(PacketRingTest, RefusesPacketLargerThanTheRing) {
  PacketRing ring(256);
  EXPECT_FALSE(ring.Push(0, Packet(300, 0)));
  EXPECT_TRUE(ring.empty());
}

TEST(PacketRingTest, WrapsAroundKeepingOrderAgainstAReferenceQueue) {
  PacketRing ring(10000);
  std::deque<std::pair<std::int64_t, std::vector<std::uint8_t>>> reference;
  std::int64_t t = 0;
  std::size_t pushed = 0;
  for (int step = 0; step < 20000; ++step) {
    const bool push = (step * 2654435761u) % 7 < 4;
    if (push) {
      auto p = Packet(1 + (step * 37) % 1500, static_cast<std::uint8_t>(step));
      if (ring.Push(t, p)) {
        reference.emplace_back(t, std::move(p));
        ++pushed;
      } else {
        // Refusal is only allowed when the free space is too fragmented or too small:
        // less than two records of this size (one lost at the end, one before the head).
        EXPECT_GT(ring.used_bytes() + 2 * (16 + p.size() + 15), ring.capacity());
      }
      ++t;
    } else if (!reference.empty()) {
      ASSERT_FALSE(ring.empty());
      EXPECT_EQ(ring.FrontDeliverNs(), reference.front().first);
      const auto front = ring.Front();
      ASSERT_EQ(front.size(), reference.front().second.size());
      EXPECT_TRUE(std::equal(front.begin(), front.end(), reference.front().second.begin()));
      ring.Pop();
      reference.pop_front();
    }
    ASSERT_EQ(ring.packets(), reference.size());
  }
  EXPECT_GT(pushed, 5000u);  // wrapped many times
}

}  // namespace
}  // namespace gfrep::netprobe::internal
