#pragma once

// How many copies a site agent runs at once, tuned from the goodput it measures (issue 9:
// "while goodput rises with more files in flight, add them"). FTS3's optimizer does this per
// link every few minutes; a destination agent does it every few seconds.
//
// A hill climb on one number, the limit L (between `min` and `max`, starting at `start`),
// shaped like TCP's own: a fast climb, then careful probes that back off.
// - Every period the agent reports a sample: the bytes its copies received (goodput),
//   whether the limit held copies back (tasks were ready while L copies ran), and how TCP
//   fared for the copies that ended (the senders' TCP_INFO: share of bytes re-sent, smoothed
//   over least RTT). A period in which the limit held nothing back says nothing about L, and
//   nothing changes. The first period with bytes after a (re)start is not a measurement
//   either: it holds the copies' session setup and slow start.
// - A probe starts only from a level: the goodput at L has stopped rising (under `gain`
//   above the period before at the same L), so that what the copies' slow start adds is not
//   taken for the probe's gain (on a 200 ms route the ramp lasts several periods), and only
//   while a long route (least RTT `full_min_rtt_ms` or more) shows no standing queue (the
//   senders' smoothed RTT under `full_rtt_inflation` times the least): with the bottleneck's
//   queue filling, the route is full and more copies only lengthen the queue until it
//   overflows, which costs a long route seconds of recovery. A short route probes anyway:
//   a probe is cheap there, and a delayed ACK alone multiplies a 50-us RTT.
// - Probe: L grows by `step` (x2) while no probe has failed since the start ("climbing"),
//   then by `fine_step` (x1.25), at least +1, at most `max`. The first period after a change
//   may already show the gain (warm sessions, small files): then the probe is kept at once.
//   Otherwise that period is taken as settling (new copies open sessions and leave slow
//   start), and the next one is compared with the goodput measured before the change.
// - Kept if goodput rose by at least `gain` (10 %), and the next probe follows once the new
//   level holds; else L goes back to where it was and holds there before the next probe:
//   `hold` periods after one failed probe, twice as long after each further one in a row
//   (at most `max_hold`), since every probe beyond the route's level costs its copies a
//   burst of loss. A probe that lowered goodput (more streams overflowed the bottleneck
//   queue, or the source's disks or CPU ran out) is undone the same way.
// - Congestion vetoes a probe: one that turned a clean path into a congested one (more than
//   `max_loss` of the bytes re-sent, or a smoothed RTT over `max_rtt_inflation` times the
//   least: a standing queue at the bottleneck) is undone even if goodput rose, because that
//   gain does not last (FTS3's optimizer backs off on errors the same way; TCP would lose
//   the windows of every copy at the next overflow).
// - While L holds, a goodput that falls below half of its level at the same L for two
//   periods in a row (loss on the route, a slower source) steps L down by `step`, so a
//   route that got worse is not kept at a level that only suited the better days. So does
//   a route congested at L for two periods in a row (more than `max_loss` re-sent with a
//   standing queue: L's bytes overflow the bottleneck, e.g. a burst started too high), not
//   counting the two periods with figures after L last changed (the copies started at the
//   old L still end then). The RTT figures come only with copies that end: a period without
//   any keeps the last verdict of "full".
// - A probe never goes beyond the sample's `ceiling`: what the agent's part of the route can
//   hold with the files being copied (the site agent works it out); a limit already above it
//   is not lowered for it (the congestion rules above do that when the bytes overflow).
//
// Thread safety: none; the site agent calls it from one thread.

#include <algorithm>
#include <chrono>
#include <string>

namespace gfrep::replica::agent {

struct InFlightOptions {
  int min = 1;
  int max = 64;
  int start = 16;      // clamped to [min, max]
  double step = 2;         // growth per probe while climbing (at least +1)
  double fine_step = 1.25; // growth per probe once a probe failed (at least +1)
  double gain = 1.10;      // a probe is kept when goodput grew by this factor
  int hold = 5;            // periods to wait after a failed probe...
  int max_hold = 40;       // ...doubling with each further failure in a row, up to this
  double max_loss = 0.01;          // re-sent share of bytes sent above which a path is congested
  double max_rtt_inflation = 1.5;  // smoothed / least RTT above which a path is congested
  double full_rtt_inflation = 1.2; // smoothed / least RTT from which a path is full (no probe)...
  double full_min_rtt_ms = 10;     // ...on a route whose least RTT is at least this
};

// One period's measurement.
struct InFlightSample {
  double goodput = 0;         // bytes received per second
  bool limited = false;       // the limit held copies back
  double loss = 0;            // re-sent / sent bytes of the copies that ended (0: unknown)
  double rtt_inflation = 0;   // their smoothed / least RTT (0: unknown)
  double min_rtt_ms = 0;      // the least of their least RTTs, ms (0: unknown)
  int ceiling = 0;            // no probe beyond this many copies (0: only `max` bounds them)
};

class InFlightLimit {
 public:
  explicit InFlightLimit(InFlightOptions options);

  // One period's measurement. Returns the limit for the next period.
  int Update(const InFlightSample& sample);

  // Starts the climb afresh from `start` (clamped), forgetting every measurement: for a new
  // burst of work after the agent was idle, whose files may want another level.
  void Restart(int start);

  int limit() const { return limit_; }
  // Why the last Update changed the limit ("" when it did not); for the agent's log.
  const std::string& reason() const { return reason_; }

 private:
  enum class Phase { kWarmup, kMeasure, kSettle, kJudge, kHold };
  int Max() const { return ceiling_ > 0 ? std::clamp(ceiling_, o_.min, o_.max) : o_.max; }
  int Grown() const;
  bool Congested(const InFlightSample& s) const;

  InFlightOptions o_;
  int limit_;
  int ceiling_ = 0;  // the last sample's
  Phase phase_ = Phase::kWarmup;
  bool climbing_ = true;  // no probe failed since the start
  int failures_ = 0;      // failed probes in a row
  int before_limit_ = 0;       // L before the probe being judged
  double before_goodput_ = 0;  // goodput measured at before_limit_
  bool before_congested_ = false;  // the path was congested at before_limit_
  double held_goodput_ = 0;    // goodput at L while holding, smoothed (0: not measured yet)
  int low_periods_ = 0;        // periods in a row below half of it
  double level_goodput_ = 0;   // goodput of the last measured period at L (0: none yet)
  int overfull_periods_ = 0;   // periods in a row with loss and a standing queue
  int overfull_grace_ = 0;     // periods with figures not counted after a change of L
  bool full_ = false;          // the last period with figures showed a standing queue
  int hold_left_ = 0;
  std::string reason_;
};

}  // namespace gfrep::replica::agent
