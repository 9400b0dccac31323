#include "replica/core/replica_file.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <memory>

#include "replica/core/spool.h"
#include "transfer/checksum.h"

namespace gfrep::replica {
namespace {

namespace fs = std::filesystem;

constexpr std::size_t kChunk = 1 << 20;

std::int64_t MtimeNs(const struct stat& st) {
  return static_cast<std::int64_t>(st.st_mtim.tv_sec) * 1'000'000'000 + st.st_mtim.tv_nsec;
}

ReplicaFinding Verdict(ReplicaFinding f, ReplicaVerdict v, std::string note) {
  f.verdict = v;
  f.note = std::move(note);
  return f;
}

}  // namespace

ReplicaFinding CheckReplicaFile(const fs::path& spool, const catalog::Replica& replica,
                                const catalog::Attributes* attributes,
                                const std::function<bool(std::size_t)>& pace) {
  ReplicaFinding f;
  f.replica = replica;
  if (replica.state != catalog::ReplicaState::kComplete &&
      replica.state != catalog::ReplicaState::kUnverified) {
    return Verdict(std::move(f), ReplicaVerdict::kSkipped, "not complete");
  }
  const fs::path file = ReplicaFile(spool, replica.inode, replica.generation);
  struct stat st {};
  if (::lstat(file.c_str(), &st) != 0) {
    const int err = errno;
    if (err == ENOENT)
      return Verdict(std::move(f), ReplicaVerdict::kLost, "missing from the spool");
    return Verdict(std::move(f), ReplicaVerdict::kSkipped,
                   fmt::format("stat {}: {}", file.string(), std::strerror(err)));
  }
  if (!S_ISREG(st.st_mode)) {
    return Verdict(std::move(f), ReplicaVerdict::kCorrupt, "not a regular file");
  }
  f.mtime_ns = MtimeNs(st);
  if (static_cast<std::uint64_t>(st.st_size) != replica.size) {
    return Verdict(std::move(f), ReplicaVerdict::kCorrupt,
                   fmt::format("{} bytes, the catalog says {}", st.st_size, replica.size));
  }
  if (replica.mtime_ns != 0 && f.mtime_ns != replica.mtime_ns) {
    return Verdict(std::move(f), ReplicaVerdict::kCorrupt,
                   fmt::format("modified after it was committed (mtime {} ns, recorded {} ns)",
                               f.mtime_ns, replica.mtime_ns));
  }
  if (attributes == nullptr) return Verdict(std::move(f), ReplicaVerdict::kGood, "");

  if (attributes->generation != replica.generation) {
    return Verdict(std::move(f), ReplicaVerdict::kSkipped,
                   fmt::format("file is at generation {}", attributes->generation));
  }
  absl::StatusOr<transfer::ChecksumAlgorithm> algo =
      transfer::ParseChecksumAlgorithm(attributes->checksum_algo);
  if (!algo.ok() || attributes->checksum.empty()) {
    return Verdict(std::move(f), ReplicaVerdict::kSkipped, "the catalog has no usable checksum");
  }
  int fd = ::open(file.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) {
    const int err = errno;
    if (err == ENOENT)
      return Verdict(std::move(f), ReplicaVerdict::kLost, "missing from the spool");
    return Verdict(std::move(f), ReplicaVerdict::kSkipped,
                   fmt::format("open {}: {}", file.string(), std::strerror(err)));
  }
  // Sequential, once, not kept in the page cache by this pass (a scrub must not evict what
  // readers use).
  ::posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);
  transfer::FileHasher hasher(*algo);
  // No bigger than the replica and not zeroed: the pass reads thousands of small replicas
  // in a row, and a zeroed megabyte per file was most of its CPU.
  const std::size_t buffer_size = static_cast<std::size_t>(
      std::max<std::uint64_t>(1, std::min<std::uint64_t>(kChunk, replica.size)));
  std::unique_ptr<char[]> buffer = std::make_unique_for_overwrite<char[]>(buffer_size);
  std::uint64_t done = 0;
  std::string failure;
  while (done < replica.size) {
    const std::size_t want =
        static_cast<std::size_t>(std::min<std::uint64_t>(kChunk, replica.size - done));
    if (pace && !pace(want)) {
      ::close(fd);
      return Verdict(std::move(f), ReplicaVerdict::kSkipped, "stopped");
    }
    ssize_t got = ::pread(fd, buffer.get(), want, static_cast<off_t>(done));
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) {
      failure = fmt::format("read: {}", std::strerror(errno));
      break;
    }
    if (got == 0) {
      failure = fmt::format("ends at byte {} of {}", done, replica.size);
      break;
    }
    hasher.Update(buffer.get(), static_cast<std::size_t>(got));
    done += static_cast<std::uint64_t>(got);
  }
  ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
  ::close(fd);
  f.checksummed = true;
  if (!failure.empty()) return Verdict(std::move(f), ReplicaVerdict::kCorrupt, failure);
  const std::string sum = hasher.Finish();
  const std::string expected = CatalogChecksum(*attributes);
  if (sum != expected) {
    return Verdict(std::move(f), ReplicaVerdict::kCorrupt,
                   fmt::format("checksum {}, the catalog says {}", sum, expected));
  }
  return Verdict(std::move(f), ReplicaVerdict::kGood, "");
}

catalog::ReplicaTransition MarkBad(catalog::InodeId inode, std::string_view node,
                                   std::uint64_t generation, catalog::ReplicaState to,
                                   std::string_view note) {
  catalog::ReplicaTransition t;
  t.inode = inode;
  t.node = std::string(node);
  t.generation = generation;
  t.from = catalog::ReplicaState::kComplete;
  t.to = to;
  t.note = std::string(catalog::TruncateUtf8(note, catalog::kMaxLabelBytes));
  return t;
}

std::optional<catalog::ReplicaTransition> TransitionFor(const ReplicaFinding& f) {
  const catalog::Replica& r = f.replica;
  const bool unverified = r.state == catalog::ReplicaState::kUnverified;
  std::optional<catalog::ReplicaTransition> t;
  switch (f.verdict) {
    case ReplicaVerdict::kLost:
    case ReplicaVerdict::kCorrupt:
      if (unverified && r.note == catalog::kRemadeNote) {
        // Back from a dead node damaged, and its copy was made again meanwhile: dropped.
        t = MarkBad(r.inode, r.node, r.generation, catalog::ReplicaState::kDeleting,
                    fmt::format("{} after its node came back; {}", f.note, catalog::kRemadeNote));
        break;
      }
      t = MarkBad(r.inode, r.node, r.generation,
                  f.verdict == ReplicaVerdict::kLost ? catalog::ReplicaState::kLost
                                                     : catalog::ReplicaState::kCorrupt,
                  f.note);
      break;
    case ReplicaVerdict::kGood:
      // Only a pass that read the bytes vouches for them (and for their mtime as a stamp).
      if (!f.checksummed) return std::nullopt;
      t = MarkBad(r.inode, r.node, r.generation, catalog::ReplicaState::kComplete,
                  unverified ? catalog::kRecheckedNote : "");
      t->verified = true;
      t->mtime_ns = f.mtime_ns;
      break;
    case ReplicaVerdict::kSkipped:
      return std::nullopt;
  }
  if (t) t->from = r.state;  // complete, or unverified (its node came back)
  return t;
}

}  // namespace gfrep::replica
