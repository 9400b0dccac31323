#pragma once

// FsView is the catalog's namespace seen as a read-only file tree: the logic behind gfmount
// (tools/gfmount.cc is only the FUSE glue around it), testable without FUSE. FsNodes (below)
// gives its entries the kernel's node ids: one per directory, one per version of a file.
//
//   absl::StatusOr<std::unique_ptr<replica::client::FsView>> view =
//       replica::client::FsView::Create(catalog, {.ttl = std::chrono::seconds(1), .reader = ...});
//   (*view)->GetAttr("/exp/run001");   // stat, lookup
//   (*view)->ReadDir("/exp");          // readdir (with every child's attributes)
//   (*view)->Open("/exp/run001", {{.inode = 12, .generation = 3}});  // then ReadAt
//
// The namespace cache. GetAttr and ReadDir answer from a cache of catalog entries:
//   - a directory listing (one List call per `list_page` children) keeps every child's
//     attributes, so a stat of each of a directory's 10,000 entries after its listing (what
//     `ls -l` does) makes no catalog call at all;
//   - an entry stat'ed alone (Stat) is kept by path, and so is a name that does not exist
//     (negative entry: a shell's PATH search or a program probing for files costs no call);
//   - everything is trusted for `ttl`, then asked again (expiry is the rule that always holds);
//   - and, sooner, the catalog's event log (PollEvents, or the follower thread that
//     StartFollowing runs): a replica event of inode I (each new generation of a file, and
//     each change of a replica's state: stale, corrupt, lost, deleting...) drops I's entry
//     and its directory's listing at once. The namespace changes that write no event (mkdir,
//     rename, chmod/chown, an empty file created or removed) are seen when the TTL expires.
// Attributes served from the cache may thus be up to `ttl` old (or until the next event);
// the bytes never are: Open asks the catalog every time (replica::client::Open: Locate, then this
// node's complete replica of the CURRENT generation, else the best remote one), so a stale,
// pending, corrupt or lost replica is never served. An open told which version to expect
// (the inode and generation its caller showed) opens exactly that one or fails with kAborted;
// an open that finds other attributes than the cache holds drops the cached entry.
//
// Error codes: as catalog::Catalog and replica::client::Open; in addition Open returns kUnavailable
// when the file exists but no replica of its current generation can be read, and kAborted
// when it is not the expected version.
//
// Thread safety: every method of FsView and FsNodes may be called concurrently from any thread
// (one mutex each guards their maps; catalog calls are made outside them). An OpenFile may be
// read from several threads at once (remote reads are serialised by its own mutex; a local
// replica is read with pread on its descriptor, without a lock). Calls block on the catalog:
// do not make them on an executor thread.

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "catalog/catalog.h"
#include "replica/client/reader.h"

namespace gfrep::replica::client {

struct FsViewOptions {
  // How long cached attributes, listings and missing names are trusted without asking the
  // catalog again. gfmount gives the kernel the same attribute and entry timeouts.
  std::chrono::milliseconds ttl{1000};
  // Children asked of the catalog per List call when reading a directory.
  std::size_t list_page = 10000;
  // Long-poll wait of each ReadEvents of the follower thread (also bounds how long the
  // destructor waits for it to stop).
  std::chrono::milliseconds event_wait{1000};
  // How Open reads a file: this node's identity (its own replicas are read through a plain
  // descriptor), transfer settings for remote replicas.
  ReaderOptions reader;
  // Monotonic time in ns for the TTL (tests inject one). Null: std::chrono::steady_clock.
  std::function<std::int64_t()> now_ns;
};

// One version of a file: what an open must find when its caller showed the file at it.
struct FileVersion {
  catalog::InodeId inode = 0;
  std::uint64_t generation = 0;  // 0: the file without content
};

// One open file of an FsView: a replica::client::FileReader of one generation, or an empty file.
class OpenFile {
 public:
  // Reads up to `n` bytes at `offset`: exactly `n` unless the end of the file comes first
  // (0 at or past the end). Remote-read errors: as FileReader::ReadAt.
  absl::StatusOr<std::size_t> ReadAt(std::uint64_t offset, void* buffer, std::size_t n);

  std::uint64_t size() const { return size_; }
  catalog::InodeId inode() const { return inode_; }
  std::uint64_t generation() const { return generation_; }
  // True when this node's own replica is read (through a plain descriptor).
  bool local() const { return local_fd_ >= 0; }
  // The descriptor of this node's own replica when local() (valid while the OpenFile
  // lives; read it with pread only, from any thread), else -1. For zero-copy reads (splice).
  int local_fd() const { return local_fd_; }
  // The node whose replica is read ("" for an empty file).
  const std::string& source_node() const { return source_node_; }

 private:
  friend class FsView;
  OpenFile() = default;

