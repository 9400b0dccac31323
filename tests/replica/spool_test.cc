#include "replica/spool.h"

#include <gtest/gtest.h>

#include <filesystem>

#include "tests/support/temp_dir.h"

namespace gfrep::replica {
namespace {

TEST(SpoolTest, MapsCatalogPathsIntoTheSpool) {
  auto rel = SpoolRelativePath("/exp//run1/f.dat");
  ASSERT_TRUE(rel.ok());
  EXPECT_EQ(*rel, "exp/run1/f.dat");
  auto p = ReplicaPath("/spool", "/exp/f");
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->string(), "/spool/exp/f");
}

TEST(SpoolTest, RefusesEscapesTheRootAndReservedNames) {
  EXPECT_FALSE(SpoolRelativePath("/a/../b").ok());
  EXPECT_FALSE(SpoolRelativePath("relative").ok());
  EXPECT_FALSE(SpoolRelativePath("/").ok());
  EXPECT_FALSE(SpoolRelativePath("/.gfrep-tmp/x").ok());
}

TEST(SpoolTest, RouteSettingsOverrideOnlyWhatTheyDefine) {
  transfer::RouteOptions defaults;
  defaults.streams = 4;
  defaults.congestion = "cubic";
  catalog::Route r;
  r.src_site = "A";
  r.dst_site = "B";
  r.streams = 16;
  r.socket_buffer_bytes = 8 << 20;
  r.route_rate_bps = 500'000'000;
  transfer::RouteOptions o = ToRouteOptions(r, defaults);
  EXPECT_EQ(o.streams, 16);
  EXPECT_EQ(o.socket_buffer, 8u << 20);
  EXPECT_EQ(o.congestion, "cubic");
  EXPECT_EQ(o.route_rate_bps, 500'000'000u);
  EXPECT_EQ(o.stripe_unit, defaults.stripe_unit);
  EXPECT_EQ(o.route_name, "A->B");
  EXPECT_TRUE(transfer::Validate(o).ok());
}

TEST(SpoolTest, CatalogChecksumUsesTheEngineSpelling) {
  catalog::Attributes a;
  EXPECT_EQ(CatalogChecksum(a), "");
  a.checksum_algo = "xxh3-128";
  a.checksum = "00ff";
  EXPECT_EQ(CatalogChecksum(a), "xxh3-128:00ff");
}

TEST(SpoolTest, SyncDirectoryChainSyncsInsideTheSpoolOnly) {
  gfrep::testing::TempDir tmp;
  std::filesystem::path spool = tmp.path() / "spool";
  std::filesystem::create_directories(spool / "a" / "b");
  EXPECT_TRUE(SyncDirectoryChain(spool, spool / "a" / "b").ok());
  EXPECT_TRUE(SyncDirectoryChain(spool, spool).ok());
  EXPECT_TRUE(SyncDirectoryChain(spool / "", spool / "a" / "").ok());
  absl::Status missing = SyncDirectoryChain(spool, spool / "a" / "nope");
  EXPECT_TRUE(absl::IsNotFound(missing)) << missing;
  EXPECT_TRUE(absl::IsInvalidArgument(SyncDirectoryChain(spool, tmp.path())));
  EXPECT_TRUE(absl::IsInvalidArgument(SyncDirectoryChain(spool, spool / ".." / "x")));
  EXPECT_TRUE(absl::IsInvalidArgument(SyncDirectoryChain(spool, tmp.path() / "spool2")));
}

}  // namespace
}  // namespace gfrep::replica
