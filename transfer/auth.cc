#include "transfer/auth.h"

#include <fcntl.h>
#include <openssl/rand.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>

#include <fmt/format.h>

#include "absl/status/status.h"

namespace gfrep::transfer {
namespace {
constexpr std::size_t kKeyBytes = 32;

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}
}  // namespace

std::filesystem::path DefaultKeyPath() {
  const char* home = std::getenv("HOME");
  std::filesystem::path base = (home != nullptr && *home != '\0') ? home : "/";
  return base / ".gfrep" / "shared_key";
}

absl::StatusOr<std::string> LoadOrCreateSharedKey(const std::filesystem::path& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    if (errno != ENOENT) {
      return absl::InternalError(fmt::format("key file {}: {}", path.string(), std::strerror(errno)));
    }
    std::error_code ec;
    if (path.has_parent_path() && !std::filesystem::exists(path.parent_path())) {
      std::filesystem::create_directories(path.parent_path(), ec);
      if (ec) {
        return absl::InternalError(fmt::format("create {}: {}", path.parent_path().string(), ec.message()));
      }
      ::chmod(path.parent_path().c_str(), 0700);
    }
    unsigned char key[kKeyBytes];
    if (RAND_bytes(key, sizeof(key)) != 1) return absl::InternalError("RAND_bytes failed");
    std::string hex;
    for (unsigned char b : key) hex += fmt::format("{:02x}", b);
    hex += '\n';
    // Write a private temporary file, then link() it into place: link fails if another
    // process created the key first (we then use theirs), and nobody ever reads a
    // half-written key.
    std::filesystem::path tmp = path;
    tmp += fmt::format(".tmp.{}", ::getpid());
    int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0) {
      return absl::InternalError(fmt::format("create key file {}: {}", tmp.string(), std::strerror(errno)));
    }
    bool ok = ::write(fd, hex.data(), hex.size()) == static_cast<ssize_t>(hex.size());
    ok = ::fsync(fd) == 0 && ok;
    ::close(fd);
    int link_errno = ok && ::link(tmp.c_str(), path.c_str()) != 0 ? errno : 0;
    ::unlink(tmp.c_str());
    if (!ok) return absl::InternalError(fmt::format("write key file {}", tmp.string()));
    if (link_errno != 0 && link_errno != EEXIST) {
      return absl::InternalError(fmt::format("create key file {}: {}", path.string(), std::strerror(link_errno)));
    }
    if (::stat(path.c_str(), &st) != 0) {
      return absl::InternalError(fmt::format("key file {}: {}", path.string(), std::strerror(errno)));
    }
  }
  if ((st.st_mode & 077) != 0) {
    return absl::PermissionDeniedError(fmt::format(
        "key file {} is accessible by group/others (mode {:o}); run chmod 600 {}", path.string(),
        st.st_mode & 0777, path.string()));
  }
  std::ifstream in(path);
  std::string text;
  std::getline(in, text);
  while (!text.empty() && (text.back() == '\r' || text.back() == ' ')) text.pop_back();
  if (text.size() != 2 * kKeyBytes) {
    return absl::InvalidArgumentError(
        fmt::format("key file {}: expected {} hex digits", path.string(), 2 * kKeyBytes));
  }
  std::string key;
  for (std::size_t i = 0; i < text.size(); i += 2) {
    int hi = HexValue(text[i]);
    int lo = HexValue(text[i + 1]);
    if (hi < 0 || lo < 0) {
      return absl::InvalidArgumentError(fmt::format("key file {}: not hex", path.string()));
    }
    key.push_back(static_cast<char>(hi * 16 + lo));
  }
  return key;
}

}  // namespace gfrep::transfer
