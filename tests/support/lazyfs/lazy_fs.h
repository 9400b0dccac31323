#pragma once

// LazyFs is the file system behind gfrep-test-lazyfs (main.cc), a FUSE file system for
// power-cut tests, after LazyFS (the one Jepsen uses): `kill -9` keeps the page cache, so
// only a file system that forgets what was never synced can show a missing fsync.
//
// The model (strict POSIX durability, as on a disk whose cache is lost at the cut):
//   - Every operation is applied at once to the backing directory (the "live" state), so
//     processes on the mount see ordinary POSIX behaviour and read the backing files.
//   - Beside it LazyFs keeps the durable state. Objects (files, directories, symlinks) have
//     ids of ours (never a reused st_ino); an open file's handle keeps its id, so an fsync
//     through a descriptor of a renamed or unlinked file still finds its object.
//       * A regular file's durable content is its content (bytes, size, mode, times) at its
//         last fsync or fdatasync (the two are the same here). Until its first change, a
//         file present at mount is durable as it is; before that change (write, truncate,
//         fallocate, O_TRUNC, chmod, utimens, or the removal of its last name) its bytes are
//         copied to the shadow directory. A file created on the mount and never synced is
//         durably empty.
//       * A directory's durable entries (name -> id) are its entries at its last fsync; at
//         mount, what is there. A new directory has none.
//     fsync of a file makes its data durable, never its name; fsync of a directory makes
//     its current entries durable (each naming an object whose own content follows its
//     own rule), not the directory's name in its parent.
//   - Cut: the backing directory is rebuilt from the durable state alone, from the root
//     down through durable entries: a durable name whose file was never synced is an empty
//     file, an unlinked or renamed name whose directory was not synced is back (with the
//     file's durable content), a new name in an unsynced directory is gone, and so is a new
//     directory (with all below it) until its parent is synced. Two durable names of one
//     file become hard links. A directory durably named twice (renamed, both parents synced
//     at different times) is made at the first name met only; a cycle is cut the same way.
//     After a cut every operation that changes anything fails with EIO.
// Not modelled: extended attributes, owners and directory modes (kept as they are), special
// files (FIFOs, devices, sockets: not supported), fallocate modes other than 0 and
// KEEP_SIZE (EOPNOTSUPP), partial durability (a sync is all of a file or nothing; a real
// disk may also keep some unsynced writes, which only makes this model the stricter one).
// fstat of an open file whose last name was removed fails with ESTALE (libfuse's path API
// with hard_remove has no path for it and the kernel sends no handle for fstat); reads,
// writes and fsync through its descriptor work.
// Objects are never forgotten (a test mounts for seconds): shadow copies stay until exit.
//
// Methods follow the FUSE convention (0 or a count, or -errno; results through pointers):
// their only caller is the FUSE adapter in main.cc, and a Status in between would be
// converted straight back. Paths are the mount's ("/a/b"), as FUSE passes them.
//
// Thread safety: every method may be called from any thread (FUSE runs several). One mutex
// guards the model and is held across each changing operation, including the write itself,
// so that a sync never misses a write it could have seen; reads take no lock.

#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/types.h>

#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"

namespace gfrep::testing::lazyfs {

using ObjectId = std::uint64_t;

// An open file or directory: its object and, for files, the backing descriptor.
struct Handle {
  ObjectId id = 0;
  int fd = -1;
};

class LazyFs {
 public:
  // Scans `backing`: everything in it is durable. `shadow` is an empty directory (any file
  // system) for durable copies. kFailedPrecondition for a special file in `backing`.
  static absl::StatusOr<std::unique_ptr<LazyFs>> Open(const std::filesystem::path& backing,
                                                      const std::filesystem::path& shadow);

  int GetAttr(const char* path, const Handle* h, struct stat* st);
  // Lists the live entries of directory `id` (an OpenDir handle's): fill(name, type bits).
  int ReadDir(ObjectId id, const std::function<void(const std::string&, mode_t)>& fill);
  int Readlink(const char* path, char* buf, std::size_t size);
  int StatFs(struct statvfs* st);

  // *out is owned by the caller until Release.
  int OpenFile(const char* path, int flags, Handle** out);
  int Create(const char* path, int flags, mode_t mode, Handle** out);
  int OpenDir(const char* path, Handle** out);
  void Release(Handle* h);

