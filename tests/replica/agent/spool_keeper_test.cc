#include "replica/agent/internal/spool_keeper.h"

#include <gtest/gtest.h>
#include <spdlog/sinks/null_sink.h>
#include <spdlog/spdlog.h>

#include <fstream>

#include "replica/core/spool.h"
#include "tests/support/scratch_catalog.h"
#include "tests/support/temp_dir.h"
#include "transfer/checksum.h"
#include "transfer/spool_names.h"

namespace gfrep::replica::agent::internal {
namespace {

namespace fs = std::filesystem;

class SpoolKeeperTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto c = gfrep::testing::OpenScratchCatalog(dir_.Sub("db"));
    ASSERT_TRUE(c.ok()) << c.status();
    cat_ = std::move(*c);
    catalog::Site site;
    site.name = "S";
    ASSERT_TRUE(cat_->PutSite(site).ok());
    for (const char* name : {"n1", "n2"}) {
      catalog::Node node;
      node.name = name;
      node.site = "S";
      node.address = "127.0.0.1:1";
      node.spool = spool_.string();
      ASSERT_TRUE(cat_->RegisterNode(node).ok());
    }
    catalog::MkdirOptions m;
    m.parents = true;
    ASSERT_TRUE(cat_->Mkdir("/d", m).ok());
  }

  SpoolKeeper Keeper(std::chrono::milliseconds grace) {
    SpoolKeeperOptions o;
    o.catalog = cat_.get();
    o.node = "n1";
    o.spool = spool_;
    o.orphan_grace = grace;
    o.logger = std::make_shared<spdlog::logger>("test", std::make_shared<spdlog::sinks::null_sink_mt>());
    return SpoolKeeper(std::move(o));
  }

  // Commits `path` with the checksum of `bytes_of` and `writer` as the writer (the legacy
  // way: no reserved generation).
  catalog::Attributes Commit(const std::string& path, const fs::path& bytes_of,
                             const std::string& writer) {
    auto sum = transfer::ComputeFileChecksum(bytes_of, transfer::ChecksumAlgorithm::kXxh3_128);
    EXPECT_TRUE(sum.ok());
    catalog::FileContent c;
    c.size = fs::file_size(bytes_of);
    c.checksum_algo = "xxh3-128";
    c.checksum = sum->substr(sum->find(':') + 1);
    auto a = cat_->CommitFile(path, c, writer, std::nullopt);
    EXPECT_TRUE(a.ok()) << a.status();
    return *a;
  }

  // WriteRandomFile, making the parent directories first.
  static void Write(const fs::path& file, std::uint64_t size, std::uint64_t seed) {
    fs::create_directories(file.parent_path());
    gfrep::testing::WriteRandomFile(file, size, seed);
  }

  gfrep::testing::TempDir dir_{"spoolkeeper"};
  fs::path spool_ = dir_.path() / "spool";
  std::unique_ptr<catalog::Catalog> cat_;
};

TEST_F(SpoolKeeperTest, GarbageCollectionKeepsRecordedFilesAndRemovesTheRest) {
  fs::path src = dir_.path() / "src";
  Write(src, 1000, 1);
  catalog::Attributes kept = Commit("/d/kept", src, "n1");
  fs::path kept_file = ReplicaFile(spool_, kept.inode, kept.generation);
  Write(kept_file, 1000, 1);
  // An older generation of the same inode: superseded.
  fs::path older = spool_ / transfer::ReplicaRelativePath(kept.inode, 0);
  Write(older, 10, 2);
  // A file of an inode the catalog no longer has.
  catalog::Attributes gone = Commit("/d/gone", src, "n2");
  ASSERT_TRUE(cat_->Remove("/d/gone", false).ok());
  fs::path gone_file = ReplicaFile(spool_, gone.inode, gone.generation);
  Write(gone_file, 10, 3);
  // An upload nobody committed (yet): a reserved generation of a live file.
  auto reserved = cat_->BeginWrite("/d/kept", catalog::FileContent{});
  ASSERT_TRUE(reserved.ok());
  fs::path upload = ReplicaFile(spool_, kept.inode, reserved->generation);
  Write(upload, 10, 4);
  // Something that is not ours: never touched.
  fs::path stray = spool_ / transfer::kReplicaDirName / "notes.txt";
  Write(stray, 10, 5);

  auto removed = Keeper(std::chrono::hours(1)).CollectGarbage();
  ASSERT_TRUE(removed.ok()) << removed.status();
  EXPECT_EQ(*removed, 2u);
  EXPECT_TRUE(fs::exists(kept_file));
  EXPECT_FALSE(fs::exists(older));
  EXPECT_FALSE(fs::exists(gone_file));
  EXPECT_FALSE(fs::exists(gone_file.parent_path())) << "empty inode directories go too";
  EXPECT_TRUE(fs::exists(upload)) << "a young upload may still be committed";
  EXPECT_TRUE(fs::exists(stray));

  // Past the grace the uncommitted upload is garbage too.
  removed = Keeper(std::chrono::milliseconds(0)).CollectGarbage();
  ASSERT_TRUE(removed.ok());
  EXPECT_EQ(*removed, 1u);
  EXPECT_FALSE(fs::exists(upload));
  EXPECT_TRUE(fs::exists(kept_file));
}

