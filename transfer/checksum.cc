#include "transfer/checksum.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <openssl/evp.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <memory>

#include "absl/status/status.h"
#include "absl/strings/cord.h"
#include "transfer/internal/xxh.h"

namespace gfrep::transfer {
namespace {

std::string Hex(const unsigned char* data, std::size_t size) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out(size * 2, '0');
  for (std::size_t i = 0; i < size; ++i) {
    out[2 * i] = kDigits[data[i] >> 4];
    out[2 * i + 1] = kDigits[data[i] & 15];
  }
  return out;
}

std::array<std::uint32_t, 256> MakeCrc32cTable() {
  std::array<std::uint32_t, 256> table{};
  for (std::uint32_t i = 0; i < 256; ++i) {
    std::uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
    table[i] = c;
  }
  return table;
}

#if defined(__x86_64__)
__attribute__((target("sse4.2"))) std::uint32_t Crc32cHw(std::uint32_t crc, const unsigned char* p,
                                                          std::size_t n) {
  std::uint64_t c = crc;
  while (n >= 8) {
    std::uint64_t v;
    std::memcpy(&v, p, 8);
    c = __builtin_ia32_crc32di(c, v);
    p += 8;
    n -= 8;
  }
  auto c32 = static_cast<std::uint32_t>(c);
  while (n-- > 0) c32 = __builtin_ia32_crc32qi(c32, *p++);
  return c32;
}
#endif

}  // namespace

namespace {
constexpr char kExpectedMismatchPayload[] = "gfrep/expected-checksum-mismatch";
}  // namespace

absl::Status ExpectedChecksumMismatch(std::string_view message) {
  absl::Status s = absl::FailedPreconditionError(std::string(message));
  s.SetPayload(kExpectedMismatchPayload, absl::Cord("1"));
  return s;
}

bool IsExpectedChecksumMismatch(const absl::Status& status) {
  return status.GetPayload(kExpectedMismatchPayload).has_value();
}

absl::StatusOr<ChecksumAlgorithm> ParseChecksumAlgorithm(std::string_view name) {
  if (name == "xxh3-tree") return ChecksumAlgorithm::kXxh3Tree;
  if (name == "xxh3-128" || name == "xxh3" || name == "xxh128") return ChecksumAlgorithm::kXxh3_128;
  if (name == "adler32") return ChecksumAlgorithm::kAdler32;
  if (name == "sha256") return ChecksumAlgorithm::kSha256;
  return absl::InvalidArgumentError(
      fmt::format("unknown checksum algorithm '{}' (xxh3-tree, xxh3-128, adler32, sha256)", name));
}

std::string_view ChecksumAlgorithmName(ChecksumAlgorithm algorithm) {
  switch (algorithm) {
    case ChecksumAlgorithm::kXxh3_128: return "xxh3-128";
    case ChecksumAlgorithm::kAdler32: return "adler32";
    case ChecksumAlgorithm::kSha256: return "sha256";
    case ChecksumAlgorithm::kXxh3Tree: return "xxh3-tree";
  }
  return "?";
}

absl::StatusOr<BlockChecksumAlgorithm> ParseBlockChecksumAlgorithm(std::string_view name) {
  if (name == "xxh3-64" || name == "xxh3") return BlockChecksumAlgorithm::kXxh3_64;
  if (name == "crc32c") return BlockChecksumAlgorithm::kCrc32c;
  return absl::InvalidArgumentError(
      fmt::format("unknown block checksum algorithm '{}' (xxh3-64, crc32c)", name));
}

std::string_view BlockChecksumAlgorithmName(BlockChecksumAlgorithm algorithm) {
  return algorithm == BlockChecksumAlgorithm::kCrc32c ? "crc32c" : "xxh3-64";
}

struct FileHasher::State {
  XXH3_state_t* xxh = nullptr;  // xxh3-128; xxh3-tree: over the leaf digests
  XXH3_state_t* leaf = nullptr;  // xxh3-tree: the leaf being hashed
  std::uint64_t leaf_fill = 0;
  std::uint32_t adler = 1;
  EVP_MD_CTX* sha = nullptr;
};

