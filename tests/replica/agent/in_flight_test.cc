#include "replica/agent/in_flight.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <vector>

namespace gfrep::replica::agent {
namespace {

// A route whose goodput grows with the copies in flight up to `knee` copies (each adds
// `per_copy` bytes/s, as latency-bound small files do) and then stays flat or falls.
struct Route {
  int knee;
  double per_copy = 1e6;
  double past_knee = 0;  // goodput change per copy beyond the knee (negative: worse)
  double operator()(int in_flight) const {
    const int below = std::min(in_flight, knee);
    return below * per_copy + std::max(0, in_flight - knee) * past_knee;
  }
};

// Runs `periods` periods with the limit held back every time (tasks always waiting).
int RunPeriods(InFlightLimit& l, const std::function<double(int)>& route, int periods) {
  for (int i = 0; i < periods; ++i) l.Update({route(l.limit()), true});
  return l.limit();
}

// The first period after a start holds session setup: it is not measured.
void Warmup(InFlightLimit& l) { l.Update({1, true}); }

TEST(InFlightLimitTest, ClimbsFastThenProbesGentlyAndLessOftenNearTheKnee) {
  InFlightOptions o;
  o.min = 1;
  o.max = 256;
  o.start = 16;
  InFlightLimit l(o);
  EXPECT_EQ(l.limit(), 16);
  // Warmup, a period to measure the level, then 16 -> 32 -> 64 -> 128 (each kept at once:
  // goodput grew with it; the next probe a period later, once the new level held) -> 256,
  // which gains nothing (the knee is at 85) and is undone after its judging period.
  const Route route{85};
  RunPeriods(l, route, 11);
  EXPECT_EQ(l.limit(), 128);
  EXPECT_NE(l.reason().find("back"), std::string::npos) << l.reason();
  // From now on probes go up by a quarter, and each failed one waits twice as long.
  std::vector<int> probes;
  for (int i = 0; i < 150; ++i) {
    l.Update({route(l.limit()), true});
    EXPECT_TRUE(l.limit() == 128 || l.limit() == 160) << l.limit();
    if (l.limit() == 160 && (probes.empty() || probes.back() != i - 1)) probes.push_back(i);
  }
  ASSERT_GE(probes.size(), 4u);
  for (std::size_t k = 2; k < probes.size(); ++k) {
    EXPECT_GE(probes[k] - probes[k - 1], probes[k - 1] - probes[k - 2]) << "probe " << k;
  }
  EXPECT_LE(probes.size(), 7u);  // 5, 10, 20, 40, 40 periods apart
}

TEST(InFlightLimitTest, AProbeThatLowersGoodputIsUndone) {
  InFlightOptions o;
  o.start = 8;
  o.max = 64;
  o.step = 1.5;
  InFlightLimit l(o);
  // Beyond 8 copies, each extra copy costs goodput (a bottleneck queue overflowing).
  Route r{8, 1e6, -0.5e6};
  Warmup(l);
  l.Update({r(l.limit()), true});  // the level at 8
  EXPECT_EQ(l.limit(), 8);
  l.Update({r(l.limit()), true});  // it holds: probe 8 -> 12
  EXPECT_EQ(l.limit(), 12);
  l.Update({r(l.limit()), true});  // settle: no gain showed at once
  EXPECT_EQ(l.limit(), 12);
  l.Update({r(l.limit()), true});  // judged: worse, back to 8
  EXPECT_EQ(l.limit(), 8);
  EXPECT_NE(l.reason().find("back"), std::string::npos);
  for (int i = 0; i < 30; ++i) {
    l.Update({r(l.limit()), true});
    EXPECT_LE(l.limit(), 10);  // a quarter more at most, now
  }
}

TEST(InFlightLimitTest, TheFirstPeriodAfterAStartIsNotAMeasurement) {
  // The first period's goodput is low (sessions being set up): a probe judged against it
  // would look like a gain whatever it did. The baseline is the second period.
  InFlightOptions o;
  o.start = 32;
  o.max = 256;
  InFlightLimit l(o);
  l.Update({1e6, true});  // setup
  EXPECT_EQ(l.limit(), 32);
  l.Update({100e6, true});  // measured: the level
  EXPECT_EQ(l.limit(), 32);
  l.Update({100e6, true});  // it holds: probe
  EXPECT_EQ(l.limit(), 64);
  l.Update({105e6, true});  // 5 %: not kept at once
  EXPECT_EQ(l.limit(), 64);
  l.Update({105e6, true});  // nor after settling
  EXPECT_EQ(l.limit(), 32);
  // A restart (new work) forgets it all and warms up again.
  l.Restart(200);
  EXPECT_EQ(l.limit(), 200);
  l.Update({1e6, true});
  EXPECT_EQ(l.limit(), 200);
  l.Update({50e6, true});
  l.Update({50e6, true});
  EXPECT_EQ(l.limit(), 256);  // climbing again (x2, capped)
}

TEST(InFlightLimitTest, NothingChangesWhileTheLimitHoldsNothingBack) {
  InFlightOptions o;
  o.start = 4;
  InFlightLimit l(o);
  for (int i = 0; i < 20; ++i) EXPECT_EQ(l.Update({1e6 * (i + 1), false}), 4);
}

TEST(InFlightLimitTest, StaysWithinItsBounds) {
  InFlightOptions o;
  o.min = 2;
  o.max = 10;
  o.start = 50;
  InFlightLimit l(o);
  EXPECT_EQ(l.limit(), 10);  // start clamped
  EXPECT_EQ(RunPeriods(l, Route{1000}, 30), 10);
  o.start = 0;
  InFlightLimit low(o);
  EXPECT_EQ(low.limit(), 2);
  low.Restart(-5);
  EXPECT_EQ(low.limit(), 2);
}

TEST(InFlightLimitTest, NoProbeGoesBeyondTheSamplesCeiling) {
  // Two nodes of a site, each probing to 512 copies of 64 KiB, overflowed the route; each
  // node's ceiling is what its part of the route holds.
  InFlightOptions o;
  o.max = 512;
  o.start = 100;
  InFlightLimit l(o);
  const Route route{1000};  // goodput would keep growing to 1,000 copies
  auto period = [&](int ceiling) {
    InFlightSample s{route(l.limit()), true};
    s.ceiling = ceiling;
    return l.Update(s);
  };
  int peak = 0;
  for (int i = 0; i < 40; ++i) peak = std::max(peak, period(256));
  EXPECT_EQ(peak, 256);  // 100 -> 200 -> 256, not 400
  EXPECT_EQ(l.limit(), 256);
  // A ceiling below the limit does not lower it (the congestion rules do, if bytes overflow).
  for (int i = 0; i < 10; ++i) EXPECT_EQ(period(150), 256);
  // A higher ceiling (smaller files now) lets the probes go on.
  for (int i = 0; i < 40; ++i) period(0);
  EXPECT_EQ(l.limit(), 512);
}

TEST(InFlightLimitTest, AGoodputCollapseAtTheSameLimitStepsDown) {
  InFlightOptions o;
  o.start = 32;
  o.max = 32;
  InFlightLimit l(o);
  Warmup(l);
  l.Update({32e6, true});  // at max: hold and watch
  l.Update({32e6, true});
  EXPECT_EQ(l.limit(), 32);
  l.Update({10e6, true});  // one bad period: files ending together, say
  EXPECT_EQ(l.limit(), 32);
  l.Update({32e6, true});
  l.Update({10e6, true});
  EXPECT_EQ(l.limit(), 32);
  l.Update({10e6, true});  // two in a row: the route got much worse (loss), fewer copies
  EXPECT_LT(l.limit(), 32);
  EXPECT_NE(l.reason().find("fell"), std::string::npos);
}

TEST(InFlightLimitTest, ADemandDropDuringAProbeEndsItWithoutJudging) {
  InFlightOptions o;
  o.start = 8;
  o.step = 1.5;
  InFlightLimit l(o);
  Warmup(l);
  l.Update({8e6, true});   // the level
  l.Update({8e6, true});   // probe 8 -> 12
  l.Update({1e6, false});  // the work ran out: no verdict, the limit stays
  EXPECT_EQ(l.limit(), 12);
  l.Update({12e6, true});  // the level at 12 (the one at 8 says nothing of it)
  EXPECT_EQ(l.limit(), 12);
  l.Update({12e6, true});  // a new probe from 12
  EXPECT_EQ(l.limit(), 18);
}

TEST(InFlightLimitTest, AGainThatShowsAtOnceIsKeptWithoutASettlingPeriod) {
  // Warm sessions and small files: more copies give more goodput in the very next period, so
  // the probe is kept there, and the next one follows as soon as that level holds: the limit
  // doubles every two periods (32 -> 256 in 6, not 9).
  InFlightOptions o;
  o.start = 32;
  o.max = 256;
  InFlightLimit l(o);
  const Route route{1000};
  Warmup(l);
  l.Update({route(l.limit()), true});  // the level
  for (int want : {64, 64, 128, 128, 256}) {
    l.Update({route(l.limit()), true});
    EXPECT_EQ(l.limit(), want);
  }
}

TEST(InFlightLimitTest, AProbeThatMakesACleanPathCongestedIsUndoneDespiteMoreGoodput) {
  // Goodput keeps growing with the copies, but beyond 16 copies the senders re-send 2 % of
  // their bytes (the bottleneck queue overflows): the probe to 32 is undone.
  InFlightOptions o;
  o.start = 8;
  o.max = 256;
  InFlightLimit l(o);
  auto sample = [](int in_flight) {
    return InFlightSample{in_flight * 1e6, true, in_flight > 16 ? 0.02 : 0.0001, 1.1};
  };
  Warmup(l);
  l.Update(sample(l.limit()));  // the level at 8
  l.Update(sample(l.limit()));  // 8 -> 16
  l.Update(sample(l.limit()));  // 16 helped at once: kept
  l.Update(sample(l.limit()));  // and held: 16 -> 32
  EXPECT_EQ(l.limit(), 32);
  l.Update(sample(l.limit()));  // congested at 32: back to 16
  EXPECT_EQ(l.limit(), 16);
  EXPECT_NE(l.reason().find("congestion"), std::string::npos) << l.reason();
  for (int i = 0; i < 40; ++i) {
    l.Update(sample(l.limit()));
    EXPECT_LE(l.limit(), 20);
  }
  // A standing queue (smoothed RTT twice the least) vetoes the same way.
  InFlightLimit q(o);
  auto queued = [](int in_flight) {
    return InFlightSample{in_flight * 1e6, true, 0, in_flight > 16 ? 2.0 : 1.05};
  };
  Warmup(q);
  for (int i = 0; i < 4; ++i) q.Update(queued(q.limit()));
  EXPECT_EQ(q.limit(), 32);
  q.Update(queued(q.limit()));
  EXPECT_EQ(q.limit(), 16);
  EXPECT_NE(q.reason().find("congestion"), std::string::npos) << q.reason();
}

TEST(InFlightLimitTest, OnAPathCongestedAlreadyAProbeIsJudgedByGoodputAlone) {
  // Loss that does not come from us (a lossy route): it vetoes nothing, goodput decides.
  InFlightOptions o;
  o.start = 8;
  o.max = 64;
  InFlightLimit l(o);
  Warmup(l);
  for (int i = 0; i < 6; ++i) l.Update({l.limit() * 1e6, true, 0.03, 1.0});
  EXPECT_EQ(l.limit(), 64);
}

TEST(InFlightLimitTest, AProbeWaitsUntilGoodputStopsRisingAtTheSameLimit) {
  // The copies' slow start on a 200 ms route: goodput climbs for several periods at the same
  // limit. A probe started then would take the ramp for its own gain and climb past what
  // the route holds; it waits until the goodput levels out (under 10 % more).
  InFlightOptions o;
  o.start = 8;
  o.max = 256;
  InFlightLimit l(o);
  Warmup(l);
  for (double mbyte : {10.0, 30.0, 60.0, 90.0, 100.0}) {
    l.Update({mbyte * 1e6, true});
    EXPECT_EQ(l.limit(), 8) << mbyte;
  }
  l.Update({105e6, true});  // 5 % over the period before: the level holds
  EXPECT_EQ(l.limit(), 16);
  EXPECT_NE(l.reason().find("probing"), std::string::npos) << l.reason();
}

TEST(InFlightLimitTest, NoProbeStartsWhileTheRouteShowsAStandingQueue) {
  // Smoothed RTT 1.3 times the least, nothing re-sent: the copies fill the bottleneck's
  // queue, so the route is full and more copies would only lengthen the queue. When the
  // queue drains (other traffic left), probing resumes.
  InFlightOptions o;
  o.start = 8;
  o.max = 64;
  InFlightLimit l(o);
  Warmup(l);
  for (int i = 0; i < 20; ++i) {
    l.Update({100e6, true, 0, 1.3, 200});  // 200 ms least, 260 smoothed
    EXPECT_EQ(l.limit(), 8) << i;
  }
  l.Update({100e6, true, 0, 1.05, 200});
  EXPECT_EQ(l.limit(), 16);
  // A period in which no copy ended (no figures) keeps the last verdict: still full.
  InFlightLimit kept(o);
  Warmup(kept);
  kept.Update({100e6, true, 0, 1.3, 200});
  kept.Update({100e6, true});
  kept.Update({100e6, true});
  EXPECT_EQ(kept.limit(), 8);
  kept.Update({100e6, true, 0, 1.05, 200});
  EXPECT_EQ(kept.limit(), 16);
  // Without any figures yet (no copy ended since the start) nothing stops a probe.
  InFlightLimit u(o);
  Warmup(u);
  u.Update({100e6, true});
  u.Update({100e6, true});
  EXPECT_EQ(u.limit(), 16);
  // Nor does a short route's: on loopback a delayed ACK alone makes a 30-us RTT 12 ms.
  InFlightLimit lo(o);
  Warmup(lo);
  lo.Update({100e6, true, 0, 400.0, 0.03});
  lo.Update({100e6, true, 0, 400.0, 0.03});
  EXPECT_EQ(lo.limit(), 16);
}

TEST(InFlightLimitTest, ABurstThatOverflowsTheRouteStepsDownUntilItFits) {
  // Started at 32 copies where the route holds 8: two periods in a row with 3 % re-sent and
  // a standing queue halve the limit, then (after two periods of grace: the copies started
  // at 32 still end then) again, until the path is clean; no probe while the queue stands.
  // A loss without a queue (a lossy route) steps nothing down, nor does a queue without
  // loss (a deep buffer, another's traffic).
  InFlightOptions o;
  o.start = 32;
  o.max = 256;
  InFlightLimit l(o);
  auto route = [](int in_flight) {
    return in_flight > 8 ? InFlightSample{100e6, true, 0.03, 1.8, 200}
                         : InFlightSample{100e6, true, 0, 1.25, 200};
  };
  Warmup(l);
  l.Update(route(l.limit()));
  EXPECT_EQ(l.limit(), 32);  // one congested period: copies ending together, maybe
  l.Update(route(l.limit()));
  EXPECT_EQ(l.limit(), 16);
  EXPECT_NE(l.reason().find("congestion at 32"), std::string::npos) << l.reason();
  for (int i = 0; i < 3; ++i) {  // two periods of grace, then the first congested one
    l.Update(route(l.limit()));
    EXPECT_EQ(l.limit(), 16) << i;
  }
  l.Update(route(l.limit()));
  EXPECT_EQ(l.limit(), 8);
  for (int i = 0; i < 60; ++i) {
    l.Update(route(l.limit()));
    EXPECT_EQ(l.limit(), 8) << i;
  }
  InFlightLimit lossy(o);
  Warmup(lossy);
  for (int i = 0; i < 10; ++i) lossy.Update({100e6, true, 0.03, 1.0, 200});
  EXPECT_GE(lossy.limit(), 32);
  InFlightLimit deep(o);
  Warmup(deep);
  for (int i = 0; i < 20; ++i) {
    deep.Update({100e6, true, 0, 1.8, 200});
    EXPECT_EQ(deep.limit(), 32) << i;
  }
}

}  // namespace
}  // namespace gfrep::replica::agent
