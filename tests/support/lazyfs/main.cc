// gfrep-test-lazyfs: a FUSE file system for power-cut tests (test-only, never installed).
//
//   gfrep-test-lazyfs BACKING MOUNTPOINT [--debug]
//
// Mounts BACKING on MOUNTPOINT: everything done on the mount happens in BACKING at once,
// and LazyFs (lazy_fs.h, where the model is) remembers what fsync/fsyncdir made durable.
// Prints "lazyfs: mounted BACKING on MOUNTPOINT" once the mount is in place.
//
//   SIGUSR1   the power cut: stop serving, unmount, rebuild BACKING from the durable state
//             alone, print "lazyfs: cut: ..." and exit 0 (1 if the rebuild failed). Kill every
//             process using the mount first: the cut drops whatever they did not sync.
//   SIGTERM   (or SIGINT, SIGHUP, or an unmount from outside) a clean stop: unmount and exit
//             0; BACKING keeps everything, as after an orderly shutdown.
//   exit 2    bad arguments, or the mount failed.
//
// Durable copies go to a fresh directory beside BACKING (".NAME.lazyfs-XXXXXX", removed at
// exit); the cut builds the new tree beside BACKING too, on the same file system.
#define FUSE_USE_VERSION 312

#include <fuse.h>
#include <fuse_lowlevel.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>
#include <thread>

#include "tests/support/lazyfs/lazy_fs.h"

namespace {

namespace fs = std::filesystem;
using gfrep::testing::lazyfs::Handle;
using gfrep::testing::lazyfs::LazyFs;

LazyFs& Self() { return *static_cast<LazyFs*>(fuse_get_context()->private_data); }
Handle* HandleOf(const fuse_file_info* fi) {
  return fi == nullptr ? nullptr : reinterpret_cast<Handle*>(static_cast<std::uintptr_t>(fi->fh));
}
void SetHandle(fuse_file_info* fi, Handle* h) { fi->fh = reinterpret_cast<std::uintptr_t>(h); }

void* Init(fuse_conn_info*, fuse_config* cfg) {
  // Unlinked open files are removed at once (no .fuse_hidden renames, which would be
  // operations of their own on the model) and reached through their handles.
  cfg->hard_remove = 1;
  cfg->nullpath_ok = 1;
  return fuse_get_context()->private_data;
}

int GetAttr(const char* path, struct stat* st, fuse_file_info* fi) {
  return Self().GetAttr(path, HandleOf(fi), st);
}

int ReadDir(const char*, void* buf, fuse_fill_dir_t filler, off_t, fuse_file_info* fi,
            fuse_readdir_flags) {
  // The directory's handle names it (nullpath_ok: no path); list its live entries.
  Handle* h = HandleOf(fi);
  return Self().ReadDir(h->id, [&](const std::string& name, mode_t type) {
    struct stat st {};
    st.st_mode = type;
    filler(buf, name.c_str(), &st, 0, static_cast<fuse_fill_dir_flags>(0));
  });
}

int Open(const char* path, fuse_file_info* fi) {
  Handle* h = nullptr;
  if (int r = Self().OpenFile(path, fi->flags, &h); r != 0) return r;
  SetHandle(fi, h);
  return 0;
}

int Create(const char* path, mode_t mode, fuse_file_info* fi) {
  Handle* h = nullptr;
  if (int r = Self().Create(path, fi->flags, mode, &h); r != 0) return r;
  SetHandle(fi, h);
  return 0;
}

int OpenDir(const char* path, fuse_file_info* fi) {
  Handle* h = nullptr;
  if (int r = Self().OpenDir(path, &h); r != 0) return r;
  SetHandle(fi, h);
  return 0;
}

int Release(const char*, fuse_file_info* fi) {
  Self().Release(HandleOf(fi));
  return 0;
}

int Read(const char*, char* buf, size_t size, off_t off, fuse_file_info* fi) {
  return Self().Read(*HandleOf(fi), buf, size, off);
}

int Write(const char*, const char* buf, size_t size, off_t off, fuse_file_info* fi) {
  return Self().Write(*HandleOf(fi), buf, size, off);
}

int Fsync(const char*, int, fuse_file_info* fi) { return Self().Fsync(*HandleOf(fi)); }
int FsyncDir(const char*, int, fuse_file_info* fi) { return Self().FsyncDir(*HandleOf(fi)); }

int Truncate(const char* path, off_t size, fuse_file_info* fi) {
  return Self().Truncate(path, HandleOf(fi), size);
}

int Fallocate(const char*, int mode, off_t off, off_t len, fuse_file_info* fi) {
  return Self().Fallocate(*HandleOf(fi), mode, off, len);
}

int Chmod(const char* path, mode_t mode, fuse_file_info* fi) {
  return Self().Chmod(path, HandleOf(fi), mode);
}

int Chown(const char* path, uid_t uid, gid_t gid, fuse_file_info* fi) {
  return Self().Chown(path, HandleOf(fi), uid, gid);
}

int Utimens(const char* path, const struct timespec tv[2], fuse_file_info* fi) {
  return Self().Utimens(path, HandleOf(fi), tv);
}

int Mkdir(const char* path, mode_t mode) { return Self().Mkdir(path, mode); }
int Rmdir(const char* path) { return Self().Rmdir(path); }
int Unlink(const char* path) { return Self().Unlink(path); }
int Rename(const char* from, const char* to, unsigned flags) {
  return Self().Rename(from, to, flags);
}
int Link(const char* from, const char* to) { return Self().Link(from, to); }
int Symlink(const char* target, const char* path) { return Self().Symlink(target, path); }
int Readlink(const char* path, char* buf, size_t size) { return Self().Readlink(path, buf, size); }
int StatFs(const char*, struct statvfs* st) { return Self().StatFs(st); }

int Usage() {
  std::fprintf(stderr, "usage: gfrep-test-lazyfs BACKING MOUNTPOINT [--debug]\n");
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3 && !(argc == 4 && std::strcmp(argv[3], "--debug") == 0)) return Usage();
  const bool debug = argc == 4;
  std::error_code ec;
  const fs::path backing = fs::canonical(argv[1], ec);
  if (ec || !fs::is_directory(backing)) {
    std::fprintf(stderr, "lazyfs: %s is not a directory\n", argv[1]);
    return 2;
  }
  const std::string mountpoint = argv[2];

