#pragma once

// StragglerWatch: which running copies move far slower than they should (issue 39, "a slow
// copy is never re-planned"). Every tick the agent gives it each running copy's received
// bytes. A copy that has run a whole `window` is a straggler when its goodput over that window
// is under `fraction` of the median goodput, over the same window, of the agent's other copies
// that ran all of it. A copy with no such neighbour is not judged: what a route "should" give
// one copy is not known well enough (its measured bandwidth is not what a paced or shared
// copy gets; a lone copy judged against it was given back again and again). A whole agent
// held back (its disk, its CPU, a congested route) slows every copy alike, and so makes no
// straggler.
//
// Thread safety: one thread at a time. Pure: the clock comes with each tick.

#include <chrono>
#include <cstdint>
#include <deque>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace gfrep::replica::agent {

struct StragglerOptions {
  std::chrono::milliseconds window{30000};
  double fraction = 0.25;
};

class StragglerWatch {
 public:
  using Clock = std::chrono::steady_clock;
  explicit StragglerWatch(StragglerOptions options) : options_(options) {}

  struct Copy {
    std::uint64_t id = 0;        // the task's
    std::uint64_t received = 0;  // bytes received so far
  };
  struct Verdict {
    std::uint64_t id = 0;
    double goodput_bps = 0;    // over the window
    double reference_bps = 0;  // what it was judged against
    std::string reason;        // "straggler: 2.1 Mbit/s over 30 s, under a quarter of ..."
  };

  // The copies running at `now` (those missing are forgotten); the stragglers among them.
  // A copy is judged once: it is forgotten after its verdict.
  std::vector<Verdict> Tick(Clock::time_point now, const std::vector<Copy>& copies);

 private:
  struct Track {
    Clock::time_point first;
    // (time, received), the oldest at or before now - window once the copy is that old.
    std::deque<std::pair<Clock::time_point, std::uint64_t>> samples;
    bool judged = false;
  };
  StragglerOptions options_;
  std::map<std::uint64_t, Track> tracks_;
};

}  // namespace gfrep::replica::agent
