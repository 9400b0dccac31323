#include "replica/client/fs_view.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "transfer/errno_status.h"

namespace gfrep::replica::client {
namespace {

// "/a/b" -> "/a"; "/a" -> "/"; "/" -> "" (the root has no parent).
std::string ParentOf(const std::string& path) {
  if (path == "/") return "";
  std::size_t slash = path.rfind('/');
  return slash == 0 ? "/" : path.substr(0, slash);
}

std::string NameOf(const std::string& path) { return path.substr(path.rfind('/') + 1); }

std::string ChildPath(const std::string& dir, const std::string& name) {
  return dir == "/" ? "/" + name : dir + "/" + name;
}

absl::StatusOr<std::string> Normalize(std::string_view path) {
  absl::StatusOr<std::vector<std::string>> parts = catalog::SplitPath(path);
  if (!parts.ok()) return parts.status();
  return catalog::JoinPath(*parts);
}

}  // namespace

absl::StatusOr<std::size_t> OpenFile::ReadAt(std::uint64_t offset, void* buffer, std::size_t n) {
  if (offset >= size_ || n == 0) return 0;
  n = static_cast<std::size_t>(std::min<std::uint64_t>(n, size_ - offset));
  char* out = static_cast<char*>(buffer);
  std::size_t done = 0;
  if (local_fd_ >= 0) {
    // This node's own replica: pread is safe from many threads at once.
    while (done < n) {
      ssize_t got = ::pread(local_fd_, out + done, n - done, static_cast<off_t>(offset + done));
      if (got < 0) {
        if (errno == EINTR) continue;
        return transfer::ErrnoStatus(errno, "pread");
      }
      if (got == 0) break;
      done += static_cast<std::size_t>(got);
    }
    return done;
  }
  absl::MutexLock lock(&mu_);
  while (done < n) {
    absl::StatusOr<std::size_t> got = reader_->ReadAt(offset + done, out + done, n - done);
    if (!got.ok()) return got.status();
    if (*got == 0) break;
    done += *got;
  }
  return done;
}

FsView::FsView(const ReaderCatalog& catalog, FsViewOptions options)
    : catalog_(catalog), options_(std::move(options)) {}

absl::StatusOr<std::unique_ptr<FsView>> FsView::Create(const ReaderCatalog& catalog,
                                                       FsViewOptions options) {
  if (options.ttl.count() <= 0) return absl::InvalidArgumentError("fs view: ttl must be > 0");
  if (options.list_page == 0) return absl::InvalidArgumentError("fs view: list_page must be > 0");
  std::unique_ptr<FsView> view(new FsView(catalog, std::move(options)));
  absl::StatusOr<std::uint64_t> seq = catalog.view->LastEventSeq();
  if (!seq.ok()) return seq.status();
  absl::MutexLock lock(&view->mu_);
  view->event_seq_ = *seq;
  view->counters_.event_polls = 1;
  return view;
}

FsView::~FsView() {
  stop_ = true;
  if (follower_.joinable()) follower_.join();
}

std::int64_t FsView::Now() const {
  if (options_.now_ns) return options_.now_ns();
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

const catalog::Attributes* FsView::CachedLocked(const std::string& path, bool fresh_only,
                                                bool* missing) {
  *missing = false;
  const std::int64_t now = Now();
  if (auto it = entries_.find(path); it != entries_.end()) {
    if (!fresh_only || it->second.expires_ns > now) {
      if (it->second.exists) return &it->second.attributes;
      if (fresh_only) {
        *missing = true;
        return nullptr;
      }
    }
  }
  const std::string parent = ParentOf(path);
  if (parent.empty()) return nullptr;
  auto dir = listings_.find(parent);
  if (dir == listings_.end() || (fresh_only && dir->second.expires_ns <= now)) return nullptr;
  const std::string name = NameOf(path);
  const std::vector<catalog::DirEntry>& children = dir->second.children;
  auto child =
      std::lower_bound(children.begin(), children.end(), name,
                       [](const catalog::DirEntry& e, const std::string& n) { return e.name < n; });
  if (child != children.end() && child->name == name) return &child->attributes;
  // A fresh complete listing without the name: it does not exist.
  *missing = fresh_only;
  return nullptr;
}

void FsView::DropLocked(const std::string& path) {
  entries_.erase(path);
  const std::string parent = ParentOf(path);
  if (!parent.empty()) listings_.erase(parent);
}

absl::StatusOr<catalog::Attributes> FsView::GetAttr(std::string_view raw_path) {
  absl::StatusOr<std::string> path = Normalize(raw_path);
  if (!path.ok()) return path.status();
  std::uint64_t epoch = 0;
  {
    absl::MutexLock lock(&mu_);
    bool missing = false;
    if (const catalog::Attributes* a = CachedLocked(*path, true, &missing)) {
      ++counters_.cache_hits;
      return *a;
    }
    if (missing) {
      ++counters_.cache_hits;
      return absl::NotFoundError(fmt::format("{}: no such file or directory", *path));
    }
    ++counters_.stat_calls;
    epoch = epoch_;
  }
  absl::StatusOr<catalog::Attributes> a = catalog_.view->Stat(*path);
  if (!a.ok() && !absl::IsNotFound(a.status())) return a.status();
  absl::MutexLock lock(&mu_);
  // An event dropped entries while the catalog answered: this answer may predate it, so it
  // is returned but not kept.
  if (epoch_ != epoch) return a;
  Entry& e = entries_[*path];
  e.exists = a.ok();
  e.expires_ns = Now() + std::chrono::nanoseconds(options_.ttl).count();
  if (a.ok()) {
    e.attributes = *a;
    path_of_[a->inode] = *path;
  }
  return a;
}

absl::StatusOr<std::vector<catalog::DirEntry>> FsView::ReadDir(std::string_view raw_path) {
  absl::StatusOr<std::string> path = Normalize(raw_path);
  if (!path.ok()) return path.status();
  std::uint64_t epoch = 0;
  {
    absl::MutexLock lock(&mu_);
    if (auto it = listings_.find(*path); it != listings_.end() && it->second.expires_ns > Now()) {
      ++counters_.cache_hits;
      return it->second.children;
    }
    epoch = epoch_;
  }
  std::vector<catalog::DirEntry> children;
  catalog::ListOptions list;
  list.limit = options_.list_page;
  while (true) {
    {
      absl::MutexLock lock(&mu_);
      ++counters_.list_calls;
    }
    absl::StatusOr<std::vector<catalog::DirEntry>> page = catalog_.view->List(*path, list);
    if (!page.ok()) return page.status();
    const std::size_t got = page->size();
    for (catalog::DirEntry& e : *page) children.push_back(std::move(e));
    if (got < list.limit) break;
    list.start_after = children.back().name;
  }
  absl::MutexLock lock(&mu_);
  if (epoch_ != epoch) return children;  // may predate an event that came meanwhile: not kept
  Listing& l = listings_[*path];
  l.children = children;
  l.expires_ns = Now() + std::chrono::nanoseconds(options_.ttl).count();
  for (const catalog::DirEntry& e : children) {
    path_of_[e.attributes.inode] = ChildPath(*path, e.name);
    // The listing is newer than an entry stat'ed alone before it.
    entries_.erase(ChildPath(*path, e.name));
  }
  return children;
}

absl::StatusOr<std::unique_ptr<OpenFile>> FsView::Open(std::string_view raw_path,
                                                       std::optional<FileVersion> expected) {
  absl::StatusOr<std::string> path = Normalize(raw_path);
  if (!path.ok()) return path.status();
  {
    absl::MutexLock lock(&mu_);
    ++counters_.open_calls;
  }
  std::unique_ptr<OpenFile> file(new OpenFile());
  absl::StatusOr<std::unique_ptr<FileReader>> reader =
      replica::client::Open(catalog_, *path, options_.reader);
  catalog::Attributes found;  // what the open found at the path
  if (reader.ok()) {
    found.inode = (*reader)->inode();
    found.generation = (*reader)->generation();
    found.size = (*reader)->size();
  } else {
    // Tell "no such file" and "a file without content" (readable: empty) from "no readable
    // replica" and "a directory" with the entry itself.
    absl::StatusOr<catalog::Attributes> a = catalog_.view->Stat(*path);
    {
      absl::MutexLock lock(&mu_);
      ++counters_.stat_calls;
      DropLocked(*path);
    }
    if (!a.ok()) return a.status();
    if (a->type == catalog::FileType::kDirectory) {
      return absl::FailedPreconditionError(fmt::format("{}: is a directory", *path));
    }
    found = *a;
    if (!expected || (expected->inode == a->inode && expected->generation == a->generation)) {
      if (a->generation != 0) {
        if (absl::IsNotFound(reader.status())) {
          return absl::UnavailableError(fmt::format("{}: no readable replica of generation {}: {}",
                                                    *path, a->generation,
                                                    std::string(reader.status().message())));
        }
        return reader.status();
      }
      found.size = 0;  // a file without content reads as empty
    }
  }
  absl::MutexLock lock(&mu_);
  if (expected && (expected->inode != found.inode || expected->generation != found.generation)) {
    // The caller showed an older version (or another file under the name): the cache may
    // still hold it, and the caller's next look-up must get what the catalog has now (nor
    // may a stat already on its way with the older answer be kept).
    DropLocked(*path);
    ++epoch_;
    return absl::AbortedError(
        fmt::format("{}: is inode {} generation {} now, not inode {} generation {}", *path,
                    found.inode, found.generation, expected->inode, expected->generation));
  }
  bool missing = false;
  if (const catalog::Attributes* a = CachedLocked(*path, false, &missing)) {
    if (a->inode != found.inode || a->generation != found.generation || a->size != found.size) {
      // Asked again on the next GetAttr, which then reports what was just opened.
      DropLocked(*path);
      ++epoch_;
    }
  }
  file->inode_ = found.inode;
  file->generation_ = found.generation;
  file->size_ = found.size;
  if (reader.ok()) {
    if ((*reader)->local()) file->local_fd_ = (*reader)->fd();
    file->source_node_ = (*reader)->source_node();
    file->reader_ = std::move(*reader);
  }
  return file;
}

absl::StatusOr<std::vector<catalog::InodeId>> FsView::PollEvents(std::chrono::milliseconds wait) {
  absl::MutexLock poll(&poll_mu_);
  std::uint64_t after;
  {
    absl::MutexLock lock(&mu_);
    after = event_seq_;
    ++counters_.event_polls;
  }
  absl::StatusOr<std::vector<catalog::Event>> events =
      catalog_.view->ReadEvents(after, 10000, wait);
  if (!events.ok()) {
    // Changes may have been missed: trust nothing cached, and start again from now.
    InvalidateAll();
    absl::StatusOr<std::uint64_t> seq = catalog_.view->LastEventSeq();
    absl::MutexLock lock(&mu_);
    ++counters_.event_polls;
    if (seq.ok()) event_seq_ = *seq;
    return events.status();
  }
  std::vector<catalog::InodeId> changed;
  absl::MutexLock lock(&mu_);
  for (const catalog::Event& e : *events) {
    event_seq_ = std::max(event_seq_, e.seq);
    if (e.kind != catalog::EventKind::kReplica) continue;
    ++epoch_;  // answers fetched before this event are not kept (GetAttr, ReadDir)
    if (std::find(changed.begin(), changed.end(), e.id) == changed.end()) {
      changed.push_back(e.id);
    }
    auto it = path_of_.find(e.id);
    if (it == path_of_.end()) continue;  // never shown: nothing cached to drop
    DropLocked(it->second);
    ++counters_.invalidated;
  }
  return changed;
}

void FsView::StartFollowing(EventsCallback on_events) {
  follower_ = std::thread([this, on_events = std::move(on_events)] {
    while (!stop_) {
      absl::StatusOr<std::vector<catalog::InodeId>> changed = PollEvents(options_.event_wait);
      if (on_events && (!changed.ok() || !changed->empty())) on_events(changed);
      if (!changed.ok()) {
        // The whole cache was dropped; wait a little before asking again (catalog down?).
        for (int i = 0; i < 10 && !stop_; ++i) {
          std::this_thread::sleep_for(options_.event_wait / 10);
        }
      }
    }
  });
}

void FsView::InvalidateAll() {
  absl::MutexLock lock(&mu_);
  entries_.clear();
  listings_.clear();
  ++epoch_;
}

FsView::Counters FsView::counters() const {
  absl::MutexLock lock(&mu_);
  return counters_;
}

FsNodes::FsNodes(FsView& view) : view_(view) {
  Record root;
  root.lookups = 1;  // the kernel holds the root while mounted
  root.path = std::string(1, '/');
  root.attributes.type = catalog::FileType::kDirectory;  // its inode: from its first GetAttr
  nodes_.emplace(kRootId, std::move(root));
}

FsNodes::Version FsNodes::VersionOf(const catalog::Attributes& a) {
  return {a.inode, a.type == catalog::FileType::kDirectory ? 0 : a.generation};
}

absl::StatusOr<std::string> FsNodes::ChildPathLocked(NodeId parent, std::string_view name) const {
  auto it = nodes_.find(parent);
  if (it == nodes_.end()) return absl::NotFoundError(fmt::format("node {} is not held", parent));
  if (it->second.attributes.type != catalog::FileType::kDirectory) {
    return absl::FailedPreconditionError(fmt::format("{}: not a directory", it->second.path));
  }
  return ChildPath(it->second.path, std::string(name));
}

FsNodes::Node FsNodes::RefLocked(NodeId parent, std::string_view name, std::string path,
                                 const catalog::Attributes& a) {
  auto [it, inserted] = by_version_.try_emplace(VersionOf(a), next_id_);
  if (inserted) ++next_id_;
  Record& r = nodes_[it->second];
  ++r.lookups;
  // Where it was found last: a renamed directory keeps its node, and its children's paths
  // follow. A file node's attributes are those of its generation (the same size every time).
  r.parent = parent;
  r.name = std::string(name);
  r.path = std::move(path);
  r.attributes = a;
  return Node{it->second, a};
}

absl::StatusOr<FsNodes::Node> FsNodes::Lookup(NodeId parent, std::string_view name) {
  absl::StatusOr<std::string> path;
  {
    absl::MutexLock lock(&mu_);
    path = ChildPathLocked(parent, name);
  }
  if (!path.ok()) return path.status();
  absl::StatusOr<catalog::Attributes> a = view_.GetAttr(*path);
  if (!a.ok()) return a.status();
  absl::MutexLock lock(&mu_);
  return RefLocked(parent, name, std::move(*path), *a);
}

absl::StatusOr<FsNodes::Node> FsNodes::LookupEntry(NodeId parent, const catalog::DirEntry& entry) {
  absl::MutexLock lock(&mu_);
  absl::StatusOr<std::string> path = ChildPathLocked(parent, entry.name);
  if (!path.ok()) return path.status();
  return RefLocked(parent, entry.name, std::move(*path), entry.attributes);
}

void FsNodes::Forget(NodeId id, std::uint64_t n) {
  if (id == kRootId) return;
  absl::MutexLock lock(&mu_);
  auto it = nodes_.find(id);
  if (it == nodes_.end()) return;
  if (it->second.lookups > n) {
    it->second.lookups -= n;
    return;
  }
  auto v = by_version_.find(VersionOf(it->second.attributes));
  if (v != by_version_.end() && v->second == id) by_version_.erase(v);
  nodes_.erase(it);
}

absl::StatusOr<catalog::Attributes> FsNodes::GetAttr(NodeId id) {
  std::string path;
  catalog::Attributes known;
  {
    absl::MutexLock lock(&mu_);
    auto it = nodes_.find(id);
    if (it == nodes_.end()) return absl::NotFoundError(fmt::format("node {} is not held", id));
    path = it->second.path;
    known = it->second.attributes;
  }
  absl::StatusOr<catalog::Attributes> now = view_.GetAttr(path);
  const bool directory = known.type == catalog::FileType::kDirectory;
  // The root's inode is learnt from its first answer.
  const bool same = now.ok() && (id == kRootId && known.inode == 0
                                     ? now->type == catalog::FileType::kDirectory
                                     : now->inode == known.inode &&
                                           (directory || now->generation == known.generation));
  if (!same) {
    if (id == kRootId && known.inode == 0) {
      return now.ok() ? absl::InternalError("the root is not a directory") : now.status();
    }
    return known;  // the path holds another version now: this node's stays as it was
  }
  absl::MutexLock lock(&mu_);
  if (auto it = nodes_.find(id); it != nodes_.end()) it->second.attributes = *now;
  return *now;
}

absl::StatusOr<std::vector<catalog::DirEntry>> FsNodes::ReadDir(NodeId id) {
  std::string path;
  {
    absl::MutexLock lock(&mu_);
    auto it = nodes_.find(id);
    if (it == nodes_.end()) return absl::NotFoundError(fmt::format("node {} is not held", id));
    if (it->second.attributes.type != catalog::FileType::kDirectory) {
      return absl::FailedPreconditionError(fmt::format("{}: not a directory", it->second.path));
    }
    path = it->second.path;
  }
  return view_.ReadDir(path);
}

absl::StatusOr<FsNodes::Opened> FsNodes::Open(NodeId id) {
  Opened opened;
  FileVersion version;
  std::uint64_t distrust = 0;
  {
    absl::MutexLock lock(&mu_);
    auto it = nodes_.find(id);
    if (it == nodes_.end()) return absl::NotFoundError(fmt::format("node {} is not held", id));
    const Record& r = it->second;
    if (r.attributes.type == catalog::FileType::kDirectory) {
      return absl::FailedPreconditionError(fmt::format("{}: is a directory", r.path));
    }
    opened.path = r.path;
    version = {r.attributes.inode, r.attributes.generation};
    distrust = r.distrust;
    opened.keep_cache = r.distrust == r.distrust_dropped;
  }
  absl::StatusOr<std::unique_ptr<OpenFile>> file = view_.Open(opened.path, version);
  if (!file.ok()) return file.status();  // no pages dropped: the next open still must
  opened.file = std::move(*file);
  absl::MutexLock lock(&mu_);
  if (auto it = nodes_.find(id); it != nodes_.end()) {
    Record& r = it->second;
    // An event during the open (a replica found bad after this open chose its reader, say):
    // this open drops the pages too, and so does the next one (this handle's reads may put
    // them back).
    if (r.distrust != distrust) opened.keep_cache = false;
    if (!opened.keep_cache) r.distrust_dropped = std::max(r.distrust_dropped, distrust);
  }
  return opened;
}

void FsNodes::ReadFailed(NodeId id) {
  absl::MutexLock lock(&mu_);
  if (auto it = nodes_.find(id); it != nodes_.end()) ++it->second.distrust;
}

std::vector<FsNodes::KernelName> FsNodes::Changed(catalog::InodeId inode) {
  std::vector<KernelName> names;
  absl::MutexLock lock(&mu_);
  for (auto v = by_version_.lower_bound({inode, 0});
       v != by_version_.end() && v->first.first == inode; ++v) {
    Record& r = nodes_.at(v->second);
    ++r.distrust;
    KernelName name{r.parent, r.name};
    if (r.parent != 0 && std::find(names.begin(), names.end(), name) == names.end()) {
      names.push_back(std::move(name));
    }
  }
  return names;
}

void FsNodes::ChangedAll() {
  absl::MutexLock lock(&mu_);
  for (auto& [id, r] : nodes_) ++r.distrust;
}

std::size_t FsNodes::size() const {
  absl::MutexLock lock(&mu_);
  return nodes_.size();
}

}  // namespace gfrep::replica::client