namespace {

LeafDigest DigestOf(XXH3_state_t* leaf) {
  XXH128_canonical_t canon;
  XXH128_canonicalFromHash(&canon, XXH3_128bits_digest(leaf));
  LeafDigest d;
  std::memcpy(d.data(), canon.digest, d.size());
  return d;
}

// Feeds `size` bytes into a leaf state of `fill` bytes, calling end() at each leaf boundary
// (which digests and resets the leaf).
template <typename EndLeaf>
void FeedLeaves(XXH3_state_t* leaf, std::uint64_t& fill, const unsigned char* p, std::size_t size,
                EndLeaf end) {
  while (size > 0) {
    auto n = static_cast<std::size_t>(std::min<std::uint64_t>(size, kTreeLeafBytes - fill));
    XXH3_128bits_update(leaf, p, n);
    fill += n;
    p += n;
    size -= n;
    if (fill == kTreeLeafBytes) {
      end();
      XXH3_128bits_reset(leaf);
      fill = 0;
    }
  }
}

}  // namespace

FileHasher::FileHasher(ChecksumAlgorithm algorithm)
    : algorithm_(algorithm), state_(std::make_unique<State>()) {
  switch (algorithm_) {
    case ChecksumAlgorithm::kXxh3_128:
      state_->xxh = XXH3_createState();
      XXH3_128bits_reset(state_->xxh);
      break;
    case ChecksumAlgorithm::kAdler32:
      break;
    case ChecksumAlgorithm::kSha256:
      state_->sha = EVP_MD_CTX_new();
      EVP_DigestInit_ex(state_->sha, EVP_sha256(), nullptr);
      break;
    case ChecksumAlgorithm::kXxh3Tree:
      state_->xxh = XXH3_createState();
      XXH3_128bits_reset(state_->xxh);
      state_->leaf = XXH3_createState();
      XXH3_128bits_reset(state_->leaf);
      break;
  }
}

FileHasher::~FileHasher() {
  if (state_->xxh != nullptr) XXH3_freeState(state_->xxh);
  if (state_->leaf != nullptr) XXH3_freeState(state_->leaf);
  if (state_->sha != nullptr) EVP_MD_CTX_free(state_->sha);
}

void FileHasher::Update(const void* data, std::size_t size) {
  switch (algorithm_) {
    case ChecksumAlgorithm::kXxh3_128:
      XXH3_128bits_update(state_->xxh, data, size);
      break;
    case ChecksumAlgorithm::kAdler32:
      state_->adler = Adler32(state_->adler, data, size);
      break;
    case ChecksumAlgorithm::kSha256:
      EVP_DigestUpdate(state_->sha, data, size);
      break;
    case ChecksumAlgorithm::kXxh3Tree: {
      State& st = *state_;
      FeedLeaves(st.leaf, st.leaf_fill, static_cast<const unsigned char*>(data), size, [&st] {
        LeafDigest d = DigestOf(st.leaf);
        XXH3_128bits_update(st.xxh, d.data(), d.size());
      });
      break;
    }
  }
}

std::string FileHasher::Finish() {
  std::string prefix = fmt::format("{}:", ChecksumAlgorithmName(algorithm_));
  switch (algorithm_) {
    case ChecksumAlgorithm::kXxh3_128: {
      XXH128_canonical_t canon;
      XXH128_canonicalFromHash(&canon, XXH3_128bits_digest(state_->xxh));
      return prefix + Hex(canon.digest, sizeof(canon.digest));
    }
    case ChecksumAlgorithm::kXxh3Tree: {
      if (state_->leaf_fill > 0) {  // the short last leaf
        LeafDigest d = DigestOf(state_->leaf);
        XXH3_128bits_update(state_->xxh, d.data(), d.size());
      }
      XXH128_canonical_t canon;
      XXH128_canonicalFromHash(&canon, XXH3_128bits_digest(state_->xxh));
      return prefix + Hex(canon.digest, sizeof(canon.digest));
    }
    case ChecksumAlgorithm::kAdler32:
      return prefix + fmt::format("{:08x}", state_->adler);
    case ChecksumAlgorithm::kSha256: {
      unsigned char md[EVP_MAX_MD_SIZE];
      unsigned int len = 0;
      EVP_DigestFinal_ex(state_->sha, md, &len);
      return prefix + Hex(md, len);
    }
  }
  return prefix;
}

std::string ChecksumOf(ChecksumAlgorithm algorithm, std::string_view data) {
  FileHasher h(algorithm);
  h.Update(data.data(), data.size());
  return h.Finish();
}

