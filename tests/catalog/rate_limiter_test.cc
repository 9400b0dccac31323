// The per-identity call rate of gfcatalogd (catalog/internal/rate_limiter.h), on a clock the
// test moves.
#include "catalog/internal/rate_limiter.h"

#include <gtest/gtest.h>

#include <string>

namespace gfrep::catalog::internal {
namespace {

using namespace std::chrono_literals;

TEST(RateLimiterTest, ABurstThenTheRateAndOthersAreNotSlowed) {
  RateLimiter limiter(10, 5);  // 10 calls a second, 5 at once
  const auto t0 = RateLimiter::Clock::now();
  for (int i = 0; i < 5; ++i) EXPECT_EQ(limiter.Acquire("user alice", t0), 0ms) << i;
  // The sixth at once must wait a tenth of a second; it takes nothing meanwhile.
  EXPECT_EQ(limiter.Acquire("user alice", t0), 100ms);
  EXPECT_EQ(limiter.Acquire("user alice", t0 + 50ms), 50ms);
  EXPECT_EQ(limiter.Acquire("user alice", t0 + 100ms), 0ms);
  EXPECT_GT(limiter.Acquire("user alice", t0 + 100ms), 0ms);
  // Another identity has its own bucket.
  for (int i = 0; i < 5; ++i) EXPECT_EQ(limiter.Acquire("admin root", t0 + 100ms), 0ms) << i;
  // After a long pause the bucket holds the burst, not more.
  for (int i = 0; i < 5; ++i) EXPECT_EQ(limiter.Acquire("user alice", t0 + 1h), 0ms) << i;
  EXPECT_GT(limiter.Acquire("user alice", t0 + 1h), 0ms);
}

TEST(RateLimiterTest, ManyCallersKeepMemoryBoundedAndIdleOnesAreForgotten) {
  RateLimiter limiter(1, 1, /*max_keys=*/100);
  const auto t0 = RateLimiter::Clock::now();
  for (int i = 0; i < 100; ++i) EXPECT_EQ(limiter.Acquire("user u" + std::to_string(i), t0), 0ms);
  EXPECT_EQ(limiter.keys(), 100u);
  // Full: newcomers share one overflow bucket (one call, then a wait) and the map stays put.
  EXPECT_EQ(limiter.Acquire("user new1", t0), 0ms);
  EXPECT_GT(limiter.Acquire("user new2", t0), 0ms);
  EXPECT_EQ(limiter.keys(), 100u);
  // Two seconds later every bucket has refilled: the idle callers are forgotten and the
  // newcomer gets its own.
  EXPECT_EQ(limiter.Acquire("user new3", t0 + 2s), 0ms);
  EXPECT_EQ(limiter.keys(), 1u);
}

}  // namespace
}  // namespace gfrep::catalog::internal
