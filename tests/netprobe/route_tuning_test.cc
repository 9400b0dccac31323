// Route settings from a measurement (netprobe/route_tuning.h) and the probe's report format.

#include "netprobe/route_tuning.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "netprobe/route_probe.h"

namespace gfrep::netprobe {
namespace {

using ::testing::HasSubstr;

RouteMeasurement Measured(double rtt_ms, double one_bps, double many_bps, std::uint64_t kernel_max) {
  RouteMeasurement m;
  m.src_site = "a";
  m.dst_site = "b";
  m.rtt_ms = rtt_ms;
  m.one.streams = 1;
  m.one.bits_per_second = one_bps;
  m.many.streams = 8;
  m.many.bits_per_second = many_bps;
  m.many.congestion = "bbr";
  m.max_socket_buffer = kernel_max;
  return m;
}

TEST(RouteTuningTest, ALongFatRouteOneStreamCanFillGetsTwoStreamsWithBdpBuffers) {
  RouteAdvice a = Advise(Measured(200, 940e6, 1000e6, 128 << 20));
  const double bdp = 1000e6 / 8 * 0.2;  // 25 MB
  EXPECT_EQ(a.route.streams, 2u);
  EXPECT_NEAR(static_cast<double>(a.route.socket_buffer_bytes), bdp, 1);  // 2 x BDP / 2
  EXPECT_EQ(a.route.total_streams, 64u);
  EXPECT_EQ(a.route.route_rate_bps, static_cast<std::uint64_t>(0.97 * 1000e6));
  EXPECT_EQ(a.route.bandwidth_bps, 1000'000'000u);
  EXPECT_EQ(a.route.congestion_control, "bbr");
  EXPECT_EQ(a.route.stripe_unit_bytes, 2u << 20);  // 25 MB / 2 / 4 -> 2 MiB
  EXPECT_EQ(a.route.src_site, "a");
  EXPECT_EQ(a.reasons.size(), 7u);
}

// gfprobe route --compare-cc: the fastest algorithm that really ran wins; one that did not
// take (the sender reported another) or that the source could not have never competes; within
// 2 % the one with fewer retransmits wins; the winner's rate counts towards the bandwidth.
TEST(RouteTuningTest, ComparedCongestionControlsPickTheFastestThatRan) {
  RouteMeasurement m = Measured(200, 100e6, 800e6, 128 << 20);
  auto run = [](std::string cc, double bps, std::uint64_t retrans, std::string used) {
    RouteMeasurement::CongestionRun r;
    r.requested = std::move(cc);
    r.result.streams = 8;
    r.result.bits_per_second = bps;
    r.result.retransmits = retrans;
    r.result.congestion = std::move(used);
    return r;
  };
  m.congestion_runs = {run("reno", 700e6, 50, "reno"), run("cubic", 900e6, 40, "cubic"),
                       run("highspeed", 990e6, 10, "cubic"),  // did not take: excluded
                       run("bbr", 905e6, 5, "bbr")};           // within 2 % of cubic, cleaner
  RouteMeasurement::CongestionRun missing;
  missing.requested = "vegas";
  missing.error = "congestion control 'vegas' is not available here";
  m.congestion_runs.push_back(missing);
  RouteAdvice a = Advise(m);
  EXPECT_EQ(a.route.congestion_control, "bbr");
  EXPECT_EQ(a.route.bandwidth_bps, 905'000'000u);  // the winner's rate beats the plain runs
  const std::string why = a.reasons.back();
  EXPECT_THAT(why, HasSubstr("the fastest of the algorithms compared"));
  EXPECT_THAT(why, HasSubstr("highspeed did not take (the sender used cubic)"));
  EXPECT_THAT(why, HasSubstr("vegas unavailable at the source"));
  EXPECT_THAT(why, HasSubstr("cubic 900 Mbit/s, 40 retransmits"));

  // Clearly faster beats cleaner.
  m.congestion_runs = {run("bbr", 905e6, 5, "bbr"), run("highspeed", 960e6, 30, "highspeed")};
  EXPECT_EQ(Advise(m).route.congestion_control, "highspeed");

  // Nothing ran as asked: the plain run's algorithm stays, and the reason says why.
  m.congestion_runs = {run("highspeed", 990e6, 10, "cubic")};
  a = Advise(m);
  EXPECT_EQ(a.route.congestion_control, "bbr");  // what Measured's many-stream run used
  EXPECT_EQ(a.route.bandwidth_bps, 800'000'000u);
  EXPECT_THAT(a.reasons.back(), HasSubstr("none of the algorithms compared ran as asked"));
}

TEST(RouteTuningTest, AWeakSingleStreamAsksForEnoughStreamsToCarryTheRoute) {
  // One stream gets a ninth of the route (loss, or a small window): 1.25 x 9 -> 12.
  RouteAdvice a = Advise(Measured(200, 100e6, 900e6, 128 << 20));
  EXPECT_EQ(a.route.streams, 12u);
  EXPECT_EQ(a.route.total_streams, 128u);
  EXPECT_THAT(a.reasons[1], HasSubstr("100 Mbit/s"));
}

TEST(RouteTuningTest, AKernelThatGrantsSmallBuffersGetsMoreStreamsAndASysctlNote) {
  RouteAdvice a = Advise(Measured(200, 940e6, 1000e6, 4 << 20));
  EXPECT_EQ(a.route.socket_buffer_bytes, 4u << 20);
  EXPECT_GE(a.route.streams * a.route.socket_buffer_bytes, 2 * 25'000'000u);  // 12 x 4 MiB
  EXPECT_THAT(a.reasons[2], HasSubstr("net.core.rmem_max"));
}

TEST(RouteTuningTest, ASmallBdpKeepsTheKernelsAutotuning) {
  RouteAdvice a = Advise(Measured(0.05, 20e9, 30e9, 128 << 20));
  EXPECT_EQ(a.route.socket_buffer_bytes, 0u);
  EXPECT_THAT(a.reasons[2], HasSubstr("autotuning"));
  EXPECT_EQ(a.route.stripe_unit_bytes, 1u << 20);
}

TEST(ProbeReportTest, RoundTripsAndRefusesMalformedReports) {
  ProbeReport r;
  r.iperf.streams = 8;
  r.iperf.seconds = 4;
  r.iperf.bytes = 500'000'000;
  r.iperf.bits_per_second = 1e9;
  r.iperf.retransmits = 12;
  r.iperf.congestion = "cubic";
  r.rtt_ms = 200.5;
  r.max_socket_buffer = 1 << 27;
  absl::StatusOr<ProbeReport> back = ProbeReportFromJson(ToJson(r));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->iperf.retransmits, 12u);
  EXPECT_EQ(back->iperf.congestion, "cubic");
  EXPECT_DOUBLE_EQ(back->rtt_ms, 200.5);
  EXPECT_EQ(back->max_socket_buffer, 1u << 27);
  for (const char* bad : {"", "[]", "{}", R"({"streams":8})",
                          R"({"streams":0,"seconds":4,"bytes":1,"bits_per_second":1,"retransmits":0,"congestion":"","rtt_ms":1,"max_socket_buffer":0})",
                          R"({"streams":8,"seconds":4,"bytes":1,"bits_per_second":1,"retransmits":0,"congestion":"","rtt_ms":-1,"max_socket_buffer":0})",
                          R"({"streams":"8","seconds":4,"bytes":1,"bits_per_second":1,"retransmits":0,"congestion":"","rtt_ms":1,"max_socket_buffer":0})"}) {
    EXPECT_FALSE(ProbeReportFromJson(bad).ok()) << bad;
  }
}

}  // namespace
}  // namespace gfrep::netprobe
