// gfrep-test-lazyfs: what a power cut keeps, through a real mount (root and /dev/fuse, else
// skipped with a message), and the model alone (LazyFsModelTest, anywhere). The durable
// state is set up in the backing directory before mounting (present at mount = durable);
// after the cut the backing directory is what a reboot would find.
#include "tests/support/lazyfs/lazy_fs.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <stdio.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <string>

#include "tests/support/lazy_mount.h"
#include "tests/support/temp_dir.h"

namespace gfrep::testing::lazyfs {
namespace {

namespace fs = std::filesystem;

enum class Sync { kNone, kFsync, kFdatasync };

// Writes `data` to `path` (created or truncated) through the mount, then syncs as told.
void Put(const fs::path& path, const std::string& data, Sync sync) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  ASSERT_GE(fd, 0) << path << ": " << std::strerror(errno);
  ASSERT_EQ(::write(fd, data.data(), data.size()), static_cast<ssize_t>(data.size()));
  if (sync == Sync::kFsync) {
    EXPECT_EQ(::fsync(fd), 0) << std::strerror(errno);
  } else if (sync == Sync::kFdatasync) {
    EXPECT_EQ(::fdatasync(fd), 0) << std::strerror(errno);
  }
  ::close(fd);
}

void SyncDir(const fs::path& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  ASSERT_GE(fd, 0) << dir << ": " << std::strerror(errno);
  EXPECT_EQ(::fsync(fd), 0) << std::strerror(errno);
  ::close(fd);
}

class LazyFsMountTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (std::string why = LazyMount::Unavailable(); !why.empty()) {
      GTEST_SKIP() << "lazyfs mount test " << why;
    }
    fs::create_directories(backing_);
  }

  void Mount() {
    absl::StatusOr<LazyMount> m = LazyMount::Start(backing_, dir_.path() / "mnt");
    ASSERT_TRUE(m.ok()) << m.status();
    mount_ = std::move(*m);
  }

  void Cut() {
    absl::StatusOr<std::string> summary = mount_.Cut();
    ASSERT_TRUE(summary.ok()) << summary.status();
  }

  fs::path M(const std::string& name) const { return mount_.path() / name; }
  fs::path B(const std::string& name) const { return backing_ / name; }
  // A file durable before the mount.
  void Durable(const std::string& name, const std::string& data) {
    fs::create_directories(B(name).parent_path());
    std::FILE* f = std::fopen(B(name).c_str(), "wb");
    ASSERT_NE(f, nullptr);
    std::fwrite(data.data(), 1, data.size(), f);
    std::fclose(f);
  }

  TempDir dir_{"lazyfs"};
  fs::path backing_ = dir_.path() / "backing";
  LazyMount mount_;  // after dir_: unmounted before the directory goes
};

TEST_F(LazyFsMountTest, UnsyncedWriteIsGoneAfterACut) {
  Durable("f", "old bytes");
  Mount();
  Put(M("f"), "new bytes, never synced", Sync::kNone);
  Put(M("g"), "new file", Sync::kNone);
  SyncDir(mount_.path());                                  // g's name is durable, its bytes are not
  EXPECT_EQ(ReadFile(M("f")), "new bytes, never synced");  // the live state before the cut
  Cut();
  EXPECT_EQ(ReadFile(B("f")), "old bytes");
  ASSERT_TRUE(fs::exists(B("g")));
  EXPECT_EQ(fs::file_size(B("g")), 0u);
}

TEST_F(LazyFsMountTest, SyncedWriteStaysWithItsModificationTime) {
  Durable("f", "old");
  Durable("g", "old");
  Mount();
  Put(M("f"), "fsynced", Sync::kFsync);
  Put(M("g"), "fdatasynced", Sync::kFdatasync);
  struct stat before {};
  ASSERT_EQ(::stat(M("f").c_str(), &before), 0);
  // Appended after the sync: not durable.
  {
    const int fd = ::open(M("f").c_str(), O_WRONLY | O_APPEND | O_CLOEXEC);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(::write(fd, " and more", 9), 9);
    ::close(fd);
  }
  EXPECT_EQ(ReadFile(M("f")), "fsynced and more");
  Cut();
  EXPECT_EQ(ReadFile(B("f")), "fsynced");
  EXPECT_EQ(ReadFile(B("g")), "fdatasynced");
  struct stat after {};
  ASSERT_EQ(::stat(B("f").c_str(), &after), 0);
  EXPECT_EQ(after.st_mtim.tv_sec, before.st_mtim.tv_sec);
  EXPECT_EQ(after.st_mtim.tv_nsec, before.st_mtim.tv_nsec);
}

