#include "replica/agent/straggler.h"

#include <gtest/gtest.h>

#include <map>
#include <utility>
#include <vector>

namespace gfrep::replica::agent {
namespace {

using Clock = StragglerWatch::Clock;
using std::chrono::milliseconds;
using std::chrono::seconds;

// Feeds `ticks` one-second ticks of copies moving at the given bytes per second.
std::vector<StragglerWatch::Verdict> Feed(StragglerWatch& w, Clock::time_point& now, int ticks,
                                         const std::vector<std::pair<std::uint64_t, std::uint64_t>>& rates,
                                         std::map<std::uint64_t, std::uint64_t>& received) {
  std::vector<StragglerWatch::Verdict> out;
  for (int i = 0; i < ticks; ++i) {
    now += seconds(1);
    std::vector<StragglerWatch::Copy> copies;
    for (const auto& [id, rate] : rates) {
      received[id] += rate;
      copies.push_back({id, received[id]});
    }
    for (StragglerWatch::Verdict& v : w.Tick(now, copies)) out.push_back(std::move(v));
  }
  return out;
}

TEST(StragglerWatchTest, ACopyFarBelowTheOthersOverAWholeWindowIsNamedOnce) {
  StragglerWatch w({seconds(10), 0.25});
  Clock::time_point now{};
  std::map<std::uint64_t, std::uint64_t> got;
  // 9 s: nobody has run a whole window yet.
  EXPECT_TRUE(Feed(w, now, 9, {{1, 1'000'000}, {2, 1'000'000}, {3, 100'000}}, got).empty());
  std::vector<StragglerWatch::Verdict> v =
      Feed(w, now, 3, {{1, 1'000'000}, {2, 1'000'000}, {3, 100'000}}, got);
  ASSERT_EQ(v.size(), 1u);
  EXPECT_EQ(v[0].id, 3u);
  EXPECT_NEAR(v[0].goodput_bps, 0.8e6, 0.1e6);
  EXPECT_NEAR(v[0].reference_bps, 8e6, 0.5e6);
  EXPECT_NE(v[0].reason.find("straggler: 0.80 Mbit/s over 10 s, under 25 % of the median of the 2 other copies"),
            std::string::npos)
      << v[0].reason;
  // Named once, however long it stays slow.
  EXPECT_TRUE(Feed(w, now, 5, {{1, 1'000'000}, {2, 1'000'000}, {3, 100'000}}, got).empty());
}

TEST(StragglerWatchTest, CopiesSlowAlikeAndACopyAtAThirdMakeNoStraggler) {
  StragglerWatch w({seconds(10), 0.25});
  Clock::time_point now{};
  std::map<std::uint64_t, std::uint64_t> got;
  // A whole agent held back: everyone at 50 kB/s. One at a third of the others: not under a
  // quarter.
  EXPECT_TRUE(Feed(w, now, 20, {{1, 50'000}, {2, 50'000}, {3, 50'000}, {4, 17'000}}, got).empty());
}

TEST(StragglerWatchTest, ALoneCopyIsNeverJudged) {
  // However slow: nothing to compare it with (a paced route's single copy is slow by design).
  StragglerWatch w({seconds(5), 0.25});
  Clock::time_point now{};
  std::map<std::uint64_t, std::uint64_t> got;
  EXPECT_TRUE(Feed(w, now, 30, {{7, 10}}, got).empty());
}

TEST(StragglerWatchTest, ACopyThatSlowedOnlyLatelyIsJudgedOnTheLastWindowAndAFinishedOneForgotten) {
  StragglerWatch w({seconds(5), 0.25});
  Clock::time_point now{};
  std::map<std::uint64_t, std::uint64_t> got;
  EXPECT_TRUE(Feed(w, now, 20, {{1, 1'000'000}, {2, 1'000'000}}, got).empty());
  // Copy 2 falls to 1 % of copy 1: named within a window and a tick or two.
  std::vector<StragglerWatch::Verdict> v = Feed(w, now, 7, {{1, 1'000'000}, {2, 10'000}}, got);
  ASSERT_EQ(v.size(), 1u);
  EXPECT_EQ(v[0].id, 2u);
  // A copy that ends is forgotten: the same id later starts a new track (no whole window yet).
  EXPECT_TRUE(Feed(w, now, 1, {{1, 1'000'000}}, got).empty());
  EXPECT_TRUE(Feed(w, now, 3, {{1, 1'000'000}, {2, 10'000}}, got).empty());
}

}  // namespace
}  // namespace gfrep::replica::agent
