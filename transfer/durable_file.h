#pragma once

// Putting a file in place so that it survives a crash or a power cut, the one way every
// library does it (the engine's received files, the site agent's replicas, the spool keeper,
// small state files): create the missing parent directories, rename the file into place
// (optionally refusing to replace an existing file), then fsync the directories whose
// entries changed, so each new name is on disk. Every return value is checked; any failure
// fails the install. Errors are errno's (transfer/errno_status.h: a full disk is
// kResourceExhausted).
//
// Thread safety: blocking file-system calls; run on a blocking-work thread.

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"

namespace gfrep::transfer {

// Creates the missing directories of `dir` (like mkdir -p) and returns those it created,
// outermost first. kFailedPrecondition if a component exists and is not a directory.
absl::StatusOr<std::vector<std::filesystem::path>> CreateParents(const std::filesystem::path& dir);

// fsyncs each directory. The first failure (open or fsync) is returned.
absl::Status SyncDirectories(const std::vector<std::filesystem::path>& dirs);

// Makes a rename into `dir` (and the creation of `dir` and its parents) durable: fsyncs
// `dir` and each of its ancestors up to and including `root`. kInvalidArgument if `dir` is
// not `root` or inside it (lexically), kNotFound if a directory is missing.
absl::Status SyncDirectoryChain(const std::filesystem::path& root,
                                const std::filesystem::path& dir);

// Renames `from` to `to` unless `to` exists (renameat2 RENAME_NOREPLACE, or link + unlink
// where the file system lacks it): kAlreadyExists then, and `from` is left alone.
absl::Status RenameNoReplace(const std::filesystem::path& from, const std::filesystem::path& to);

// Renames `part` to `final_path` after creating its missing parents, and fsyncs the final
// directory and the parent of every directory created. With `create_only`, an existing final
// file is never replaced: kAlreadyExists, and `part` is removed.
absl::Status InstallFile(const std::filesystem::path& part, const std::filesystem::path& final_path,
                         bool create_only);

// Writes `content` to `path` so that after a crash or a power cut `path` holds its old
// content or the new one, never a mix: a temporary file beside it ("PATH.tmp") written and
// fsynced, renamed over `path`, and the directory fsynced.
absl::Status WriteFileDurably(const std::filesystem::path& path, std::string_view content);

// The directories under `root` whose names this process has made durable, so that putting
// many files into one tree syncs each directory chain once, not once per file (a replica's
// directory spool/.gfrep-data/INODE is new for each file: the whole chain up to the spool
// cost three directory fsyncs per copy, one now).
//
// Prepare(dir) creates `dir` and its missing parents and returns once the name of `dir` and
// of each ancestor up to `root` is on disk: for directories it created, their parents are
// synced (and the chain above the deepest existing one, unless remembered); for an existing
// `dir` not remembered (made by an earlier process, or by an attempt that failed before its
// sync), the whole chain. A directory is remembered only after its sync succeeded, and at most
// `max_remembered` of them (beyond that, each Prepare syncs as if it knew none). Whatever is
// then renamed into `dir` still needs `dir` itself synced (InstallFile does).
//
// Thread safety: Prepare may be called from several threads at once (blocking file-system
// calls: a blocking-work thread).
class DurableDirectories {
 public:
  explicit DurableDirectories(std::filesystem::path root, std::size_t max_remembered = 100000);

  // kInvalidArgument if `dir` is not inside `root` (lexically); errors as CreateParents and
  // SyncDirectories.
  absl::Status Prepare(const std::filesystem::path& dir);

  // Directories fsynced by Prepare so far.
  std::uint64_t synced() const;

 private:
  bool Known(const std::filesystem::path& dir) const;
  void Remember(const std::vector<std::filesystem::path>& dirs);
  absl::Status Sync(const std::vector<std::filesystem::path>& dirs);

  const std::filesystem::path root_;
  const std::size_t max_remembered_;
  mutable absl::Mutex mu_;
  std::set<std::string> known_ ABSL_GUARDED_BY(mu_);
  std::uint64_t synced_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace gfrep::transfer
