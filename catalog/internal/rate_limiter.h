#pragma once

// Calls per second per caller (gfcatalogd --max-calls-per-identity): one token bucket per key
// (an identity), `rate` tokens a second up to `burst`. A caller over its rate is told how long
// to wait; others are not slowed. Memory is bounded: beyond `max_keys` callers, buckets that
// have refilled (idle callers) are dropped, and if none has, the new caller shares one
// overflow bucket. Thread-safe.

#include <chrono>
#include <cstddef>
#include <string>
#include <string_view>
#include <unordered_map>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace gfrep::catalog::internal {

class RateLimiter {
 public:
  using Clock = std::chrono::steady_clock;
  // REQUIRES: rate > 0, burst >= 1.
  RateLimiter(double rate, double burst, std::size_t max_keys = 10000);

  // Zero if `key` may make a call now (and takes a token), else how long until it may.
  std::chrono::milliseconds Acquire(std::string_view key, Clock::time_point now = Clock::now());

  std::size_t keys() const;

 private:
  struct Bucket {
    double tokens = 0;
    Clock::time_point last{};
  };
  void Refill(Bucket& b, Clock::time_point now) const;

  const double rate_;
  const double burst_;
  const std::size_t max_keys_;
  mutable absl::Mutex mu_;
  std::unordered_map<std::string, Bucket> buckets_ ABSL_GUARDED_BY(mu_);
  Bucket overflow_ ABSL_GUARDED_BY(mu_);
};

}  // namespace gfrep::catalog::internal
