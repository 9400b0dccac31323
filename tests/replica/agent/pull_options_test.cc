// PullOptionsFor (replica/agent/pull_options.h): one copy's engine settings from the agent's
// defaults, the task's share, the route, the source, the disk profile and the copies at once.
#include "replica/agent/pull_options.h"

#include <gtest/gtest.h>

#include "transfer/agent.h"

namespace gfrep::replica::agent {
namespace {

struct Case {
  const char* name;
  std::uint64_t size = 64ull << 20;
  std::uint32_t task_streams = 0;  // the task's route-budget share (0: none)
  std::uint64_t task_rate = 0;
  std::uint32_t route_streams = 0;  // the catalog's route (0: unset)
  std::uint64_t route_rate = 0;
  bool route_tls = false;
  bool source_requires_tls = false;
  DiskHints disk = {};
  int copies = 1;
  // Expected:
  int streams;
  std::uint64_t rate;
  bool tls;
  int cut_from = 0;
};

class PullOptionsTest : public ::testing::TestWithParam<Case> {};

TEST_P(PullOptionsTest, FollowsTheRules) {
  const Case& c = GetParam();
  transfer::TransferOptions defaults;
  defaults.route.streams = 4;
  catalog::Task task;
  task.size = c.size;
  task.spec.streams = c.task_streams;
  task.spec.route_rate_bps = c.task_rate;
  catalog::Route route;
  route.src_site = "A";
  route.dst_site = "B";
  route.streams = c.route_streams;
  route.route_rate_bps = c.route_rate;
  route.data_tls = c.route_tls;
  catalog::Node source;
  source.name = "a1";
  source.requires_data_tls = c.source_requires_tls;
  PullSettings s = PullOptionsFor(defaults, task, route, source, c.disk, c.copies);
  EXPECT_EQ(s.options.route.streams, c.streams);
  EXPECT_EQ(s.options.route.route_rate_bps, c.rate);
  EXPECT_EQ(s.options.tls, c.tls);
  EXPECT_EQ(s.options.route.route_name, "A->B");  // paced together at the source
  EXPECT_EQ(s.streams_cut_from, c.cut_from);
}

INSTANTIATE_TEST_SUITE_P(
    Table, PullOptionsTest,
    ::testing::Values(
        // Nothing known: the defaults' streams.
        Case{.name = "defaults", .streams = 4, .rate = 0, .tls = false},
        // The route's streams over the defaults.
        Case{.name = "route", .route_streams = 16, .streams = 16, .rate = 0, .tls = false},
        // The task's share wins over the route's, rate too.
        Case{.name = "share",
             .task_streams = 6,
             .task_rate = 300'000'000,
             .route_streams = 16,
             .route_rate = 900'000'000,
             .streams = 6,
             .rate = 300'000'000,
             .tls = false},
        // Without a share a small file gets no stream without a block: 64 KiB -> 1, 600 KiB -> 3.
        Case{.name = "small",
             .size = 64 << 10,
             .route_streams = 16,
             .streams = 1,
             .rate = 0,
             .tls = false},
        Case{.name = "three_blocks",
             .size = 600 << 10,
             .route_streams = 16,
             .streams = 3,
             .rate = 0,
             .tls = false},
        // ...but a share is the planner's decision, also for a small file.
        Case{.name = "small_share",
             .size = 64 << 10,
             .task_streams = 2,
             .streams = 2,
             .rate = 0,
             .tls = false},
        // Data in TLS when the route asks or the source requires it.
        Case{.name = "route_tls", .route_tls = true, .streams = 4, .rate = 0, .tls = true},
        Case{.name = "source_tls",
             .source_requires_tls = true,
             .streams = 4,
             .rate = 0,
             .tls = true},
        // 128 copies at once x (streams + 1) connections within a source's per-peer limit.
        Case{.name = "peer_limit",
             .route_streams = 32,
             .copies = 128,
             .streams = 15,
             .rate = 0,
             .tls = false,
             .cut_from = 32},
        // A share above the engine's most streams is cut to it first.
        Case{.name = "engine_max",
             .task_streams = 1000,
             .streams = transfer::kMaxStreams,
             .rate = 0,
             .tls = false}),
    [](const ::testing::TestParamInfo<Case>& info) { return std::string(info.param.name); });

TEST(PullOptionsDiskTest, AMeasuredDiskProfileSetsTheWriteSizeWithinBounds) {
  transfer::TransferOptions defaults;
  catalog::Task task;
  task.size = 1 << 20;
  catalog::Route route;
  catalog::Node source;
  PullSettings s = PullOptionsFor(defaults, task, route, source, {1 << 20, 64 << 20}, 1);
  EXPECT_EQ(s.options.write_io_size, 1u << 20);
  EXPECT_EQ(s.options.journal_interval, 64u << 20);
  // Out of bounds (a corrupt profile): the engine's own choice stays.
  s = PullOptionsFor(defaults, task, route, source, {100, 0}, 1);
  EXPECT_EQ(s.options.write_io_size, defaults.write_io_size);
  EXPECT_EQ(s.options.journal_interval, defaults.journal_interval);
  s = PullOptionsFor(defaults, task, route, source, {2ull << 30, 0}, 1);
  EXPECT_EQ(s.options.write_io_size, defaults.write_io_size);
}

TEST(PullOptionsPeerLimitTest, ManyCopiesWithManyStreamsStayWithinTheSourcesPerPeerLimit) {
  EXPECT_EQ(StreamsWithinPeerLimit(128), 15);
  EXPECT_EQ(StreamsWithinPeerLimit(16), 127);
  EXPECT_EQ(StreamsWithinPeerLimit(256), 7);
  EXPECT_EQ(StreamsWithinPeerLimit(4096), 1);
  EXPECT_EQ(StreamsWithinPeerLimit(0), transfer::kDefaultMaxConnectionsPerPeer - 1);
}

}  // namespace
}  // namespace gfrep::replica::agent
