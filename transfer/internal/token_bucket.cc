#include "transfer/internal/token_bucket.h"

#include <algorithm>
#include <map>

namespace gfrep::transfer::internal {

namespace {
class RealClock : public Clock {
 public:
  std::chrono::steady_clock::time_point Now() override { return std::chrono::steady_clock::now(); }
};
}  // namespace

Clock* SteadyClock() {
  static RealClock clock;
  return &clock;
}

TokenBucket::TokenBucket(double rate, double burst, Clock* clock)
    : rate_(rate), burst_(burst), tokens_(burst), last_(clock->Now()), clock_(clock) {}

double TokenBucket::TokensAt(std::chrono::steady_clock::time_point now) const {
  const double elapsed = std::chrono::duration<double>(now - last_).count();
  return elapsed > 0 ? std::min(burst_, tokens_ + elapsed * rate_) : tokens_;
}

std::chrono::nanoseconds TokenBucket::WouldWait(std::uint64_t bytes) const {
  absl::MutexLock lock(&mu_);
  const double after = TokensAt(clock_->Now()) - static_cast<double>(bytes);
  if (after >= 0) return std::chrono::nanoseconds(0);
  return std::chrono::nanoseconds(static_cast<std::int64_t>(-after / rate_ * 1e9));
}

std::chrono::nanoseconds TokenBucket::Reserve(std::uint64_t bytes) {
  absl::MutexLock lock(&mu_);
  auto now = clock_->Now();
  double elapsed = std::chrono::duration<double>(now - last_).count();
  if (elapsed > 0) {
    tokens_ = std::min(burst_, tokens_ + elapsed * rate_);
    last_ = now;
  }
  tokens_ -= static_cast<double>(bytes);
  if (tokens_ >= 0) return std::chrono::nanoseconds(0);
  return std::chrono::nanoseconds(static_cast<std::int64_t>(-tokens_ / rate_ * 1e9));
}

void TokenBucket::SetRate(double rate) {
  absl::MutexLock lock(&mu_);
  rate_ = rate;
}

double TokenBucket::rate() const {
  absl::MutexLock lock(&mu_);
  return rate_;
}

std::shared_ptr<TokenBucket> RouteBucket(const std::string& name, double rate_bytes) {
  static absl::Mutex mu(absl::kConstInit);
  // Kept for the process's life (a few per route): a bucket that died with its last copy
  // forgot its debt and came back with a full burst, so many short copies one after another
  // went faster than the route's rate.
  static std::map<std::string, std::shared_ptr<TokenBucket>> buckets;
  absl::MutexLock lock(&mu);
  std::shared_ptr<TokenBucket> b = buckets[name];
  if (b) {
    if (b->rate() != rate_bytes) b->SetRate(rate_bytes);
    return b;
  }
  // Burst: 50 ms worth of bytes, at least 256 KiB, so pacing stays smooth.
  b = std::make_shared<TokenBucket>(rate_bytes, std::max(rate_bytes * 0.05, 256.0 * 1024),
                                    SteadyClock());
  buckets[name] = b;
  return b;
}

}  // namespace gfrep::transfer::internal
