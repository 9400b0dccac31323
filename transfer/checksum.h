#pragma once

// File and block checksums used by the transfer engine, the catalog and gfreg.
//
// File (end-to-end) checksums have a string form "<algorithm>:<lower-case hex>", e.g.
// "xxh3-tree:0f3a...". Algorithms: xxh3-tree (default), xxh3-128, adler32 and sha256 (the
// ones HEP catalogs record). Block checksums (one per data frame) are 64-bit: xxh3-64 or
// crc32c.
//
// xxh3-tree cuts the file into leaves of kTreeLeafBytes (the last one may be shorter; an
// empty file has none), takes each leaf's XXH3-128 and then the XXH3-128 of the leaves'
// canonical (big-endian) digests in file order. Against accidental damage it is as strong
// as xxh3-128; unlike it, its leaves can be hashed in any order, so the transfer engine
// computes it in the same pass as its block checks instead of a second pass over every byte
// (see IsTreeFrame).
//
// Thread safety: a FileHasher, LeafHasher or TreeChecksum is used by one thread at a time;
// free functions are pure.

#include <array>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace gfrep::transfer {

enum class ChecksumAlgorithm { kXxh3_128, kAdler32, kSha256, kXxh3Tree };
enum class BlockChecksumAlgorithm { kXxh3_64, kCrc32c };

// "xxh3-tree", "xxh3-128" (also "xxh3"), "adler32", "sha256". kInvalidArgument otherwise.
absl::StatusOr<ChecksumAlgorithm> ParseChecksumAlgorithm(std::string_view name);

// A pull's bytes are not what TransferOptions::expected_checksum/expected_size say: the
// source's file differs from what its owner recorded (kFailedPrecondition: the same source
// gives the same bytes again). IsExpectedChecksumMismatch tells it from other errors.
absl::Status ExpectedChecksumMismatch(std::string_view message);
bool IsExpectedChecksumMismatch(const absl::Status& status);
std::string_view ChecksumAlgorithmName(ChecksumAlgorithm algorithm);
// "xxh3-64" (also "xxh3"), "crc32c".
absl::StatusOr<BlockChecksumAlgorithm> ParseBlockChecksumAlgorithm(std::string_view name);
std::string_view BlockChecksumAlgorithmName(BlockChecksumAlgorithm algorithm);

// Incremental file checksum. Feed bytes in file order.
class FileHasher {
 public:
  explicit FileHasher(ChecksumAlgorithm algorithm);
  ~FileHasher();
  FileHasher(const FileHasher&) = delete;
  FileHasher& operator=(const FileHasher&) = delete;

  void Update(const void* data, std::size_t size);
  // "<algorithm>:<hex>". Call once.
  std::string Finish();

 private:
  struct State;
  ChecksumAlgorithm algorithm_;
  std::unique_ptr<State> state_;
};

// One-shot checksum of a byte string, in string form.
std::string ChecksumOf(ChecksumAlgorithm algorithm, std::string_view data);

// Checksum of a whole file (read with pread, so a file truncated meanwhile is an error,
// never SIGBUS). kNotFound / kPermissionDenied / kInternal with the path in the message;
// kAborted if the file shrank while it was read.
absl::StatusOr<std::string> ComputeFileChecksum(const std::filesystem::path& path,
                                                ChecksumAlgorithm algorithm);
// Same, over an already open descriptor of `size` bytes.
absl::StatusOr<std::string> ComputeFdChecksum(int fd, std::uint64_t size,
                                              ChecksumAlgorithm algorithm);

// xxh3-tree's leaves: the engine's least block (sender.h, BlockSize), so that blocks are
// whole leaves whatever the file's size. A transfer keeps 16 bytes per leaf (64 MiB per TiB).
inline constexpr std::uint64_t kTreeLeafBytes = 256 * 1024;
using LeafDigest = std::array<unsigned char, 16>;  // canonical XXH3-128 of one leaf

