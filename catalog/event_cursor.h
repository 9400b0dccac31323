#pragma once

// EventCursor: follows a catalog's event log (EventView::ReadEvents) from a position. The
// first Read, Drain or Start takes the log's end as the position (events from now on), unless
// Seek set one; each Read or Drain moves the position past what it returned; an error leaves
// the position where it was, and Reset() makes the next call start at the log's end again
// (after trouble in which events may have been missed and the caller looks again by itself).
// What the planner, the repairer, the policy engine, the dashboard, the site agent, Replicate
// and gfrep each did by hand.
//
// Thread safety: one thread at a time. Blocking: one or two catalog calls per Read.

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "catalog/catalog.h"

namespace gfrep::catalog {

class EventCursor {
 public:
  static constexpr std::size_t kDefaultBatch = 10000;

  explicit EventCursor(EventView& catalog, std::size_t batch = kDefaultBatch)
      : catalog_(&catalog), batch_(batch) {}

  // Takes the log's end as the position if there is none yet.
  absl::Status Start() {
    if (started_) return absl::OkStatus();
    absl::StatusOr<std::uint64_t> last = catalog_->LastEventSeq();
    if (!last.ok()) return last.status();
    Seek(*last);
    return absl::OkStatus();
  }
  // Events after `seq` come next.
  void Seek(std::uint64_t seq) {
    after_ = seq;
    started_ = true;
  }
  // The next call starts at the log's end again.
  void Reset() { started_ = false; }
  bool started() const { return started_; }
  std::uint64_t after() const { return after_; }

  // The events after the position, at most one batch, waiting up to `wait` for the first.
  absl::StatusOr<std::vector<Event>> Read(std::chrono::milliseconds wait = std::chrono::milliseconds(0)) {
    if (absl::Status s = Start(); !s.ok()) return s;
    absl::StatusOr<std::vector<Event>> events = catalog_->ReadEvents(after_, batch_, wait);
    if (events.ok()) {
      for (const Event& e : *events) after_ = std::max(after_, e.seq);
    }
    return events;
  }

  // Every event after the position, `fn` for each, batch after batch until one is not full.
  absl::Status Drain(const std::function<void(const Event&)>& fn) {
    for (;;) {
      absl::StatusOr<std::vector<Event>> events = Read();
      if (!events.ok()) return events.status();
      for (const Event& e : *events) fn(e);
      if (events->size() < batch_) return absl::OkStatus();
    }
  }

 private:
  EventView* catalog_;
  std::size_t batch_;
  bool started_ = false;
  std::uint64_t after_ = 0;
};

}  // namespace gfrep::catalog
