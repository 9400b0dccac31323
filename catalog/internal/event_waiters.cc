#include "catalog/internal/event_waiters.h"

#include <utility>
#include <vector>

#include <fmt/format.h>

namespace gfrep::catalog::internal {

EventWaiters::EventWaiters(Catalog& catalog, Dispatch dispatch, EventWaitersOptions options)
    : catalog_(catalog), dispatch_(std::move(dispatch)), options_(options) {
  absl::StatusOr<std::uint64_t> last = catalog_.LastEventSeq();
  {
    absl::MutexLock l(&mu_);
    // Unknown (a read error): 0, so the first event read sets it.
    seen_ = last.ok() ? *last : 0;
  }
  follower_ = std::thread([this] { Follow(); });
}

EventWaiters::~EventWaiters() { Stop(); }

absl::Status EventWaiters::Wait(std::uint64_t after_seq,
                                std::chrono::steady_clock::time_point deadline,
                                const std::string& identity, Callback done) {
  {
    absl::MutexLock l(&mu_);
    if (stopping_) return absl::CancelledError("the catalog server is stopping");
    if (seen_ <= after_seq) {
      std::size_t& mine = per_identity_[identity];
      if (mine >= options_.max_per_identity) {
        return absl::ResourceExhaustedError(fmt::format(
            "{} long polls of the event log are waiting for {} already (the most one caller "
            "may hold); wait for one to return",
            mine, identity.empty() ? "this caller" : identity));
      }
      if (waiters_.size() >= options_.max_total) {
        return absl::ResourceExhaustedError(
            fmt::format("{} long polls are waiting already; try again shortly", waiters_.size()));
      }
      ++mine;
      waiters_.emplace(next_id_++, Waiter{after_seq, deadline, identity, std::move(done)});
      return absl::OkStatus();
    }
  }
  // Already behind: no wait.
  dispatch_([done = std::move(done)] { done(false); });
  return absl::OkStatus();
}

void EventWaiters::Stop() {
  std::map<std::uint64_t, Waiter> left;
  {
    absl::MutexLock l(&mu_);
    if (stopping_) return;
    stopping_ = true;
  }
  if (follower_.joinable()) follower_.join();
  {
    absl::MutexLock l(&mu_);
    left.swap(waiters_);
    per_identity_.clear();
  }
  for (auto& [id, w] : left) Fire(std::move(w), /*timed_out=*/true);
}

std::size_t EventWaiters::size() const {
  absl::MutexLock l(&mu_);
  return waiters_.size();
}

void EventWaiters::Follow() {
  while (true) {
    std::uint64_t seen = 0;
    {
      absl::MutexLock l(&mu_);
      if (stopping_) return;
      seen = seen_;
    }
    // One event read (cheap), returned as soon as one is appended; then the newest number,
    // so that a burst of events wakes everyone once.
    absl::StatusOr<std::vector<Event>> next = catalog_.ReadEvents(seen, 1, options_.tick);
    if (next.ok() && !next->empty()) {
      absl::StatusOr<std::uint64_t> last = catalog_.LastEventSeq();
      seen = last.ok() ? std::max(*last, next->back().seq) : next->back().seq;
    } else if (!next.ok()) {
      // The catalog's store is unreachable for now: waiters keep waiting until their
      // deadline; try again after a tick.
      absl::MutexLock l(&mu_);
      mu_.AwaitWithTimeout(absl::Condition(&stopping_), absl::FromChrono(options_.tick));
    }
    Release(seen, std::chrono::steady_clock::now());
  }
}

void EventWaiters::Release(std::uint64_t seen, std::chrono::steady_clock::time_point now) {
  std::vector<std::pair<Waiter, bool>> ready;
  {
    absl::MutexLock l(&mu_);
    if (seen > seen_) seen_ = seen;
    for (auto it = waiters_.begin(); it != waiters_.end();) {
      const bool behind = it->second.after_seq < seen_;
      if (!behind && it->second.deadline > now) {
        ++it;
        continue;
      }
      auto per = per_identity_.find(it->second.identity);
      if (per != per_identity_.end() && --per->second == 0) per_identity_.erase(per);
      ready.emplace_back(std::move(it->second), !behind);
      it = waiters_.erase(it);
    }
  }
  for (auto& [w, timed_out] : ready) Fire(std::move(w), timed_out);
}

void EventWaiters::Fire(Waiter w, bool timed_out) {
  dispatch_([done = std::move(w.done), timed_out] { done(timed_out); });
}

}  // namespace gfrep::catalog::internal
