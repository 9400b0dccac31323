#pragma once

// How many copies a site agent runs at once, tuned from the goodput it measures (issue 9:
// "while goodput rises with more files in flight, add them"). FTS3's optimizer does this per
// link every few minutes; a destination agent does it every few seconds.
//
// A hill climb on one number, the limit L (between `min` and `max`, starting at `start`):
// - Every period the agent reports the bytes its copies received (goodput) and whether the
//   limit held copies back (tasks were ready while L copies ran). A period in which it did
//   not says nothing about L, and nothing changes.
// - Probe: L grows by `step` (x2, at least +1, at most `max`). The period right after a
//   change is skipped (new copies open sessions and leave slow start then), the next one is
//   compared with the goodput measured before the change.
// - Kept if goodput rose by at least `gain` (10 %), and the next probe follows; else L goes
//   back to where it was, and stays there for `hold` periods before the next probe. A probe
//   that lowered goodput by more than `gain` (more streams overflowed the bottleneck queue,
//   or the source's disks or CPU ran out) is undone the same way.
// - While L holds, a goodput that falls by more than half at the same L (loss on the route,
//   a slower source) steps L down by the same factor, so a route that got worse is not
//   kept at a level that only suited the better days; the climb then starts again.
//
// Thread safety: none; the site agent calls it from one thread.

#include <chrono>
#include <string>

namespace gfrep::replica {

struct InFlightOptions {
  int min = 1;
  int max = 64;
  int start = 16;      // clamped to [min, max]
  double step = 2;     // growth per probe (at least +1)
  double gain = 1.10;  // a probe is kept when goodput grew by this factor
  int hold = 5;        // periods to wait after a failed probe
};

class InFlightLimit {
 public:
  explicit InFlightLimit(InFlightOptions options);

  // One period's measurement: bytes received per second, and whether the limit held copies
  // back. Returns the limit for the next period.
  int Update(double goodput, bool limited);

  int limit() const { return limit_; }
  // Why the last Update changed the limit ("" when it did not); for the agent's log.
  const std::string& reason() const { return reason_; }

 private:
  enum class Phase { kMeasure, kSettle, kJudge, kHold };
  int Grown() const;

  InFlightOptions o_;
  int limit_;
  Phase phase_ = Phase::kMeasure;
  int before_limit_ = 0;       // L before the probe being judged
  double before_goodput_ = 0;  // goodput measured at before_limit_
  double held_goodput_ = 0;    // goodput at L while holding (0: not measured yet)
  int hold_left_ = 0;
  std::string reason_;
};

}  // namespace gfrep::replica
