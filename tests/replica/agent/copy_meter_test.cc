#include "replica/agent/copy_meter.h"

#include <gtest/gtest.h>

namespace gfrep::replica::agent {
namespace {

constexpr std::int64_t kMs = 1'000'000;

TEST(CopyMeterTest, SamplesWhatEachCopyReceivedAndTakesThemAsOneBatch) {
  CopyMeter meter;
  EXPECT_FALSE(meter.Take("n", "s", 1).has_value()) << "nothing running";
  auto a = meter.Begin({1, 10, "kek1", "kek", 1000, 4, 0});
  auto b = meter.Begin({2, 10, "kek2", "kek", 1000, 2, 0});
  a->received.fetch_add(100);
  meter.Sample(100 * kMs);
  a->received.fetch_add(50);
  b->received.fetch_add(7);
  meter.End(2);
  meter.Sample(200 * kMs);
  b->received.fetch_add(1000);  // after its last sample: not counted (it has ended)
  meter.Sample(300 * kMs);
  std::optional<catalog::TelemetryBatch> batch = meter.Take("sdsc1", "sdsc", 300 * kMs);
  ASSERT_TRUE(batch.has_value());
  ASSERT_TRUE(catalog::Validate(*batch).ok()) << catalog::Validate(*batch);
  ASSERT_EQ(batch->copies.size(), 2u);
  EXPECT_EQ(batch->copies[0].task_id, 1u);
  EXPECT_EQ(batch->copies[0].received, 150u);
  EXPECT_EQ(batch->copies[1].received, 7u);
  ASSERT_EQ(batch->points.size(), 3u);
  EXPECT_EQ(batch->points[0].bytes, (std::vector<std::uint64_t>{100, 0}));
  EXPECT_EQ(batch->points[1].bytes, (std::vector<std::uint64_t>{50, 7}));
  EXPECT_EQ(batch->points[2].bytes, (std::vector<std::uint64_t>{0, 0}));
  // No stream counted anything: the stream counts are all zero, one per stream (4 + 2).
  EXPECT_EQ(batch->points[1].stream_bytes, std::vector<std::uint64_t>(6, 0));
  // The ended copy is gone from the next batch; the running one stays.
  meter.Sample(400 * kMs);
  batch = meter.Take("sdsc1", "sdsc", 400 * kMs);
  ASSERT_TRUE(batch.has_value());
  ASSERT_EQ(batch->copies.size(), 1u);
  meter.End(1);
  meter.Sample(500 * kMs);
  meter.Take("sdsc1", "sdsc", 500 * kMs);
  meter.Sample(600 * kMs);
  EXPECT_FALSE(meter.Take("sdsc1", "sdsc", 600 * kMs).has_value()) << "idle: nothing sent";
}

TEST(CopyMeterTest, PerStreamCountsTravelInCopyOrderOnePerStream) {
  CopyMeter meter;
  auto a = meter.Begin({5, 10, "kek1", "kek", 1000, 3, 0});
  auto b = meter.Begin({6, 10, "kek2", "kek", 1000, 2, 0});
  a->received.fetch_add(60);
  a->stream[0].fetch_add(10);
  a->stream[2].fetch_add(50);
  b->received.fetch_add(9);
  b->stream[1].fetch_add(9);
  meter.Sample(100 * kMs);
  a->stream[1].fetch_add(4);
  a->received.fetch_add(4);
  meter.Sample(200 * kMs);
  std::optional<catalog::TelemetryBatch> batch = meter.Take("sdsc1", "sdsc", 200 * kMs);
  ASSERT_TRUE(batch.has_value());
  ASSERT_TRUE(catalog::Validate(*batch).ok()) << catalog::Validate(*batch);
  ASSERT_EQ(batch->points.size(), 2u);
  EXPECT_EQ(batch->points[0].stream_bytes, (std::vector<std::uint64_t>{10, 0, 50, 0, 9}));
  EXPECT_EQ(batch->points[1].stream_bytes, (std::vector<std::uint64_t>{0, 4, 0, 0, 0}));
  // More streams than a copy may have are cut to the limit (the counters match the report).
  auto c = meter.Begin({7, 10, "kek1", "kek", 1000, 1000, 0});
  EXPECT_EQ(c->stream.size(), catalog::kMaxTelemetryStreams);
}

}  // namespace
}  // namespace gfrep::replica::agent
