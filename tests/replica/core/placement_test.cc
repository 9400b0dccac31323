#include "replica/core/placement.h"

#include <gtest/gtest.h>

namespace gfrep::replica {
namespace {

constexpr std::int64_t kPlacementNow = 1'000'000'000'000;

catalog::Node PlacementNode(std::string name, std::string site, std::uint64_t free = 1ull << 40,
                       std::uint32_t active = 0, double load = 0) {
  catalog::Node n;
  n.name = std::move(name);
  n.site = std::move(site);
  n.free_bytes = free;
  n.active_transfers = active;
  n.load = load;
  n.last_heartbeat_ns = kPlacementNow;
  return n;
}

LivenessOptions PlacementLiveness() {
  LivenessOptions o;
  o.now_ns = kPlacementNow;
  o.heartbeat_timeout = std::chrono::seconds(10);
  return o;
}

std::vector<std::string> Names(const std::vector<catalog::Node>& nodes) {
  std::vector<std::string> out;
  for (const auto& n : nodes) out.push_back(n.name);
  return out;
}

TEST(PlaceReplicasTest, SpreadsOverSitesBeforeFillingOne) {
  Topology t;
  t.nodes = {PlacementNode("a1", "A"), PlacementNode("b1", "B"), PlacementNode("b2", "B"), PlacementNode("c1", "C")};
  PlacementRequest r;
  r.count = 2;
  r.exclude_nodes = {"a1"};
  r.replicas_per_site = {{"A", 1}};
  auto got = PlaceReplicas(r, t, PlacementLiveness());
  ASSERT_EQ(got.size(), 2u);
  EXPECT_NE(got[0].site, got[1].site);
}

TEST(PlaceReplicasTest, NeverPlacesTwoReplicasOnOneNode) {
  Topology t;
  t.nodes = {PlacementNode("a1", "A"), PlacementNode("b1", "B")};
  PlacementRequest r;
  r.count = 3;
  r.exclude_nodes = {"a1"};
  auto got = PlaceReplicas(r, t, PlacementLiveness());
  EXPECT_EQ(Names(got), std::vector<std::string>{"b1"});
}

TEST(PlaceReplicasTest, HonoursDestinationSitesFreeSpaceAndLiveness) {
  Topology t;
  t.nodes = {PlacementNode("a1", "A"), PlacementNode("b1", "B", 10), PlacementNode("b2", "B"),
             PlacementNode("c1", "C"), PlacementNode("b3", "B")};
  t.nodes[4].last_heartbeat_ns = kPlacementNow - 3'600'000'000'000;
  PlacementRequest r;
  r.count = 5;
  r.dst_sites = {"B"};
  r.file_size = 1000;
  EXPECT_EQ(Names(PlaceReplicas(r, t, PlacementLiveness())), std::vector<std::string>{"b2"});
}

TEST(PlaceReplicasTest, PrefersTheLeastBusyThenLeastLoadedNode) {
  Topology t;
  t.nodes = {PlacementNode("b1", "B", 1ull << 40, 2), PlacementNode("b2", "B", 1ull << 40, 0, 5.0),
             PlacementNode("b3", "B", 1ull << 40, 0, 0.5)};
  PlacementRequest r;
  r.count = 1;
  EXPECT_EQ(Names(PlaceReplicas(r, t, PlacementLiveness())), std::vector<std::string>{"b3"});
  r.planned = {{"b3", 4}};
  EXPECT_EQ(Names(PlaceReplicas(r, t, PlacementLiveness())), std::vector<std::string>{"b2"});
}

}  // namespace
}  // namespace gfrep::replica
