#pragma once

// FsView is the catalog's namespace seen as a read-only file tree: the logic behind gfmount
// (tools/gfmount.cc is only the FUSE glue around it), testable without FUSE.
//
//   absl::StatusOr<std::unique_ptr<replica::FsView>> view =
//       replica::FsView::Create(catalog, {.ttl = std::chrono::seconds(1), .reader = ...});
//   (*view)->GetAttr("/exp/run001");   // stat, lookup
//   (*view)->ReadDir("/exp");          // readdir (with every child's attributes)
//   (*view)->Open("/exp/run001");      // then ReadAt on the OpenFile
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
// the bytes never are: Open asks the catalog every time (replica::Open: Locate, then this
// node's complete replica of the CURRENT generation, else the best remote one), so a stale,
// pending, corrupt or lost replica is never served, and an open that finds a newer
// generation than the cache knew drops the cached entry (OpenFile::attributes_changed()).
//
// Error codes: as catalog::Catalog and replica::Open; in addition Open returns kUnavailable
// when the file exists but no replica of its current generation can be read.
//
// Thread safety: every method of FsView may be called concurrently from any thread (one
// mutex guards the cache; catalog calls are made outside it). An OpenFile may be read from
// several threads at once (remote reads are serialised by its own mutex; a local replica is
// read with pread on its descriptor, without a lock). Calls block on the catalog: do not
// make them on an executor thread.

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <vector>

#include "absl/status/statusor.h"
#include "catalog/catalog.h"
#include "replica/reader.h"

namespace gfrep::replica {

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

// One open file of an FsView: a replica::FileReader of one generation.
class FsView;

class OpenFile {
 public:
  // Reads up to `n` bytes at `offset`: exactly `n` unless the end of the file comes first
  // (0 at or past the end). Remote-read errors: as FileReader::ReadAt.
  absl::StatusOr<std::size_t> ReadAt(std::uint64_t offset, void* buffer, std::size_t n);

  std::uint64_t size() const { return size_; }
  std::uint64_t generation() const { return generation_; }
  // True when this node's own replica is read (through a plain descriptor).
  bool local() const { return reader_ != nullptr && reader_->local(); }
  // The descriptor of this node's own replica when local() (valid while the OpenFile
  // lives; read it with pread only, from any thread), else -1. For zero-copy reads (splice).
  int local_fd() const { return local_fd_; }
  // The node whose replica is read ("" for an empty file).
  std::string source_node() const { return reader_ ? reader_->source_node() : ""; }
  // The previous Open of this inode through the same FsView served the same generation, no
  // replica event of the inode came in since, and the catalog confirmed (one Stat) that the
  // path is still that inode at that generation: the bytes a kernel page cache kept from
  // the previous open are still right (gfmount's keep_cache).
  bool same_generation_as_last_open() const { return same_generation_; }
  // The cache held other attributes for the path (another generation or size) than the
  // open found: whoever was told them (the kernel) should forget them.
  bool attributes_changed() const { return attributes_changed_; }
  // The kernel's page cache of this inode must not be used for this handle (gfmount: direct
  // I/O, no keep_cache): another generation of the inode is open in this view (its reads may
  // fill the inode's page cache, which all handles share, with its bytes), or the inode is
  // unknown to the view (so nothing is tracked for it).
  bool bypass_page_cache() const { return bypass_page_cache_; }
  ~OpenFile();

 private:
  friend class FsView;
  OpenFile() = default;

  FsView* view_ = nullptr;              // tracks this handle's generation while it lives
  catalog::InodeId inode_ = 0;
  bool bypass_page_cache_ = false;
  std::unique_ptr<FileReader> reader_;  // null for a file without content
  int local_fd_ = -1;                   // the local replica's descriptor, else -1
  std::uint64_t size_ = 0;
  std::uint64_t generation_ = 0;
  bool same_generation_ = false;
  bool attributes_changed_ = false;
  std::mutex mu_;  // one remote read at a time (FileReader is single-threaded)
};

class FsView {
 public:
  // Counts of catalog calls made (and cache answers), for tests and gfmount's log.
  struct Counters {
    std::uint64_t stat_calls = 0;
    std::uint64_t list_calls = 0;
    std::uint64_t open_calls = 0;   // replica::Open (each makes its own catalog calls)
    std::uint64_t event_polls = 0;  // ReadEvents / LastEventSeq calls
    std::uint64_t cache_hits = 0;   // GetAttr/ReadDir answered without a catalog call
    std::uint64_t invalidated = 0;  // entries dropped because of events
  };

  // `catalog` must outlive the view. Reads the event log's position (LastEventSeq): events
  // before it are not replayed. kInvalidArgument for a zero ttl or list_page.
  static absl::StatusOr<std::unique_ptr<FsView>> Create(catalog::Catalog& catalog,
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
  // as empty). kNotFound (no such file), kFailedPrecondition (a directory), kUnavailable
  // (no replica of the current generation could be read), kDataLoss.
  absl::StatusOr<std::unique_ptr<OpenFile>> Open(std::string_view path);

  // Reads the catalog's event log once (waiting up to `wait` for an event) and drops the
  // cached entries of the inodes named by replica events, and their directories' listings.
  // Returns the paths of the dropped entries. If the log cannot be read, drops the whole
  // cache and returns the error.
  absl::StatusOr<std::vector<std::string>> PollEvents(std::chrono::milliseconds wait);

  // Runs PollEvents in a loop on a thread of its own until the view is destroyed; each
  // dropped path is given to `on_invalidate` (on that thread; gfmount tells the kernel).
  // REQUIRES: called at most once.
  void StartFollowing(std::function<void(const std::string& path)> on_invalidate);

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

  FsView(catalog::Catalog& catalog, FsViewOptions options);
  std::int64_t Now() const;
  // Cached attributes of `path` (fresh or not, when `fresh_only` is false), under mu_.
  const catalog::Attributes* CachedLocked(const std::string& path, bool fresh_only, bool* missing);
  // Drops `path`'s entry and its parent's listing, under mu_.
  void DropLocked(const std::string& path);

  catalog::Catalog& catalog_;
  const FsViewOptions options_;

  mutable std::mutex mu_;
  // Guarded by mu_.
  std::unordered_map<std::string, Entry> entries_;
  std::unordered_map<std::string, Listing> listings_;
  std::unordered_map<catalog::InodeId, std::string> path_of_;  // inodes seen -> last path
  std::unordered_map<catalog::InodeId, std::uint64_t> last_open_generation_;
  // Counts replica events (and whole-cache drops): an answer fetched from the catalog while
  // it moved is returned but not cached, and an open during which it moved keeps no pages.
  std::uint64_t epoch_ = 0;
  // Open handles per inode and generation (OpenFile::bypass_page_cache).
  std::unordered_map<catalog::InodeId, std::map<std::uint64_t, int>> open_generations_;
  friend class OpenFile;
  // An OpenFile of `inode` at `generation` is closed.
  void Closed(catalog::InodeId inode, std::uint64_t generation);
  // The next open of `inode` must not keep the kernel's pages (a read of it failed).
  void ForgetGeneration(catalog::InodeId inode);
  std::uint64_t event_seq_ = 0;
  Counters counters_;

  std::mutex poll_mu_;  // one PollEvents at a time
  std::atomic<bool> stop_{false};
  std::thread follower_;
};

}  // namespace gfrep::replica
