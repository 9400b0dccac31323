#include "transfer/internal/path.h"

#include <gtest/gtest.h>

#include <filesystem>

#include "tests/support/temp_dir.h"
#include "transfer/internal/log_safe.h"

namespace gfrep::transfer::internal {
namespace {

class PathTest : public ::testing::Test {
 protected:
  PathTest() : dir_("path"), spool_(std::filesystem::canonical(dir_.path()) / "spool") {
    std::filesystem::create_directories(spool_ / "sub");
    std::filesystem::create_directories(dir_.path() / "outside");
  }
  gfrep::testing::TempDir dir_;
  std::filesystem::path spool_;
};

TEST_F(PathTest, AcceptsPlainRelativePaths) {
  absl::StatusOr<std::filesystem::path> p = ResolveSpoolPath(spool_, "sub/file.dat");
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(*p, spool_ / "sub" / "file.dat");
  EXPECT_TRUE(ResolveSpoolPath(spool_, "new/dir/file").ok());
}

TEST_F(PathTest, RefusesEscapesAndOddComponents) {
  for (const char* bad : {"../x", "sub/../../x", "a/./b", ".", "..", "/etc/passwd", "", "a//b",
                          "a/", ".gfrep-tmp/x"}) {
    absl::StatusOr<std::filesystem::path> p = ResolveSpoolPath(spool_, bad);
    EXPECT_TRUE(absl::IsInvalidArgument(p.status())) << "'" << bad << "': " << p.status();
  }
  EXPECT_FALSE(ResolveSpoolPath(spool_, std::string("a\0b", 3)).ok());
  // Issue 37: a newline in a path was accepted and logged raw (forged log lines).
  for (const char* bad : {"a\nb", "dir/x\r", "\x1b[2J", "a\x7f"}) {
    absl::StatusOr<std::filesystem::path> p = ResolveSpoolPath(spool_, bad);
    EXPECT_TRUE(absl::IsInvalidArgument(p.status())) << p.status();
    EXPECT_EQ(std::string(p.status().message()).find('\n'), std::string::npos);
  }
  EXPECT_FALSE(ResolveSpoolPath(spool_, std::string(5000, 'a')).ok());
}

TEST_F(PathTest, RefusesReservedTopLevelNamesButServesReplicaNames) {
  for (const char* bad : {".gfrep-index/1", ".gfrep-staging/task-1", ".gfrep-tmp/x", ".gfrep-data",
                          ".gfrep-data/1", ".gfrep-data/01/2", ".gfrep-data/1/02", ".gfrep-data/1/2/3",
                          ".gfrep-data/a/2", ".gfrep-data/1/", ".gfrep-other", ".gfrep-"}) {
    absl::StatusOr<std::filesystem::path> p = ResolveSpoolPath(spool_, bad);
    EXPECT_TRUE(absl::IsInvalidArgument(p.status())) << "'" << bad << "': " << p.status();
    EXPECT_NE(p.status().message().find("reserved"), absl::string_view::npos) << bad;
  }
  absl::StatusOr<std::filesystem::path> replica = ResolveSpoolPath(spool_, ".gfrep-data/5/7");
  ASSERT_TRUE(replica.ok()) << replica.status();
  EXPECT_EQ(*replica, spool_ / ".gfrep-data" / "5" / "7");
  EXPECT_TRUE(ResolveSpoolPath(spool_, ".gfrep-data/0/18446744073709551615").ok());
  // Only the first component is reserved.
  EXPECT_TRUE(ResolveSpoolPath(spool_, "sub/.gfrep-index").ok());
  EXPECT_TRUE(ResolveSpoolPath(spool_, ".gfrepx").ok());
}

TEST_F(PathTest, RefusesSymlinkLeavingTheSpool) {
  std::filesystem::create_directory_symlink(dir_.path() / "outside", spool_ / "link");
  absl::StatusOr<std::filesystem::path> p = ResolveSpoolPath(spool_, "link/secret");
  EXPECT_TRUE(absl::IsPermissionDenied(p.status())) << p.status();
  std::filesystem::create_symlink("/etc/passwd", spool_ / "pw");
  EXPECT_TRUE(absl::IsPermissionDenied(ResolveSpoolPath(spool_, "pw").status()));
}

TEST_F(PathTest, AllowsSymlinkStayingInside) {
  std::filesystem::create_directory_symlink(spool_ / "sub", spool_ / "alias");
  EXPECT_TRUE(ResolveSpoolPath(spool_, "alias/f").ok());
}

TEST(LogSafeTest, EscapesControlCharactersOnly) {
  EXPECT_EQ(LogSafe("plain caf\xc3\xa9 / ok"), "plain caf\xc3\xa9 / ok");
  EXPECT_EQ(LogSafe("a\nforged line"), "a\\x0aforged line");
  EXPECT_EQ(LogSafe(std::string("\0\x1b\x7f", 3)), "\\x00\\x1b\\x7f");
}

}  // namespace
}  // namespace gfrep::transfer::internal
