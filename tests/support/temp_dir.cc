#include "tests/support/temp_dir.h"

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <random>
#include <sstream>
#include <vector>

namespace gfrep::testing {

TempDir::TempDir(std::string_view prefix) {
  const char* base = std::getenv("TMPDIR");
  std::string tmpl = std::string(base != nullptr && *base != '\0' ? base : "/tmp") + "/gfrep-" +
                     std::string(prefix) + "-XXXXXX";
  std::vector<char> buf(tmpl.begin(), tmpl.end());
  buf.push_back('\0');
  if (mkdtemp(buf.data()) == nullptr) {
    std::perror("mkdtemp");
    std::abort();
  }
  path_ = buf.data();
}

TempDir::~TempDir() {
  std::error_code ec;
  std::filesystem::remove_all(path_, ec);
  (void)ec;  // ignored: best-effort cleanup of a test directory
}

std::string TempDir::Sub(std::string_view name) const { return (path_ / name).string(); }

void WriteRandomFile(const std::filesystem::path& path, std::uint64_t size, std::uint64_t seed) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  std::mt19937_64 rng(seed);
  std::vector<std::uint64_t> block(1 << 14);
  std::uint64_t left = size;
  while (left > 0) {
    for (auto& w : block) w = rng();
    std::uint64_t n = std::min<std::uint64_t>(left, block.size() * sizeof(std::uint64_t));
    out.write(reinterpret_cast<const char*>(block.data()), static_cast<std::streamsize>(n));
    left -= n;
  }
}

void FlipByte(const std::filesystem::path& path, std::uint64_t offset) {
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  char c = 0;
  if (!f.seekg(static_cast<std::streamoff>(offset)) || !f.read(&c, 1)) {
    std::fprintf(stderr, "FlipByte: cannot read byte %llu of %s\n",
                 static_cast<unsigned long long>(offset), path.c_str());
    std::abort();
  }
  c = static_cast<char>(c ^ 0x5a);
  f.seekp(static_cast<std::streamoff>(offset));
  f.write(&c, 1);
}

std::string ReadFile(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace gfrep::testing