  absl::Mutex mu_;  // one remote read at a time (FileReader is single-threaded)
  std::unique_ptr<FileReader> reader_ ABSL_PT_GUARDED_BY(mu_);  // null for a file without content
  int local_fd_ = -1;                   // the local replica's descriptor, else -1
  std::string source_node_;             // as the reader said at open
  std::uint64_t size_ = 0;
  catalog::InodeId inode_ = 0;
  std::uint64_t generation_ = 0;
};

class FsView {
 public:
  // Counts of catalog calls made (and cache answers), for tests and gfmount's log.
  struct Counters {
    std::uint64_t stat_calls = 0;
    std::uint64_t list_calls = 0;
    std::uint64_t open_calls = 0;   // replica::client::Open (each makes its own catalog calls)
    std::uint64_t event_polls = 0;  // ReadEvents / LastEventSeq calls
    std::uint64_t cache_hits = 0;   // GetAttr/ReadDir answered without a catalog call
    std::uint64_t invalidated = 0;  // entries dropped because of events
  };

  // `catalog` must outlive the view. Reads the event log's position (LastEventSeq): events
  // before it are not replayed. kInvalidArgument for a zero ttl or list_page.
  static absl::StatusOr<std::unique_ptr<FsView>> Create(const ReaderCatalog& catalog,
                                                        FsViewOptions options);
  // Stops the follower thread (waits up to about options.event_wait).
  ~FsView();
  FsView(const FsView&) = delete;
  FsView& operator=(const FsView&) = delete;

  // The entry at `path` (absolute; "/" is the root). kNotFound if there is none.
  absl::StatusOr<catalog::Attributes> GetAttr(std::string_view path);

  // The children of directory `path` in name order, with their attributes.
  // kNotFound, kFailedPrecondition (a file).
  absl::StatusOr<std::vector<catalog::DirEntry>> ReadDir(std::string_view path);

  // Opens the current generation of file `path` for reading (a file without content reads
  // as empty). With `expected`, the path must still be that inode at that generation, else
  // kAborted (the caller shows an older version, or another file under the name: look it up
  // again; the cached entry is dropped, so the next GetAttr asks the catalog). kNotFound (no
  // such file), kFailedPrecondition (a directory), kUnavailable (no replica of the current
  // generation could be read), kDataLoss.
  absl::StatusOr<std::unique_ptr<OpenFile>> Open(std::string_view path,
                                                 std::optional<FileVersion> expected = {});

  // Reads the catalog's event log once (waiting up to `wait` for an event) and drops the
  // cached entries of the inodes named by replica events, and their directories' listings.
  // Returns those inodes (each once, in the log's order). If the log cannot be read, drops
  // the whole cache and returns the error.
  absl::StatusOr<std::vector<catalog::InodeId>> PollEvents(std::chrono::milliseconds wait);

  // Runs PollEvents in a loop on a thread of its own until the view is destroyed, and gives
  // `on_events` (on that thread) every answer that names inodes and every error (after which
  // the whole cache was dropped: changes may have been missed). gfmount tells the kernel.
  // REQUIRES: called at most once.
  using EventsCallback =
      std::function<void(const absl::StatusOr<std::vector<catalog::InodeId>>& changed)>;
  void StartFollowing(EventsCallback on_events);

  // Drops every cached entry and listing.
  void InvalidateAll();

  Counters counters() const;
  const FsViewOptions& options() const { return options_; }

 private:
  struct Entry {
    bool exists = false;
    catalog::Attributes attributes;
    std::int64_t expires_ns = 0;
  };
  struct Listing {
    std::vector<catalog::DirEntry> children;  // name order
    std::int64_t expires_ns = 0;
  };

  FsView(const ReaderCatalog& catalog, FsViewOptions options);
  std::int64_t Now() const;
  // Cached attributes of `path` (fresh or not, when `fresh_only` is false), under mu_.
  const catalog::Attributes* CachedLocked(const std::string& path, bool fresh_only, bool* missing)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Drops `path`'s entry and its parent's listing, under mu_.
  void DropLocked(const std::string& path) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  ReaderCatalog catalog_;
  const FsViewOptions options_;

  mutable absl::Mutex mu_;
  std::unordered_map<std::string, Entry> entries_ ABSL_GUARDED_BY(mu_);
  std::unordered_map<std::string, Listing> listings_ ABSL_GUARDED_BY(mu_);
  // Inodes seen -> last path.
  std::unordered_map<catalog::InodeId, std::string> path_of_ ABSL_GUARDED_BY(mu_);
  // Counts replica events, whole-cache drops and opens that found a newer version than the
  // cache: an answer fetched from the catalog while it moved is returned but not cached.
  std::uint64_t epoch_ ABSL_GUARDED_BY(mu_) = 0;
  std::uint64_t event_seq_ ABSL_GUARDED_BY(mu_) = 0;
  Counters counters_ ABSL_GUARDED_BY(mu_);