TEST_F(LazyFsMountTest, RenameWithoutDirectorySyncIsUndone) {
  Durable("a", "A");
  Mount();
  ASSERT_EQ(::rename(M("a").c_str(), M("b").c_str()), 0);
  EXPECT_FALSE(fs::exists(M("a")));
  Cut();
  EXPECT_EQ(ReadFile(B("a")), "A");
  EXPECT_FALSE(fs::exists(B("b")));
}

TEST_F(LazyFsMountTest, RenameWithDirectorySyncStays) {
  Durable("a", "A");
  Mount();
  ASSERT_EQ(::rename(M("a").c_str(), M("b").c_str()), 0);
  SyncDir(mount_.path());
  Cut();
  EXPECT_FALSE(fs::exists(B("a")));
  EXPECT_EQ(ReadFile(B("b")), "A");
}

TEST_F(LazyFsMountTest, ReplacingRenameNeedsTheDirectorySync) {
  // The atomic-replace idiom: write a temporary, fsync it, rename it over the old file.
  Durable("kept", "old");
  Durable("replaced", "old");
  Durable("solo", "old");
  Mount();
  Put(M("kept.tmp"), "new kept", Sync::kFsync);
  ASSERT_EQ(::rename(M("kept.tmp").c_str(), M("kept").c_str()), 0);
  Put(M("replaced.tmp"), "new replaced", Sync::kFsync);
  ASSERT_EQ(::rename(M("replaced.tmp").c_str(), M("replaced").c_str()), 0);
  SyncDir(mount_.path());
  Put(M("kept.tmp"), "newer kept", Sync::kFsync);
  ASSERT_EQ(::rename(M("kept.tmp").c_str(), M("kept").c_str()), 0);  // no directory sync
  Put(M("solo.tmp"), "new solo", Sync::kFsync);
  ASSERT_EQ(::rename(M("solo.tmp").c_str(), M("solo").c_str()), 0);  // nor here
  Cut();
  EXPECT_EQ(ReadFile(B("solo")), "old");
  EXPECT_EQ(ReadFile(B("replaced")), "new replaced");
  EXPECT_EQ(ReadFile(B("kept")), "new kept");  // the newer one's rename was not synced
  EXPECT_FALSE(fs::exists(B("kept.tmp")));
  EXPECT_FALSE(fs::exists(B("replaced.tmp")));
}

TEST_F(LazyFsMountTest, FsyncedFileIsGoneWithoutItsDirectorySync) {
  Mount();
  Put(M("new"), "synced bytes", Sync::kFsync);
  Cut();
  EXPECT_FALSE(fs::exists(B("new")));
}

TEST_F(LazyFsMountTest, UnlinkWithoutDirectorySyncComesBackWithItsDurableContent) {
  Durable("untouched", "as mounted");
  Durable("synced", "v1");
  Mount();
  Put(M("new"), "x", Sync::kFsync);
  SyncDir(mount_.path());  // "new" has a durable name now
  Put(M("synced"), "v2", Sync::kFsync);
  Put(M("synced"), "v3, not synced", Sync::kNone);
  for (const char* name : {"synced", "untouched", "new"}) {
    ASSERT_EQ(::unlink(M(name).c_str()), 0) << name;
  }
  Cut();
  EXPECT_EQ(ReadFile(B("synced")), "v2");
  EXPECT_EQ(ReadFile(B("untouched")), "as mounted");
  EXPECT_EQ(ReadFile(B("new")), "x");
}

