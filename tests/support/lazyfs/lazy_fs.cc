#include "tests/support/lazyfs/lazy_fs.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"

namespace gfrep::testing::lazyfs {

namespace fs = std::filesystem;

namespace {

absl::Status Errno(int err, std::string_view what, const fs::path& path) {
  return absl::InternalError(
      absl::StrCat(std::string(what), " ", path.string(), ": ", std::strerror(err)));
}

// Closes a descriptor at the end of a scope.
struct Fd {
  int fd = -1;
  explicit Fd(int f) : fd(f) {}
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
};

// Copies bytes [begin, end) of `from` to the same offsets of `to`. 0 or -errno.
int CopyRange(int from, int to, std::uint64_t begin, std::uint64_t end) {
  if (end <= begin) return 0;
  std::vector<char> buf(static_cast<std::size_t>(std::min<std::uint64_t>(1 << 20, end - begin)));
  while (begin < end) {
    const std::size_t want =
        static_cast<std::size_t>(std::min<std::uint64_t>(buf.size(), end - begin));
    const ssize_t n = ::pread(from, buf.data(), want, static_cast<off_t>(begin));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return -errno;
    if (n == 0) return 0;  // the file is shorter than the span: the rest is beyond its end
    for (ssize_t done = 0; done < n;) {
      const ssize_t w = ::pwrite(to, buf.data() + done, static_cast<std::size_t>(n - done),
                                 static_cast<off_t>(begin) + done);
      if (w < 0 && errno == EINTR) continue;
      if (w < 0) return -errno;
      done += w;
    }
    begin += static_cast<std::uint64_t>(n);
  }
  return 0;
}

std::vector<std::string_view> Components(std::string_view path) {
  std::vector<std::string_view> out;
  while (!path.empty()) {
    const std::size_t slash = path.find('/');
    std::string_view part = path.substr(0, slash);
    if (!part.empty()) out.push_back(part);
    if (slash == std::string_view::npos) break;
    path.remove_prefix(slash + 1);
  }
  return out;
}

// The FUSE adapter passes a path, or (nullpath_ok, a descriptor given) none.
std::string_view PathOrEmpty(const char* path) { return path == nullptr ? "" : path; }

}  // namespace

absl::StatusOr<std::unique_ptr<LazyFs>> LazyFs::Open(const fs::path& backing,
                                                     const fs::path& shadow) {
  std::unique_ptr<LazyFs> lazy(new LazyFs(backing, shadow));
  absl::MutexLock lock(&lazy->mu_);
  const ObjectId root = lazy->NewObject(Kind::kDir);
  lazy->objects_[root].live_names = 1;  // the root is never removed
  std::map<std::pair<dev_t, ino_t>, ObjectId> links;
  if (absl::Status s = lazy->Scan(backing, root, links); !s.ok()) return s;
  return lazy;
}

absl::Status LazyFs::Scan(const fs::path& dir, ObjectId id,
                          std::map<std::pair<dev_t, ino_t>, ObjectId>& links) {
  std::error_code ec;
  for (const fs::directory_entry& e : fs::directory_iterator(dir, ec)) {
    struct stat st {};
    if (::lstat(e.path().c_str(), &st) != 0) return Errno(errno, "lstat", e.path());
    const std::string name = e.path().filename().string();
    ObjectId child = 0;
    if (S_ISREG(st.st_mode) && st.st_nlink > 1) {
      if (auto it = links.find({st.st_dev, st.st_ino}); it != links.end()) child = it->second;
    }
    if (child == 0) {
      if (S_ISDIR(st.st_mode)) {
        child = NewObject(Kind::kDir);
      } else if (S_ISREG(st.st_mode)) {
        child = NewObject(Kind::kFile);
        objects_[child].data = Data::kLive;
        if (st.st_nlink > 1) links[{st.st_dev, st.st_ino}] = child;
      } else if (S_ISLNK(st.st_mode)) {
        child = NewObject(Kind::kSymlink);
        objects_[child].target = fs::read_symlink(e.path(), ec).string();
        if (ec)
          return absl::InternalError(
              absl::StrCat("readlink ", e.path().string(), ": ", ec.message()));
      } else {
        return absl::FailedPreconditionError(
            absl::StrCat(e.path().string(), ": special files are not supported"));
      }
      objects_[child].mode = st.st_mode & 07777;
    }
    Object& o = objects_[child];
    ++o.live_names;
    objects_[id].live[name] = child;
    objects_[id].durable[name] = child;
    if (o.kind == Kind::kDir) {
      if (absl::Status s = Scan(e.path(), child, links); !s.ok()) return s;
    }
  }
  if (ec) return absl::InternalError(absl::StrCat("list ", dir.string(), ": ", ec.message()));
  return absl::OkStatus();
}

ObjectId LazyFs::NewObject(Kind kind) {
  const ObjectId id = next_id_++;
  objects_[id].kind = kind;
  return id;
}

std::string LazyFs::Backing(std::string_view path) const {
  return backing_.string() + std::string(path == "/" ? "" : path);
}

std::string LazyFs::ShadowOf(ObjectId id) const { return (shadow_ / std::to_string(id)).string(); }

ObjectId LazyFs::Resolve(std::string_view path) {
  ObjectId id = kRootId;
  for (std::string_view part : Components(path)) {
    const Object& o = objects_[id];
    if (o.kind != Kind::kDir) return 0;
    auto it = o.live.find(std::string(part));
    if (it == o.live.end()) return 0;
    id = it->second;
  }
  return id;
}

int LazyFs::ResolveParent(std::string_view path, ObjectId* parent, std::string* name) {
  const std::size_t slash = path.rfind('/');
  if (slash == std::string_view::npos || slash + 1 == path.size()) return -EINVAL;
  const ObjectId p = Resolve(path.substr(0, slash));
  if (p == 0) return -ENOENT;
  if (objects_[p].kind != Kind::kDir) return -ENOTDIR;
  *parent = p;
  *name = std::string(path.substr(slash + 1));
  return 0;
}

int LazyFs::PrepareChange(ObjectId id, int fd, std::string_view path) {
  Object& o = objects_[id];
  if (o.kind != Kind::kFile || o.data != Data::kLive) return 0;
  Fd opened(fd >= 0 ? -1 : ::open(Backing(path).c_str(), O_RDONLY | O_CLOEXEC));
  const int from = fd >= 0 ? fd : opened.fd;
  if (from < 0) return -errno;
  struct stat st {};
  if (::fstat(from, &st) != 0) return -errno;
  Fd to(::open(ShadowOf(id).c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600));
  if (to.fd < 0) return -errno;
  if (int r = CopyRange(from, to.fd, 0, static_cast<std::uint64_t>(st.st_size)); r != 0) return r;
  o.data = Data::kShadow;
  o.mode = st.st_mode & 07777;
  o.atime = st.st_atim;
  o.mtime = st.st_mtim;
  o.dirty_begin = o.dirty_end = 0;
  return 0;
}

void LazyFs::MarkDirty(Object& o, std::uint64_t begin, std::uint64_t end) {
  if (end <= begin) return;
  if (o.dirty_end <= o.dirty_begin) {
    o.dirty_begin = begin;
    o.dirty_end = end;
    return;
  }
  o.dirty_begin = std::min(o.dirty_begin, begin);
  o.dirty_end = std::max(o.dirty_end, end);
}

int LazyFs::GetAttr(const char* path, const Handle* h, struct stat* st) {
  if (h != nullptr && h->fd >= 0) return ::fstat(h->fd, st) == 0 ? 0 : -errno;
  if (path == nullptr) return -ENOENT;
  return ::lstat(Backing(path).c_str(), st) == 0 ? 0 : -errno;
}

int LazyFs::ReadDir(ObjectId id, const std::function<void(const std::string&, mode_t)>& fill) {
  absl::MutexLock lock(&mu_);
  if (cut_) return -EIO;
  const Object& dir = objects_[id];
  if (dir.kind != Kind::kDir) return -ENOTDIR;
  fill(".", S_IFDIR);
  fill("..", S_IFDIR);
  for (const auto& [name, child] : dir.live) {
    const Kind k = objects_[child].kind;
    fill(name, k == Kind::kDir ? S_IFDIR : k == Kind::kSymlink ? S_IFLNK : S_IFREG);
  }
  return 0;
}

int LazyFs::Readlink(const char* path, char* buf, std::size_t size) {
  if (size == 0) return -EINVAL;
  const ssize_t n = ::readlink(Backing(path).c_str(), buf, size - 1);
  if (n < 0) return -errno;
  buf[n] = '\0';
  return 0;
}

int LazyFs::StatFs(struct statvfs* st) { return ::statvfs(backing_.c_str(), st) == 0 ? 0 : -errno; }

int LazyFs::OpenLocked(std::string_view path, ObjectId id, int flags, Handle** out) {
  Object& o = objects_[id];
  if (o.kind == Kind::kDir) return -EISDIR;
  // Writes come with the kernel's offsets (also for O_APPEND), and a sync reads the file
  // back through the same descriptor: so no O_APPEND, and read access always.
  int bflags = flags & ~(O_APPEND | O_CREAT | O_EXCL | O_DIRECT);
  if ((bflags & O_ACCMODE) == O_WRONLY) bflags = (bflags & ~O_ACCMODE) | O_RDWR;
  std::uint64_t old_size = 0;
  if (flags & O_TRUNC) {
    struct stat st {};
    if (::lstat(Backing(path).c_str(), &st) != 0) return -errno;
    old_size = static_cast<std::uint64_t>(st.st_size);
    if (int r = PrepareChange(id, -1, path); r != 0) return r;
  }
  const int fd = ::open(Backing(path).c_str(), bflags | O_CLOEXEC);
  if (fd < 0) return -errno;
  if (flags & O_TRUNC) MarkDirty(o, 0, old_size);
  *out = new Handle{id, fd};
  return 0;
}

int LazyFs::OpenFile(const char* path, int flags, Handle** out) {
  absl::MutexLock lock(&mu_);
  if (cut_) return -EIO;
  const ObjectId id = Resolve(path);
  if (id == 0) return -ENOENT;
  return OpenLocked(path, id, flags, out);
}

int LazyFs::Create(const char* path, int flags, mode_t mode, Handle** out) {
  absl::MutexLock lock(&mu_);
  if (cut_) return -EIO;
  ObjectId parent = 0;
  std::string name;
  if (int r = ResolveParent(path, &parent, &name); r != 0) return r;
  if (auto it = objects_[parent].live.find(name); it != objects_[parent].live.end()) {
    if (flags & O_EXCL) return -EEXIST;
    return OpenLocked(path, it->second, flags, out);
  }
  int bflags = (flags & ~(O_APPEND | O_DIRECT)) | O_CREAT | O_EXCL;
  if ((bflags & O_ACCMODE) == O_WRONLY) bflags = (bflags & ~O_ACCMODE) | O_RDWR;
  const int fd = ::open(Backing(path).c_str(), bflags | O_CLOEXEC, mode);
  if (fd < 0) return -errno;
  struct stat st {};
  (void)::fstat(fd, &st);  // ignored: only the mode and times an empty file is rebuilt with
  const ObjectId id = NewObject(Kind::kFile);
  Object& o = objects_[id];
  o.data = Data::kEmpty;
  o.mode = st.st_mode & 07777;
  o.atime = st.st_atim;
  o.mtime = st.st_mtim;
  o.live_names = 1;
  objects_[parent].live[name] = id;
  *out = new Handle{id, fd};
  return 0;
}

int LazyFs::OpenDir(const char* path, Handle** out) {
  absl::MutexLock lock(&mu_);
  if (cut_) return -EIO;
  const ObjectId id = Resolve(path);
  if (id == 0) return -ENOENT;
  if (objects_[id].kind != Kind::kDir) return -ENOTDIR;
  *out = new Handle{id, -1};
  return 0;
}

void LazyFs::Release(Handle* h) {
  if (h->fd >= 0) ::close(h->fd);
  delete h;
}

int LazyFs::Read(const Handle& h, char* buf, std::size_t size, off_t off) {
  const ssize_t n = ::pread(h.fd, buf, size, off);
  return n < 0 ? -errno : static_cast<int>(n);
}

int LazyFs::Write(const Handle& h, const char* buf, std::size_t size, off_t off) {
  absl::MutexLock lock(&mu_);
  if (cut_) return -EIO;
  if (int r = PrepareChange(h.id, h.fd, ""); r != 0) return r;
  const ssize_t n = ::pwrite(h.fd, buf, size, off);
  if (n < 0) return -errno;
  MarkDirty(objects_[h.id], static_cast<std::uint64_t>(off), static_cast<std::uint64_t>(off + n));
  return static_cast<int>(n);
}

int LazyFs::Truncate(const char* path, const Handle* h, off_t size) {
  absl::MutexLock lock(&mu_);
  if (cut_) return -EIO;
  const ObjectId id = h != nullptr ? h->id : Resolve(PathOrEmpty(path));
  if (id == 0) return -ENOENT;
  if (objects_[id].kind == Kind::kDir) return -EISDIR;
  const int fd = h != nullptr ? h->fd : -1;
  if (int r = PrepareChange(id, fd, PathOrEmpty(path)); r != 0) return r;
  struct stat st {};
  if ((fd >= 0 ? ::fstat(fd, &st) : ::lstat(Backing(path).c_str(), &st)) != 0) return -errno;
  if ((fd >= 0 ? ::ftruncate(fd, size) : ::truncate(Backing(path).c_str(), size)) != 0)
    return -errno;
  const auto old_size = static_cast<std::uint64_t>(st.st_size);
  const auto new_size = static_cast<std::uint64_t>(size);
  MarkDirty(objects_[id], std::min(old_size, new_size), std::max(old_size, new_size));
  return 0;
}

int LazyFs::Fallocate(const Handle& h, int mode, off_t off, off_t len) {
  if ((mode & ~FALLOC_FL_KEEP_SIZE) != 0) return -EOPNOTSUPP;
  absl::MutexLock lock(&mu_);
  if (cut_) return -EIO;
  if (mode == FALLOC_FL_KEEP_SIZE) {
    // Reserves blocks; the content (and size) stays what it was.
    return ::fallocate(h.fd, mode, off, len) == 0 ? 0 : -errno;
  }
  if (int r = PrepareChange(h.id, h.fd, ""); r != 0) return r;
  struct stat st {};
  if (::fstat(h.fd, &st) != 0) return -errno;
  if (::fallocate(h.fd, mode, off, len) != 0) return -errno;
  MarkDirty(objects_[h.id], static_cast<std::uint64_t>(st.st_size),
            static_cast<std::uint64_t>(off + len));
  return 0;
}

int LazyFs::Chmod(const char* path, const Handle* h, mode_t mode) {
  absl::MutexLock lock(&mu_);
  if (cut_) return -EIO;
  const ObjectId id = h != nullptr ? h->id : Resolve(PathOrEmpty(path));
  if (id == 0) return -ENOENT;
  const int fd = h != nullptr ? h->fd : -1;
  if (int r = PrepareChange(id, fd, PathOrEmpty(path)); r != 0) return r;
  if ((fd >= 0 ? ::fchmod(fd, mode) : ::chmod(Backing(path).c_str(), mode)) != 0) return -errno;
  if (objects_[id].kind == Kind::kDir) objects_[id].mode = mode & 07777;
  return 0;
}

int LazyFs::Chown(const char* path, const Handle* h, uid_t uid, gid_t gid) {
  absl::MutexLock lock(&mu_);
  if (cut_) return -EIO;
  const int fd = h != nullptr ? h->fd : -1;
  const int r =
      fd >= 0 ? ::fchown(fd, uid, gid) : ::lchown(Backing(PathOrEmpty(path)).c_str(), uid, gid);
  return r == 0 ? 0 : -errno;
}

int LazyFs::Utimens(const char* path, const Handle* h, const struct timespec tv[2]) {
  absl::MutexLock lock(&mu_);
  if (cut_) return -EIO;
  const ObjectId id = h != nullptr ? h->id : Resolve(PathOrEmpty(path));
  if (id == 0) return -ENOENT;
  const int fd = h != nullptr ? h->fd : -1;
  if (int r = PrepareChange(id, fd, PathOrEmpty(path)); r != 0) return r;
  const int r = fd >= 0 ? ::futimens(fd, tv)
                        : ::utimensat(AT_FDCWD, Backing(path).c_str(), tv, AT_SYMLINK_NOFOLLOW);
  return r == 0 ? 0 : -errno;
}

int LazyFs::Mkdir(const char* path, mode_t mode) {
  absl::MutexLock lock(&mu_);
  if (cut_) return -EIO;
  ObjectId parent = 0;
  std::string name;
  if (int r = ResolveParent(path, &parent, &name); r != 0) return r;
  if (::mkdir(Backing(path).c_str(), mode) != 0) return -errno;
  const ObjectId id = NewObject(Kind::kDir);
  objects_[id].mode = mode & 07777;
  objects_[id].live_names = 1;
  objects_[parent].live[name] = id;
  return 0;
}

int LazyFs::Rmdir(const char* path) {
  absl::MutexLock lock(&mu_);
  if (cut_) return -EIO;
  ObjectId parent = 0;
  std::string name;
  if (int r = ResolveParent(path, &parent, &name); r != 0) return r;
  auto it = objects_[parent].live.find(name);
  if (it == objects_[parent].live.end()) return -ENOENT;
  if (::rmdir(Backing(path).c_str()) != 0) return -errno;
  // The directory stays an object: a durable entry may still name it, with its own
  // durable entries.
  --objects_[it->second].live_names;
  objects_[parent].live.erase(it);
  return 0;
}

int LazyFs::Unlink(const char* path) {
  absl::MutexLock lock(&mu_);
  if (cut_) return -EIO;
  ObjectId parent = 0;
  std::string name;
  if (int r = ResolveParent(path, &parent, &name); r != 0) return r;
  auto it = objects_[parent].live.find(name);
  if (it == objects_[parent].live.end()) return -ENOENT;
  const ObjectId id = it->second;
  if (objects_[id].kind == Kind::kDir) return -EISDIR;
  // The last name of an unchanged file goes: its bytes are still durable content.
  if (objects_[id].live_names == 1) {
    if (int r = PrepareChange(id, -1, path); r != 0) return r;
  }
  if (::unlink(Backing(path).c_str()) != 0) return -errno;
  --objects_[id].live_names;
  objects_[parent].live.erase(it);
  return 0;
}

int LazyFs::Rename(const char* from, const char* to, unsigned flags) {
  if ((flags & ~(RENAME_NOREPLACE | RENAME_EXCHANGE)) != 0) return -EINVAL;
  absl::MutexLock lock(&mu_);
  if (cut_) return -EIO;
  ObjectId from_dir = 0, to_dir = 0;
  std::string from_name, to_name;
  if (int r = ResolveParent(from, &from_dir, &from_name); r != 0) return r;
  if (int r = ResolveParent(to, &to_dir, &to_name); r != 0) return r;
  auto src = objects_[from_dir].live.find(from_name);
  if (src == objects_[from_dir].live.end()) return -ENOENT;
  const ObjectId id = src->second;
  auto dst = objects_[to_dir].live.find(to_name);
  const ObjectId replaced = dst == objects_[to_dir].live.end() ? 0 : dst->second;
  if (replaced != 0 && replaced != id && (flags & RENAME_EXCHANGE) == 0 &&
      objects_[replaced].live_names == 1) {
    // A replaced file loses its last name: keep its durable bytes first (a no-op unless
    // unchanged since mount; harmless if the rename then fails).
    if (int r = PrepareChange(replaced, -1, to); r != 0) return r;
  }
  if (::renameat2(AT_FDCWD, Backing(from).c_str(), AT_FDCWD, Backing(to).c_str(), flags) != 0) {
    return -errno;
  }
  if (replaced == id) return 0;  // two names of one file (or one name): POSIX does nothing
  if (flags & RENAME_EXCHANGE) {
    objects_[from_dir].live[from_name] = replaced;
    objects_[to_dir].live[to_name] = id;
    return 0;
  }
  objects_[from_dir].live.erase(from_name);
  if (replaced != 0) --objects_[replaced].live_names;
  objects_[to_dir].live[to_name] = id;
  return 0;
}

int LazyFs::Link(const char* from, const char* to) {
  absl::MutexLock lock(&mu_);
  if (cut_) return -EIO;
  const ObjectId id = Resolve(from);
  if (id == 0) return -ENOENT;
  ObjectId parent = 0;
  std::string name;
  if (int r = ResolveParent(to, &parent, &name); r != 0) return r;
  if (::link(Backing(from).c_str(), Backing(to).c_str()) != 0) return -errno;
  ++objects_[id].live_names;
  objects_[parent].live[name] = id;
  return 0;
}

int LazyFs::Symlink(const char* target, const char* path) {
  absl::MutexLock lock(&mu_);
  if (cut_) return -EIO;
  ObjectId parent = 0;
  std::string name;
  if (int r = ResolveParent(path, &parent, &name); r != 0) return r;
  if (::symlink(target, Backing(path).c_str()) != 0) return -errno;
  const ObjectId id = NewObject(Kind::kSymlink);
  objects_[id].target = target;
  objects_[id].live_names = 1;
  objects_[parent].live[name] = id;
  return 0;
}

int LazyFs::Fsync(const Handle& h) {
  absl::MutexLock lock(&mu_);
  if (cut_) return -EIO;
  Object& o = objects_[h.id];
  if (o.kind != Kind::kFile || o.data == Data::kLive) return 0;  // unchanged: durable already
  struct stat st {};
  if (::fstat(h.fd, &st) != 0) return -errno;
  const auto size = static_cast<std::uint64_t>(st.st_size);
  // A first sync copies the whole file; later ones what changed since the last.
  const bool whole = o.data == Data::kEmpty;
  Fd shadow(
      ::open(ShadowOf(h.id).c_str(), O_WRONLY | O_CLOEXEC | (whole ? O_CREAT | O_TRUNC : 0), 0600));
  if (shadow.fd < 0) return -errno;
  if (::ftruncate(shadow.fd, st.st_size) != 0) return -errno;
  const std::uint64_t begin = whole ? 0 : o.dirty_begin;
  const std::uint64_t end = whole ? size : std::min(o.dirty_end, size);
  if (int r = CopyRange(h.fd, shadow.fd, begin, end); r != 0) return r;
  o.data = Data::kShadow;
  o.dirty_begin = o.dirty_end = 0;
  o.mode = st.st_mode & 07777;
  o.atime = st.st_atim;
  o.mtime = st.st_mtim;
  return 0;
}

int LazyFs::FsyncDir(const Handle& h) {
  absl::MutexLock lock(&mu_);
  if (cut_) return -EIO;
  Object& o = objects_[h.id];
  o.durable = o.live;
  return 0;
}

absl::Status LazyFs::Materialize(ObjectId id, const fs::path& out,
                                 const std::unordered_map<ObjectId, std::string>& live_path,
                                 std::unordered_map<ObjectId, fs::path>& made, int& files,
                                 int& dirs) {
  for (const auto& [name, child] : objects_[id].durable) {
    const fs::path target = out / name;
    const Object& o = objects_[child];
    if (auto it = made.find(child); it != made.end()) {
      if (o.kind == Kind::kDir) continue;  // a directory has one name (see the header)
      if (::link(it->second.c_str(), target.c_str()) != 0) return Errno(errno, "link", target);
      continue;
    }
    made[child] = target;
    switch (o.kind) {
      case Kind::kDir:
        if (::mkdir(target.c_str(), o.mode) != 0) return Errno(errno, "mkdir", target);
        ++dirs;
        if (absl::Status s = Materialize(child, target, live_path, made, files, dirs); !s.ok()) {
          return s;
        }
        continue;
      case Kind::kSymlink:
        if (::symlink(o.target.c_str(), target.c_str()) != 0)
          return Errno(errno, "symlink", target);
        continue;
      case Kind::kFile:
        break;
    }
    ++files;
    if (o.data == Data::kLive) {
      // Unchanged since mount, and (kept so by PrepareChange) still named in the live tree.
      const std::string from = Backing(live_path.at(child));
      if (::link(from.c_str(), target.c_str()) == 0) continue;
      if (errno != EXDEV) return Errno(errno, "link", target);
      std::error_code ec;
      fs::copy_file(from, target, ec);
      if (ec) return absl::InternalError(absl::StrCat("copy ", from, ": ", ec.message()));
      continue;
    }
    Fd to(::open(target.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600));
    if (to.fd < 0) return Errno(errno, "create", target);
    if (o.data == Data::kShadow) {
      Fd from(::open(ShadowOf(child).c_str(), O_RDONLY | O_CLOEXEC));
      struct stat st {};
      if (from.fd < 0 || ::fstat(from.fd, &st) != 0) return Errno(errno, "open", ShadowOf(child));
      if (int r = CopyRange(from.fd, to.fd, 0, static_cast<std::uint64_t>(st.st_size)); r != 0) {
        return Errno(-r, "copy into", target);
      }
    }
    const struct timespec times[2] = {o.atime, o.mtime};
    if (::fchmod(to.fd, o.mode) != 0 || ::futimens(to.fd, times) != 0) {
      return Errno(errno, "set mode and times of", target);
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> LazyFs::Cut() {
  absl::MutexLock lock(&mu_);
  cut_ = true;
  // A path in the live tree of every object, for files still unchanged since mount.
  std::unordered_map<ObjectId, std::string> live_path;
  std::vector<std::pair<ObjectId, std::string>> todo = {{kRootId, ""}};
  while (!todo.empty()) {
    auto [dir, path] = todo.back();
    todo.pop_back();
    for (const auto& [name, child] : objects_[dir].live) {
      if (!live_path.emplace(child, path + "/" + name).second) continue;
      if (objects_[child].kind == Kind::kDir) todo.emplace_back(child, path + "/" + name);
    }
  }
  std::string tmpl =
      (backing_.parent_path() / ("." + backing_.filename().string() + ".cut-XXXXXX")).string();
  if (::mkdtemp(tmpl.data()) == nullptr) return Errno(errno, "mkdtemp", tmpl);
  const fs::path fresh = tmpl;
  std::unordered_map<ObjectId, fs::path> made = {{kRootId, fresh}};
  int files = 0, dirs = 0;
  if (absl::Status s = Materialize(kRootId, fresh, live_path, made, files, dirs); !s.ok()) {
    return s;
  }
  // Swap: the backing directory itself stays (a test may hold its path), its content is
  // replaced by the rebuilt tree.
  std::error_code ec;
  std::vector<fs::path> old;
  for (const fs::directory_entry& e : fs::directory_iterator(backing_, ec)) old.push_back(e.path());
  if (ec) return absl::InternalError(absl::StrCat("list ", backing_.string(), ": ", ec.message()));
  for (const fs::path& p : old) {
    fs::remove_all(p, ec);
    if (ec) return absl::InternalError(absl::StrCat("remove ", p.string(), ": ", ec.message()));
  }
  std::vector<fs::path> rebuilt;
  for (const fs::directory_entry& e : fs::directory_iterator(fresh, ec))
    rebuilt.push_back(e.path());
  if (ec) return absl::InternalError(absl::StrCat("list ", fresh.string(), ": ", ec.message()));
  for (const fs::path& p : rebuilt) {
    fs::rename(p, backing_ / p.filename(), ec);
    if (ec) return absl::InternalError(absl::StrCat("move ", p.string(), ": ", ec.message()));
  }
  fs::remove(fresh, ec);
  (void)ec;  // ignored: an empty leftover directory beside the backing one
  return absl::StrCat("cut: rebuilt ", files, " files and ", dirs,
                      " directories from the durable state");
}

}  // namespace gfrep::testing::lazyfs
