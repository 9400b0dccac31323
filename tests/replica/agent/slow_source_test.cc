#include "replica/agent/slow_source.h"

#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

namespace gfrep::replica::agent {
namespace {

using Clock = SlowSourceWatch::Clock;
using std::chrono::seconds;

// Each source runs `copies` at once, each moving `rate` bytes a second (short copies, as a
// burst of small files makes, are what the agent cannot judge one by one). Feeds `ticks`
// one-second ticks of the sources' copies and bytes received so far; the verdicts.
struct Source {
  std::string name;
  int copies;
  std::uint64_t rate;
};
class Feeder {
 public:
  explicit Feeder(SlowSourceWatch& w) : w_(w) {}
  std::vector<SlowSourceWatch::Verdict> Run(int ticks, const std::vector<Source>& sources) {
    std::vector<SlowSourceWatch::Verdict> out;
    for (int i = 0; i < ticks; ++i) {
      now_ += seconds(1);
      std::vector<SlowSourceWatch::Source> seen;
      for (const Source& s : sources) {
        received_[s.name] += static_cast<std::uint64_t>(s.copies) * s.rate;
        seen.push_back({s.name, s.copies, received_[s.name]});
      }
      for (SlowSourceWatch::Verdict& v : w_.Tick(now_, seen)) out.push_back(std::move(v));
    }
    return out;
  }