  int Read(const Handle& h, char* buf, std::size_t size, off_t off);
  int Write(const Handle& h, const char* buf, std::size_t size, off_t off);
  int Truncate(const char* path, const Handle* h, off_t size);
  int Fallocate(const Handle& h, int mode, off_t off, off_t len);
  int Chmod(const char* path, const Handle* h, mode_t mode);
  int Chown(const char* path, const Handle* h, uid_t uid, gid_t gid);
  int Utimens(const char* path, const Handle* h, const struct timespec tv[2]);

  int Mkdir(const char* path, mode_t mode);
  int Rmdir(const char* path);
  int Unlink(const char* path);
  // flags: 0, RENAME_NOREPLACE or RENAME_EXCHANGE (else EINVAL).
  int Rename(const char* from, const char* to, unsigned flags);
  int Link(const char* from, const char* to);
  int Symlink(const char* target, const char* path);

  // fsync/fdatasync of a file: its content becomes durable.
  int Fsync(const Handle& h);
  // fsync of a directory: its current entries become durable.
  int FsyncDir(const Handle& h);

  // The power cut: from now on every operation fails with EIO; the backing directory is
  // rebuilt from the durable state (see the file comment). The new tree is built beside
  // `backing` (same file system, so untouched files are linked, not copied) and swapped in.
  // Returns a one-line summary. REQUIRES: no process still uses the mount's files.
  absl::StatusOr<std::string> Cut();

 private:
  enum class Kind { kFile, kDir, kSymlink };
  // Where a file's durable content is: still its live file (unchanged since mount), the
  // shadow copy, or nowhere (created and never synced: durably empty).
  enum class Data { kLive, kShadow, kEmpty };

  struct Object {
    Kind kind = Kind::kFile;
    int live_names = 0;
    std::map<std::string, ObjectId> live;     // directories: entries now
    std::map<std::string, ObjectId> durable;  // directories: entries at the last fsync
    Data data = Data::kEmpty;                 // files
    // Files: bytes [dirty_begin, dirty_end) may differ from the shadow copy. One span, not
    // a set: appends (logs, uploads) keep it tight, and copying more is never wrong.
    std::uint64_t dirty_begin = 0;
    std::uint64_t dirty_end = 0;
    // Durable metadata: files (kShadow: at the last sync; kEmpty: at create), and the mode
    // a rebuilt directory gets.
    mode_t mode = 0644;
    struct timespec atime {};
    struct timespec mtime {};
    std::string target;  // symlinks
  };

  LazyFs(std::filesystem::path backing, std::filesystem::path shadow)
      : backing_(std::move(backing)), shadow_(std::move(shadow)) {}

  absl::Status Scan(const std::filesystem::path& dir, ObjectId id,
                    std::map<std::pair<dev_t, ino_t>, ObjectId>& links);
  ObjectId NewObject(Kind kind) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  std::string Backing(std::string_view path) const;
  std::string ShadowOf(ObjectId id) const;
  // The object at `path` in the live tree, 0 if none.
  ObjectId Resolve(std::string_view path) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The live directory that holds `path` and the last component; -errno if missing.
  int ResolveParent(std::string_view path, ObjectId* parent, std::string* name)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Before a file's first change since mount: copy it (from `fd`, or else from `path`) to
  // the shadow, which then holds its durable content.
  int PrepareChange(ObjectId id, int fd, std::string_view path) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void MarkDirty(Object& o, std::uint64_t begin, std::uint64_t end);
  int OpenLocked(std::string_view path, ObjectId id, int flags, Handle** out)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Rebuilds the durable entries of directory `id` under `out` (see Cut).
  absl::Status Materialize(ObjectId id, const std::filesystem::path& out,
                           const std::unordered_map<ObjectId, std::string>& live_path,
                           std::unordered_map<ObjectId, std::filesystem::path>& made, int& files,
                           int& dirs) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // Constant after construction
  const std::filesystem::path backing_;
  const std::filesystem::path shadow_;

  absl::Mutex mu_;
  // Guarded by mu_
  bool cut_ ABSL_GUARDED_BY(mu_) = false;
  ObjectId next_id_ ABSL_GUARDED_BY(mu_) = 1;
  // References stay valid on insert (nothing is ever erased).
  std::unordered_map<ObjectId, Object> objects_ ABSL_GUARDED_BY(mu_);
};

inline constexpr ObjectId kRootId = 1;

}  // namespace gfrep::testing::lazyfs
