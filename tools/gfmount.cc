// gfmount CATALOG MOUNTPOINT --site S --node N: the catalog's namespace as a read-only file
// tree (FUSE 3), so that unchanged programs (ls, stat, cat, md5sum, dd, python) read the
// federation. The logic is replica::FsView (replica/fs_view.h: namespace cache, invalidation by
// TTL and by the catalog's event log, open through replica::Open); this file is only the FUSE
// glue (the high-level, path-based libfuse API, multi-threaded loop).
//
// Reads: this node's complete replica of the current generation through its descriptor
// (pread; libfuse 3.14 in Debian 12 has no passthrough API, see replica/README.md), else the
// best remote replica. A stale, pending, corrupt or lost replica is never read. The kernel
// keeps a file's pages between opens only while its generation is unchanged (keep_cache).
// Runs in the foreground until SIGINT/SIGTERM/SIGHUP (or `fusermount3 -u MOUNTPOINT`), then
// unmounts.
#define FUSE_USE_VERSION 312
#include <fcntl.h>
#include <fmt/format.h>
#include <fuse.h>
#include <fuse_lowlevel.h>
#include <pthread.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "catalog/client.h"
#include "replica/fs_view.h"
#include "tools/internal/catalog_flags.h"
#include "tools/internal/cli.h"
#include "transfer/auth.h"

