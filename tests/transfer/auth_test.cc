#include "transfer/auth.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <fstream>

#include "tests/support/temp_dir.h"

namespace gfrep::transfer {
namespace {

TEST(AuthTest, CreatesKeyFileMode0600AndReusesIt) {
  testing::TempDir dir("auth");
  std::filesystem::path p = dir.path() / "home" / ".gfrep" / "shared_key";
  absl::StatusOr<std::string> a = LoadOrCreateSharedKey(p);
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->size(), 32u);
  struct stat st {};
  ASSERT_EQ(::stat(p.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  absl::StatusOr<std::string> b = LoadOrCreateSharedKey(p);
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(*a, *b);
}

TEST(AuthTest, RefusesKeyReadableByOthers) {
  testing::TempDir dir("auth");
  std::filesystem::path p = dir.path() / "key";
  ASSERT_TRUE(LoadOrCreateSharedKey(p).ok());
  ::chmod(p.c_str(), 0644);
  absl::StatusOr<std::string> k = LoadOrCreateSharedKey(p);
  EXPECT_TRUE(absl::IsPermissionDenied(k.status())) << k.status();
}

TEST(AuthTest, RefusesMalformedKey) {
  testing::TempDir dir("auth");
  std::filesystem::path p = dir.path() / "key";
  std::ofstream(p) << "not-hex\n";
  ::chmod(p.c_str(), 0600);
  EXPECT_TRUE(absl::IsInvalidArgument(LoadOrCreateSharedKey(p).status()));
}

}  // namespace
}  // namespace gfrep::transfer
