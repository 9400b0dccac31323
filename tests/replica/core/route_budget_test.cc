// replica/core/route_budget.h: a destination node's part of its route, and the copies a
// burst of work starts with.

#include "replica/core/route_budget.h"

#include <gtest/gtest.h>

#include <vector>

namespace gfrep::replica {
namespace {

catalog::Task TaskOf(std::uint64_t size, std::uint32_t dst_share_ppm) {
  catalog::Task t;
  t.size = size;
  t.spec.dst_share_ppm = dst_share_ppm;
  return t;
}

TEST(RouteLoadTest, ADestinationNodesPartIsItsOpenTasksOverTheRoutes) {
  RouteLoad load;
  const RouteLoad::Key ab{"A", "B"};
  const RouteLoad::Key ac{"A", "C"};
  EXPECT_EQ(load.DstSharePpm(ab, "b1"), catalog::kWholeRoutePpm);  // nothing counted yet
  for (int i = 0; i < 3; ++i) load.Add(ab, "a1", "b1", 4);
  load.Add(ab, "a2", "b2", 4);
  load.Add(ac, "a1", "c1", 4);  // another route: not counted for A -> B
  EXPECT_EQ(load.DstSharePpm(ab, "b1"), 750'000u);
  EXPECT_EQ(load.DstSharePpm(ab, "b2"), 250'000u);
  EXPECT_EQ(load.DstSharePpm(ac, "c1"), catalog::kWholeRoutePpm);
  // A node with no task counted yet (its first is being planned) is taken as one task.
  EXPECT_EQ(load.DstSharePpm(ab, "b3"), 250'000u);
}

// The 200 ms / 1 Gbit/s test route: 1.3 BDP is 32.5 MB.
catalog::Route LongFatRoute() {
  catalog::Route r;
  r.src_site = "A";
  r.dst_site = "B";
  r.rtt_ms = 200;
  r.bandwidth_bps = 1'000'000'000;
  return r;
}

TEST(BurstStartTest, OneNodeStartsWith13BdpOfItsFiles) {
  const catalog::Route route = LongFatRoute();
  const std::vector<catalog::Task> files(200, TaskOf(4 << 20, catalog::kWholeRoutePpm));
  EXPECT_EQ(BurstStartCopies(&route, files, 0, 2, 64), 8);  // ceil(32.5 MB / 4 MiB)
  // Tasks made before the planner gave parts (0) have the whole route.
  const std::vector<catalog::Task> old(200, TaskOf(4 << 20, 0));
  EXPECT_EQ(BurstStartCopies(&route, old, 0, 2, 64), 8);
  // A part over the whole (a peer's bad value: the proto carries it as sent) is the whole.
  const std::vector<catalog::Task> over(200, TaskOf(4 << 20, 5'000'000));
  EXPECT_EQ(BurstStartCopies(&route, over, 0, 2, 64), 8);
}

TEST(BurstStartTest, TwoNodesOfASiteEachStartWithTheirPart) {
  // Before the parts, each of two nodes started 8 copies: 2.6 BDP on the route together.
  const catalog::Route route = LongFatRoute();
  const std::vector<catalog::Task> half(100, TaskOf(4 << 20, 500'000));
  EXPECT_EQ(BurstStartCopies(&route, half, 0, 2, 64), 4);
  const std::vector<catalog::Task> quarter(50, TaskOf(4 << 20, 250'000));
  EXPECT_EQ(BurstStartCopies(&route, quarter, 0, 2, 64), 2);
}

TEST(BurstStartTest, TheBoundsAndTheDefaultHold) {
  const catalog::Route route = LongFatRoute();
  const std::vector<catalog::Task> tiny(10, TaskOf(16 << 10, catalog::kWholeRoutePpm));
  EXPECT_EQ(BurstStartCopies(&route, tiny, 0, 2, 32), 32);  // at most max_copies
  const std::vector<catalog::Task> huge(4, TaskOf(1ull << 30, 100'000));
  EXPECT_EQ(BurstStartCopies(&route, huge, 0, 2, 32), 2);  // at least min_copies
  // No route known: the default bytes in flight, still times the part.
  const std::vector<catalog::Task> mib(64, TaskOf(1 << 20, 500'000));
  EXPECT_EQ(BurstStartCopies(nullptr, mib, 32 << 20, 1, 64), 16);
  // A route learnt from copies (observed RTT and peak) counts like a measured one.
  catalog::Route learnt;
  learnt.observed.rtt_ms = 200;
  learnt.observed.peak_bps = 1'000'000'000;
  const std::vector<catalog::Task> files(8, TaskOf(4 << 20, catalog::kWholeRoutePpm));
  EXPECT_EQ(BurstStartCopies(&learnt, files, 0, 2, 64), 8);
}

TEST(RouteShareCopiesTest, TheFilesMeanSizeAndTheNodesPart) {
  const catalog::Route route = LongFatRoute();
  // 32.5 MB in flight: 496 copies of 64 KiB for the whole route, 248 for half of it.
  EXPECT_EQ(RouteShareCopies(&route, 0, catalog::kWholeRoutePpm, 64 << 10, 2, 1024), 496);
  EXPECT_EQ(RouteShareCopies(&route, 0, 500'000, 64 << 10, 2, 1024), 248);
  EXPECT_EQ(RouteShareCopies(&route, 0, 0, 64 << 10, 2, 1024), 496);  // 0: the whole route
  // No route: the default bytes; the bounds hold; a mean of 0 is one byte.
  EXPECT_EQ(RouteShareCopies(nullptr, 32 << 20, 500'000, 64 << 10, 2, 1024), 256);
  EXPECT_EQ(RouteShareCopies(&route, 0, 0, 512 << 20, 2, 1024), 2);
  EXPECT_EQ(RouteShareCopies(&route, 0, 0, 0, 2, 1024), 1024);
}

}  // namespace
}  // namespace gfrep::replica
