#include "transfer/internal/journal.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <optional>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "absl/status/status.h"
#include "transfer/errno_status.h"
#include "transfer/internal/xxh.h"

namespace gfrep::transfer::internal {
namespace {

constexpr std::uint32_t kJournalMagic = 0x4a524647;  // "GFRJ"
constexpr std::uint32_t kMaxHeader = 64 * 1024;

void StoreNative64(unsigned char* p, std::uint64_t v) { std::memcpy(p, &v, 8); }
std::uint64_t LoadNative64(const unsigned char* p) {
  std::uint64_t v;
  std::memcpy(&v, p, 8);
  return v;
}

absl::Status Errno(std::string_view what, const std::filesystem::path& path) {
  return ErrnoStatus(errno, fmt::format("{} {}", what, path.string()));
}

bool WriteAll(int fd, const void* data, std::size_t size) {
  const char* p = static_cast<const char*>(data);
  while (size > 0) {
    ssize_t n = ::write(fd, p, size);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    p += n;
    size -= static_cast<std::size_t>(n);
  }
  return true;
}

std::string HeaderJson(const JournalHeader& h) {
  nlohmann::json j = {{"size", h.size}, {"source_id", h.source_id}, {"checksum", h.checksum}};
  return j.dump();
}

// If the file at fd holds a journal with header `expected`, fills `ranges` from its records
// up to the first bad one and returns where that one begins (the end of the valid records).
std::optional<std::uint64_t> Load(int fd, const JournalHeader& expected, RangeSet& ranges) {
  struct stat st {};
  if (::fstat(fd, &st) != 0 || st.st_size < 8 || st.st_size > (1ll << 30)) return std::nullopt;
  std::string data(static_cast<std::size_t>(st.st_size), '\0');
  if (::pread(fd, data.data(), data.size(), 0) != static_cast<ssize_t>(data.size())) {
    return std::nullopt;
  }
  const auto* p = reinterpret_cast<const unsigned char*>(data.data());
  std::uint32_t magic, n;
  std::memcpy(&magic, p, 4);
  std::memcpy(&n, p + 4, 4);
  if (magic != kJournalMagic || n > kMaxHeader || data.size() < 8 + n + 8) return std::nullopt;
  if (XXH3_64bits(p + 8, n) != LoadNative64(p + 8 + n)) return std::nullopt;
  if (std::string_view(data.data() + 8, n) != HeaderJson(expected)) return std::nullopt;
  std::size_t off = 16 + n;
  for (; off + 24 <= data.size(); off += 24) {
    std::uint64_t b = LoadNative64(p + off), e = LoadNative64(p + off + 8);
    if (XXH3_64bits(p + off, 16) != LoadNative64(p + off + 16)) break;  // torn or damaged
    if (b > e || e > expected.size) break;
    ranges.Add(b, e);
  }
  return off;
}

}  // namespace

Journal::~Journal() { Close(); }

Journal::Journal(Journal&& o) noexcept
    : fd_(std::exchange(o.fd_, -1)),
      path_(std::exchange(o.path_, {})),
      header_(std::move(o.header_)),
      ranges_(std::move(o.ranges_)),
      resumed_(o.resumed_) {}

Journal& Journal::operator=(Journal&& o) noexcept {
  if (this != &o) {
    Close();
    fd_ = std::exchange(o.fd_, -1);
    path_ = std::exchange(o.path_, {});
    header_ = std::move(o.header_);
    ranges_ = std::move(o.ranges_);
    resumed_ = o.resumed_;
  }
  return *this;
}

void Journal::Close() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  path_.clear();  // closed: no later Append creates it
}

absl::StatusOr<Journal> Journal::Open(const std::filesystem::path& path,
                                      const JournalHeader& header) {
  Journal j;
  j.path_ = path;
  const std::string json = HeaderJson(header);
  j.header_.assign(8 + json.size() + 8, '\0');
  auto* p = reinterpret_cast<unsigned char*>(j.header_.data());
  std::uint32_t magic = kJournalMagic, n = static_cast<std::uint32_t>(json.size());
  std::memcpy(p, &magic, 4);
  std::memcpy(p + 4, &n, 4);
  std::memcpy(p + 8, json.data(), n);
  StoreNative64(p + 8 + n, XXH3_64bits(json.data(), n));
  j.fd_ = ::open(path.c_str(), O_RDWR | O_CLOEXEC | O_NOFOLLOW);
  if (j.fd_ < 0) {
    if (errno == ENOENT) return j;  // made by the first Append
    return Errno("open journal", path);
  }
  if (std::optional<std::uint64_t> valid_end = Load(j.fd_, header, j.ranges_)) {
    j.resumed_ = true;
    // Drop the tail from the first bad record on (torn or damaged) so new records follow
    // valid ones: the next Load stops at the first bad record and would never see them.
    if (::ftruncate(j.fd_, static_cast<off_t>(*valid_end)) != 0) {
      return Errno("truncate journal", path);
    }
    if (::lseek(j.fd_, 0, SEEK_END) < 0) return Errno("seek journal", path);
    return j;
  }
  // Another source version's (or damaged): it describes nothing of ours.
  j.ranges_.Clear();
  ::close(std::exchange(j.fd_, -1));
  if (::unlink(path.c_str()) != 0 && errno != ENOENT) return Errno("remove journal", path);
  return j;
}

absl::Status Journal::Append(const std::vector<ByteRange>& ranges) {
  if (ranges.empty()) return absl::OkStatus();
  std::string buf;
  if (fd_ < 0) {
    if (path_.empty()) return absl::FailedPreconditionError("journal closed");
    fd_ = ::open(path_.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd_ < 0) return Errno("create journal", path_);
    buf = header_;
  }
  const std::size_t at = buf.size();
  buf.resize(at + ranges.size() * 24);
  auto* p = reinterpret_cast<unsigned char*>(buf.data() + at);
  for (const ByteRange& r : ranges) {
    StoreNative64(p, r.begin);
    StoreNative64(p + 8, r.end);
    StoreNative64(p + 16, XXH3_64bits(p, 16));
    p += 24;
  }
  if (!WriteAll(fd_, buf.data(), buf.size())) return Errno("append journal", path_);
  if (::fdatasync(fd_) != 0) return Errno("sync journal", path_);
  for (const ByteRange& r : ranges) ranges_.Add(r);
  return absl::OkStatus();
}

}  // namespace gfrep::transfer::internal
