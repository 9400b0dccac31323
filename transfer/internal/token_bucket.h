#pragma once

// TokenBucket: an aggregate rate limit in bytes/s with a burst allowance, shared by every
// stream of every transfer on one route (see RouteBucket). Reservation style: a stream
// asks for `bytes` and is told how long to wait before sending them; the debt is shared,
// so N streams together never exceed the rate. The clock is injected for tests.
//
// Thread safety: all methods are thread-safe (one mutex).

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace gfrep::transfer::internal {

class Clock {
 public:
  virtual ~Clock() = default;
  virtual std::chrono::steady_clock::time_point Now() = 0;
};

// The real steady clock (a process-wide instance).
Clock* SteadyClock();

class TokenBucket {
 public:
  // `rate` bytes per second (> 0); up to `burst` bytes may go at once after idling.
  TokenBucket(double rate, double burst, Clock* clock);

  // Takes `bytes` tokens and returns how long the caller must wait before sending them
  // (zero when tokens were available).
  std::chrono::nanoseconds Reserve(std::uint64_t bytes);
  // How long a Reserve(bytes) made now would wait; takes nothing.
  std::chrono::nanoseconds WouldWait(std::uint64_t bytes) const;
  void SetRate(double rate);
  double rate() const;

 private:
  // Tokens now (negative: debt), from the stored count and the time since `last_`.
  double TokensAt(std::chrono::steady_clock::time_point now) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  mutable absl::Mutex mu_;
  double rate_ ABSL_GUARDED_BY(mu_);
  double burst_ ABSL_GUARDED_BY(mu_);
  double tokens_ ABSL_GUARDED_BY(mu_);  // negative = debt
  std::chrono::steady_clock::time_point last_ ABSL_GUARDED_BY(mu_);
  Clock* clock_;
};

// The process-wide bucket of route `name` at `rate_bytes` bytes/s (created on first use;
// a later call with another rate updates it). A bucket lives as long as the process, with
// its tokens and debt: a route's copies that come one after another (many small files)
// share one allowance instead of each starting with a fresh burst.
std::shared_ptr<TokenBucket> RouteBucket(const std::string& name, double rate_bytes);

}  // namespace gfrep::transfer::internal
