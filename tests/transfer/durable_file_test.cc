#include "transfer/durable_file.h"

#include <gtest/gtest.h>

#include <filesystem>

#include "tests/support/temp_dir.h"

namespace gfrep::transfer {
namespace {

namespace fs = std::filesystem;

class DurableFileTest : public ::testing::Test {
 protected:
  DurableFileTest() : dir_("durable"), root_(fs::canonical(dir_.path())) {}
  gfrep::testing::TempDir dir_;
  fs::path root_;
};

TEST_F(DurableFileTest, CreateParentsReturnsTheDirectoriesItMadeOutermostFirst) {
  fs::create_directories(root_ / "a");
  absl::StatusOr<std::vector<fs::path>> made = CreateParents(root_ / "a" / "b" / "c");
  ASSERT_TRUE(made.ok()) << made.status();
  EXPECT_EQ(*made, (std::vector<fs::path>{root_ / "a" / "b", root_ / "a" / "b" / "c"}));
  EXPECT_TRUE(fs::is_directory(root_ / "a" / "b" / "c"));
  absl::StatusOr<std::vector<fs::path>> again = CreateParents(root_ / "a" / "b" / "c");
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_TRUE(again->empty());
}

TEST_F(DurableFileTest, CreateParentsFailsWhenAComponentIsAFile) {
  gfrep::testing::WriteRandomFile(root_ / "file", 10, 1);
  absl::StatusOr<std::vector<fs::path>> made = CreateParents(root_ / "file" / "sub");
  EXPECT_TRUE(absl::IsFailedPrecondition(made.status())) << made.status();
}

TEST_F(DurableFileTest, SyncDirectoriesReportsADirectoryItCannotSync) {
  EXPECT_TRUE(SyncDirectories({root_}).ok());
  absl::Status s = SyncDirectories({root_, root_ / "gone"});
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("gone"), absl::string_view::npos) << s;
}

TEST_F(DurableFileTest, CommitCreatesParentsAndRenames) {
  gfrep::testing::WriteRandomFile(root_ / "part", 100, 2);
  std::string bytes = gfrep::testing::ReadFile(root_ / "part");
  ASSERT_TRUE(InstallFile(root_ / "part", root_ / "x" / "y" / "f", false).ok());
  EXPECT_EQ(gfrep::testing::ReadFile(root_ / "x" / "y" / "f"), bytes);
  EXPECT_FALSE(fs::exists(root_ / "part"));
  // A normal commit replaces an existing file.
  gfrep::testing::WriteRandomFile(root_ / "part", 50, 3);
  ASSERT_TRUE(InstallFile(root_ / "part", root_ / "x" / "y" / "f", false).ok());
  EXPECT_EQ(fs::file_size(root_ / "x" / "y" / "f"), 50u);
}

TEST_F(DurableFileTest, CreateOnlyCommitNeverReplacesAndDropsTheTemporary) {
  gfrep::testing::WriteRandomFile(root_ / "first", 100, 4);
  std::string first = gfrep::testing::ReadFile(root_ / "first");
  ASSERT_TRUE(InstallFile(root_ / "first", root_ / "d" / "f", true).ok());
  gfrep::testing::WriteRandomFile(root_ / "second", 100, 5);
  absl::Status s = InstallFile(root_ / "second", root_ / "d" / "f", true);
  EXPECT_TRUE(absl::IsAlreadyExists(s)) << s;
  EXPECT_EQ(gfrep::testing::ReadFile(root_ / "d" / "f"), first);
  EXPECT_FALSE(fs::exists(root_ / "second"));
}

TEST_F(DurableFileTest, CommitFailsClearlyWhenAParentIsAFile) {
  gfrep::testing::WriteRandomFile(root_ / "blocker", 10, 6);
  gfrep::testing::WriteRandomFile(root_ / "part", 10, 7);
  absl::Status s = InstallFile(root_ / "part", root_ / "blocker" / "f", false);
  EXPECT_TRUE(absl::IsFailedPrecondition(s)) << s;
  EXPECT_TRUE(fs::exists(root_ / "part"));
}

TEST_F(DurableFileTest, RenameNoReplaceNeverOverwrites) {
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

TEST_F(DurableFileTest, SyncDirectoryChainSyncsInsideTheRootOnly) {
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

TEST_F(DurableFileTest, WriteFileDurablyReplacesTheWholeFileAndSaysWhatFailedByErrno) {
  gfrep::testing::TempDir tmp;
  const std::filesystem::path file = tmp.path() / "state.json";
  ASSERT_TRUE(WriteFileDurably(file, "first\n").ok());
  ASSERT_TRUE(WriteFileDurably(file, "second, longer\n").ok());
  EXPECT_EQ(gfrep::testing::ReadFile(file), "second, longer\n");
  EXPECT_FALSE(std::filesystem::exists(tmp.path() / "state.json.tmp"))
      << "the temporary file is renamed";
  // A missing directory is kNotFound (the errno mapping every library shares), not kInternal.
  absl::Status missing = WriteFileDurably(tmp.path() / "no-such-dir" / "f", "x");
  EXPECT_TRUE(absl::IsNotFound(missing)) << missing;
  EXPECT_NE(missing.message().find("no-such-dir"), absl::string_view::npos) << missing;
}


// A tree that receives many files syncs each directory chain once per process: a replica's
// directory is new for every file, and syncing the whole chain up to the spool cost three
// directory fsyncs per copy.
TEST_F(DurableFileTest, DurableDirectoriesSyncEachChainOncePerProcess) {
  const fs::path root = root_ / "spool";
  fs::create_directories(root);
  DurableDirectories dirs(root);
  // New a/1: root (holds a, and was not known: with its own chain, just root) and a (holds 1).
  ASSERT_TRUE(dirs.Prepare(root / "a" / "1").ok());
  EXPECT_TRUE(fs::is_directory(root / "a" / "1"));
  EXPECT_EQ(dirs.synced(), 2u);
  // Known: nothing to sync.
  ASSERT_TRUE(dirs.Prepare(root / "a" / "1").ok());
  EXPECT_EQ(dirs.synced(), 2u);
  // A new sibling: only its parent, which is known.
  ASSERT_TRUE(dirs.Prepare(root / "a" / "2").ok());
  EXPECT_EQ(dirs.synced(), 3u);
  // Another process (or one that died before its sync) made a/3: the whole chain once.
  fs::create_directories(root / "a" / "3");
  ASSERT_TRUE(dirs.Prepare(root / "a" / "3").ok());
  EXPECT_EQ(dirs.synced(), 6u);  // a/3, a, root
  ASSERT_TRUE(dirs.Prepare(root / "a" / "3").ok());
  EXPECT_EQ(dirs.synced(), 6u);
  // A new process knows nothing: the chain of an existing directory again.
  DurableDirectories restarted(root);
  ASSERT_TRUE(restarted.Prepare(root / "a" / "1").ok());
  EXPECT_EQ(restarted.synced(), 3u);
  // Outside the root: refused, nothing made.
  EXPECT_EQ(dirs.Prepare(root_ / "elsewhere").code(), absl::StatusCode::kInvalidArgument);
  EXPECT_FALSE(fs::exists(root_ / "elsewhere"));
  // A component that is a file: the error, nothing remembered.
  gfrep::testing::WriteRandomFile(root / "file", 10, 1);
  EXPECT_EQ(dirs.Prepare(root / "file" / "x").code(), absl::StatusCode::kFailedPrecondition);
  // Remembering is bounded: past the limit, a known-looking directory is synced again.
  DurableDirectories small(root, 1);
  ASSERT_TRUE(small.Prepare(root / "b" / "1").ok());  // remembers root only
  const std::uint64_t before = small.synced();
  ASSERT_TRUE(small.Prepare(root / "b" / "1").ok());
  EXPECT_GT(small.synced(), before);
}

}  // namespace
}  // namespace gfrep::transfer