TEST_F(LazyFsMountTest, NestedNewDirectoriesNeedEachParentSynced) {
  Mount();
  // Chains D/a/b/f, each file and directory synced bottom-up, D itself only for "z".
  auto chain = [&](const std::string& top) {
    fs::create_directories(M(top + "/a/b"));
    Put(M(top + "/a/b/f"), top, Sync::kFsync);
    SyncDir(M(top + "/a/b"));
    SyncDir(M(top + "/a"));
    if (top == "z") SyncDir(M(top));
  };
  chain("y");
  chain("z");
  SyncDir(mount_.path());  // names y and z are durable
  chain("x");              // made after the root's sync: all of it goes
  SyncDir(M("x"));
  Cut();
  EXPECT_FALSE(fs::exists(B("x")));
  ASSERT_TRUE(fs::is_directory(B("y")));
  EXPECT_TRUE(fs::is_empty(B("y")));  // y's own entries were never synced
  EXPECT_EQ(ReadFile(B("z/a/b/f")), "z");
}

TEST_F(LazyFsMountTest, TruncateWithoutSyncIsUndone) {
  Durable("f", "0123456789");
  Mount();
  fs::resize_file(M("f"), 3);
  EXPECT_EQ(fs::file_size(M("f")), 3u);
  Cut();
  EXPECT_EQ(ReadFile(B("f")), "0123456789");
}

TEST_F(LazyFsMountTest, DoesWhatRocksDbAndTheSpoolNeed) {
  Mount();
  // RENAME_NOREPLACE (the spool's RenameNoReplace): refused over a name, done otherwise.
  Put(M("a"), "A", Sync::kFsync);
  Put(M("b"), "B", Sync::kFsync);
  EXPECT_NE(::renameat2(AT_FDCWD, M("a").c_str(), AT_FDCWD, M("b").c_str(), RENAME_NOREPLACE), 0);
  EXPECT_EQ(errno, EEXIST);
  EXPECT_EQ(::renameat2(AT_FDCWD, M("a").c_str(), AT_FDCWD, M("c").c_str(), RENAME_NOREPLACE), 0)
      << std::strerror(errno);
  // Locks are the kernel's: a second open file description conflicts (RocksDB's LOCK).
  const int l1 = ::open(M("LOCK").c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  const int l2 = ::open(M("LOCK").c_str(), O_RDWR | O_CLOEXEC);
  ASSERT_GE(l1, 0);
  ASSERT_GE(l2, 0);
  EXPECT_EQ(::flock(l1, LOCK_EX | LOCK_NB), 0) << std::strerror(errno);
  EXPECT_NE(::flock(l2, LOCK_EX | LOCK_NB), 0);
  struct flock fl {};
  fl.l_type = F_WRLCK;
  fl.l_whence = SEEK_SET;
  EXPECT_EQ(::fcntl(l1, F_OFD_SETLK, &fl), 0) << std::strerror(errno);
  EXPECT_NE(::fcntl(l2, F_OFD_SETLK, &fl), 0);
  ::close(l2);
  // Preallocation keeps the size; other fallocate modes are refused clearly.
  EXPECT_EQ(::fallocate(l1, FALLOC_FL_KEEP_SIZE, 0, 1 << 20), 0) << std::strerror(errno);
  EXPECT_EQ(::lseek(l1, 0, SEEK_END), 0);
  EXPECT_NE(::fallocate(l1, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 0, 4096), 0);
  EXPECT_EQ(errno, EOPNOTSUPP);
  // pwrite past the end leaves a hole of zeros, durable with the sync.
  ASSERT_EQ(::pwrite(l1, "x", 1, 9), 1);
  EXPECT_EQ(::fsync(l1), 0);
  ::close(l1);
  // A hard link, and a file written through a descriptor after its name was removed.
  ASSERT_EQ(::link(M("b").c_str(), M("b2").c_str()), 0);
  const int fd = ::open(M("c").c_str(), O_RDWR | O_CLOEXEC);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::unlink(M("c").c_str()), 0);
  ASSERT_EQ(::pwrite(fd, "z", 1, 0), 1);
  EXPECT_EQ(::fsync(fd), 0) << std::strerror(errno);
  ::close(fd);
  SyncDir(mount_.path());
  Cut();
  EXPECT_EQ(ReadFile(B("LOCK")), std::string(9, '\0') + "x");
  EXPECT_FALSE(fs::exists(B("a")));
  EXPECT_FALSE(fs::exists(B("c")));
  struct stat b {
  }, b2{};
  ASSERT_EQ(::stat(B("b").c_str(), &b), 0);
  ASSERT_EQ(::stat(B("b2").c_str(), &b2), 0);
  EXPECT_EQ(b.st_ino, b2.st_ino);
  EXPECT_EQ(ReadFile(B("b2")), "B");
}

