#pragma once

// TempDir is a fresh directory under $TMPDIR (or /tmp) that is removed, with
// everything in it, when the object is destroyed, also when a test fails.
//
// Thread safety: none needed; owned by one test.

#include <filesystem>
#include <string>
#include <string_view>

namespace gfrep::testing {

class TempDir {
 public:
  // Creates gfrep-<prefix>-XXXXXX. Aborts the test binary if the directory cannot
  // be made: nothing else in a test could work without it.
  explicit TempDir(std::string_view prefix = "test");
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::filesystem::path& path() const { return path_; }
  // path() / name, as a string (handy for argv).
  std::string Sub(std::string_view name) const;

 private:
  std::filesystem::path path_;
};

// Writes `size` deterministic pseudo-random bytes (seeded by `seed`) to `path`.
void WriteRandomFile(const std::filesystem::path& path, std::uint64_t size, std::uint64_t seed);

// Overwrites the byte at `offset` of an existing file with a different one, in place (the
// size stays; the mtime moves, as with any write). Aborts the test process if it cannot.
void FlipByte(const std::filesystem::path& path, std::uint64_t offset);

// Reads a whole file; empty string if it cannot be read.
std::string ReadFile(const std::filesystem::path& path);

}  // namespace gfrep::testing