// With the xxh3-tree file checksum, a data frame [offset, offset + length) of a file of
// `file_size` bytes is a tree frame when it starts on a leaf boundary and ends on one or at
// the end of the file. Both ends of a transfer hash a tree frame's leaves (LeafHasher) and
// keep the digests for the file checksum; its xxh3-64 block check is LeafHasher::BlockCheck
// (the XXH3-64 of the digests), so each byte is hashed once. Other frames are checked as
// usual and their leaves are hashed again at the end.
bool IsTreeFrame(std::uint64_t offset, std::uint64_t length, std::uint64_t file_size);

// The leaves of one run of bytes that starts on a leaf boundary (a tree frame), fed in
// pieces. Update neither allocates nor throws (it may be left by the jump of a mapped read
// that faulted: mapped_read.h).
class LeafHasher {
 public:
  LeafHasher();
  ~LeafHasher();
  LeafHasher(const LeafHasher&) = delete;
  LeafHasher& operator=(const LeafHasher&) = delete;

  // Starts a run of `length` bytes (allocates room for its digests).
  void Reset(std::uint64_t length);
  void Update(const void* data, std::size_t size);
  // After all `length` bytes: the run's leaf digests, in order.
  const std::vector<LeafDigest>& digests();
  // The xxh3-64 block check of a tree frame: XXH3-64 of digests().
  std::uint64_t BlockCheck();

 private:
  void EndLeaf();
  struct State;
  std::unique_ptr<State> state_;
  std::vector<LeafDigest> digests_;
  std::size_t count_ = 0;
  std::uint64_t fill_ = 0;  // bytes of the leaf being hashed
};

// The block check of one data frame, fed in pieces: xxh3-64 or crc32c of its bytes, or for a
// tree frame under xxh3-64 the XXH3-64 of its leaves (a tree frame's leaves are kept for the
// file checksum under either block algorithm). Update neither allocates nor throws.
class BlockHasher {
 public:
  explicit BlockHasher(BlockChecksumAlgorithm algorithm);
  ~BlockHasher();
  BlockHasher(const BlockHasher&) = delete;
  BlockHasher& operator=(const BlockHasher&) = delete;

  // Starts a frame of `length` bytes (allocates room for a tree frame's digests).
  void Reset(std::uint64_t length, bool tree_frame);
  void Update(const void* data, std::size_t size);
  // After all `length` bytes: the frame's block check.
  std::uint64_t Finish();
  // After Finish, for a tree frame: its leaf digests.
  const std::vector<LeafDigest>& leaves() { return leaves_.digests(); }

 private:
  struct State;
  BlockChecksumAlgorithm algorithm_;
  std::unique_ptr<State> state_;
  bool tree_frame_ = false;
  std::uint32_t crc_ = 0;
  LeafHasher leaves_;
};

// An xxh3-tree checksum put together from leaves that arrive in any order.
class TreeChecksum {
 public:
  explicit TreeChecksum(std::uint64_t file_size);
  // The digests of the leaves from `first_leaf` on (a tree frame's, at offset / leaf size).
  void Set(std::uint64_t first_leaf, const std::vector<LeafDigest>& digests);
  std::uint64_t missing_bytes() const;
  // Hashes the leaves not set yet from `fd` (pread). kAborted if the file is shorter.
  absl::Status FillFromFd(int fd);
  // "xxh3-tree:<hex>". All leaves must be set.
  std::string Finish() const;

 private:
  std::uint64_t size_;
  std::vector<LeafDigest> leaves_;
  std::vector<bool> have_;
};

// Block checksum of one frame payload.
std::uint64_t BlockChecksum(BlockChecksumAlgorithm algorithm, const void* data,
                            std::size_t size);

// Raw primitives (exposed for tests and for callers that need the integer form).
std::uint32_t Crc32c(std::uint32_t crc, const void* data, std::size_t size);
std::uint32_t Adler32(std::uint32_t adler, const void* data, std::size_t size);

}  // namespace gfrep::transfer