TEST_F(LazyFsMountTest, CleanUnmountKeepsEverything) {
  Mount();
  Put(M("f"), "never synced", Sync::kNone);
  fs::create_directories(M("d/e"));
  ASSERT_TRUE(mount_.Unmount().ok());
  EXPECT_FALSE(IsMounted(dir_.path() / "mnt"));
  EXPECT_EQ(ReadFile(B("f")), "never synced");
  EXPECT_TRUE(fs::is_directory(B("d/e")));
}

TEST_F(LazyFsMountTest, WhatACutKeptIsDurableAtTheNextMount) {
  Mount();
  Put(M("f"), "first mount", Sync::kFsync);
  SyncDir(mount_.path());
  Cut();
  ASSERT_EQ(ReadFile(B("f")), "first mount");
  Mount();
  EXPECT_EQ(ReadFile(M("f")), "first mount");
  ASSERT_EQ(::unlink(M("f").c_str()), 0);
  Cut();
  EXPECT_EQ(ReadFile(B("f")), "first mount");
}

// The model without FUSE: the same rules through LazyFs's own calls.
class LazyFsModelTest : public ::testing::Test {
 protected:
  void SetUp() override {
    fs::create_directories(backing_);
    fs::create_directories(shadow_);
  }
  TempDir dir_{"lazyfs-model"};
  fs::path backing_ = dir_.path() / "backing";
  fs::path shadow_ = dir_.path() / "shadow";
};

TEST_F(LazyFsModelTest, KeepsSyncedFilesInSyncedDirectoriesOnly) {
  absl::StatusOr<std::unique_ptr<LazyFs>> lazy = LazyFs::Open(backing_, shadow_);
  ASSERT_TRUE(lazy.ok()) << lazy.status();
  LazyFs& fs = **lazy;
  ASSERT_EQ(fs.Mkdir("/d", 0755), 0);
  Handle* f = nullptr;
  ASSERT_EQ(fs.Create("/d/f", O_WRONLY, 0644, &f), 0);
  ASSERT_EQ(fs.Write(*f, "durable", 7, 0), 7);
  ASSERT_EQ(fs.Fsync(*f), 0);
  ASSERT_EQ(fs.Write(*f, " tail", 5, 7), 5);
  fs.Release(f);
  Handle* g = nullptr;
  ASSERT_EQ(fs.Create("/d/g", O_WRONLY, 0644, &g), 0);
  ASSERT_EQ(fs.Fsync(*g), 0);
  fs.Release(g);
  Handle* dir = nullptr;
  ASSERT_EQ(fs.OpenDir("/d", &dir), 0);
  ASSERT_EQ(fs.FsyncDir(*dir), 0);
  fs.Release(dir);
  ASSERT_EQ(fs.Rename("/d/g", "/d/h", 0), 0);
  Handle* root = nullptr;
  ASSERT_EQ(fs.OpenDir("/", &root), 0);
  ASSERT_EQ(fs.FsyncDir(*root), 0);
  absl::StatusOr<std::string> summary = fs.Cut();
  ASSERT_TRUE(summary.ok()) << summary.status();
  EXPECT_EQ(ReadFile(backing_ / "d/f"), "durable");
  EXPECT_TRUE(fs::exists(backing_ / "d/g"));
  EXPECT_FALSE(fs::exists(backing_ / "d/h"));
  EXPECT_EQ(fs.Mkdir("/e", 0755), -EIO);  // nothing after a cut
  fs.Release(root);
}

TEST_F(LazyFsModelTest, RefusesSpecialFiles) {
  ASSERT_EQ(::mkfifo((backing_ / "fifo").c_str(), 0644), 0);
  absl::StatusOr<std::unique_ptr<LazyFs>> lazy = LazyFs::Open(backing_, shadow_);
  EXPECT_EQ(lazy.status().code(), absl::StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace gfrep::testing::lazyfs
