#include "transfer/internal/token_bucket.h"

#include <gtest/gtest.h>

namespace gfrep::transfer::internal {
namespace {

using std::chrono::milliseconds;
using std::chrono::nanoseconds;

class FakeClock : public Clock {
 public:
  std::chrono::steady_clock::time_point Now() override { return now; }
  std::chrono::steady_clock::time_point now{};
};

TEST(TokenBucketTest, BurstGoesImmediately) {
  FakeClock clock;
  TokenBucket b(1000, 500, &clock);  // 1000 B/s, 500 B burst
  EXPECT_EQ(b.Reserve(500), nanoseconds(0));
}

TEST(TokenBucketTest, DebtBecomesWaitAtTheRate) {
  FakeClock clock;
  TokenBucket b(1000, 500, &clock);
  EXPECT_EQ(b.Reserve(500), nanoseconds(0));
  // 1000 bytes of debt at 1000 B/s = 1 s.
  EXPECT_EQ(b.Reserve(1000), std::chrono::seconds(1));
  // A second caller queues behind the first: its wait includes the earlier debt.
  EXPECT_EQ(b.Reserve(500), milliseconds(1500));
}

TEST(TokenBucketTest, RefillsWithTimeButNotBeyondBurst) {
  FakeClock clock;
  TokenBucket b(1000, 500, &clock);
  EXPECT_EQ(b.Reserve(500), nanoseconds(0));
  clock.now += milliseconds(250);  // +250 tokens
  EXPECT_EQ(b.Reserve(250), nanoseconds(0));
  clock.now += std::chrono::seconds(100);  // capped at 500
  EXPECT_EQ(b.Reserve(500), nanoseconds(0));
  EXPECT_EQ(b.Reserve(100), milliseconds(100));
}

TEST(TokenBucketTest, SharedByManyStreamsKeepsTheAggregateRate) {
  FakeClock clock;
  TokenBucket b(1e6, 0, &clock);
  // Four streams each sending 1 MB blocks in turn, each waiting what it is told: the
  // total of 40 MB must take 40 s of fake time, whatever the interleaving.
  std::chrono::steady_clock::time_point ready[4] = {};
  for (int i = 0; i < 40; ++i) {
    int s = i % 4;
    clock.now = std::max(clock.now, ready[s]);
    ready[s] = clock.now + b.Reserve(1'000'000);
  }
  auto last = *std::max_element(std::begin(ready), std::end(ready));
  EXPECT_EQ(std::chrono::duration_cast<milliseconds>(last - std::chrono::steady_clock::time_point{}),
            milliseconds(40000));
}

TEST(TokenBucketTest, SetRateAppliesToNewReservations) {
  FakeClock clock;
  TokenBucket b(1000, 0, &clock);
  b.SetRate(2000);
  EXPECT_EQ(b.Reserve(1000), milliseconds(500));
}

TEST(TokenBucketTest, RouteBucketIsSharedPerName) {
  auto a = RouteBucket("gfrep-test-route", 1000);
  auto b = RouteBucket("gfrep-test-route", 1000);
  auto c = RouteBucket("gfrep-other-route", 1000);
  EXPECT_EQ(a.get(), b.get());
  EXPECT_NE(a.get(), c.get());
}

// Issue 37: with --route-rate 8M, a route carrying many small copies moved 38 Mbit/s: a
// route's bucket died with its last copy and the next copy found a fresh one, full burst and
// no debt. The bucket (and its debt) now outlives the copies that used it.
TEST(TokenBucketTest, ARouteBucketKeepsItsDebtBetweenCopies) {
  std::chrono::nanoseconds first_wait;
  {
    std::shared_ptr<TokenBucket> copy1 = RouteBucket("gfrep-test-debt", 1000);
    (void)copy1->Reserve(300 * 1024);  // the burst (256 KiB) and more: debt
    first_wait = copy1->WouldWait(1);
  }  // the first copy ends; nobody holds the bucket
  std::shared_ptr<TokenBucket> copy2 = RouteBucket("gfrep-test-debt", 1000);
  EXPECT_GT(copy2->WouldWait(1), std::chrono::seconds(10)) << "the debt was forgotten";
  EXPECT_LE(copy2->WouldWait(1), first_wait + std::chrono::seconds(1));
}

TEST(TokenBucketTest, WouldWaitTakesNothing) {
  FakeClock clock;
  TokenBucket b(1000, 500, &clock);
  EXPECT_EQ(b.WouldWait(400), nanoseconds(0));
  EXPECT_EQ(b.WouldWait(1500), std::chrono::seconds(1));
  EXPECT_EQ(b.Reserve(500), nanoseconds(0));  // the whole burst was still there
  EXPECT_EQ(b.WouldWait(1000), std::chrono::seconds(1));
}

}  // namespace
}  // namespace gfrep::transfer::internal
