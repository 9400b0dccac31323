#include "replica/web/telemetry.h"

#include <gtest/gtest.h>

namespace gfrep::replica::web {
namespace {

constexpr std::int64_t kMs = 1'000'000;

catalog::TelemetryBatch Batch(std::int64_t sent_ms, std::vector<catalog::TelemetryCopy> copies,
                              std::vector<catalog::TelemetryPoint> points) {
  catalog::TelemetryBatch b;
  b.node = "sdsc1";
  b.site = "sdsc";
  b.sent_ns = sent_ms * kMs;
  b.copies = std::move(copies);
  b.points = std::move(points);
  return b;
}

catalog::TelemetryCopy CopyOf(std::uint64_t task, std::uint64_t request, const std::string& src_node,
                              const std::string& src_site, std::uint64_t received) {
  return {task, request, src_node, src_site, 1000, 4, received};
}

class TelemetryHubTest : public ::testing::Test {
 protected:
  TelemetryHub Make() {
    TelemetryHubOptions o;
    o.clock = [this] { return now_ms_ * kMs; };
    return TelemetryHub(o);
  }
  std::int64_t now_ms_ = 1'000'000'000'000;  // a multiple of 100 ms
};

TEST_F(TelemetryHubTest, PointsLandInTheirBinsPerRouteAndPerNodePair) {
  TelemetryHub hub = Make();
  // Two copies from kek (two nodes) and one from tsukuba, sampled at +100 and +200 ms, sent
  // (and received: same clock) at +200 ms.
  const std::int64_t t0 = now_ms_;
  now_ms_ += 200;
  ASSERT_TRUE(hub.Add(Batch(now_ms_,
                            {CopyOf(1, 7, "kek1", "kek", 300), CopyOf(2, 7, "kek2", "kek", 30),
                             CopyOf(3, 8, "tsukuba1", "tsukuba", 5)},
                            {{(t0 + 100) * kMs, {100, 10, 0}, {}}, {(t0 + 200) * kMs, {200, 20, 5}, {}}}))
                  .ok());
  // Nothing is complete before `settle` (400 ms) has passed after a bin's end.
  EXPECT_TRUE(hub.Since(t0).series.empty());
  now_ms_ += 400;
  TelemetryBins bins = hub.Since(now_ms_ - 1000);
  EXPECT_EQ(bins.end_ms, now_ms_ - 400);
  ASSERT_EQ(bins.series.count("route:kek->sdsc"), 1u);
  const std::vector<std::uint64_t>& kek = bins.series["route:kek->sdsc"];
  // The last two bins are the samples (ending at +100 and +200 ms).
  ASSERT_GE(kek.size(), 2u);
  EXPECT_EQ(kek[kek.size() - 2], 110u);
  EXPECT_EQ(kek[kek.size() - 1], 220u);
  EXPECT_EQ(bins.series["route:tsukuba->sdsc"].back(), 5u);
  EXPECT_EQ(bins.series["pair:kek1->sdsc1"].back(), 200u);
  EXPECT_EQ(bins.series["pair:kek2->sdsc1"].back(), 20u);

  TelemetryNow now = hub.Now();
  EXPECT_EQ(now.route_bytes_total["kek->sdsc"], 330u);
  EXPECT_EQ(now.bytes_total, 335u);
  EXPECT_EQ(now.copies, 3u);
  EXPECT_EQ(now.streams, 12u);
  EXPECT_EQ(now.route_copies["kek->sdsc"], 2u);
  EXPECT_EQ(now.request_in_flight_bytes[7], 330u);
  EXPECT_EQ(now.request_in_flight_bytes[8], 5u);
  EXPECT_EQ(hub.InFlightBytes(7), 330u) << "what gfrep shows as in flight";
  EXPECT_TRUE(now.route_files_total.empty()) << "no copy has all its bytes yet";
  // Copy 3 (5 bytes of 5) reports it is whole, twice: one file on its route.
  for (int i = 0; i < 2; ++i) {
    catalog::TelemetryCopy whole = CopyOf(3, 8, "tsukuba1", "tsukuba", 5);
    whole.size = 5;
    ASSERT_TRUE(hub.Add(Batch(now_ms_, {whole}, {{now_ms_ * kMs, {0}, {}}})).ok());
  }
  EXPECT_EQ(hub.Now().route_files_total["tsukuba->sdsc"], 1u);
  EXPECT_EQ(hub.InFlightBytes(8), 0u) << "a copy with all its bytes is no longer in flight";
  EXPECT_EQ(hub.Now().route_copies.count("tsukuba->sdsc"), 0u);
  EXPECT_EQ(hub.InFlightBytes(9), 0u);

  // Since() hands each bin out once when called with the last end.
  EXPECT_TRUE(hub.Since(bins.end_ms).series.empty());
  // A copy not heard of for copy_timeout has ended.
  now_ms_ += 4000;
  EXPECT_EQ(hub.Now().copies, 0u);
  EXPECT_EQ(hub.Now().route_bytes_total["kek->sdsc"], 330u) << "totals stay";
}

TEST_F(TelemetryHubTest, AnAgentsClockOffsetIsCorrectedByTheSendTime) {
  TelemetryHub hub = Make();
  // The agent's clock is 1 h ahead: its points are placed by our clock.
  const std::int64_t ahead = now_ms_ + 3'600'000;
  ASSERT_TRUE(hub.Add(Batch(ahead, {CopyOf(1, 1, "kek1", "kek", 50)}, {{ahead * kMs, {50}, {}}})).ok());
  now_ms_ += 500;
  TelemetryBins bins = hub.Since(now_ms_ - 2000);
  ASSERT_EQ(bins.series.count("route:kek->sdsc"), 1u);
  const std::vector<std::uint64_t>& v = bins.series["route:kek->sdsc"];
  // The bin ending at the (corrected) send time: 500 ms ago = 5 bins before the end... the
  // last complete bin ends 400 ms ago, so it is the one before that.
  ASSERT_GE(v.size(), 2u);
  EXPECT_EQ(v[v.size() - 2], 50u) << ::testing::PrintToString(v);
}

TEST_F(TelemetryHubTest, HistoryIsKeptForFiveMinutesAndALateBrowserGetsIt) {
  TelemetryHub hub = Make();
  const std::int64_t start = now_ms_;
  for (int i = 1; i <= 3600; ++i) {  // 6 min of 100-ms samples, 1 byte each
    now_ms_ = start + i * 100;
    ASSERT_TRUE(hub.Add(Batch(now_ms_, {CopyOf(1, 1, "kek1", "kek", 0)}, {{now_ms_ * kMs, {1}, {}}})).ok());
  }
  now_ms_ += 400;
  TelemetryBins all = hub.Since(0);
  ASSERT_EQ(all.series.count("route:kek->sdsc"), 1u);
  EXPECT_EQ(all.series["route:kek->sdsc"].size(), 3000u) << "5 min at 0.1 s";
  EXPECT_EQ(all.series["route:kek->sdsc"].back(), 1u);
}

TEST_F(TelemetryHubTest, StreamsAreKeptPerNodePairForTheirOwnShorterHistory) {
  TelemetryHubOptions o;
  o.clock = [this] { return now_ms_ * kMs; };
  o.stream_history = std::chrono::seconds(2);
  TelemetryHub hub(o);
  const std::int64_t t0 = now_ms_;
  now_ms_ += 100;
  catalog::TelemetryCopy a = CopyOf(1, 7, "kek1", "kek", 30);
  a.streams = 2;
  catalog::TelemetryCopy b = CopyOf(2, 7, "kek2", "kek", 5);
  b.streams = 1;
  catalog::TelemetryPoint p{(t0 + 100) * kMs, {30, 5}, {10, 20, 5}};
  ASSERT_TRUE(hub.Add(Batch(now_ms_, {a, b}, {p})).ok());
  now_ms_ += 400;
  TelemetryBins kek1 = hub.StreamsSince("kek1->sdsc1", 0);
  ASSERT_EQ(kek1.series.size(), 2u) << "two streams of task 1";
  EXPECT_EQ(kek1.series["task-1#0"].back(), 10u);
  EXPECT_EQ(kek1.series["task-1#1"].back(), 20u);
  EXPECT_EQ(kek1.series["task-1#0"].size(), 20u) << "2 s of 0.1-s bins";
  EXPECT_EQ(hub.StreamsSince("kek2->sdsc1", 0).series["task-2#0"].back(), 5u);
  EXPECT_TRUE(hub.StreamsSince("kek3->sdsc1", 0).series.empty());
  EXPECT_TRUE(hub.StreamsSince("kek1->sdsc1", kek1.end_ms).series.empty()) << "handed out once";
  EXPECT_EQ(hub.Since(0).series.count("task-1#0"), 0u) << "streams are not in the main feed";
  // A batch without stream counts (an older agent) still counts its bytes.
  ASSERT_TRUE(hub.Add(Batch(now_ms_, {CopyOf(3, 7, "kek1", "kek", 8)}, {{now_ms_ * kMs, {8}, {}}})).ok());
  EXPECT_EQ(hub.Now().route_bytes_total["kek->sdsc"], 43u);
  // After the stream history the streams are gone; the route's bins stay.
  for (int i = 0; i < 30; ++i) {
    now_ms_ += 100;
    ASSERT_TRUE(hub.Add(Batch(now_ms_, {CopyOf(3, 7, "kek1", "kek", 8)}, {{now_ms_ * kMs, {0}, {}}})).ok());
  }
  EXPECT_TRUE(hub.StreamsSince("kek1->sdsc1", 0).series.empty());
  EXPECT_EQ(hub.Since(0).series.count("route:kek->sdsc"), 1u);
}

TEST(TelemetryValidateTest, RefusesMalformedBatches) {
  catalog::TelemetryBatch b = Batch(1, {CopyOf(1, 1, "kek1", "kek", 0)}, {{1, {1, 2}, {}}});
  EXPECT_TRUE(absl::IsInvalidArgument(catalog::Validate(b))) << "two counts for one copy";
  b.points = {{2, {1}, {}}, {1, {1}, {}}};
  EXPECT_TRUE(absl::IsInvalidArgument(catalog::Validate(b))) << "out of order";
  b.points = {{1, {1}, {}}};
  b.copies[0].src_node = "../x";
  EXPECT_TRUE(absl::IsInvalidArgument(catalog::Validate(b)));
  b.copies[0].src_node = "kek1";
  EXPECT_TRUE(catalog::Validate(b).ok());
  b.points = {{1, {1}, {1, 2, 3}}};
  EXPECT_TRUE(absl::IsInvalidArgument(catalog::Validate(b))) << "3 stream counts for 4 streams";
  b.points = {{1, {1}, {1, 2, 3, 4}}};
  EXPECT_TRUE(catalog::Validate(b).ok());
  b.copies[0].streams = catalog::kMaxTelemetryStreams + 1;
  b.points = {{1, {1}, {}}};
  EXPECT_TRUE(absl::IsInvalidArgument(catalog::Validate(b))) << "too many streams";
  b.copies[0].streams = 4;
  b.points.assign(catalog::kMaxTelemetryPoints + 1, {1, {1}, {}});
  EXPECT_TRUE(absl::IsInvalidArgument(catalog::Validate(b)));
}

}  // namespace
}  // namespace gfrep::replica::web
