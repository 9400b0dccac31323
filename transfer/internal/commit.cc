#include "transfer/internal/commit.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/status/status.h"
#include "transfer/internal/engine.h"

namespace gfrep::transfer::internal {
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

// rename(2) that never replaces `to`: renameat2(RENAME_NOREPLACE), or where the file system
// lacks it, link + unlink (link fails with EEXIST just the same).
int RenameNoReplace(const fs::path& from, const fs::path& to) {
  if (::renameat2(AT_FDCWD, from.c_str(), AT_FDCWD, to.c_str(), RENAME_NOREPLACE) == 0) return 0;
  if (errno != EINVAL && errno != ENOSYS) return -1;
  if (::link(from.c_str(), to.c_str()) != 0) return -1;
  return ::unlink(from.c_str());
}

}  // namespace

absl::Status CommitFile(const fs::path& part, const fs::path& final_path, bool create_only) {
  const fs::path dir = final_path.parent_path();
  absl::StatusOr<std::vector<fs::path>> created = CreateParents(dir);
  if (!created.ok()) return created.status();
  if (create_only) {
    if (RenameNoReplace(part, final_path) != 0) {
      int e = errno;
      if (e == EEXIST) {
        (void)::unlink(part.c_str());  // ignored: best-effort removal of the temporary
        return absl::AlreadyExistsError(
            fmt::format("{} already exists (replica files are written once)", final_path.string()));
      }
      return ErrnoStatus(e, fmt::format("rename into {}", final_path.string()));
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

}  // namespace gfrep::transfer::internal
