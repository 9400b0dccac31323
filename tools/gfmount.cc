// gfmount CATALOG MOUNTPOINT --site S --node N: the catalog's namespace as a read-only file
// tree (FUSE 3), so that unchanged programs (ls, stat, cat, md5sum, dd, python) read the
// federation. The logic is replica::client::FsView and replica::client::FsNodes
// (replica/client/fs_view.h: namespace cache, invalidation by TTL and by the catalog's event log,
// open through replica::client::Open, the kernel's node ids); this file is only the FUSE glue (the
// low-level libfuse API, multi-threaded loop).
//
// Node ids: one per directory, one per (inode, generation) of a file, so that the kernel's size
// and page cache of a node are one generation's. A lookup answers the node of the generation
// current now; an open of an older generation's node answers ESTALE (the kernel looks the name
// up again and retries the open once), and handles already open read their own generation to
// its end. The kernel keeps a node's pages across opens (keep_cache) unless a replica event of
// its inode or a failed read says not to. A new generation seen in the catalog's event log
// drops the kernel's name of the file (inval_entry), so the next lookup finds the new node.
//
// Reads: this node's complete replica of the node's generation through its descriptor (spliced
// into /dev/fuse; libfuse 3.14 in Debian 12 has no passthrough API, see replica/README.md), else
// the best remote replica. A stale, pending, corrupt or lost replica is never read.
// Runs in the foreground until SIGINT/SIGTERM/SIGHUP (or `fusermount3 -u MOUNTPOINT`), then
// unmounts.
#define FUSE_USE_VERSION 312
#include <fcntl.h>
#include <fmt/format.h>
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
#include <new>
#include <string>
#include <thread>
#include <vector>

#include "catalog/client.h"
#include "replica/client/fs_view.h"
#include "tools/internal/catalog_flags.h"
#include "tools/internal/cli.h"
#include "transfer/auth.h"

