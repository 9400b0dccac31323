#include "replica/agent/route_learner.h"

#include <gtest/gtest.h>

namespace gfrep::replica::agent {
namespace {

using namespace std::chrono_literals;
using Clock = RouteLearner::Clock;

TEST(RouteLearnerTest, ReportsEachRoutesBytesRttsLossAndBest10sGoodputOnce) {
  RouteLearner l;
  const Clock::time_point t0{};
  // 1 MB every 100 ms from site "jp" for 12 s: 80 Mbit/s; 0.5 MB every second from "us".
  for (int i = 0; i <= 120; ++i) {
    l.AddBytes("jp", 1'000'000, t0 + i * 100ms);
    if (i % 10 == 0) l.AddBytes("us", 500'000, t0 + i * 100ms);
  }
  l.AddCopy("jp", {4'000'000, 40'000, 300, 200});  // 1 % re-sent, RTT x1.5
  l.AddCopy("jp", {1'000'000, 0, 200, 199}, "highspeed");  // what the sender's sockets ran
  std::vector<catalog::RouteObservation> obs = l.Report();
  ASSERT_EQ(obs.size(), 2u);
  const catalog::RouteObservation& jp = obs[0].src_site == "jp" ? obs[0] : obs[1];
  const catalog::RouteObservation& us = obs[0].src_site == "jp" ? obs[1] : obs[0];
  EXPECT_EQ(jp.bytes, 121'000'000u);
  EXPECT_NEAR(static_cast<double>(jp.peak_bps), 80e6, 2e6);
  EXPECT_DOUBLE_EQ(jp.min_rtt_ms, 199);
  EXPECT_DOUBLE_EQ(jp.loss, 40'000.0 / 5'000'000);
  EXPECT_DOUBLE_EQ(jp.srtt_ms, (300.0 * 4 + 200.0 * 1) / 5);  // by bytes sent
  EXPECT_EQ(us.bytes, 6'500'000u);
  EXPECT_NEAR(static_cast<double>(us.peak_bps), 4e6, 0.5e6);
  EXPECT_EQ(jp.congestion, "highspeed");
  EXPECT_EQ(us.min_rtt_ms, 0);  // no copy from us ended
  EXPECT_EQ(us.congestion, "");
  for (const auto& o : obs) EXPECT_TRUE(catalog::Validate(o).ok()) << o.src_site;
  // Nothing new since: nothing to report.
  EXPECT_TRUE(l.Report().empty());
  l.AddBytes("us", 10, t0 + 13s);
  obs = l.Report();
  ASSERT_EQ(obs.size(), 1u);
  EXPECT_EQ(obs[0].bytes, 10u);
  // The best window that ended since the last report: 4 to 13 s, 4.5 MB in 10 s.
  EXPECT_NEAR(static_cast<double>(obs[0].peak_bps), 3.6e6, 0.1e6);
}

TEST(RouteLearnerTest, NoPeakBeforeAWholeWindowOfTraffic) {
  RouteLearner l;
  const Clock::time_point t0{};
  for (int i = 0; i < 50; ++i) l.AddBytes("jp", 1'000'000, t0 + i * 100ms);  // 5 s
  std::vector<catalog::RouteObservation> obs = l.Report();
  ASSERT_EQ(obs.size(), 1u);
  EXPECT_EQ(obs[0].peak_bps, 0u);
}

TEST(RouteLearnerTest, RecentTcpFiguresAreTakenOnceOverAllRoutes) {
  RouteLearner l;
  l.AddCopy("jp", {1'000'000, 20'000, 400, 200});
  l.AddCopy("us", {1'000'000, 0, 100, 100});
  TcpTally t = l.TakeRecent();
  EXPECT_DOUBLE_EQ(t.loss(), 0.01);
  EXPECT_DOUBLE_EQ(t.rtt_inflation(), 500.0 / 300.0);
  EXPECT_DOUBLE_EQ(t.min_rtt_ms(), 100);
  EXPECT_TRUE(l.TakeRecent().empty());
  // The route reports are separate from the tuner's takes.
  EXPECT_EQ(l.Report().size(), 2u);
}

TEST(RouteLearnerTest, CopiesWithoutFiguresTeachNothingFalse) {
  // A sender that said nothing (an old agent): zeros, which must not read as a 0 ms RTT.
  TcpTally t;
  t.Add({});
  EXPECT_EQ(t.loss(), 0);
  EXPECT_EQ(t.rtt_inflation(), 0);
  EXPECT_EQ(t.min_rtt_ms(), 0);
  EXPECT_EQ(t.srtt_ms(), 0);
}

}  // namespace
}  // namespace gfrep::replica::agent
