#include "replica/core/retry.h"

#include <gtest/gtest.h>

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

TEST(IsRetryableTest, TransportAndDamageRetryConfigurationDoesNot) {
  EXPECT_TRUE(IsRetryable(absl::UnavailableError("refused")));
  EXPECT_TRUE(IsRetryable(absl::DeadlineExceededError("idle")));
  EXPECT_TRUE(IsRetryable(absl::DataLossError("checksum")));
  EXPECT_FALSE(IsRetryable(absl::InvalidArgumentError("bad")));
  EXPECT_FALSE(IsRetryable(absl::PermissionDeniedError("key")));
  EXPECT_FALSE(IsRetryable(absl::FailedPreconditionError("removed")));
  EXPECT_FALSE(IsRetryable(absl::AbortedError("generation changed")));
}

}  // namespace
}  // namespace gfrep::replica
