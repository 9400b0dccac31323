#include "catalog/internal/rate_limiter.h"

#include <algorithm>
#include <cmath>

namespace gfrep::catalog::internal {

RateLimiter::RateLimiter(double rate, double burst, std::size_t max_keys)
    : rate_(rate), burst_(burst), max_keys_(max_keys) {
  overflow_.tokens = burst_;
}

void RateLimiter::Refill(Bucket& b, Clock::time_point now) const {
  if (now > b.last) {
    const double seconds = std::chrono::duration<double>(now - b.last).count();
    b.tokens = std::min(burst_, b.tokens + seconds * rate_);
    b.last = now;
  }
}

std::chrono::milliseconds RateLimiter::Acquire(std::string_view key, Clock::time_point now) {
  absl::MutexLock lock(&mu_);
  auto it = buckets_.find(std::string(key));
  if (it == buckets_.end() && buckets_.size() >= max_keys_) {
    // Forget callers whose buckets are full again: they would start full anyway.
    for (auto i = buckets_.begin(); i != buckets_.end();) {
      Refill(i->second, now);
      i = i->second.tokens >= burst_ ? buckets_.erase(i) : std::next(i);
    }
  }
  Bucket* b = nullptr;
  if (it != buckets_.end()) {
    b = &it->second;
  } else if (buckets_.size() < max_keys_) {
    b = &buckets_.emplace(std::string(key), Bucket{burst_, now}).first->second;
  } else {
    b = &overflow_;
  }
  Refill(*b, now);
  if (b->tokens >= 1) {
    b->tokens -= 1;
    return std::chrono::milliseconds(0);
  }
  const double wait_s = (1 - b->tokens) / rate_;
  return std::chrono::milliseconds(std::max<std::int64_t>(1, static_cast<std::int64_t>(std::ceil(wait_s * 1000))));
}

std::size_t RateLimiter::keys() const {
  absl::MutexLock lock(&mu_);
  return buckets_.size();
}

}  // namespace gfrep::catalog::internal
