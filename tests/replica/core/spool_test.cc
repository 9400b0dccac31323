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

TEST(SpoolTest, RenameNoReplaceNeverOverwrites) {
  gfrep::testing::TempDir tmp;
  gfrep::testing::WriteRandomFile(tmp.path() / "a", 10, 1);
  gfrep::testing::WriteRandomFile(tmp.path() / "b", 20, 2);
  absl::Status s = RenameNoReplace(tmp.path() / "a", tmp.path() / "b");
  EXPECT_TRUE(absl::IsAlreadyExists(s)) << s;
  EXPECT_EQ(std::filesystem::file_size(tmp.path() / "b"), 20u);
  EXPECT_TRUE(std::filesystem::exists(tmp.path() / "a"));
  EXPECT_TRUE(RenameNoReplace(tmp.path() / "a", tmp.path() / "c").ok());
  EXPECT_EQ(std::filesystem::file_size(tmp.path() / "c"), 10u);
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

TEST(SpoolTest, WriteFileDurablyReplacesTheWholeFileAndSaysWhatFailedByErrno) {
  gfrep::testing::TempDir tmp;
  const std::filesystem::path file = tmp.path() / "state.json";
  ASSERT_TRUE(WriteFileDurably(file, "first\n").ok());
  ASSERT_TRUE(WriteFileDurably(file, "second, longer\n").ok());
  EXPECT_EQ(gfrep::testing::ReadFile(file), "second, longer\n");
  EXPECT_FALSE(std::filesystem::exists(tmp.path() / "state.json.tmp")) << "the temporary file is renamed";
  // A missing directory is kNotFound (the errno mapping every library shares), not kInternal.
  absl::Status missing = WriteFileDurably(tmp.path() / "no-such-dir" / "f", "x");
  EXPECT_TRUE(absl::IsNotFound(missing)) << missing;
  EXPECT_NE(missing.message().find("no-such-dir"), absl::string_view::npos) << missing;
}

}  // namespace
}  // namespace gfrep::replica