namespace {

using gfrep::catalog::Attributes;
using gfrep::catalog::FileType;
using gfrep::replica::client::FsNodes;
using gfrep::replica::client::FsView;
using gfrep::replica::client::OpenFile;

struct Mount {
  std::unique_ptr<FsView> view;
  std::unique_ptr<FsNodes> nodes;
  std::shared_ptr<spdlog::logger> log;
  double timeout_s = 1;
  uid_t uid = 0;
  gid_t gid = 0;
  struct fuse_session* se = nullptr;
  // Serialises kernel notifications with the unmount: once unmounted, the session's
  // descriptor is closed (and its number may be reused), so nothing may be sent on it.
  std::mutex notify_mu;
  bool unmounted = false;  // guarded by notify_mu
};

// Tells the kernel to drop its name `name` in directory node `parent` (and that directory's
// attributes). Never called from a request handler (the kernel may wait for one to finish).
void InvalidateEntry(Mount& m, const FsNodes::KernelName& entry) {
  std::lock_guard<std::mutex> lock(m.notify_mu);
  if (m.unmounted) return;
  // ignored: best effort (ENOENT: the kernel no longer holds the name or its directory)
  (void)fuse_lowlevel_notify_inval_entry(m.se, entry.parent, entry.name.c_str(), entry.name.size());
}

void Unmount(Mount& m) {
  std::lock_guard<std::mutex> lock(m.notify_mu);
  if (m.unmounted) return;
  m.unmounted = true;
  fuse_session_unmount(m.se);
}

Mount& Self(fuse_req_t req) { return *static_cast<Mount*>(fuse_req_userdata(req)); }

std::string EnvOr(const std::string& value, const char* name) {
  if (!value.empty()) return value;
  const char* env = std::getenv(name);
  return env == nullptr ? "" : env;
}

// A status as the errno FUSE replies with.
int Errno(const absl::Status& s) {
  switch (s.code()) {
    case absl::StatusCode::kOk:
      return 0;
    case absl::StatusCode::kNotFound:
      return ENOENT;
    case absl::StatusCode::kPermissionDenied:
    case absl::StatusCode::kUnauthenticated:
      return EACCES;
    case absl::StatusCode::kInvalidArgument:
      return EINVAL;
    case absl::StatusCode::kFailedPrecondition:
      return ENOTDIR;
    case absl::StatusCode::kDeadlineExceeded:
      return ETIMEDOUT;
    case absl::StatusCode::kResourceExhausted:
      return EAGAIN;
    default:
      return EIO;
  }
}

// The catalog's attributes as stat: its permission bits (not enforced locally: the mount
// reads with the catalog identity of whoever ran gfmount), owned by the mounting user, and
// the catalog's inode numbers (never reused; a file's generations share one).
struct stat Stat(const Attributes& a, const Mount& m) {
  struct stat st;
  std::memset(&st, 0, sizeof(st));
  st.st_ino = a.inode;
  const mode_t perm = a.mode & 07777;
  if (a.type == FileType::kDirectory) {
    st.st_mode = S_IFDIR | (perm != 0 ? perm : 0555);
    st.st_nlink = 2;
  } else {
    st.st_mode = S_IFREG | (perm != 0 ? perm : 0444);
    st.st_nlink = 1;
  }
  st.st_size = static_cast<off_t>(a.size);
  st.st_blocks = static_cast<blkcnt_t>((a.size + 511) / 512);
  st.st_blksize = 1 << 20;  // programs that size their reads by it (cat, cp) read 1 MiB
  st.st_uid = m.uid;
  st.st_gid = m.gid;
  st.st_mtim.tv_sec = static_cast<time_t>(a.mtime_ns / 1'000'000'000);
  st.st_mtim.tv_nsec = static_cast<long>(a.mtime_ns % 1'000'000'000);
  st.st_ctim = st.st_mtim;
  st.st_atim = st.st_mtim;
  return st;
}

struct fuse_entry_param EntryOf(const FsNodes::Node& node, const Mount& m) {
  struct fuse_entry_param e;
  std::memset(&e, 0, sizeof(e));
  e.ino = node.id;
  e.attr = Stat(node.attributes, m);
  e.attr_timeout = m.timeout_s;
  e.entry_timeout = m.timeout_s;
  return e;
}

void Init(void* userdata, struct fuse_conn_info* conn) {
  (void)userdata;
  conn->want &= ~FUSE_CAP_ATOMIC_O_TRUNC;
  // A node's bytes never change: its pages are dropped by node (keep_cache), never because an
  // mtime moved.
  conn->want &= ~FUSE_CAP_AUTO_INVAL_DATA;
  // Replies to reads are spliced from the replica's descriptor, pages moved where possible.
  if ((conn->capable & FUSE_CAP_SPLICE_WRITE) != 0) conn->want |= FUSE_CAP_SPLICE_WRITE;
  if ((conn->capable & FUSE_CAP_SPLICE_MOVE) != 0) conn->want |= FUSE_CAP_SPLICE_MOVE;
  conn->max_readahead = 1u << 20;  // the kernel caps it at the device's own read-ahead
}

void Lookup(fuse_req_t req, fuse_ino_t parent, const char* name) {
  Mount& m = Self(req);
  absl::StatusOr<FsNodes::Node> node = m.nodes->Lookup(parent, name);
  if (absl::IsNotFound(node.status())) {
    // A negative entry: the kernel remembers the missing name for the TTL too.
    struct fuse_entry_param e;
    std::memset(&e, 0, sizeof(e));
    e.entry_timeout = m.timeout_s;
    fuse_reply_entry(req, &e);
    return;
  }
  if (!node.ok()) {
    fuse_reply_err(req, Errno(node.status()));
    return;
  }
  struct fuse_entry_param e = EntryOf(*node, m);
  // Not delivered (the request was aborted): the kernel did not count the lookup.
  if (fuse_reply_entry(req, &e) != 0) m.nodes->Forget(node->id, 1);
}

void Forget(fuse_req_t req, fuse_ino_t ino, uint64_t nlookup) {
  Self(req).nodes->Forget(ino, nlookup);
  fuse_reply_none(req);
}

void ForgetMulti(fuse_req_t req, size_t count, struct fuse_forget_data* forgets) {
  Mount& m = Self(req);
  for (size_t i = 0; i < count; ++i) m.nodes->Forget(forgets[i].ino, forgets[i].nlookup);
  fuse_reply_none(req);
}

void GetAttr(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info*) {
  Mount& m = Self(req);
  absl::StatusOr<Attributes> a = m.nodes->GetAttr(ino);
  if (!a.ok()) {
    fuse_reply_err(req, Errno(a.status()));
    return;
  }
  struct stat st = Stat(*a, m);
  fuse_reply_attr(req, &st, m.timeout_s);
}

// An open directory: its listing, read by its first readdir and again at offset 0 (a rewind).
struct DirHandle {
  std::mutex mu;
  bool listed = false;                             // guarded by mu
  std::vector<gfrep::catalog::DirEntry> children;  // guarded by mu
  Attributes self;                                 // guarded by mu
};

void OpenDir(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info* fi) {
  Mount& m = Self(req);
  absl::StatusOr<Attributes> a = m.nodes->GetAttr(ino);
  if (!a.ok()) {
    fuse_reply_err(req, Errno(a.status()));
    return;
  }
  if (a->type != FileType::kDirectory) {
    fuse_reply_err(req, ENOTDIR);
    return;
  }
  auto* dir = new DirHandle();
  dir->self = *a;
  fi->fh = reinterpret_cast<std::uint64_t>(dir);
  if (fuse_reply_open(req, fi) != 0) delete dir;  // not delivered: no releasedir follows
}

// A readdir reply: the entries from an offset on, or an errno.
struct DirReply {
  int error = 0;
  std::vector<char> buf;                 // as many bytes as the entries added take
  std::vector<FsNodes::NodeId> counted;  // readdirplus: the nodes whose lookups it carries
};

// readdir and readdirplus of an open directory, under its lock. Entry i (".", "..", then the
// children) has offset i + 1. With `plus` every child entry added counts one lookup of its
// node ("." and ".." none).
DirReply FillDir(fuse_req_t req, Mount& m, fuse_ino_t ino, DirHandle& dir, size_t size,
                 off_t offset, bool plus) {
  DirReply reply;
  std::lock_guard<std::mutex> lock(dir.mu);
  if (offset == 0 || !dir.listed) {
    absl::StatusOr<std::vector<gfrep::catalog::DirEntry>> list = m.nodes->ReadDir(ino);
    if (!list.ok()) {
      reply.error = Errno(list.status());
      return reply;
    }
    dir.children = std::move(*list);
    dir.listed = true;
  }
  reply.buf.resize(size);
  std::size_t used = 0;
  const std::size_t total = dir.children.size() + 2;
  for (std::size_t i = static_cast<std::size_t>(std::max<off_t>(offset, 0)); i < total; ++i) {
    const bool dots = i < 2;
    Attributes dot;
    dot.type = FileType::kDirectory;
    dot.inode = i == 0 ? dir.self.inode : dir.self.parent;
    const std::string name = dots ? (i == 0 ? "." : "..") : dir.children[i - 2].name;
    char* at = reply.buf.data() + used;
    std::size_t need = 0;
    if (!plus) {
      struct stat st = Stat(dots ? dot : dir.children[i - 2].attributes, m);
      need = fuse_add_direntry(req, at, size - used, name.c_str(), &st, static_cast<off_t>(i + 1));
    } else {
      struct fuse_entry_param e;
      std::memset(&e, 0, sizeof(e));
      FsNodes::NodeId id = 0;
      if (dots) {
        e.attr = Stat(dot, m);  // node id 0: the kernel neither links nor counts them
      } else {
        absl::StatusOr<FsNodes::Node> node = m.nodes->LookupEntry(ino, dir.children[i - 2]);
        if (!node.ok()) continue;
        e = EntryOf(*node, m);
        id = node->id;
      }
      need =
          fuse_add_direntry_plus(req, at, size - used, name.c_str(), &e, static_cast<off_t>(i + 1));
      if (id != 0) {
        if (need <= size - used) {
          reply.counted.push_back(id);
        } else {
          m.nodes->Forget(id, 1);  // not sent: not counted
        }
      }
    }
    if (need > size - used) break;
    used += need;
  }
  reply.buf.resize(used);
  return reply;
}

void ReadDirReply(fuse_req_t req, fuse_ino_t ino, size_t size, off_t offset,
                  struct fuse_file_info* fi, bool plus) {
  Mount& m = Self(req);
  // The handle is not touched after the reply: once it is sent, a releasedir may free it.
  DirReply reply = FillDir(req, m, ino, *reinterpret_cast<DirHandle*>(fi->fh), size, offset, plus);
  if (reply.error != 0) {
    fuse_reply_err(req, reply.error);
    return;
  }
  if (fuse_reply_buf(req, reply.buf.data(), reply.buf.size()) != 0) {
    for (FsNodes::NodeId id : reply.counted) m.nodes->Forget(id, 1);
  }
}

void ReadDir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t offset, struct fuse_file_info* fi) {
  ReadDirReply(req, ino, size, offset, fi, false);
}

void ReadDirPlus(fuse_req_t req, fuse_ino_t ino, size_t size, off_t offset,
                 struct fuse_file_info* fi) {
  ReadDirReply(req, ino, size, offset, fi, true);
}

void ReleaseDir(fuse_req_t req, fuse_ino_t, struct fuse_file_info* fi) {
  delete reinterpret_cast<DirHandle*>(fi->fh);
  fuse_reply_err(req, 0);
}

void Open(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info* fi) {
  Mount& m = Self(req);
  if ((fi->flags & O_ACCMODE) != O_RDONLY || (fi->flags & O_TRUNC) != 0) {
    fuse_reply_err(req, EROFS);
    return;
  }
  absl::StatusOr<FsNodes::Opened> opened = m.nodes->Open(ino);
  if (!opened.ok()) {
    if (absl::IsAborted(opened.status())) {
      // An older generation's node: the kernel looks the name up again and retries.
      m.log->debug("open node={}: {}", ino, opened.status().ToString());
      fuse_reply_err(req, ESTALE);
      return;
    }
    m.log->warn("open node={}: {}", ino, opened.status().ToString());
    fuse_reply_err(req,
                   absl::IsFailedPrecondition(opened.status()) ? EISDIR : Errno(opened.status()));
    return;
  }
  const OpenFile& file = *opened->file;
  m.log->debug("open {} generation={} size={} from={} local={} keep_cache={}", opened->path,
               file.generation(), file.size(), file.source_node(), file.local(),
               opened->keep_cache);
  fi->keep_cache = opened->keep_cache ? 1 : 0;
  fi->fh = reinterpret_cast<std::uint64_t>(opened->file.release());
  // Not delivered (the open was interrupted): no release follows.
  if (fuse_reply_open(req, fi) != 0) delete reinterpret_cast<OpenFile*>(fi->fh);
}

// A local replica is handed to libfuse as its descriptor and offset: libfuse splices the
// bytes from the file into /dev/fuse (no copy through this process's memory; the nearest
// thing to passthrough that libfuse 3.14 offers). A remote one is read into a buffer.
void Read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t offset, struct fuse_file_info* fi) {
  auto* file = reinterpret_cast<OpenFile*>(fi->fh);
  const std::uint64_t off = static_cast<std::uint64_t>(offset);
  size = static_cast<size_t>(
      std::min<std::uint64_t>(size, file->size() - std::min(off, file->size())));
  if (file->local() && size > 0) {
    struct fuse_bufvec vec = FUSE_BUFVEC_INIT(size);
    vec.buf[0].flags = static_cast<fuse_buf_flags>(FUSE_BUF_IS_FD | FUSE_BUF_FD_SEEK);
    vec.buf[0].fd = file->local_fd();
    vec.buf[0].pos = offset;
    fuse_reply_data(req, &vec, FUSE_BUF_SPLICE_MOVE);
    return;
  }
  std::unique_ptr<char[]> mem(new (std::nothrow) char[std::max<size_t>(size, 1)]);
  if (mem == nullptr) {
    fuse_reply_err(req, ENOMEM);
    return;
  }
  absl::StatusOr<std::size_t> n = file->ReadAt(off, mem.get(), size);
  if (!n.ok()) {
    Mount& m = Self(req);
    // E.g. a streamed file that failed its whole-file check at its end: what was read before
    // may be in the kernel's pages of the node, so its next open drops them.
    m.nodes->ReadFailed(ino);
    m.log->warn("read: {}", n.status().ToString());
    fuse_reply_err(req, Errno(n.status()));
    return;
  }
  fuse_reply_buf(req, mem.get(), *n);
}

void Release(fuse_req_t req, fuse_ino_t, struct fuse_file_info* fi) {
  delete reinterpret_cast<OpenFile*>(fi->fh);
  fuse_reply_err(req, 0);
}

void StatFs(fuse_req_t req, fuse_ino_t) {
  struct statvfs st;
  std::memset(&st, 0, sizeof(st));
  st.f_bsize = 1 << 20;
  st.f_frsize = 1 << 20;
  st.f_namemax = gfrep::catalog::kMaxNameBytes;
  st.f_flag = ST_RDONLY;
  fuse_reply_statfs(req, &st);
}

// The mount is read-only ("ro": the kernel answers EROFS itself); these are the backstop.
void ReadOnly(fuse_req_t req) { fuse_reply_err(req, EROFS); }
void SetAttr(fuse_req_t req, fuse_ino_t, struct stat*, int, struct fuse_file_info*) {
  ReadOnly(req);
}
void Mknod(fuse_req_t req, fuse_ino_t, const char*, mode_t, dev_t) { ReadOnly(req); }
void Mkdir(fuse_req_t req, fuse_ino_t, const char*, mode_t) { ReadOnly(req); }
void Unlink(fuse_req_t req, fuse_ino_t, const char*) { ReadOnly(req); }
void Rmdir(fuse_req_t req, fuse_ino_t, const char*) { ReadOnly(req); }
void Symlink(fuse_req_t req, const char*, fuse_ino_t, const char*) { ReadOnly(req); }
void Rename(fuse_req_t req, fuse_ino_t, const char*, fuse_ino_t, const char*, unsigned int) {
  ReadOnly(req);
}
void Link(fuse_req_t req, fuse_ino_t, fuse_ino_t, const char*) { ReadOnly(req); }
void Write(fuse_req_t req, fuse_ino_t, const char*, size_t, off_t, struct fuse_file_info*) {
  ReadOnly(req);
}
void Create(fuse_req_t req, fuse_ino_t, const char*, mode_t, struct fuse_file_info*) {
  ReadOnly(req);
}

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
  replica::client::FsViewOptions options;
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