absl::StatusOr<std::string> ComputeFdChecksum(int fd, std::uint64_t size,
                                              ChecksumAlgorithm algorithm) {
  // pread, not mmap: a file that shrinks meanwhile is a short read here, not SIGBUS.
  FileHasher hasher(algorithm);
  constexpr std::size_t kChunk = 1 << 20;
  auto buf = std::make_unique_for_overwrite<unsigned char[]>(kChunk);
  for (std::uint64_t off = 0; off < size;) {
    auto want = static_cast<std::size_t>(std::min<std::uint64_t>(kChunk, size - off));
    ssize_t n = ::pread(fd, buf.get(), want, static_cast<off_t>(off));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return absl::InternalError(fmt::format("read for checksum: {}", std::strerror(errno)));
    if (n == 0) {
      return absl::AbortedError(
          fmt::format("file changed size while its checksum was computed (no longer {} bytes)", size));
    }
    hasher.Update(buf.get(), static_cast<std::size_t>(n));
    off += static_cast<std::uint64_t>(n);
  }
  return hasher.Finish();
}

absl::StatusOr<std::string> ComputeFileChecksum(const std::filesystem::path& path,
                                                ChecksumAlgorithm algorithm) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    int e = errno;
    std::string msg = fmt::format("open {}: {}", path.string(), std::strerror(e));
    if (e == ENOENT) return absl::NotFoundError(msg);
    if (e == EACCES) return absl::PermissionDeniedError(msg);
    return absl::InternalError(msg);
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    std::string msg = fmt::format("stat {}: {}", path.string(), std::strerror(errno));
    ::close(fd);
    return absl::InternalError(msg);
  }
  absl::StatusOr<std::string> result =
      ComputeFdChecksum(fd, static_cast<std::uint64_t>(st.st_size), algorithm);
  ::close(fd);
  return result;
}

bool IsTreeFrame(std::uint64_t offset, std::uint64_t length, std::uint64_t file_size) {
  const std::uint64_t end = offset + length;
  return length > 0 && offset % kTreeLeafBytes == 0 &&
         (end % kTreeLeafBytes == 0 || end == file_size);
}

struct LeafHasher::State {
  XXH3_state_t* leaf = XXH3_createState();
};

LeafHasher::LeafHasher() : state_(std::make_unique<State>()) {}

LeafHasher::~LeafHasher() { XXH3_freeState(state_->leaf); }

void LeafHasher::Reset(std::uint64_t length) {
  digests_.resize((length + kTreeLeafBytes - 1) / kTreeLeafBytes);
  count_ = 0;
  fill_ = 0;
  XXH3_128bits_reset(state_->leaf);
}

void LeafHasher::EndLeaf() {
  if (count_ < digests_.size()) digests_[count_] = DigestOf(state_->leaf);
  ++count_;
}

void LeafHasher::Update(const void* data, std::size_t size) {
  FeedLeaves(state_->leaf, fill_, static_cast<const unsigned char*>(data), size,
             [this] { EndLeaf(); });
}

const std::vector<LeafDigest>& LeafHasher::digests() {
  if (fill_ > 0) {  // the short last leaf of the file
    EndLeaf();
    fill_ = 0;
    XXH3_128bits_reset(state_->leaf);
  }
  return digests_;
}

std::uint64_t LeafHasher::BlockCheck() {
  const std::vector<LeafDigest>& d = digests();
  return XXH3_64bits(d.data(), d.size() * sizeof(LeafDigest));
}

struct BlockHasher::State {
  XXH3_state_t* xxh = XXH3_createState();
};

BlockHasher::BlockHasher(BlockChecksumAlgorithm algorithm)
    : algorithm_(algorithm), state_(std::make_unique<State>()) {}

BlockHasher::~BlockHasher() { XXH3_freeState(state_->xxh); }

void BlockHasher::Reset(std::uint64_t length, bool tree_frame) {
  tree_frame_ = tree_frame;
  crc_ = 0;
  XXH3_64bits_reset(state_->xxh);
  if (tree_frame_) leaves_.Reset(length);
}

void BlockHasher::Update(const void* data, std::size_t size) {
  if (algorithm_ == BlockChecksumAlgorithm::kCrc32c) {
    crc_ = Crc32c(crc_, data, size);
  } else if (!tree_frame_) {
    XXH3_64bits_update(state_->xxh, data, size);
  }
  if (tree_frame_) leaves_.Update(data, size);
}