TEST_F(SpoolKeeperTest, SweepUnlinksDeletingReplicasUpToTheirGenerationOnly) {
  fs::path src = dir_.path() / "src";
  Write(src, 100, 1);
  catalog::Attributes a = Commit("/d/f", src, "n1");
  fs::path file = ReplicaFile(spool_, a.inode, a.generation);
  Write(file, 100, 1);
  fs::path newer = ReplicaFile(spool_, a.inode, a.generation + 1);  // e.g. an upload
  Write(newer, 100, 2);
  ASSERT_TRUE(cat_->Remove("/d/f", false).ok());
  auto deleted = Keeper(std::chrono::hours(1)).SweepDeleting();
  ASSERT_TRUE(deleted.ok()) << deleted.status();
  EXPECT_EQ(*deleted, 1u);
  EXPECT_FALSE(fs::exists(file));
  EXPECT_TRUE(fs::exists(newer));
  auto left = cat_->ListNodeReplicas("n1", 0, 10);
  ASSERT_TRUE(left.ok());
  EXPECT_TRUE(left->empty());
}

TEST_F(SpoolKeeperTest, ALegacySpoolIsMigratedOnceAndOnlyVerifiedBytesBecomeReplicas) {
  fs::create_directories(spool_ / "d");
  // A complete replica with the right bytes, one with wrong bytes, a stale one, a stray
  // file, and the bytes of a removed file known only through the old index.
  Write(spool_ / "d/good", 5000, 1);
  catalog::Attributes good = Commit("/d/good", spool_ / "d/good", "n1");
  Write(dir_.path() / "right", 5000, 2);
  catalog::Attributes bad = Commit("/d/bad", dir_.path() / "right", "n1");
  Write(spool_ / "d/bad", 5000, 3);
  Write(spool_ / "d/stale", 300, 4);
  catalog::Attributes stale = Commit("/d/stale", spool_ / "d/stale", "n1");
  Commit("/d/stale", dir_.path() / "right", "n2");  // a newer version elsewhere
  Write(spool_ / "stray", 10, 5);
  Write(spool_ / "d/gone", 10, 6);
  catalog::Attributes gone = Commit("/d/gone", spool_ / "d/gone", "n1");
  fs::create_directories(spool_ / ".gfrep-index");
  std::ofstream(spool_ / ".gfrep-index" / std::to_string(gone.inode)) << "d/gone";
  ASSERT_TRUE(cat_->Remove("/d/gone", false).ok());

  SpoolKeeper keeper = Keeper(std::chrono::hours(1));
  ASSERT_TRUE(keeper.MigrateLegacyLayout().ok());

  EXPECT_FALSE(fs::exists(spool_ / "d/good"));
  EXPECT_EQ(gfrep::testing::ReadFile(ReplicaFile(spool_, good.inode, good.generation)).size(), 5000u);
  EXPECT_TRUE(fs::exists(spool_ / "d/bad")) << "unverified bytes stay where they were";
  EXPECT_FALSE(fs::exists(ReplicaFile(spool_, bad.inode, bad.generation)));
  auto bad_loc = cat_->Locate("/d/bad");
  ASSERT_TRUE(bad_loc.ok());
  ASSERT_EQ(bad_loc->replicas.size(), 1u);
  EXPECT_EQ(bad_loc->replicas[0].state, catalog::ReplicaState::kCorrupt);
  EXPECT_TRUE(fs::exists(ReplicaFile(spool_, stale.inode, stale.generation)));
  EXPECT_TRUE(fs::exists(spool_ / "stray"));
  EXPECT_FALSE(fs::exists(spool_ / "d/gone"));
  EXPECT_FALSE(fs::exists(spool_ / ".gfrep-index"));
  EXPECT_TRUE(fs::exists(spool_ / ".gfrep-layout"));

  // Once: a second run changes nothing (the stray file stays).
  ASSERT_TRUE(keeper.MigrateLegacyLayout().ok());
  EXPECT_TRUE(fs::exists(spool_ / "stray"));
  EXPECT_TRUE(fs::exists(ReplicaFile(spool_, good.inode, good.generation)));
}

}  // namespace
}  // namespace gfrep::replica::agent::internal
