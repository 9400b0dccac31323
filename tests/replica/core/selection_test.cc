#include "replica/core/selection.h"

#include <gtest/gtest.h>

namespace gfrep::replica {
namespace {

constexpr std::int64_t kNow = 1'000'000'000'000;

catalog::Node MakeNode(std::string name, std::string site, std::uint32_t active = 0,
                       double load = 0, std::int64_t heartbeat = kNow) {
  catalog::Node n;
  n.name = std::move(name);
  n.site = std::move(site);
  n.address = "127.0.0.1:1";
  n.active_transfers = active;
  n.load = load;
  n.free_bytes = 1ull << 40;
  n.last_heartbeat_ns = heartbeat;
  return n;
}

catalog::Replica MakeReplica(std::string node, std::uint64_t gen = 3,
                             catalog::ReplicaState state = catalog::ReplicaState::kComplete) {
  catalog::Replica r;
  r.node = std::move(node);
  r.generation = gen;
  r.state = state;
  return r;
}

catalog::Location MakeLocation(std::vector<catalog::Replica> replicas) {
  catalog::Location loc;
  loc.path = "/f";
  loc.attributes.generation = 3;
  loc.replicas = std::move(replicas);
  return loc;
}

LivenessOptions Live() {
  LivenessOptions o;
  o.now_ns = kNow;
  o.heartbeat_timeout = std::chrono::seconds(10);
  return o;
}

Topology ThreeSites() {
  Topology t;
  t.nodes = {MakeNode("a1", "A"), MakeNode("a2", "A"), MakeNode("b1", "B"),
             MakeNode("c1", "C", 0, 0), MakeNode("c2", "C", 3, 0)};
  return t;
}

TEST(SelectSourceTest, PrefersTheReadersOwnNode) {
  Topology t = ThreeSites();
  auto got = SelectSource(MakeLocation({MakeReplica("a2"), MakeReplica("a1")}), {"A", "a1"}, t,
                          Live());
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->node.name, "a1");
  EXPECT_EQ(got->tier, SourceTier::kSameNode);
}

TEST(SelectSourceTest, PrefersTheSameSiteOverRemoteSites) {
  Topology t = ThreeSites();
  auto got = SelectSource(MakeLocation({MakeReplica("b1"), MakeReplica("a2")}), {"A", "a1"}, t,
                          Live());
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(got->node.name, "a2");
  EXPECT_EQ(got->tier, SourceTier::kSameSite);
}

TEST(SelectSourceTest, PrefersTheRouteWithMoreBandwidthThenLowerRtt) {
  Topology t = ThreeSites();
  catalog::Route bc;
  bc.src_site = "B";
  bc.dst_site = "A";
  bc.bandwidth_bps = 100'000'000;
  bc.rtt_ms = 10;
  catalog::Route cc = bc;
  cc.src_site = "C";
  cc.bandwidth_bps = 900'000'000;
  cc.rtt_ms = 200;
  t.routes = {bc, cc};
  auto got = SelectSource(MakeLocation({MakeReplica("b1"), MakeReplica("c1")}), {"A", "a1"}, t,
                          Live());
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(got->node.name, "c1");
  EXPECT_TRUE(got->has_route);
  EXPECT_EQ(got->route.bandwidth_bps, 900'000'000u);

  t.routes[1].bandwidth_bps = 100'000'000;  // equal bandwidth: lower RTT wins
  got = SelectSource(MakeLocation({MakeReplica("b1"), MakeReplica("c1")}), {"A", "a1"}, t, Live());
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(got->node.name, "b1");
}

TEST(SelectSourceTest, UnmeasuredRoutesRankByTheRttTheirCopiesShowed) {
  // No probe measured either route; earlier copies showed B -> A at 220 ms and C -> A at
  // 80 ms (Route::observed). C is nearer although c1 is busier than b1.
  Topology t = ThreeSites();
  t.nodes[3].active_transfers = 5;  // c1
  catalog::Route ba;
  ba.src_site = "B";
  ba.dst_site = "A";
  ba.observed.rtt_ms = 220;
  catalog::Route ca = ba;
  ca.src_site = "C";
  ca.observed.rtt_ms = 80;
  t.routes = {ba, ca};
  auto got = SelectSource(MakeLocation({MakeReplica("b1"), MakeReplica("c1")}), {"A", "a1"}, t,
                          Live());
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(got->node.name, "c1");
  // A measured RTT wins over a learnt one.
  t.routes[0].rtt_ms = 10;
  got = SelectSource(MakeLocation({MakeReplica("b1"), MakeReplica("c1")}), {"A", "a1"}, t, Live());
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(got->node.name, "b1");
}

TEST(SelectSourceTest, PrefersTheLeastBusyNodeOfASite) {
  Topology t = ThreeSites();
  auto got = SelectSource(MakeLocation({MakeReplica("c2"), MakeReplica("c1")}), {"A", "a1"}, t,
                          Live());
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(got->node.name, "c1");  // c2 has 3 active transfers
  BusyMap planned{{"c1", 5}};
  got = SelectSource(MakeLocation({MakeReplica("c2"), MakeReplica("c1")}), {"A", "a1"}, t, Live(),
                     planned);
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(got->node.name, "c2");
}

TEST(SelectSourceTest, IgnoresStaleOldAndPendingReplicas) {
  Topology t = ThreeSites();
  auto loc = MakeLocation({MakeReplica("a1", 3, catalog::ReplicaState::kStale),
                           MakeReplica("a2", 2), MakeReplica("b1", 3, catalog::ReplicaState::kPending),
                           MakeReplica("c1", 3)});
  auto got = SelectSource(loc, {"A", "a1"}, t, Live());
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(got->node.name, "c1");
}

TEST(SelectSourceTest, SkipsNodesWithOldHeartbeatsAndSaysWhenAllAreDown) {
  Topology t = ThreeSites();
  t.nodes[0].last_heartbeat_ns = kNow - 60'000'000'000;  // a1 silent for a minute
  auto loc = MakeLocation({MakeReplica("a1"), MakeReplica("c1")});
  auto got = SelectSource(loc, {"A", "a2"}, t, Live());
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(got->node.name, "c1");

  got = SelectSource(MakeLocation({MakeReplica("a1")}), {"A", "a2"}, t, Live());
  EXPECT_TRUE(absl::IsUnavailable(got.status())) << got.status();
  EXPECT_NE(got.status().message().find("a1"), std::string::npos);
}

TEST(SelectSourceTest, NotFoundWithoutCompleteReplicas) {
  Topology t = ThreeSites();
  auto got = SelectSource(MakeLocation({MakeReplica("a1", 2)}), {"A", "a2"}, t, Live());
  EXPECT_TRUE(absl::IsNotFound(got.status())) << got.status();
  catalog::Location empty = MakeLocation({});
  empty.attributes.generation = 0;
  EXPECT_TRUE(absl::IsFailedPrecondition(SelectSource(empty, {}, t, Live()).status()));
}

TEST(RankSourcesTest, AnOutsideReaderGetsEveryLiveSourceLeastBusyFirst) {
  Topology t = ThreeSites();
  auto ranked = RankSources(MakeLocation({MakeReplica("c2"), MakeReplica("b1"), MakeReplica("c1")}),
                            {}, t, Live());
  ASSERT_EQ(ranked.size(), 3u);
  EXPECT_EQ(ranked.back().node.name, "c2");
}

}  // namespace
}  // namespace gfrep::replica
