#include "transfer/internal/commit.h"

#include <gtest/gtest.h>

#include <filesystem>

#include "tests/support/temp_dir.h"

namespace gfrep::transfer::internal {
namespace {

namespace fs = std::filesystem;

class CommitTest : public ::testing::Test {
 protected:
  CommitTest() : dir_("commit"), root_(fs::canonical(dir_.path())) {}
  gfrep::testing::TempDir dir_;
  fs::path root_;
};

TEST_F(CommitTest, CreateParentsReturnsTheDirectoriesItMadeOutermostFirst) {
  fs::create_directories(root_ / "a");
  absl::StatusOr<std::vector<fs::path>> made = CreateParents(root_ / "a" / "b" / "c");
  ASSERT_TRUE(made.ok()) << made.status();
  EXPECT_EQ(*made, (std::vector<fs::path>{root_ / "a" / "b", root_ / "a" / "b" / "c"}));
  EXPECT_TRUE(fs::is_directory(root_ / "a" / "b" / "c"));
  absl::StatusOr<std::vector<fs::path>> again = CreateParents(root_ / "a" / "b" / "c");
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_TRUE(again->empty());
}

TEST_F(CommitTest, CreateParentsFailsWhenAComponentIsAFile) {
  gfrep::testing::WriteRandomFile(root_ / "file", 10, 1);
  absl::StatusOr<std::vector<fs::path>> made = CreateParents(root_ / "file" / "sub");
  EXPECT_TRUE(absl::IsFailedPrecondition(made.status())) << made.status();
}

TEST_F(CommitTest, SyncDirectoriesReportsADirectoryItCannotSync) {
  EXPECT_TRUE(SyncDirectories({root_}).ok());
  absl::Status s = SyncDirectories({root_, root_ / "gone"});
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("gone"), absl::string_view::npos) << s;
}

TEST_F(CommitTest, CommitCreatesParentsAndRenames) {
  gfrep::testing::WriteRandomFile(root_ / "part", 100, 2);
  std::string bytes = gfrep::testing::ReadFile(root_ / "part");
  ASSERT_TRUE(CommitFile(root_ / "part", root_ / "x" / "y" / "f", false).ok());
  EXPECT_EQ(gfrep::testing::ReadFile(root_ / "x" / "y" / "f"), bytes);
  EXPECT_FALSE(fs::exists(root_ / "part"));
  // A normal commit replaces an existing file.
  gfrep::testing::WriteRandomFile(root_ / "part", 50, 3);
  ASSERT_TRUE(CommitFile(root_ / "part", root_ / "x" / "y" / "f", false).ok());
  EXPECT_EQ(fs::file_size(root_ / "x" / "y" / "f"), 50u);
}

TEST_F(CommitTest, CreateOnlyCommitNeverReplacesAndDropsTheTemporary) {
  gfrep::testing::WriteRandomFile(root_ / "first", 100, 4);
  std::string first = gfrep::testing::ReadFile(root_ / "first");
  ASSERT_TRUE(CommitFile(root_ / "first", root_ / "d" / "f", true).ok());
  gfrep::testing::WriteRandomFile(root_ / "second", 100, 5);
  absl::Status s = CommitFile(root_ / "second", root_ / "d" / "f", true);
  EXPECT_TRUE(absl::IsAlreadyExists(s)) << s;
  EXPECT_EQ(gfrep::testing::ReadFile(root_ / "d" / "f"), first);
  EXPECT_FALSE(fs::exists(root_ / "second"));
}

TEST_F(CommitTest, CommitFailsClearlyWhenAParentIsAFile) {
  gfrep::testing::WriteRandomFile(root_ / "blocker", 10, 6);
  gfrep::testing::WriteRandomFile(root_ / "part", 10, 7);
  absl::Status s = CommitFile(root_ / "part", root_ / "blocker" / "f", false);
  EXPECT_TRUE(absl::IsFailedPrecondition(s)) << s;
  EXPECT_TRUE(fs::exists(root_ / "part"));
}

}  // namespace
}  // namespace gfrep::transfer::internal