  m.nodes = std::make_unique<FsNodes>(*m.view);

  struct fuse_lowlevel_ops ops {};
  ops.init = Init;
  ops.lookup = Lookup;
  ops.forget = Forget;
  ops.forget_multi = ForgetMulti;
  ops.getattr = GetAttr;
  ops.opendir = OpenDir;
  ops.readdir = ReadDir;
  ops.readdirplus = ReadDirPlus;
  ops.releasedir = ReleaseDir;
  ops.open = Open;
  ops.read = Read;
  ops.release = Release;
  ops.statfs = StatFs;
  ops.setattr = SetAttr;
  ops.mknod = Mknod;
  ops.mkdir = Mkdir;
  ops.unlink = Unlink;
  ops.rmdir = Rmdir;
  ops.symlink = Symlink;
  ops.rename = Rename;
  ops.link = Link;
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
  struct fuse_session* se = fuse_session_new(&args, &ops, sizeof(ops), &m);
  fuse_opt_free_args(&args);
  if (se == nullptr) {
    return tools::Fail(kProgram, "fuse_session_new failed (see the message above)");
  }
  if (fuse_session_mount(se, mountpoint.c_str()) != 0) {
    fuse_session_destroy(se);
    return tools::Fail(kProgram, fmt::format("cannot mount on {} (is /dev/fuse there, and "
                                             "fusermount3 installed?)",
                                             mountpoint));
  }
  m.se = se;
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
  // once; the kernel is told to drop its names of the inode's nodes (the next lookup finds
  // the current generation), and the nodes' next opens drop their pages.
  m.view->StartFollowing([&m](const absl::StatusOr<std::vector<gfrep::catalog::InodeId>>& changed) {
    if (!changed.ok()) {
      m.nodes->ChangedAll();  // events may have been missed
      return;
    }
    for (gfrep::catalog::InodeId inode : *changed) {
      for (const FsNodes::KernelName& name : m.nodes->Changed(inode)) {
        InvalidateEntry(m, name);
      }
    }
  });
  log->info("mounted catalog={} on {} node={} ttl={}s", cat.catalog, mountpoint,
            options.reader.identity.node, ttl_s);

  struct fuse_loop_config* loop = fuse_loop_cfg_create();
  fuse_loop_cfg_set_max_threads(loop, threads);
  const int rc = fuse_session_loop_mt(se, loop);
  fuse_loop_cfg_destroy(loop);

  // Ended by a signal or by an unmount from outside (fusermount3 -u): wake the stopper if it
  // still waits.
  loop_done = true;
  pthread_kill(stopper.native_handle(), SIGTERM);
  stopper.join();
  Unmount(m);  // from here on the follower's notifications are no-ops
  FsView::Counters c = m.view->counters();
  const std::size_t nodes = m.nodes->size();
  fuse_session_destroy(se);
  log->info(
      "unmounted {}: stat_calls={} list_calls={} opens={} cache_hits={} invalidated={} nodes={}",
      mountpoint, c.stat_calls, c.list_calls, c.open_calls, c.cache_hits, c.invalidated, nodes);
  log->flush();
  // The event follower may be inside a catalog long poll (queued behind other pollers on a
  // busy catalog, up to the call timeout): neither wait for it nor tear the catalog client
  // down under it. Everything that matters is done: the mount is gone.
  std::_Exit(rc == 0 ? 0 : 1);
}