  // Signals: the stopper thread takes the commands; every other thread blocks them.
  // SIGUSR2 only wakes the FUSE loop's main thread from its wait (as gfmount does).
  sigset_t commands;
  sigemptyset(&commands);
  for (int s : {SIGUSR1, SIGTERM, SIGINT, SIGHUP}) sigaddset(&commands, s);
  pthread_sigmask(SIG_BLOCK, &commands, nullptr);
  struct sigaction wake {};
  wake.sa_handler = [](int) {};
  sigemptyset(&wake.sa_mask);
  sigaction(SIGUSR2, &wake, nullptr);
  const pthread_t main_thread = pthread_self();

  std::string shadow_tmpl =
      (backing.parent_path() / ("." + backing.filename().string() + ".lazyfs-XXXXXX")).string();
  if (::mkdtemp(shadow_tmpl.data()) == nullptr) {
    std::perror("lazyfs: mkdtemp");
    return 2;
  }
  const fs::path shadow = shadow_tmpl;
  auto lazy = LazyFs::Open(backing, shadow);
  if (!lazy.ok()) {
    std::fprintf(stderr, "lazyfs: %s\n", lazy.status().ToString().c_str());
    fs::remove_all(shadow, ec);
    return 2;
  }

  fuse_operations ops{};
  ops.init = Init;
  ops.getattr = GetAttr;
  ops.readdir = ReadDir;
  ops.open = Open;
  ops.create = Create;
  ops.opendir = OpenDir;
  ops.release = Release;
  ops.releasedir = Release;
  ops.read = Read;
  ops.write = Write;
  ops.fsync = Fsync;
  ops.fsyncdir = FsyncDir;
  ops.truncate = Truncate;
  ops.fallocate = Fallocate;
  ops.chmod = Chmod;
  ops.chown = Chown;
  ops.utimens = Utimens;
  ops.mkdir = Mkdir;
  ops.rmdir = Rmdir;
  ops.unlink = Unlink;
  ops.rename = Rename;
  ops.link = Link;
  ops.symlink = Symlink;
  ops.readlink = Readlink;
  ops.statfs = StatFs;
  // No lock/flock operations: the kernel then keeps POSIX and flock locks itself, which is
  // all RocksDB's LOCK file needs (one machine).

  fuse_args args = FUSE_ARGS_INIT(0, nullptr);
  fuse_opt_add_arg(&args, "gfrep-test-lazyfs");
  fuse_opt_add_arg(&args, "-o");
  fuse_opt_add_arg(&args, "fsname=lazyfs,subtype=gfrep-lazyfs");
  if (debug) fuse_opt_add_arg(&args, "-d");
  fuse* f = fuse_new(&args, &ops, sizeof(ops), lazy->get());
  fuse_opt_free_args(&args);
  if (f == nullptr || fuse_mount(f, mountpoint.c_str()) != 0) {
    std::fprintf(stderr, "lazyfs: cannot mount on %s (root, /dev/fuse, fusermount3?)\n",
                 mountpoint.c_str());
    if (f != nullptr) fuse_destroy(f);
    fs::remove_all(shadow, ec);
    return 2;
  }
  fuse_session* se = fuse_get_session(f);
  std::atomic<bool> cut{false};
  std::atomic<bool> loop_done{false};
  std::thread stopper([&] {
    int sig = 0;
    if (sigwait(&commands, &sig) != 0 || loop_done) return;
    cut = sig == SIGUSR1;
    fuse_session_exit(se);
    pthread_kill(main_thread, SIGUSR2);
  });
  std::printf("lazyfs: mounted %s on %s\n", backing.c_str(), mountpoint.c_str());
  std::fflush(stdout);

  fuse_loop_config* loop = fuse_loop_cfg_create();
  fuse_loop_cfg_set_max_threads(loop, 16);
  fuse_loop_mt(f, loop);  // returns once no worker runs an operation any more
  fuse_loop_cfg_destroy(loop);
  loop_done = true;
  pthread_kill(stopper.native_handle(), SIGTERM);  // ended from outside: wake the stopper
  stopper.join();
  fuse_unmount(f);

  int rc = 0;
  if (cut) {
    absl::StatusOr<std::string> summary = (*lazy)->Cut();
    if (summary.ok()) {
      std::printf("lazyfs: %s\n", summary->c_str());
    } else {
      std::fprintf(stderr, "lazyfs: cut failed: %s\n", summary.status().ToString().c_str());
      rc = 1;
    }
  } else {
    std::printf("lazyfs: unmounted %s, everything kept\n", mountpoint.c_str());
  }
  std::fflush(stdout);
  fuse_destroy(f);
  fs::remove_all(shadow, ec);
  (void)ec;  // ignored: best-effort removal of the durable copies
  return rc;
}
