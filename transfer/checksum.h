#pragma once

// File and block checksums used by the transfer engine, the catalog and gfreg.
//
// File (end-to-end) checksums have a string form "<algorithm>:<lower-case hex>", e.g.
// "xxh3-128:0f3a...". Algorithms: xxh3-128 (default, fast), adler32 and sha256 (the ones
// HEP catalogs record). Block checksums (one per data frame) are 64-bit: xxh3-64 or crc32c.
//
// Thread safety: a FileHasher is used by one thread at a time; free functions are pure.

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace gfrep::transfer {

enum class ChecksumAlgorithm { kXxh3_128, kAdler32, kSha256 };
enum class BlockChecksumAlgorithm { kXxh3_64, kCrc32c };

// "xxh3-128" (also "xxh3"), "adler32", "sha256". kInvalidArgument otherwise.
absl::StatusOr<ChecksumAlgorithm> ParseChecksumAlgorithm(std::string_view name);
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

// Block checksum of one frame payload.
std::uint64_t BlockChecksum(BlockChecksumAlgorithm algorithm, const void* data,
                            std::size_t size);

// Raw primitives (exposed for tests and for callers that need the integer form).
std::uint32_t Crc32c(std::uint32_t crc, const void* data, std::size_t size);
std::uint32_t Adler32(std::uint32_t adler, const void* data, std::size_t size);

}  // namespace gfrep::transfer
