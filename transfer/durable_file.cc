#include "transfer/durable_file.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/status/status.h"
#include "transfer/errno_status.h"

namespace gfrep::transfer {
namespace fs = std::filesystem;

absl::StatusOr<std::vector<fs::path>> CreateParents(const fs::path& dir) {
  // Walk up to the deepest existing ancestor, then create downwards.
  std::vector<fs::path> missing;
  fs::path p = dir;
  for (;;) {
    struct stat st {};
    if (::stat(p.c_str(), &st) == 0) {
      if (!S_ISDIR(st.st_mode)) {
        return absl::FailedPreconditionError(fmt::format("{} is not a directory", p.string()));
      }
      break;
    }
    if (errno != ENOENT && errno != ENOTDIR)
      return ErrnoStatus(errno, fmt::format("stat {}", p.string()));
    missing.push_back(p);
    if (!p.has_parent_path() || p.parent_path() == p) break;
    p = p.parent_path();
  }
  std::vector<fs::path> created;
  for (auto it = missing.rbegin(); it != missing.rend(); ++it) {
    if (::mkdir(it->c_str(), 0755) == 0) {
      created.push_back(*it);
      continue;
    }
    int e = errno;
    struct stat st {};
    if (e == EEXIST && ::stat(it->c_str(), &st) == 0 && S_ISDIR(st.st_mode))
      continue;  // a racing mkdir
    if (e == EEXIST || e == ENOTDIR) {
      return absl::FailedPreconditionError(
          fmt::format("create directory {}: {}", it->string(), std::strerror(e)));
    }
    return ErrnoStatus(e, fmt::format("create directory {}", it->string()));
  }
  return created;
}

absl::Status SyncDirectories(const std::vector<fs::path>& dirs) {
  for (const fs::path& d : dirs) {
    int fd = ::open(d.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return ErrnoStatus(errno, fmt::format("open directory {} to sync it", d.string()));
    int rc = ::fsync(fd);
    int e = errno;
    ::close(fd);
    if (rc != 0) return ErrnoStatus(e, fmt::format("sync directory {}", d.string()));
  }
  return absl::OkStatus();
}

namespace {

// `dir` and its ancestors up to and including `root`, innermost first; kInvalidArgument if
// `dir` is not `root` or inside it.
absl::StatusOr<std::vector<fs::path>> Chain(const fs::path& root_dir, const fs::path& dir) {
  fs::path root = root_dir.lexically_normal();
  fs::path cur = dir.lexically_normal();
  if (!root.empty() && !root.has_filename()) root = root.parent_path();  // "a/" -> "a"
  if (!cur.empty() && !cur.has_filename()) cur = cur.parent_path();
  fs::path rel = cur.lexically_relative(root);
  if (root.empty() || rel.empty() || *rel.begin() == "..") {
    return absl::InvalidArgumentError(
        fmt::format("{} is not inside {}", dir.string(), root_dir.string()));
  }
  std::vector<fs::path> chain{cur};
  while (chain.back() != root && chain.back().parent_path() != chain.back()) {
    chain.push_back(chain.back().parent_path());
  }
  return chain;
}

}  // namespace

absl::Status SyncDirectoryChain(const fs::path& root_dir, const fs::path& dir) {
  absl::StatusOr<std::vector<fs::path>> chain = Chain(root_dir, dir);
  if (!chain.ok()) return chain.status();
  return SyncDirectories(*chain);
}

DurableDirectories::DurableDirectories(fs::path root, std::size_t max_remembered)
    : root_(std::move(root)), max_remembered_(max_remembered) {}

bool DurableDirectories::Known(const fs::path& dir) const {
  absl::MutexLock lock(&mu_);
  return known_.count(dir.lexically_normal().string()) > 0;
}

void DurableDirectories::Remember(const std::vector<fs::path>& dirs) {
  absl::MutexLock lock(&mu_);
  for (const fs::path& d : dirs) {
    if (known_.size() >= max_remembered_) return;
    known_.insert(d.lexically_normal().string());
  }
}

absl::Status DurableDirectories::Sync(const std::vector<fs::path>& dirs) {
  absl::Status s = SyncDirectories(dirs);
  absl::MutexLock lock(&mu_);
  synced_ += dirs.size();
  return s;
}

std::uint64_t DurableDirectories::synced() const {
  absl::MutexLock lock(&mu_);
  return synced_;
}

absl::Status DurableDirectories::Prepare(const fs::path& dir) {
  absl::StatusOr<std::vector<fs::path>> chain = Chain(root_, dir);
  if (!chain.ok()) return chain.status();
  absl::StatusOr<std::vector<fs::path>> created = CreateParents(dir);
  if (!created.ok()) return created.status();
  if (created->empty()) {
    if (Known(chain->front())) return absl::OkStatus();
    if (absl::Status s = Sync(*chain); !s.ok()) return s;
    Remember(*chain);
    return absl::OkStatus();
  }
  // The parent of each directory made holds its name; the deepest one that existed, and the
  // chain above it, are synced only if not known already.
  std::vector<fs::path> sync;
  const fs::path existing = created->front().parent_path();
  absl::StatusOr<std::vector<fs::path>> above = Chain(root_, existing);
  if (!above.ok()) return above.status();
  if (Known(existing)) {
    sync.push_back(existing);
  } else {
    sync = *above;
  }
  for (std::size_t i = 0; i + 1 < created->size(); ++i) sync.push_back((*created)[i]);
  if (absl::Status s = Sync(sync); !s.ok()) return s;
  Remember(*above);
  Remember(*created);
  return absl::OkStatus();
}

absl::Status RenameNoReplace(const fs::path& from, const fs::path& to) {
  if (::renameat2(AT_FDCWD, from.c_str(), AT_FDCWD, to.c_str(), RENAME_NOREPLACE) != 0) {
    if (errno != EINVAL && errno != ENOSYS) {
      return ErrnoStatus(errno, fmt::format("rename {} -> {}", from.string(), to.string()));
    }
    // No RENAME_NOREPLACE here: link fails with EEXIST just the same.
    if (::link(from.c_str(), to.c_str()) != 0) {
      return ErrnoStatus(errno, fmt::format("link {} -> {}", from.string(), to.string()));
    }
    if (::unlink(from.c_str()) != 0) {
      return ErrnoStatus(errno, fmt::format("unlink {} after linking it", from.string()));
    }
  }
  return absl::OkStatus();
}

absl::Status InstallFile(const fs::path& part, const fs::path& final_path, bool create_only) {
  const fs::path dir = final_path.parent_path();
  absl::StatusOr<std::vector<fs::path>> created = CreateParents(dir);
  if (!created.ok()) return created.status();
  if (create_only) {
    if (absl::Status s = RenameNoReplace(part, final_path); !s.ok()) {
      if (absl::IsAlreadyExists(s)) {
        (void)::unlink(part.c_str());  // ignored: best-effort removal of the temporary
        return absl::AlreadyExistsError(
            fmt::format("{} already exists (replica files are written once)", final_path.string()));
      }
      return s;
    }
  } else if (::rename(part.c_str(), final_path.c_str()) != 0) {
    return ErrnoStatus(errno, fmt::format("rename into {}", final_path.string()));
  }
  // The final directory holds the new name; the parent of each created directory holds
  // that directory's name.
  std::vector<fs::path> sync{dir};
  for (auto it = created->rbegin(); it != created->rend(); ++it) {
    if (it->parent_path() != dir) sync.push_back(it->parent_path());
  }
  return SyncDirectories(sync);
}

absl::Status WriteFileDurably(const fs::path& path, std::string_view content) {
  fs::path tmp = path;
  tmp += ".tmp";
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return ErrnoStatus(errno, fmt::format("create {}", tmp.string()));
  const ssize_t n = ::write(fd, content.data(), content.size());
  int err = n < 0 ? errno : ENOSPC;  // a short write: the disk is full
  bool ok = n == static_cast<ssize_t>(content.size());
  if (ok && ::fsync(fd) != 0) {
    err = errno;
    ok = false;
  }
  ::close(fd);
  if (!ok) return ErrnoStatus(err, fmt::format("write {}", tmp.string()));
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    return ErrnoStatus(errno, fmt::format("rename {} -> {}", tmp.string(), path.string()));
  }
  return SyncDirectories({path.has_parent_path() ? path.parent_path() : fs::path(".")});
}

}  // namespace gfrep::transfer