std::uint64_t BlockHasher::Finish() {
  if (algorithm_ == BlockChecksumAlgorithm::kCrc32c) return crc_;
  if (tree_frame_) return leaves_.BlockCheck();
  return XXH3_64bits_digest(state_->xxh);
}

TreeChecksum::TreeChecksum(std::uint64_t file_size)
    : size_(file_size),
      leaves_((file_size + kTreeLeafBytes - 1) / kTreeLeafBytes),
      have_(leaves_.size(), false) {}

void TreeChecksum::Set(std::uint64_t first_leaf, const std::vector<LeafDigest>& digests) {
  for (std::size_t i = 0; i < digests.size() && first_leaf + i < leaves_.size(); ++i) {
    leaves_[first_leaf + i] = digests[i];
    have_[first_leaf + i] = true;
  }
}

std::uint64_t TreeChecksum::missing_bytes() const {
  std::uint64_t bytes = 0;
  for (std::size_t i = 0; i < have_.size(); ++i) {
    if (!have_[i]) bytes += std::min<std::uint64_t>(kTreeLeafBytes, size_ - i * kTreeLeafBytes);
  }
  return bytes;
}

absl::Status TreeChecksum::FillFromFd(int fd) {
  std::unique_ptr<unsigned char[]> buf;
  XXH3_state_t* leaf = XXH3_createState();
  struct Free {
    XXH3_state_t* s;
    ~Free() { XXH3_freeState(s); }
  } free_leaf{leaf};
  for (std::size_t i = 0; i < have_.size(); ++i) {
    if (have_[i]) continue;
    if (buf == nullptr) buf = std::make_unique_for_overwrite<unsigned char[]>(kTreeLeafBytes);
    const std::uint64_t off = i * kTreeLeafBytes;
    const auto want = static_cast<std::size_t>(std::min<std::uint64_t>(kTreeLeafBytes, size_ - off));
    for (std::size_t got = 0; got < want;) {
      ssize_t n = ::pread(fd, buf.get() + got, want - got, static_cast<off_t>(off + got));
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) return absl::InternalError(fmt::format("read for checksum: {}", std::strerror(errno)));
      if (n == 0) {
        return absl::AbortedError(fmt::format(
            "file changed size while its checksum was computed (no longer {} bytes)", size_));
      }
      got += static_cast<std::size_t>(n);
    }
    XXH3_128bits_reset(leaf);
    XXH3_128bits_update(leaf, buf.get(), want);
    leaves_[i] = DigestOf(leaf);
    have_[i] = true;
  }
  return absl::OkStatus();
}

std::string TreeChecksum::Finish() const {
  XXH128_canonical_t canon;
  XXH128_canonicalFromHash(&canon, XXH3_128bits(leaves_.data(), leaves_.size() * sizeof(LeafDigest)));
  return "xxh3-tree:" + Hex(canon.digest, sizeof(canon.digest));
}

std::uint64_t BlockChecksum(BlockChecksumAlgorithm algorithm, const void* data,
                            std::size_t size) {
  if (algorithm == BlockChecksumAlgorithm::kCrc32c) return Crc32c(0, data, size);
  return XXH3_64bits(data, size);
}

std::uint32_t Crc32c(std::uint32_t crc, const void* data, std::size_t size) {
  const auto* p = static_cast<const unsigned char*>(data);
  crc = ~crc;
#if defined(__x86_64__)
  if (__builtin_cpu_supports("sse4.2")) return ~Crc32cHw(crc, p, size);
#endif
  static const std::array<std::uint32_t, 256> kTable = MakeCrc32cTable();
  for (std::size_t i = 0; i < size; ++i) crc = kTable[(crc ^ p[i]) & 0xff] ^ (crc >> 8);
  return ~crc;
}

std::uint32_t Adler32(std::uint32_t adler, const void* data, std::size_t size) {
  constexpr std::uint32_t kMod = 65521;
  const auto* p = static_cast<const unsigned char*>(data);
  std::uint32_t a = adler & 0xffff;
  std::uint32_t b = adler >> 16;
  while (size > 0) {
    // 5552 is the largest n with 255n(n+1)/2 + (n+1)(kMod-1) < 2^32 (zlib's NMAX).
    std::size_t n = std::min<std::size_t>(size, 5552);
    size -= n;
    while (n-- > 0) {
      a += *p++;
      b += a;
    }
    a %= kMod;
    b %= kMod;
  }
  return (b << 16) | a;
}

}  // namespace gfrep::transfer
