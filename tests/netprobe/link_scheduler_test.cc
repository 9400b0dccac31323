#include "netprobe/internal/link_scheduler.h"

#include <gtest/gtest.h>

namespace gfrep::netprobe::internal {
namespace {

using std::chrono::milliseconds;

DirectionOptions Link(std::uint64_t rate_bps, milliseconds delay, std::uint64_t queue = 0,
                      double loss = 0) {
  DirectionOptions o;
  o.rate_bps = rate_bps;
  o.delay = delay;
  o.queue_bytes = queue;
  o.loss = loss;
  return o;
}

TEST(LinkSchedulerTest, IdleLinkDeliversAfterSerialisationPlusDelay) {
  LinkScheduler s(Link(8'000'000, milliseconds(50)), 1);  // 1 byte per microsecond
  Decision d = s.Offer(1'000'000, 1000);
  ASSERT_EQ(d.verdict, Verdict::kForward);
  EXPECT_EQ(d.deliver_ns, 1'000'000 + 1'000'000 + 50'000'000);
}

TEST(LinkSchedulerTest, BackToBackPacketsAreSpacedByTheBottleneck) {
  LinkScheduler s(Link(8'000'000, milliseconds(10)), 1);
  const Decision first = s.Offer(0, 1000);
  const Decision second = s.Offer(0, 1000);
  const Decision third = s.Offer(0, 500);
  EXPECT_EQ(second.deliver_ns - first.deliver_ns, 1'000'000);
  EXPECT_EQ(third.deliver_ns - second.deliver_ns, 500'000);
  EXPECT_EQ(s.BacklogBytes(0), 2500u);
  EXPECT_EQ(s.BacklogBytes(2'000'000), 500u);
  EXPECT_EQ(s.BacklogBytes(3'000'000), 0u);
}

TEST(LinkSchedulerTest, DeliveryTimesNeverDecrease) {
  LinkScheduler s(Link(1'000'000'000, milliseconds(100)), 7);
  std::int64_t last = 0;
  std::int64_t now = 0;
  for (int i = 0; i < 10000; ++i) {
    now += (i * 7919) % 20000;
    const Decision d = s.Offer(now, 64 + (i * 131) % 9000);
    if (d.verdict != Verdict::kForward) continue;
    EXPECT_GE(d.deliver_ns, last);
    EXPECT_GE(d.deliver_ns, now + 100'000'000);
    last = d.deliver_ns;
  }
}

TEST(LinkSchedulerTest, DropTailWhenQueueFull) {
  LinkScheduler s(Link(8'000'000, milliseconds(10), /*queue=*/3000), 1);
  EXPECT_EQ(s.Offer(0, 1000).verdict, Verdict::kForward);
  EXPECT_EQ(s.Offer(0, 1000).verdict, Verdict::kForward);
  EXPECT_EQ(s.Offer(0, 1000).verdict, Verdict::kForward);
  EXPECT_EQ(s.Offer(0, 1).verdict, Verdict::kDropQueue);
  // After one packet time there is room for one more 1000-byte packet.
  EXPECT_EQ(s.Offer(1'000'000, 1000).verdict, Verdict::kForward);
  EXPECT_EQ(s.Offer(1'000'000, 1000).verdict, Verdict::kDropQueue);
}

TEST(LinkSchedulerTest, DefaultQueueIsOneBandwidthDelayProduct) {
  LinkScheduler s(Link(1'000'000'000, milliseconds(100)), 1);  // RTT 200 ms -> 25 MB
  EXPECT_EQ(s.queue_limit(), 25'000'000u);
  LinkScheduler tiny(Link(1'000'000, milliseconds(1)), 1);
  EXPECT_EQ(tiny.queue_limit(), 65536u);
}

TEST(LinkSchedulerTest, UnlimitedRateOnlyDelays) {
  LinkScheduler s(Link(0, milliseconds(5)), 1);
  for (int i = 0; i < 1000; ++i) {
    const Decision d = s.Offer(42, 9000);
    ASSERT_EQ(d.verdict, Verdict::kForward);
    EXPECT_EQ(d.deliver_ns, 42 + 5'000'000);
  }
}

TEST(LinkSchedulerTest, LossFractionMatchesProbabilityAndIsSeeded) {
  constexpr int kPackets = 200000;
  auto count = [](std::uint64_t seed) {
    LinkScheduler s(Link(0, milliseconds(0), 0, 0.01), seed);
    int lost = 0;
    for (int i = 0; i < kPackets; ++i) {
      lost += s.Offer(i, 100).verdict == Verdict::kDropLoss ? 1 : 0;
    }
    return lost;
  };
  const int lost = count(3);
  EXPECT_NEAR(lost, kPackets * 0.01, 5 * std::sqrt(kPackets * 0.01));  // 5 sigma
  EXPECT_EQ(lost, count(3));
  EXPECT_NE(lost, count(4));
}

TEST(LinkSchedulerTest, NoLossNeverDrops) {
  LinkScheduler s(Link(0, milliseconds(0)), 1);
  for (int i = 0; i < 100000; ++i) ASSERT_EQ(s.Offer(i, 100).verdict, Verdict::kForward);
}

TEST(DirectionOptionsTest, ValidateRejectsOutOfRange) {
  EXPECT_TRUE(Validate(Link(1'000'000'000, milliseconds(100))).ok());
  EXPECT_EQ(Validate(Link(1, milliseconds(-1))).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Validate(Link(1, milliseconds(20000))).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Validate(Link(1, milliseconds(1), 0, 1.0)).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Validate(Link(1, milliseconds(1), 0, -0.1)).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Validate(Link(1'000'000'000'000ULL, milliseconds(1))).code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace gfrep::netprobe::internal
