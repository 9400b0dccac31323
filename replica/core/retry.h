#pragma once

// Retry policy for replica copies. The catalog's FailTask requeues a task after
// `retry_after`; whoever fails the task (the site agent) computes it here: exponential
// backoff from `initial` by `multiplier`, capped at `max`, for attempts 1, 2, 3, ...
//
// Thread safety: pure functions.

#include <chrono>
#include <cstdint>

#include "absl/status/status.h"

namespace gfrep::replica {

struct RetryOptions {
  // Delay after the first failed attempt.
  std::chrono::milliseconds initial{1000};
  // Growth per further attempt.
  double multiplier = 2.0;
  // Upper bound of one delay.
  std::chrono::milliseconds max{60000};
  // Attempts per task before it fails for good (TaskSpec::max_attempts).
  std::uint32_t max_attempts = 5;
};

absl::Status Validate(const RetryOptions& options);

// Delay before the next attempt after `attempts` failed ones (attempts >= 1).
std::chrono::milliseconds BackoffDelay(const RetryOptions& options, std::uint32_t attempts);

// Whether a failed copy is worth another attempt (STYLE rule 8): transport trouble,
// timeouts, a damaged copy (kDataLoss), a full disk, a source file not (yet) found.
// Invalid arguments, permission problems and failed preconditions are not.
bool IsRetryable(const absl::Status& status);

}  // namespace gfrep::replica