  absl::Mutex poll_mu_;  // one PollEvents at a time
  std::atomic<bool> stop_{false};
  std::thread follower_;
};

// FsNodes gives an FsView's entries the node ids of the kernel's FUSE protocol (gfmount uses
// the low-level libfuse API), so that a node id stands for one version of a file: a directory
// has one node per catalog inode, a file one per (inode, generation). The kernel keeps one size
// and one page cache per node id; since a file node's version never changes, neither do its
// size and bytes, and the kernel may keep its pages across opens. A new generation is a new
// node, which the next lookup of the name finds; an open of an older generation's node fails
// with kAborted (gfmount answers ESTALE: the kernel looks the name up again, revalidating, and
// retries the open once), while handles already open keep reading their own generation.
//
// Lookup counts are the kernel's: each node handed to it (Lookup, LookupEntry) counts one,
// Forget takes the kernel's count off, and a node is freed at zero (ids are never reused). The
// root (kRootId) is never freed. A node remembers where it was last found (directory node and
// name), so that a replica event of its inode can tell the kernel which names to drop.
//
// Thread safety: see FsView. The view must outlive this table.
class FsNodes {
 public:
  using NodeId = std::uint64_t;
  static constexpr NodeId kRootId = 1;  // FUSE_ROOT_ID

  struct Node {
    NodeId id = 0;
    catalog::Attributes attributes;
  };
  // A name as the kernel holds it: `name` in directory node `parent`.
  struct KernelName {
    NodeId parent = 0;
    std::string name;
    bool operator==(const KernelName&) const = default;
  };
  struct Opened {
    std::unique_ptr<OpenFile> file;
    // The kernel may keep the node's cached pages (else it must drop them at this open).
    bool keep_cache = true;
    std::string path;  // where the file was opened (for logs)
  };

  explicit FsNodes(FsView& view);

  // The entry `name` in directory node `parent`: its node (for a file, the node of the
  // generation the view shows now) and attributes. Counts one lookup. kNotFound (no such
  // entry, or `parent` is not held), kFailedPrecondition (`parent` is a file), as
  // FsView::GetAttr.
  absl::StatusOr<Node> Lookup(NodeId parent, std::string_view name);
  // The node of `entry`, a child of directory node `parent` that ReadDir returned (FUSE's
  // readdirplus). Counts one lookup. kNotFound if `parent` is not held.
  absl::StatusOr<Node> LookupEntry(NodeId parent, const catalog::DirEntry& entry);
  // The kernel drops `n` lookups of `id`; at zero the node is freed. Unknown ids are ignored.
  void Forget(NodeId id, std::uint64_t n);

  // The attributes of node `id`. A file node's are its generation's (its size never changes;
  // mode, owner and mtime are refreshed from the view while it shows the same inode at the
  // same generation). A directory's are the view's while its path is still that directory,
  // else the last known. kNotFound for an id not held; the view's errors for the root before
  // its attributes were ever read.
  absl::StatusOr<catalog::Attributes> GetAttr(NodeId id);
  // The children of directory node `id` (FsView::ReadDir of its path). kNotFound for an id
  // not held, kFailedPrecondition for a file node.
  absl::StatusOr<std::vector<catalog::DirEntry>> ReadDir(NodeId id);
  // Opens file node `id`: exactly its inode at its generation (FsView::Open with it
  // expected). kAborted when its path holds another version now, kNotFound (or an id not
  // held), kFailedPrecondition (a directory node), and FsView::Open's errors.
  absl::StatusOr<Opened> Open(NodeId id);

  // A read of node `id` failed: pages the kernel cached from its reader are not trusted, and
  // the next open of the node drops them.
  void ReadFailed(NodeId id);
  // A replica event of `inode` (a new generation, a replica found bad...): the next open of
  // each of its nodes drops the kernel's pages (they may come from a replica now found bad).
  // Returns the names the kernel holds for its nodes, to be dropped (fuse's inval_entry), so
  // that the next lookup finds the current generation's node.
  std::vector<KernelName> Changed(catalog::InodeId inode);
  // Events may have been missed: the next open of every node drops the kernel's pages.
  void ChangedAll();

  // Nodes held, the root included.
  std::size_t size() const;

 private:
  struct Record {
    std::uint64_t lookups = 0;
    NodeId parent = 0;  // where it was last found (0 for the root)
    std::string name;
    std::string path;
    catalog::Attributes attributes;
    // Reasons not to trust the kernel's pages of the node (replica events, failed reads), and
    // how many of them an open that dropped the pages covered: the next open keeps the pages
    // only if both are equal.
    std::uint64_t distrust = 0;
    std::uint64_t distrust_dropped = 0;
  };
  // A directory's version is its inode alone (generation 0), a file's its inode and generation.
  using Version = std::pair<catalog::InodeId, std::uint64_t>;
  static Version VersionOf(const catalog::Attributes& a);

  // The node of `a`, found as `name` in `parent` at `path`; counts one lookup. Under mu_.
  Node RefLocked(NodeId parent, std::string_view name, std::string path,
                 const catalog::Attributes& a) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The path of child `name` of directory node `parent`, under mu_.
  absl::StatusOr<std::string> ChildPathLocked(NodeId parent, std::string_view name) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  FsView& view_;
  mutable absl::Mutex mu_;
  std::unordered_map<NodeId, Record> nodes_ ABSL_GUARDED_BY(mu_);
  // Ordered: a file's nodes of every generation together.
  std::map<Version, NodeId> by_version_ ABSL_GUARDED_BY(mu_);
  NodeId next_id_ ABSL_GUARDED_BY(mu_) = kRootId + 1;
};

}  // namespace gfrep::replica::client
