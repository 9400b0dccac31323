#include "tests/support/temp_dir.h"

#include <gtest/gtest.h>

namespace gfrep::testing {
namespace {

TEST(TempDirTest, RemovesItselfAndContents) {
  std::filesystem::path kept;
  {
    TempDir dir("support");
    kept = dir.path();
    WriteRandomFile(dir.path() / "f", 100000, 7);
    EXPECT_EQ(std::filesystem::file_size(dir.path() / "f"), 100000u);
  }
  EXPECT_FALSE(std::filesystem::exists(kept));
}

TEST(TempDirTest, RandomFilesAreDeterministicPerSeed) {
  TempDir dir;
  WriteRandomFile(dir.path() / "a", 4096, 1);
  WriteRandomFile(dir.path() / "b", 4096, 1);
  WriteRandomFile(dir.path() / "c", 4096, 2);
  EXPECT_EQ(ReadFile(dir.path() / "a"), ReadFile(dir.path() / "b"));
  EXPECT_NE(ReadFile(dir.path() / "a"), ReadFile(dir.path() / "c"));
}

}  // namespace
}  // namespace gfrep::testing