namespace {

using gfrep::catalog::Attributes;
using gfrep::catalog::FileType;
using gfrep::replica::FsView;
using gfrep::replica::OpenFile;

struct Mount {
  std::unique_ptr<FsView> view;
  std::shared_ptr<spdlog::logger> log;
  double timeout_s = 1;
  uid_t uid = 0;
  gid_t gid = 0;
  struct fuse* fuse = nullptr;
  // Serialises kernel notifications with the unmount: once unmounted, the session's
  // descriptor is closed (and its number may be reused), so nothing may be sent on it.
  std::mutex notify_mu;
  bool unmounted = false;  // guarded by notify_mu
};

// Tells the kernel to forget the attributes and pages it holds for `path`.
void Invalidate(Mount& m, const char* path) {
  std::lock_guard<std::mutex> lock(m.notify_mu);
  if (!m.unmounted) (void)fuse_invalidate_path(m.fuse, path);  // ignored: best effort
}

void Unmount(Mount& m) {
  std::lock_guard<std::mutex> lock(m.notify_mu);
  if (m.unmounted) return;
  m.unmounted = true;
  fuse_unmount(m.fuse);
}

Mount& Self() { return *static_cast<Mount*>(fuse_get_context()->private_data); }

std::string EnvOr(const std::string& value, const char* name) {
  if (!value.empty()) return value;
  const char* env = std::getenv(name);
  return env == nullptr ? "" : env;
}

// A status as the negative errno FUSE wants.
int Errno(const absl::Status& s) {
  switch (s.code()) {
    case absl::StatusCode::kOk:
      return 0;
    case absl::StatusCode::kNotFound:
      return -ENOENT;
    case absl::StatusCode::kPermissionDenied:
    case absl::StatusCode::kUnauthenticated:
      return -EACCES;
    case absl::StatusCode::kInvalidArgument:
      return -EINVAL;
    case absl::StatusCode::kFailedPrecondition:
      return -ENOTDIR;
    case absl::StatusCode::kDeadlineExceeded:
      return -ETIMEDOUT;
    case absl::StatusCode::kResourceExhausted:
      return -EAGAIN;
    default:
      return -EIO;
  }
}

// The catalog's attributes as stat: its permission bits (not enforced locally: the mount
// reads with the catalog identity of whoever ran gfmount), owned by the mounting user.
void Fill(const Attributes& a, struct stat* st, const Mount& m) {
  std::memset(st, 0, sizeof(*st));
  st->st_ino = a.inode;
  const mode_t perm = a.mode & 07777;
  if (a.type == FileType::kDirectory) {
    st->st_mode = S_IFDIR | (perm != 0 ? perm : 0555);
    st->st_nlink = 2;
  } else {
    st->st_mode = S_IFREG | (perm != 0 ? perm : 0444);
    st->st_nlink = 1;
  }
  st->st_size = static_cast<off_t>(a.size);
  st->st_blocks = static_cast<blkcnt_t>((a.size + 511) / 512);
  st->st_blksize = 1 << 20;  // programs that size their reads by it (cat, cp) read 1 MiB
  st->st_uid = m.uid;
  st->st_gid = m.gid;
  st->st_mtim.tv_sec = static_cast<time_t>(a.mtime_ns / 1'000'000'000);
  st->st_mtim.tv_nsec = static_cast<long>(a.mtime_ns % 1'000'000'000);
  st->st_ctim = st->st_mtim;
  st->st_atim = st->st_mtim;
}

void* Init(struct fuse_conn_info* conn, struct fuse_config* cfg) {
  Mount& m = Self();
  cfg->use_ino = 1;  // catalog inode numbers (never reused)
  cfg->attr_timeout = m.timeout_s;
  cfg->entry_timeout = m.timeout_s;
  cfg->negative_timeout = m.timeout_s;
  cfg->kernel_cache = 0;  // keep_cache is decided per open, by generation
  cfg->auto_cache = 0;
  cfg->direct_io = 0;
  cfg->nullpath_ok = 0;  // readdir takes the path (read and release use fi->fh)
  conn->want &= ~FUSE_CAP_ATOMIC_O_TRUNC;
  // Replies to reads are spliced from the replica's descriptor, pages moved where possible.
  if ((conn->capable & FUSE_CAP_SPLICE_WRITE) != 0) conn->want |= FUSE_CAP_SPLICE_WRITE;
  if ((conn->capable & FUSE_CAP_SPLICE_MOVE) != 0) conn->want |= FUSE_CAP_SPLICE_MOVE;
  conn->max_readahead = 1u << 20;  // the kernel caps it at the device's own read-ahead
  return &m;
}

int GetAttr(const char* path, struct stat* st, struct fuse_file_info* fi) {
  Mount& m = Self();
  if (path == nullptr && fi != nullptr) {
    auto* file = reinterpret_cast<OpenFile*>(fi->fh);
    Attributes a;
    a.size = file->size();
    a.mode = 0444;
    Fill(a, st, m);
    return 0;
  }
  absl::StatusOr<Attributes> a = m.view->GetAttr(path);
  if (!a.ok()) return Errno(a.status());
  Fill(*a, st, m);
  return 0;
}

int ReadDir(const char* path, void* buf, fuse_fill_dir_t filler, off_t, struct fuse_file_info*,
            enum fuse_readdir_flags) {
  Mount& m = Self();
  absl::StatusOr<std::vector<gfrep::catalog::DirEntry>> list = m.view->ReadDir(path);
  if (!list.ok()) return Errno(list.status());
  filler(buf, ".", nullptr, 0, static_cast<fuse_fill_dir_flags>(0));
  filler(buf, "..", nullptr, 0, static_cast<fuse_fill_dir_flags>(0));
  struct stat st;
  for (const gfrep::catalog::DirEntry& e : *list) {
    Fill(e.attributes, &st, m);
    if (filler(buf, e.name.c_str(), &st, 0, FUSE_FILL_DIR_PLUS) != 0) break;
  }
  return 0;
}

int Open(const char* path, struct fuse_file_info* fi) {
  Mount& m = Self();
  if ((fi->flags & O_ACCMODE) != O_RDONLY || (fi->flags & O_TRUNC) != 0) return -EROFS;
  absl::StatusOr<std::unique_ptr<OpenFile>> file = m.view->Open(path);
  if (!file.ok()) {
    m.log->warn("open {}: {}", path, file.status().ToString());
    if (absl::IsFailedPrecondition(file.status())) return -EISDIR;
    return Errno(file.status());
  }
  m.log->debug("open {} generation={} size={} from={} local={} keep_cache={}", path,
               (*file)->generation(), (*file)->size(), (*file)->source_node(), (*file)->local(),
               (*file)->same_generation_as_last_open());
  // While another generation of the inode is open, its reads may fill the inode's page
  // cache (shared by every handle): this handle then reads around the cache.
  fi->keep_cache = (*file)->same_generation_as_last_open() && !(*file)->bypass_page_cache() ? 1 : 0;
  fi->direct_io = (*file)->bypass_page_cache() ? 1 : 0;
  if ((*file)->attributes_changed()) {
    // The kernel may still hold the old size for the attribute timeout: a read past it
    // would stop at the old end. Make it ask again (the view already dropped its entry).
    Invalidate(m, path);
  }
  fi->fh = reinterpret_cast<std::uint64_t>(file->release());
  return 0;
}

// A local replica is handed to libfuse as its descriptor and offset: libfuse splices the
// bytes from the file into /dev/fuse (no copy through this process's memory; the nearest
// thing to passthrough that libfuse 3.14 offers). A remote one is read into a buffer.
int ReadBuf(const char*, struct fuse_bufvec** bufp, size_t size, off_t offset,
            struct fuse_file_info* fi) {
  auto* file = reinterpret_cast<OpenFile*>(fi->fh);
  const std::uint64_t off = static_cast<std::uint64_t>(offset);
  if (off >= file->size()) size = 0;
  size = static_cast<size_t>(
      std::min<std::uint64_t>(size, file->size() - std::min(off, file->size())));
  auto* vec = static_cast<struct fuse_bufvec*>(std::malloc(sizeof(struct fuse_bufvec)));
  if (vec == nullptr) return -ENOMEM;
  *vec = FUSE_BUFVEC_INIT(size);
  if (file->local() && size > 0) {
    vec->buf[0].flags = static_cast<fuse_buf_flags>(FUSE_BUF_IS_FD | FUSE_BUF_FD_SEEK);
    vec->buf[0].fd = file->local_fd();
    vec->buf[0].pos = offset;
    *bufp = vec;
    return 0;
  }
  void* mem = size > 0 ? std::malloc(size) : nullptr;
  if (size > 0 && mem == nullptr) {
    std::free(vec);
    return -ENOMEM;
  }
  absl::StatusOr<std::size_t> n = file->ReadAt(off, mem, size);
  if (!n.ok()) {
    std::free(mem);
    std::free(vec);
    Self().log->warn("read: {}", n.status().ToString());
    return Errno(n.status());
  }
  vec->buf[0].mem = mem;  // freed by libfuse with the vector
  vec->buf[0].size = *n;
  *bufp = vec;
  return 0;
}

int Release(const char*, struct fuse_file_info* fi) {
  delete reinterpret_cast<OpenFile*>(fi->fh);
  return 0;
}

int StatFs(const char*, struct statvfs* st) {
  std::memset(st, 0, sizeof(*st));
  st->f_bsize = 1 << 20;
  st->f_frsize = 1 << 20;
  st->f_namemax = gfrep::catalog::kMaxNameBytes;
  st->f_flag = ST_RDONLY;
  return 0;
}

// The mount is read-only ("ro": the kernel answers EROFS itself); these are the backstop.
int ReadOnly() { return -EROFS; }
int Mknod(const char*, mode_t, dev_t) { return ReadOnly(); }
int Mkdir(const char*, mode_t) { return ReadOnly(); }
int Unlink(const char*) { return ReadOnly(); }
int Rmdir(const char*) { return ReadOnly(); }
int Rename(const char*, const char*, unsigned int) { return ReadOnly(); }
int Chmod(const char*, mode_t, struct fuse_file_info*) { return ReadOnly(); }
int Chown(const char*, uid_t, gid_t, struct fuse_file_info*) { return ReadOnly(); }
int Truncate(const char*, off_t, struct fuse_file_info*) { return ReadOnly(); }
int Write(const char*, const char*, size_t, off_t, struct fuse_file_info*) { return ReadOnly(); }
int Create(const char*, mode_t, struct fuse_file_info*) { return ReadOnly(); }

}  // namespace

int main(int argc, char** argv) {
  using namespace gfrep;
  constexpr const char* kProgram = "gfmount";
  CLI::App app{"gfmount: the catalog's namespace as a read-only file system (FUSE)"};
  tools::CommonFlags common;
  tools::CatalogFlags cat;
  std::string catalog_address, mountpoint, site, node, key_file, tmp_dir;
  double ttl_s = 1;
  bool allow_other = false, verify = false, replicate_on_read = false;
  unsigned threads = 16;
  tools::AddCommonFlags(app, common);
  tools::AddCatalogFlags(app, cat);
  app.add_option("CATALOG", catalog_address,
                 "Catalog address HOST:PORT (or --catalog, $GFREP_CATALOG)");
  app.add_option("MOUNTPOINT", mountpoint, "An existing empty directory");
  app.add_option("--site", site, "Site of this node (default: $GFREP_SITE)");
  app.add_option("--node", node,
                 "This node's name: its replicas are read locally (default: $GFREP_NODE)");
  app.add_option("--key-file", key_file,
                 "Shared key file for remote reads (default ~/.gfrep/shared_key)");
  app.add_option("--tmp-dir", tmp_dir,
                 "Where remote replicas are staged (default: $TMPDIR or /tmp)");
  app.add_option("--ttl", ttl_s,
                 "Seconds attributes and listings are cached (here and in the kernel); changes "
                 "of replicas are seen sooner through the catalog's event log")
      ->check(CLI::Range(0.001, 3600.0));
  app.add_option("--threads", threads, "Most requests served at once")->check(CLI::Range(1, 256));
  app.add_flag("--allow-other", allow_other, "Let other users read the mount (FUSE allow_other)");
  app.add_flag("--replicate-on-read", replicate_on_read,
               "A file read from another site also gets a copy at this site (a replication "
               "request per open of a remote replica)");
  app.add_flag("--verify", verify,
               "Checksum this node's own replica at each open before serving it");
  CLI11_PARSE(app, argc, argv);
  // One positional only: it is the mount point (the catalog then comes from --catalog).
  if (mountpoint.empty()) std::swap(mountpoint, catalog_address);
  if (mountpoint.empty()) return tools::Fail(kProgram, "MOUNTPOINT is required (see --help)");
  if (!catalog_address.empty()) cat.catalog = catalog_address;
  auto log = tools::MakeLogger(kProgram, common);
  // SIGINT/SIGTERM/SIGHUP are taken by one thread (sigwait, below), blocked in every other
  // thread (all created after this): libfuse's own handlers only set a flag that a worker
  // blocked in read(/dev/fuse) does not see until the next request comes.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  sigaddset(&stop_signals, SIGHUP);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
  // SIGUSR1 wakes the FUSE loop's main thread from its wait (see the stopper below).
  struct sigaction wake {};
  wake.sa_handler = [](int) {};
  sigemptyset(&wake.sa_mask);
  sigaction(SIGUSR1, &wake, nullptr);
  const pthread_t main_thread = pthread_self();

  auto client = tools::ConnectCatalog(cat);
  if (!client.ok()) return tools::Fail(kProgram, tools::ErrorText(client.status()));
  replica::FsViewOptions options;
  options.ttl = std::chrono::milliseconds(static_cast<std::int64_t>(ttl_s * 1000));
  options.reader.identity.site = EnvOr(site, "GFREP_SITE");
  options.reader.identity.node = EnvOr(node, "GFREP_NODE");
  options.reader.tmp_dir = tmp_dir;
  options.reader.verify_local = verify;
  options.reader.replicate_on_read = replicate_on_read;
  options.reader.transfer.logger = log;
  std::filesystem::path key_path =
      key_file.empty() ? transfer::DefaultKeyPath() : std::filesystem::path(key_file);
  absl::StatusOr<std::string> key = transfer::LoadOrCreateSharedKey(key_path);
  if (!key.ok()) return tools::Fail(kProgram, tools::ErrorText(key.status()));
  options.reader.transfer.shared_key = *key;

  Mount m;
  m.log = log;
  m.timeout_s = ttl_s;
  m.uid = ::getuid();
  m.gid = ::getgid();
  absl::StatusOr<std::unique_ptr<FsView>> view = FsView::Create(**client, options);
  if (!view.ok()) return tools::Fail(kProgram, tools::ErrorText(view.status()));
  m.view = std::move(*view);

  struct fuse_operations ops {};
  ops.init = Init;
  ops.getattr = GetAttr;
  ops.readdir = ReadDir;
  ops.open = Open;
  ops.read_buf = ReadBuf;
  ops.release = Release;
  ops.statfs = StatFs;
  ops.mknod = Mknod;
  ops.mkdir = Mkdir;
  ops.unlink = Unlink;
  ops.rmdir = Rmdir;
  ops.rename = Rename;
  ops.chmod = Chmod;
  ops.chown = Chown;
  ops.truncate = Truncate;
  ops.write = Write;
  ops.create = Create;

  // FUSE splits options at commas: those of a list of catalog front ends are escaped.
  std::string fsname = "gfrep:";
  for (char c : cat.catalog) {
    if (c == ',' || c == '\\') fsname += '\\';
    fsname += c;
  }
  std::string fuse_opts = fmt::format("ro,noatime,fsname={},subtype=gfrep", fsname);
  // With other users let in, the kernel checks the mode bits shown (owner: whoever mounted)
  // against each caller, so a file the catalog shows 0600 is not readable by everyone.
  if (allow_other) fuse_opts += ",allow_other,default_permissions";
  struct fuse_args args = FUSE_ARGS_INIT(0, nullptr);
  if (fuse_opt_add_arg(&args, kProgram) != 0 || fuse_opt_add_arg(&args, "-o") != 0 ||
      fuse_opt_add_arg(&args, fuse_opts.c_str()) != 0) {
    return tools::Fail(kProgram, "out of memory");
  }
  struct fuse* f = fuse_new(&args, &ops, sizeof(ops), &m);
  fuse_opt_free_args(&args);
  if (f == nullptr) return tools::Fail(kProgram, "fuse_new failed (see the message above)");
  if (fuse_mount(f, mountpoint.c_str()) != 0) {
    fuse_destroy(f);
    return tools::Fail(kProgram, fmt::format("cannot mount on {} (is /dev/fuse there, and "
                                             "fusermount3 installed?)",
                                             mountpoint));
  }
  m.fuse = f;
  struct fuse_session* se = fuse_get_session(f);
  // A stop signal ends the session and unmounts: the workers' reads then end (ENODEV).
  std::atomic<bool> loop_done{false};
  std::thread stopper([&] {
    int sig = 0;
    while (sigwait(&stop_signals, &sig) == 0) {
      if (loop_done) return;
      log->info("signal {}: unmounting {}", sig, mountpoint);
      // Only end the loop here: unmounting closes the session's descriptor, which workers
      // still answering requests would then write to (its number possibly reused). The
      // loop's main thread waits in sem_wait; a signal of its own makes it look at the exit
      // flag, cancel the workers and return; main unmounts after that.
      fuse_session_exit(se);
      pthread_kill(main_thread, SIGUSR1);
      return;
    }
  });
  // Replica events (a new generation, a replica found bad...) drop the view's entries at
  // once; the kernel is told to forget the same paths' attributes and pages.
  m.view->StartFollowing([&m](const std::string& path) { Invalidate(m, path.c_str()); });
  log->info("mounted catalog={} on {} node={} ttl={}s", cat.catalog, mountpoint,
            options.reader.identity.node, ttl_s);

  struct fuse_loop_config* loop = fuse_loop_cfg_create();
  fuse_loop_cfg_set_max_threads(loop, threads);
  const int rc = fuse_loop_mt(f, loop);
  fuse_loop_cfg_destroy(loop);

  // Ended by a signal or by an unmount from outside (fusermount3 -u): wake the stopper if it
  // still waits.
  loop_done = true;
  pthread_kill(stopper.native_handle(), SIGTERM);
  stopper.join();
  Unmount(m);  // from here on the follower's notifications are no-ops
  FsView::Counters c = m.view->counters();
  fuse_destroy(f);
  log->info("unmounted {}: stat_calls={} list_calls={} opens={} cache_hits={} invalidated={}",
            mountpoint, c.stat_calls, c.list_calls, c.open_calls, c.cache_hits, c.invalidated);
  log->flush();
  // The event follower may be inside a catalog long poll (queued behind other pollers on a
  // busy catalog, up to the call timeout): neither wait for it nor tear the catalog client
  // down under it. Everything that matters is done: the mount is gone.
  std::_Exit(rc == 0 ? 0 : 1);
}
