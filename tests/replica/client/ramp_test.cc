#include "replica/client/ramp.h"

#include <gtest/gtest.h>

namespace gfrep::replica::client {
namespace {

// 100 ms samples of a transfer that ramps up linearly for 2 s to 1 Gbit/s, then holds it.
std::vector<RampSample> Ramping(double seconds) {
  std::vector<RampSample> out;
  double bytes = 0;
  for (int i = 1; i <= static_cast<int>(seconds * 10); ++i) {
    const double t = i / 10.0;
    const double bps = 1e9 * std::min(1.0, t / 2.0);
    bytes += bps / 8 / 10;
    out.push_back({t, static_cast<std::uint64_t>(bytes)});
  }
  return out;
}

TEST(RampTest, TheTimeToNinetyPercentOfTheReferenceIsWhenTheWindowFirstReachesIt) {
  const Ramp r = MeasureRamp(Ramping(6), 1e9);
  ASSERT_TRUE(r.seconds_to_90pct.has_value());
  // The 1-s window averages t-1..t: its mean rate is 1e9 * (t - 0.5) / 2 until t = 2, and
  // reaches 0.9e9 where (t-1..t) averages 0.9: t = 2.3 or so (the ramp ends at 2 s).
  EXPECT_GT(*r.seconds_to_90pct, 2.0);
  EXPECT_LT(*r.seconds_to_90pct, 2.6);
  EXPECT_NEAR(r.peak_bps, 1e9, 1e7);
  ASSERT_EQ(r.series_bps.size(), 12u);  // 6 s in 0.5-s bins
  EXPECT_LT(r.series_bps[0], 0.3e9);
  EXPECT_NEAR(r.series_bps.back(), 1e9, 1e7);
}

TEST(RampTest, AReferenceNeverReachedGivesNoTimeAndNoReferenceUsesThePeak) {
  EXPECT_FALSE(MeasureRamp(Ramping(6), 2e9).seconds_to_90pct.has_value());
  const Ramp own = MeasureRamp(Ramping(6), 0);
  ASSERT_TRUE(own.seconds_to_90pct.has_value());
  EXPECT_LT(*own.seconds_to_90pct, 2.6);
  EXPECT_TRUE(MeasureRamp({}, 1e9).series_bps.empty());
}

TEST(RampTest, ReceivedBytesThatDropForAMomentDoNotMakeANegativeRate) {
  // A finished copy left the in-flight count before the done count had it.
  std::vector<RampSample> s = {{0.5, 1000}, {1.0, 125'000'000}, {1.5, 60'000'000}, {2.0, 250'000'000}};
  const Ramp r = MeasureRamp(s, 1e9);
  for (double bps : r.series_bps) EXPECT_GE(bps, 0);
  EXPECT_GE(r.peak_bps, 0.9e9);
}

}  // namespace
}  // namespace gfrep::replica::client
