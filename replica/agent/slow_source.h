#pragma once

// SlowSourceWatch: which source nodes give this agent's copies far less than they should
// (issue 39's straggler row: one source node's route throttled to a tenth mid-request).
// StragglerWatch judges one copy that ran a whole window; short copies (a few MiB at a
// fraction of a route) end before any window, each slow, and a throttled source would serve
// its share of a request's files at its slow pace. This watch judges the source from its
// copies together: over the window, the bytes they received per second of copy running (its
// goodput per copy; per copy, not in total, so that a source given fewer copies at once is
// not slow for it). A source is slow when that figure is under `fraction` of
//   - the median of the same figure of the other sources whose copies also ran the whole
//     window, or
//   - its own level, in all: the source's goodput in all (its copies together) over the
//     window under `fraction` of its best over half a window earlier (a source that slowed
//     mid-request: the planner often pairs each destination node with one source node, so
//     the agent has no other source to compare with), while the agent still runs at least
//     half as many copies from it as then (a request's tail, with fewer copies, moves less in
//     all and is not a slowdown; the tuner halving its copies after a throttle's loss is
//     still judged). In all, not per copy: more copies sharing what one copy had (a burst of
//     small files after a large file's last copy) lower each copy's share, not the total.
// A source idle (no copy running, no bytes) for half a window starts its window again (its
// level is kept until it has been idle for six windows). A judged source is judged again only
// after a new window.
// A route that other traffic comes to share by more than four to one looks the same as a
// slower source; giving the copies back then costs their partial files, and another replica
// where there is one.
//
// Thread safety: one thread at a time. Pure: the clock comes with each tick.

#include <chrono>
#include <cstdint>
#include <deque>
#include <map>
#include <string>
#include <vector>

namespace gfrep::replica::agent {

class SlowSourceWatch {
 public:
  using Clock = std::chrono::steady_clock;
  SlowSourceWatch(std::chrono::milliseconds window, double fraction)
      : window_(window), fraction_(fraction) {}

  // A source node as the agent sees it at a tick.
  struct Source {
    std::string name;
    int copies = 0;              // copies from it running now (their pulls begun)
    std::uint64_t received = 0;  // bytes its copies ever received (ended ones' included)
  };
  struct Verdict {
    std::string source;
    double per_copy_bps = 0;   // its copies' goodput per copy over the window
    double reference_bps = 0;  // the other sources' median of the same, or its best in all
    std::string reason;        // "source a-n2 slow: 4.1 Mbit/s per copy over 10 s, ..."
  };

  // The sources at `now` (one missing, or with no copy and no new bytes, is idle this tick);
  // the sources judged slow.
  std::vector<Verdict> Tick(Clock::time_point now, const std::vector<Source>& sources);

 private:
  struct Sample {
    Clock::time_point at;
    double bytes = 0;         // received by the source's copies since the tick before
    double copy_seconds = 0;  // its copies running x the time since the tick before
  };
  struct Track {
    Clock::time_point first;  // the tick before its first sample
    std::deque<Sample> samples;
    Clock::time_point last;   // the last tick with a copy from it that had begun
  };
  // A source's highest goodput in all over half a window, and its copies at once then.
  struct Level {
    double total_bps = 0;
    double copies = 0;
    Clock::time_point seen;  // the last tick with a copy from it
  };
  std::chrono::milliseconds window_;
  double fraction_;
  bool ticked_ = false;
  Clock::time_point last_;
  std::map<std::string, std::uint64_t> received_;  // per source, at the tick before
  std::map<std::string, Track> tracks_;
  std::map<std::string, Level> levels_;
};

}  // namespace gfrep::replica::agent
