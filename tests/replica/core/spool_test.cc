#include "replica/core/spool.h"

#include <gtest/gtest.h>

#include <filesystem>

#include "tests/support/temp_dir.h"
#include "transfer/checksum.h"

namespace gfrep::replica {
namespace {

TEST(SpoolTest, ReplicasLiveUnderTheirIdentityNotTheirPath) {
  EXPECT_EQ(ReplicaFile("/spool", 42, 7).string(), "/spool/.gfrep-data/42/7");
}

TEST(SpoolTest, LegacyPathsMapIntoTheSpoolAndRefuseEscapesAndReservedNames) {
  auto rel = LegacySpoolRelativePath("/exp//run1/f.dat");
  ASSERT_TRUE(rel.ok());
  EXPECT_EQ(*rel, "exp/run1/f.dat");
  EXPECT_FALSE(LegacySpoolRelativePath("/a/../b").ok());
  EXPECT_FALSE(LegacySpoolRelativePath("relative").ok());
  EXPECT_FALSE(LegacySpoolRelativePath("/").ok());
  EXPECT_FALSE(LegacySpoolRelativePath("/.gfrep-tmp/x").ok());
}

TEST(SpoolTest, VerifyFileComparesSizeAndChecksumWithTheCatalog) {
  gfrep::testing::TempDir tmp;
  std::filesystem::path f = tmp.path() / "f";
  gfrep::testing::WriteRandomFile(f, 1000, 1);
  auto sum = transfer::ComputeFileChecksum(f, transfer::ChecksumAlgorithm::kXxh3_128);
  ASSERT_TRUE(sum.ok());
  catalog::Attributes a;
  a.size = 1000;
  a.checksum_algo = "xxh3-128";
  a.checksum = sum->substr(sum->find(':') + 1);
  EXPECT_TRUE(VerifyFile(f, a).ok());
  gfrep::testing::WriteRandomFile(f, 1000, 2);
  EXPECT_TRUE(absl::IsDataLoss(VerifyFile(f, a)));
  a.size = 999;
  EXPECT_TRUE(absl::IsDataLoss(VerifyFile(f, a)));
  EXPECT_TRUE(absl::IsNotFound(VerifyFile(tmp.path() / "nope", a)));
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

}  // namespace
}  // namespace gfrep::replica
