#include "netprobe/topology.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

namespace gfrep::netprobe {
namespace {

using ::testing::HasSubstr;

std::string ReadTopologyFile(const std::string& name) {
  std::ifstream in(std::string(GFREP_SOURCE_DIR) + "/tools/topologies/" + name + ".topo");
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

std::string ErrorOf(std::string_view text) {
  absl::StatusOr<Topology> t = ParseTopology(text);
  EXPECT_FALSE(t.ok()) << text;
  if (t.ok()) return "";
  EXPECT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument);
  return std::string(t.status().message());
}

TEST(TopologyTest, ParsesTranspacAsInThePaper) {
  absl::StatusOr<Topology> t = ParseTopology(ReadTopologyFile("transpac"));
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->name, "transpac");
  ASSERT_EQ(t->sites.size(), 2u);
  EXPECT_EQ(t->sites[0].nodes, 4);
  ASSERT_EQ(t->routes.size(), 2u);
  EXPECT_EQ(t->routes[0].name, "north");
  EXPECT_EQ(t->routes[0].rate_bps, 622'000'000u);
  EXPECT_EQ(t->routes[0].rtt, std::chrono::milliseconds(199));
  EXPECT_EQ(t->routes[1].rate_bps, 271'000'000u);
  EXPECT_EQ(t->routes[1].rtt, std::chrono::milliseconds(222));
  ASSERT_EQ(t->pins.size(), 2u);
  EXPECT_EQ(t->pins[0].node, "jp-n4");
  EXPECT_EQ(t->pins[0].route, "south");
}

TEST(TopologyTest, ShippedTopologiesParse) {
  for (const char* name : {"lfn-1g", "lfn-1g-loss", "three-sites"}) {
    absl::StatusOr<Topology> t = ParseTopology(ReadTopologyFile(name));
    ASSERT_TRUE(t.ok()) << name << ": " << t.status();
    EXPECT_EQ(t->name, name);
  }
  absl::StatusOr<Topology> loss = ParseTopology(ReadTopologyFile("lfn-1g-loss"));
  ASSERT_TRUE(loss.ok());
  EXPECT_DOUBLE_EQ(loss->routes[0].loss, 1e-5);
  EXPECT_EQ(loss->routes[0].rate_bps, 1'000'000'000u);
}

TEST(TopologyTest, NamesAndAddressesFollowTheDocumentedScheme) {
  absl::StatusOr<Topology> t = ParseTopology(
      "topology x\nsite jp nodes=2\nsite us nodes=1\nroute wan jp us rtt=10ms rate=1G\n");
  ASSERT_TRUE(t.ok()) << t.status();
  const std::vector<NodeInfo> nodes = Nodes(*t);
  ASSERT_EQ(nodes.size(), 3u);
  EXPECT_EQ(nodes[1].name, "jp-n2");
  EXPECT_EQ(nodes[1].netns, "gfrep-jp-n2");
  EXPECT_EQ(nodes[1].address, "10.99.1.12");
  EXPECT_EQ(nodes[2].address, "10.99.2.11");
  EXPECT_EQ(RouterNamespace("us"), "gfrep-us-rt");
  EXPECT_EQ(RouteDevice("wan"), "r-wan");
  absl::StatusOr<NodeInfo> us = FindNode(*t, "us-n1");
  ASSERT_TRUE(us.ok());
  EXPECT_EQ(us->address, "10.99.2.11");
  EXPECT_EQ(FindNode(*t, "us-n2").status().code(), absl::StatusCode::kNotFound);
}

TEST(TopologyTest, CommentsBlankLinesAndDefaults) {
  absl::StatusOr<Topology> t = ParseTopology(
      "# comment\n\n  topology t1 # trailing\nsite a nodes=1\nsite b nodes=1\n"
      "route r a b rtt=1.5ms rate=28.5M loss=1e-3 queue=512K\n");
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->routes[0].rtt, std::chrono::microseconds(1500));
  EXPECT_EQ(t->routes[0].rate_bps, 28'500'000u);
  EXPECT_EQ(t->routes[0].queue_bytes, 512u * 1024);
  EXPECT_DOUBLE_EQ(t->routes[0].loss, 1e-3);
  EXPECT_EQ(t->mtu, 9000);
  EXPECT_EQ(t->buffer_bytes, 64u << 20);
  EXPECT_EQ(t->congestion_control, "");
}

TEST(TopologyTest, BadInputGivesLineNumberedErrors) {
  EXPECT_THAT(ErrorOf(""), HasSubstr("no 'topology NAME'"));
  EXPECT_THAT(ErrorOf("site a nodes=1\n"), HasSubstr("line 1: the first statement"));
  EXPECT_THAT(ErrorOf("topology t\nsite a nodes=1\nfrobnicate\n"),
              HasSubstr("line 3: unknown statement 'frobnicate'"));
  EXPECT_THAT(ErrorOf("topology T_bad\n"), HasSubstr("line 1"));
  EXPECT_THAT(ErrorOf("topology t\nsite a nodes=0\n"), HasSubstr("nodes must be 1-32"));
  EXPECT_THAT(ErrorOf("topology t\nsite a nodes=x\n"), HasSubstr("nodes must be"));
  EXPECT_THAT(ErrorOf("topology t\nsite a\n"), HasSubstr("missing nodes="));
  EXPECT_THAT(ErrorOf("topology t\nsite a nodes=1 color=red\n"), HasSubstr("unknown key 'color'"));
  EXPECT_THAT(ErrorOf("topology t\nsite a nodes=1\nsite a nodes=2\n"),
              HasSubstr("line 3: duplicate site 'a'"));
  EXPECT_THAT(ErrorOf("topology t\nsite verylongname nodes=1\n"), HasSubstr("1-8 characters"));
  const std::string two_sites = "topology t\nsite a nodes=1\nsite b nodes=1\n";
  EXPECT_THAT(ErrorOf(two_sites + "route r a c rtt=1ms rate=1G\n"),
              HasSubstr("line 4: route r: unknown site 'c'"));
  EXPECT_THAT(ErrorOf(two_sites + "route r a a rtt=1ms rate=1G\n"), HasSubstr("both ends"));
  EXPECT_THAT(ErrorOf(two_sites + "route r a b rate=1G\n"), HasSubstr("missing rtt="));
  EXPECT_THAT(ErrorOf(two_sites + "route r a b rtt=1 rate=1G\n"), HasSubstr("bad unit"));
  EXPECT_THAT(ErrorOf(two_sites + "route r a b rtt=1ms rate=fast\n"), HasSubstr("bad rate"));
  EXPECT_THAT(ErrorOf(two_sites + "route r a b rtt=1ms rate=1T\n"), HasSubstr("bad unit"));
  EXPECT_THAT(ErrorOf(two_sites + "route r a b rtt=1ms rate=1G loss=1\n"),
              HasSubstr("loss must be within [0, 1)"));
  EXPECT_THAT(ErrorOf(two_sites + "route r a b rtt=1ms rate=1G loss=-0.1\n"),
              HasSubstr("loss must be"));
  EXPECT_THAT(ErrorOf(two_sites + "route r a b rtt=1ms rate=1G queue=9G\n"), HasSubstr("exceeds 4G"));
  EXPECT_THAT(ErrorOf(two_sites + "route r a b rtt=30s rate=1G\n"), HasSubstr("exceeds 20s"));
  EXPECT_THAT(ErrorOf(two_sites + "route r a b rtt=1ms rate=1G rtt=2ms\n"),
              HasSubstr("duplicate key 'rtt'"));
  EXPECT_THAT(ErrorOf(two_sites + "route r a b rtt=1ms rate=1G\nroute r a b rtt=1ms rate=1G\n"),
              HasSubstr("line 5: duplicate route 'r'"));
  EXPECT_THAT(ErrorOf(two_sites + "pin a-n1 r\n"), HasSubstr("unknown route 'r'"));
  EXPECT_THAT(ErrorOf(two_sites + "route r a b rtt=1ms rate=1G\npin a-n2 r\n"),
              HasSubstr("unknown node 'a-n2'"));
  EXPECT_THAT(ErrorOf("topology t\nsite a nodes=1\nsite b nodes=1\nsite c nodes=1\n"
                      "route r a b rtt=1ms rate=1G\npin c-n1 r\n"),
              HasSubstr("does not touch site c"));
  EXPECT_THAT(ErrorOf(two_sites + "mtu 100\n"), HasSubstr("mtu must be within"));
  EXPECT_THAT(ErrorOf(two_sites + "buffer 1K\n"), HasSubstr("buffer must be within"));
  EXPECT_THAT(ErrorOf("topology t\n" + std::string(2000, 'x') + "\n"), HasSubstr("line too long"));
  EXPECT_THAT(ErrorOf(std::string(70000, '#')), HasSubstr("more than"));
}

TEST(TopologyTest, ValueParsers) {
  EXPECT_EQ(*ParseDuration("250us"), std::chrono::microseconds(250));
  EXPECT_EQ(*ParseDuration("2s"), std::chrono::seconds(2));
  EXPECT_EQ(*ParseBitRate("2.5G"), 2'500'000'000u);
  EXPECT_EQ(*ParseBitRate("1000"), 1000u);
  EXPECT_EQ(*ParseByteSize("64M"), 64u << 20);
  EXPECT_FALSE(ParseDuration("-1ms").ok());
  EXPECT_FALSE(ParseDuration("ms").ok());
  EXPECT_FALSE(ParseBitRate("1.2.3M").ok());
  EXPECT_FALSE(ParseByteSize("nan").ok());
  EXPECT_FALSE(ParseByteSize("1e400").ok());
}

}  // namespace
}  // namespace gfrep::netprobe
