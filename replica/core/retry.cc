#include "replica/core/retry.h"

#include <algorithm>
#include <cmath>

namespace gfrep::replica {

absl::Status Validate(const RetryOptions& options) {
  if (options.initial.count() <= 0) return absl::InvalidArgumentError("retry initial must be > 0");
  if (options.multiplier < 1.0 || options.multiplier > 100.0) {
    return absl::InvalidArgumentError("retry multiplier must be in [1, 100]");
  }
  if (options.max < options.initial) {
    return absl::InvalidArgumentError("retry max must be >= initial");
  }
  if (options.max_attempts < 1 || options.max_attempts > 1000) {
    return absl::InvalidArgumentError("max attempts must be 1..1000");
  }
  return absl::OkStatus();
}

std::chrono::milliseconds BackoffDelay(const RetryOptions& options, std::uint32_t attempts) {
  std::uint32_t exponent = attempts == 0 ? 0 : attempts - 1;
  double ms = static_cast<double>(options.initial.count()) *
              std::pow(options.multiplier, static_cast<double>(std::min<std::uint32_t>(exponent, 60)));
  double cap = static_cast<double>(options.max.count());
  return std::chrono::milliseconds(static_cast<std::int64_t>(std::min(ms, cap)));
}

bool IsRetryableCopy(const absl::Status& status) {
  switch (status.code()) {
    case absl::StatusCode::kUnavailable:
    case absl::StatusCode::kDeadlineExceeded:
    case absl::StatusCode::kDataLoss:
    case absl::StatusCode::kResourceExhausted:
    case absl::StatusCode::kNotFound:
    case absl::StatusCode::kInternal:
    case absl::StatusCode::kCancelled:
    case absl::StatusCode::kUnknown:
      return true;
    default:
      return false;
  }
}

bool IsRetryableCall(const absl::Status& status) {
  return absl::IsUnavailable(status) || absl::IsDeadlineExceeded(status);
}

bool IsRetryableDaemonCall(const absl::Status& status) {
  return IsRetryableCall(status) || absl::IsInternal(status);
}

bool AnotherSourceMayServe(const absl::Status& status) {
  return IsRetryableCall(status) || absl::IsDataLoss(status) || absl::IsAborted(status);
}

}  // namespace gfrep::replica
