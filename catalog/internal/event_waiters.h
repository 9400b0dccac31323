#pragma once

// EventWaiters: long polls on the catalog's event log without a thread per poll.
//
// A ReadEvents long poll or a Watch stream that finds no new event registers a waiter (the
// sequence number it has seen, a deadline, and a callback) and returns its thread. One
// follower thread waits on the catalog for the next event (Catalog::ReadEvents with a short
// wait, which the store wakes at once on a new event: RocksDB in-process, PostgreSQL by
// LISTEN/NOTIFY), then learns the newest sequence number and hands every waiter that is now
// behind it to `dispatch` (the server's worker pool), as it does for waiters whose deadline
// passed. So a thousand agents' long polls cost one thread and a map entry each, and a user
// holding many polls delays nobody. Each identity may hold at most `max_per_identity` waiters
// at once (kResourceExhausted beyond: a caller's own polls, not everyone's, are refused).
//
// Thread safety: every method may be called from any thread. Callbacks run on whatever
// thread `dispatch` uses, never under the lock, each exactly once (Stop fires every waiter
// left, with `timed_out` true).

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "catalog/catalog.h"

namespace gfrep::catalog::internal {

struct EventWaitersOptions {
  // Waiters one identity ("" for callers without one) may hold at once.
  std::size_t max_per_identity = 64;
  // Waiters held at once in all.
  std::size_t max_total = 100000;
  // How long the follower's each wait on the catalog lasts (also how late a deadline may
  // be noticed, and how long Stop may take).
  std::chrono::milliseconds tick{200};
};

class EventWaiters {
 public:
  // Called once per waiter: `timed_out` is false when an event newer than its sequence
  // number exists (read it without waiting), true at its deadline or at Stop.
  using Callback = std::function<void(bool timed_out)>;
  // Runs a callback on another thread (the server's pool); never inline.
  using Dispatch = std::function<void(std::function<void()>)>;

  // Starts the follower thread. The catalog and `dispatch` must outlive Stop().
  EventWaiters(Catalog& catalog, Dispatch dispatch, EventWaitersOptions options = {});
  ~EventWaiters();  // Stop()
  EventWaiters(const EventWaiters&) = delete;
  EventWaiters& operator=(const EventWaiters&) = delete;

  // Registers a waiter for an event after `after_seq` until `deadline`. If such an event is
  // already known, `done(false)` is dispatched at once. kResourceExhausted if `identity`
  // holds max_per_identity waiters (or max_total are held), kCancelled after Stop; then
  // `done` is never called.
  absl::Status Wait(std::uint64_t after_seq, std::chrono::steady_clock::time_point deadline,
                    const std::string& identity, Callback done);

  // Stops the follower and dispatches every waiter left with timed_out = true.
  void Stop();

  // Waiters held now (all identities).
  std::size_t size() const;

 private:
  struct Waiter {
    std::uint64_t after_seq;
    std::chrono::steady_clock::time_point deadline;
    std::string identity;
    Callback done;
  };

  void Follow();
  // Removes the waiters that are behind `seen` or past their deadline, and dispatches them.
  void Release(std::uint64_t seen, std::chrono::steady_clock::time_point now);
  void Fire(Waiter w, bool timed_out);

  // Constant after construction.
  Catalog& catalog_;
  const Dispatch dispatch_;
  const EventWaitersOptions options_;

  mutable absl::Mutex mu_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::uint64_t seen_ ABSL_GUARDED_BY(mu_) = 0;  // newest sequence number the follower knows
  std::uint64_t next_id_ ABSL_GUARDED_BY(mu_) = 0;
  std::map<std::uint64_t, Waiter> waiters_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, std::size_t> per_identity_ ABSL_GUARDED_BY(mu_);

  std::thread follower_;  // started last, joined by Stop
};

}  // namespace gfrep::catalog::internal