 private:
  SlowSourceWatch& w_;
  Clock::time_point now_{};
  std::map<std::string, std::uint64_t> received_;
};

TEST(SlowSourceWatchTest, ASourceWhoseShortCopiesAllCrawlIsNamedAfterAWindow) {
  // Four copies at once from each source; a-n2's move a tenth of a-n1's.
  SlowSourceWatch w(seconds(10), 0.25);
  Feeder f(w);
  const std::vector<Source> sources = {{"a-n1", 4, 10'000'000}, {"a-n2", 4, 1'000'000}};
  EXPECT_TRUE(f.Run(9, sources).empty()) << "judged before a whole window";
  std::vector<SlowSourceWatch::Verdict> v = f.Run(2, sources);
  ASSERT_EQ(v.size(), 1u);
  EXPECT_EQ(v[0].source, "a-n2");
  EXPECT_NEAR(v[0].per_copy_bps, 8e6, 1e6);
  EXPECT_NEAR(v[0].reference_bps, 80e6, 8e6);
  EXPECT_NE(v[0].reason.find("source a-n2 slow: "), std::string::npos) << v[0].reason;
  // Judged again only after a new window.
  EXPECT_TRUE(f.Run(9, sources).empty());
  EXPECT_EQ(f.Run(2, sources).size(), 1u);
}

TEST(SlowSourceWatchTest, FewerCopiesAtOnceIsNotSlowness) {
  // a-n2 runs one copy at once, a-n1 eight, each copy at the same rate: a-n2's total is an
  // eighth, its goodput per copy the same.
  SlowSourceWatch w(seconds(10), 0.25);
  Feeder f(w);
  EXPECT_TRUE(f.Run(30, {{"a-n1", 8, 5'000'000}, {"a-n2", 1, 5'000'000}}).empty());
}

TEST(SlowSourceWatchTest, ALoneSourceOrAWholeAgentHeldBackIsNotJudged) {
  SlowSourceWatch w(seconds(10), 0.25);
  Feeder f(w);
  EXPECT_TRUE(f.Run(30, {{"a-n1", 4, 100'000}}).empty()) << "a steady lone source";
  // Both slow alike (the agent's disk, its CPU): neither is under a quarter of the other.
  EXPECT_TRUE(f.Run(30, {{"a-n1", 4, 100'000}, {"a-n2", 4, 60'000}}).empty());
}

TEST(SlowSourceWatchTest, ATickWithNoCopyBegunIsAGapAndHalfAWindowStartsAgain) {
  SlowSourceWatch w(seconds(10), 0.25);
  Feeder f(w);
  const Source fast{"a-n1", 4, 10'000'000};
  const Source slow{"a-n2", 4, 1'000'000};
  // One tick at which a-n2 had no copy and received nothing: its window goes on.
  EXPECT_TRUE(f.Run(5, {fast, slow}).empty());
  EXPECT_TRUE(f.Run(1, {fast}).empty());
  EXPECT_TRUE(f.Run(4, {fast, slow}).empty());
  EXPECT_EQ(f.Run(1, {fast, slow}).size(), 1u) << "a one-tick gap started a-n2's window again";
  // Six ticks without (more than half of the 10-s window): a new window from its return.
  EXPECT_TRUE(f.Run(6, {fast}).empty());
  EXPECT_TRUE(f.Run(9, {fast, slow}).empty()) << "a-n2 judged on a window with a long gap";
  EXPECT_EQ(f.Run(2, {fast, slow}).size(), 1u);
}

TEST(SlowSourceWatchTest, AgainstTheMedianOfSeveralOthers) {
  // Three good sources and one at a twentieth of their median.
  SlowSourceWatch w(seconds(5), 0.25);
  Feeder f(w);
  std::vector<SlowSourceWatch::Verdict> v = f.Run(
      8, {{"n1", 2, 4'000'000}, {"n2", 2, 5'000'000}, {"n3", 2, 6'000'000},
          {"n4", 2, 250'000}});
  ASSERT_EQ(v.size(), 1u);
  EXPECT_EQ(v[0].source, "n4");
  EXPECT_NEAR(v[0].reference_bps, 40e6, 4e6);  // n2's, the median of n1, n2, n3
  EXPECT_NE(v[0].reason.find("the 3 other sources"), std::string::npos) << v[0].reason;
}

TEST(SlowSourceWatchTest, ALoneSourceThatSlowsToATenthMidRequestIsJudgedAgainstItsOwnLevel) {
  // The planner paired this agent with one source node; 15 s in, its route is throttled to a
  // tenth: a tenth in all with as many copies.
  SlowSourceWatch w(seconds(10), 0.25);
  Feeder f(w);
  EXPECT_TRUE(f.Run(15, {{"a-n2", 8, 10'000'000}}).empty());
  // The window's mean falls under a quarter of the level once 9 of its 10 s are slow.
  EXPECT_TRUE(f.Run(8, {{"a-n2", 8, 1'000'000}}).empty()) << "judged on a window still fast";
  std::vector<SlowSourceWatch::Verdict> v = f.Run(1, {{"a-n2", 8, 1'000'000}});
  ASSERT_EQ(v.size(), 1u);
  EXPECT_NEAR(v[0].reference_bps, 640e6, 1e6);
  EXPECT_NE(v[0].reason.find("under 25 % of its best 640.00 Mbit/s earlier, with 8.0 copies at "
                             "once now and 8.0 then"),
            std::string::npos)
      << v[0].reason;
  // Still slow after a new window, now with half the copies (the tuner's answer to the loss
  // and queue a throttle brings): judged again, the level kept.
  EXPECT_TRUE(f.Run(9, {{"a-n2", 4, 2'000'000}}).empty());
  EXPECT_EQ(f.Run(1, {{"a-n2", 4, 2'000'000}}).size(), 1u);
}

TEST(SlowSourceWatchTest, MoreCopiesForTheSameGoodputOrARequestsTailIsNotASlowdown) {
  SlowSourceWatch w(seconds(10), 0.25);
  Feeder f(w);
  // The tuner doubles the copies at once, twice, and the route gives no more: a quarter per
  // copy, not under it.
  EXPECT_TRUE(f.Run(15, {{"a-n1", 4, 10'000'000}}).empty());
  EXPECT_TRUE(f.Run(15, {{"a-n1", 8, 5'000'000}}).empty());
  EXPECT_TRUE(f.Run(15, {{"a-n1", 16, 2'500'000}}).empty());
  // The request's last files: two copies, each a little faster; then one, whatever its pace
  // (under half the four copies at the level: fewer copies, not a slower source).
  EXPECT_TRUE(f.Run(15, {{"a-n1", 2, 6'000'000}}).empty());
  EXPECT_TRUE(f.Run(30, {{"a-n1", 1, 100'000}}).empty());
}

TEST(SlowSourceWatchTest, ABurstOfSmallFilesAfterALargeFilesLastCopyIsNotASlowdown) {
  // One 512 MiB file's copy had the route to itself (640 Mbit/s, one copy), then 14 copies of
  // small files share it: a twelfth per copy, more in all (seen on lfn-1g-loss4: "source a-n1
  // slow: 56.41 Mbit/s per copy ..., under 25 % of its own 684.44", 13.5 copies against 1).
  SlowSourceWatch w(seconds(10), 0.25);
  Feeder f(w);
  EXPECT_TRUE(f.Run(15, {{"a-n1", 1, 80'000'000}}).empty());
  EXPECT_TRUE(f.Run(30, {{"a-n1", 14, 6'000'000}}).empty());
}

}  // namespace
}  // namespace gfrep::replica::agent
