#include "transfer/internal/tcp_stats.h"

#include <gtest/gtest.h>

#include "transfer/internal/engine.h"

namespace gfrep::transfer::internal {
namespace {

TEST(TcpStatsTest, DifferenceCountsOnlyWhatMovedSinceTheFirstSamples) {
  // Two connections of a warm session: earlier files had sent 1000 and 500 bytes.
  std::vector<TcpSample> before = {{1000, 10, 210'000, 200'000}, {500, 0, 205'000, 201'000}};
  std::vector<TcpSample> after = {{5000, 110, 300'000, 200'000}, {2500, 20, 250'000, 199'000}};
  TcpFigures f = Difference(before, after);
  EXPECT_EQ(f.bytes_sent, 6000u);
  EXPECT_EQ(f.bytes_retrans, 120u);
  EXPECT_DOUBLE_EQ(f.srtt_ms, 275.0);     // mean of the later smoothed RTTs
  EXPECT_DOUBLE_EQ(f.min_rtt_ms, 199.0);  // least of the later minimums
  EXPECT_DOUBLE_EQ(f.LossRatio(), 0.02);
  EXPECT_NEAR(f.RttInflation(), 275.0 / 199.0, 1e-9);
}

TEST(TcpStatsTest, UnknownFiguresStayZero) {
  TcpFigures f = Difference({}, {TcpSample{}, TcpSample{}});
  EXPECT_EQ(f.bytes_sent, 0u);
  EXPECT_EQ(f.srtt_ms, 0);
  EXPECT_EQ(f.min_rtt_ms, 0);
  EXPECT_EQ(f.LossRatio(), 0);
  EXPECT_EQ(f.RttInflation(), 0);
  EXPECT_EQ(ReadTcpSample(-1).bytes_sent, 0u);  // not a socket: nothing, no crash
}

TEST(TcpStatsTest, TheWireFormRoundTripsAndBadFieldsAreRefused) {
  TcpFigures f{123456, 789, 250.5, 200.25};
  Json msg{{"op", "finish"}, {"tcp", TcpFiguresToJson(f)}};
  absl::StatusOr<TcpFigures> back = TcpFiguresFromJson(msg);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->bytes_sent, f.bytes_sent);
  EXPECT_EQ(back->bytes_retrans, f.bytes_retrans);
  EXPECT_DOUBLE_EQ(back->srtt_ms, 250.5);
  EXPECT_DOUBLE_EQ(back->min_rtt_ms, 200.25);
  // A peer from before the field: zeros.
  absl::StatusOr<TcpFigures> none = TcpFiguresFromJson(Json{{"op", "finish"}});
  ASSERT_TRUE(none.ok());
  EXPECT_EQ(none->bytes_sent, 0u);
  // Wrong types, negative numbers, absurd RTTs: refused, naming the field.
  // (Parsed, as from the wire: non-negative numbers are unsigned there.)
  for (const char* bad : {R"({"tcp":"x"})",
                          R"({"tcp":{"sent":"1","retrans":0,"srtt_us":0,"min_rtt_us":0}})",
                          R"({"tcp":{"sent":-1,"retrans":0,"srtt_us":0,"min_rtt_us":0}})",
                          R"({"tcp":{"sent":1,"retrans":0,"srtt_us":61000000,"min_rtt_us":0}})",
                          R"({"tcp":{"sent":1}})"}) {
    absl::StatusOr<TcpFigures> r = TcpFiguresFromJson(Json::parse(bad));
    EXPECT_TRUE(absl::IsInvalidArgument(r.status())) << bad << " " << r.status();
  }
  // More re-sent than sent is capped, not trusted.
  absl::StatusOr<TcpFigures> odd = TcpFiguresFromJson(
      Json::parse(R"({"tcp":{"sent":10,"retrans":50,"srtt_us":0,"min_rtt_us":0}})"));
  ASSERT_TRUE(odd.ok()) << odd.status();
  EXPECT_EQ(odd->bytes_retrans, 10u);
}

}  // namespace
}  // namespace gfrep::transfer::internal
