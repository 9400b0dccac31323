#include "replica/core/retry.h"

#include <gtest/gtest.h>

#include <set>

namespace gfrep::replica {
namespace {

TEST(BackoffDelayTest, GrowsExponentiallyUpToTheCap) {
  RetryOptions o;
  o.initial = std::chrono::milliseconds(100);
  o.multiplier = 2;
  o.max = std::chrono::milliseconds(1000);
  EXPECT_EQ(BackoffDelay(o, 1).count(), 100);
  EXPECT_EQ(BackoffDelay(o, 2).count(), 200);
  EXPECT_EQ(BackoffDelay(o, 4).count(), 800);
  EXPECT_EQ(BackoffDelay(o, 5).count(), 1000);
  EXPECT_EQ(BackoffDelay(o, 1000).count(), 1000);
}

TEST(RetryOptionsTest, ValidateRejectsNonsense) {
  RetryOptions o;
  EXPECT_TRUE(Validate(o).ok());
  o.multiplier = 0.5;
  EXPECT_FALSE(Validate(o).ok());
  o = RetryOptions{};
  o.max = std::chrono::milliseconds(1);
  EXPECT_FALSE(Validate(o).ok());
  o = RetryOptions{};
  o.max_attempts = 0;
  EXPECT_FALSE(Validate(o).ok());
}

// Each predicate against every status code: the codes it retries are exactly its list.
TEST(RetryPredicatesTest, EachRetriesExactlyTheCodesItNames) {
  using C = absl::StatusCode;
  const std::set<C> copy = {C::kUnavailable,       C::kDeadlineExceeded, C::kDataLoss,
                            C::kResourceExhausted, C::kNotFound,         C::kInternal,
                            C::kCancelled,         C::kUnknown};
  const std::set<C> call = {C::kUnavailable, C::kDeadlineExceeded};
  const std::set<C> daemon_call = {C::kUnavailable, C::kDeadlineExceeded, C::kInternal};
  const std::set<C> another_source = {C::kUnavailable, C::kDeadlineExceeded, C::kDataLoss,
                                      C::kAborted};
  for (int code = 1; code <= 16; ++code) {
    const absl::Status s(static_cast<C>(code), "x");
    SCOPED_TRACE(s.ToString());
    EXPECT_EQ(IsRetryableCopy(s), copy.count(s.code()) == 1);
    EXPECT_EQ(IsRetryableCall(s), call.count(s.code()) == 1);
    EXPECT_EQ(IsRetryableDaemonCall(s), daemon_call.count(s.code()) == 1);
    EXPECT_EQ(AnotherSourceMayServe(s), another_source.count(s.code()) == 1);
  }
  // OK is no failure: nothing retries it.
  EXPECT_FALSE(IsRetryableCopy(absl::OkStatus()));
  EXPECT_FALSE(IsRetryableCall(absl::OkStatus()));
  EXPECT_FALSE(AnotherSourceMayServe(absl::OkStatus()));
}

}  // namespace
}  // namespace gfrep::replica
