#pragma once

// Retry policy for replica copies, and which failures each caller retries. The catalog's
// FailTask requeues a task after `retry_after`; whoever fails the task (the site agent)
// computes it here: exponential backoff from `initial` by `multiplier`, capped at `max`, for
// attempts 1, 2, 3, ...
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

// Which failures are worth another try, by who tries (STYLE rule 8): each predicate names
// its codes and why. Codes not named are not retried by that caller (invalid arguments,
// permission problems, failed preconditions, ...).

// A replica copy, as the site agent reports it (Catalog::FailTask's `retryable`): transport
// trouble (kUnavailable, kDeadlineExceeded), a damaged copy (kDataLoss: the next attempt may
// read a good source), a full disk (kResourceExhausted: space may be freed), a source file not
// found (kNotFound: the source's rename may not be visible yet), the engine's or the catalog's
// own trouble (kInternal, kUnknown), a copy cancelled by a stopping agent (kCancelled). Not a
// changed generation (kAborted: a newer task copies the new one).
bool IsRetryableCopy(const absl::Status& status);

// A call whose answer may have been lost on the way: the service was not reached or the
// connection broke (kUnavailable), or no answer came in time (kDeadlineExceeded). A client
// tries again, or first looks whether the call took effect (gfreg's commit).
bool IsRetryableCall(const absl::Status& status);

// A daemon's call to the catalog (registration, heartbeats, task completions): a retryable
// call, or the catalog's storage failing this once (kInternal: a write the database refused;
// the same call succeeds once it recovers, and the daemon has no one to hand the error to).
bool IsRetryableDaemonCall(const absl::Status& status);

// A read that another replica may serve from the same offset: a retryable call, this
// replica's bytes damaged (kDataLoss), or its file replaced by another generation (kAborted).
bool AnotherSourceMayServe(const absl::Status& status);

}  // namespace gfrep::replica
