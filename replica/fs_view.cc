#include "replica/fs_view.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace gfrep::replica {
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
        return absl::InternalError(fmt::format("pread: {}", std::strerror(errno)));
      }
      if (got == 0) break;
      done += static_cast<std::size_t>(got);
    }
    return done;
  }
  std::lock_guard<std::mutex> lock(mu_);
  while (done < n) {
    absl::StatusOr<std::size_t> got = reader_->ReadAt(offset + done, out + done, n - done);
    if (!got.ok()) {
      // E.g. a streamed file that failed its whole-file check at the end: what it read before
      // may be in the kernel's page cache, so the next open must not keep it.
      if (view_ != nullptr) view_->ForgetGeneration(inode_);
      return got.status();
    }
    if (*got == 0) break;
    done += *got;
  }
  return done;
}

FsView::FsView(catalog::Catalog& catalog, FsViewOptions options)
    : catalog_(catalog), options_(std::move(options)) {}

absl::StatusOr<std::unique_ptr<FsView>> FsView::Create(catalog::Catalog& catalog,
                                                       FsViewOptions options) {
  if (options.ttl.count() <= 0) return absl::InvalidArgumentError("fs view: ttl must be > 0");
  if (options.list_page == 0) return absl::InvalidArgumentError("fs view: list_page must be > 0");
  std::unique_ptr<FsView> view(new FsView(catalog, std::move(options)));
  absl::StatusOr<std::uint64_t> seq = catalog.LastEventSeq();
  if (!seq.ok()) return seq.status();
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
    std::lock_guard<std::mutex> lock(mu_);
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
  absl::StatusOr<catalog::Attributes> a = catalog_.Stat(*path);
  if (!a.ok() && !absl::IsNotFound(a.status())) return a.status();
  std::lock_guard<std::mutex> lock(mu_);
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
    std::lock_guard<std::mutex> lock(mu_);
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
      std::lock_guard<std::mutex> lock(mu_);
      ++counters_.list_calls;
    }
    absl::StatusOr<std::vector<catalog::DirEntry>> page = catalog_.List(*path, list);
    if (!page.ok()) return page.status();
    const std::size_t got = page->size();
    for (catalog::DirEntry& e : *page) children.push_back(std::move(e));
    if (got < list.limit) break;
    list.start_after = children.back().name;
  }
  std::lock_guard<std::mutex> lock(mu_);
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

absl::StatusOr<std::unique_ptr<OpenFile>> FsView::Open(std::string_view raw_path) {
  absl::StatusOr<std::string> path = Normalize(raw_path);
  if (!path.ok()) return path.status();
  std::uint64_t epoch = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    ++counters_.open_calls;
    epoch = epoch_;
  }
  std::unique_ptr<OpenFile> file(new OpenFile());
  absl::StatusOr<std::unique_ptr<FileReader>> reader =
      replica::Open(catalog_, *path, options_.reader);
  if (reader.ok()) {
    file->size_ = (*reader)->size();
    file->generation_ = (*reader)->generation();
    if ((*reader)->local()) file->local_fd_ = (*reader)->fd();
    file->reader_ = std::move(*reader);
  } else {
    // Tell "no such file" and "a file without content" (readable: empty) from "no readable
    // replica" and "a directory" with the entry itself.
    absl::StatusOr<catalog::Attributes> a = catalog_.Stat(*path);
    {
      std::lock_guard<std::mutex> lock(mu_);
      ++counters_.stat_calls;
      DropLocked(*path);
    }
    if (!a.ok()) return a.status();
    if (a->type == catalog::FileType::kDirectory) {
      return absl::FailedPreconditionError(fmt::format("{}: is a directory", *path));
    }
    if (a->generation != 0) {
      if (absl::IsNotFound(reader.status())) {
        return absl::UnavailableError(fmt::format("{}: no readable replica of generation {}: {}",
                                                  *path, a->generation,
                                                  std::string(reader.status().message())));
      }
      return reader.status();
    }
    file->size_ = 0;
    file->generation_ = 0;
  }
  catalog::InodeId inode = 0;
  bool candidate = false;  // the last open of this inode served this generation
  {
    std::lock_guard<std::mutex> lock(mu_);
    bool missing = false;
    // The inode comes from the cache (a file is looked up before it is opened); without it,
    // keep-cache is simply not offered.
    if (const catalog::Attributes* a = CachedLocked(*path, false, &missing)) {
      inode = a->inode;
      if (a->generation != file->generation_ || a->size != file->size_) {
        file->attributes_changed_ = true;
        // Asked again on the next GetAttr, which then reports the size just opened.
        DropLocked(*path);
      }
      auto it = last_open_generation_.find(inode);
      candidate = it != last_open_generation_.end() && it->second == file->generation_;
    }
  }
  if (inode == 0) {
    // Nothing tracked for an inode the view does not know: never share the kernel's pages.
    file->bypass_page_cache_ = file->generation_ != 0;
    return file;
  }
  if (candidate) {
    // The cached inode may be an older file under the same name (removed and made again, with
    // the same generation number): keep the kernel's pages only when the catalog confirms
    // that the path is still that inode at that generation.
    absl::StatusOr<catalog::Attributes> now = catalog_.Stat(*path);
    file->same_generation_ =
        now.ok() && now->inode == inode && now->generation == file->generation_;
    std::lock_guard<std::mutex> lock(mu_);
    ++counters_.stat_calls;
  }
  std::lock_guard<std::mutex> lock(mu_);
  // Another generation still open here reads into the inode's page cache, which every handle
  // shares: this handle reads around it (and keeps nothing) until the last such one closed.
  std::map<std::uint64_t, int>& open = open_generations_[inode];
  for (const auto& [generation, handles] : open) {
    if (generation != file->generation_ && handles > 0) file->bypass_page_cache_ = true;
  }
  if (file->bypass_page_cache_) file->same_generation_ = false;
  ++open[file->generation_];
  file->view_ = this;
  file->inode_ = inode;
  if (epoch_ != epoch) {
    // An event came while this open ran (a replica found bad, say): what it erased must stay
    // erased, and this open keeps no pages either.
    file->same_generation_ = false;
    last_open_generation_.erase(inode);
  } else {
    last_open_generation_[inode] = file->generation_;
  }
  return file;
}

OpenFile::~OpenFile() {
  if (view_ != nullptr) view_->Closed(inode_, generation_);
}

void FsView::Closed(catalog::InodeId inode, std::uint64_t generation) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = open_generations_.find(inode);
  if (it == open_generations_.end()) return;
  auto g = it->second.find(generation);
  if (g != it->second.end() && --g->second <= 0) {
    it->second.erase(g);
    auto last = last_open_generation_.find(inode);
    if (last != last_open_generation_.end() && last->second != generation) {
      // The last handle of an older generation closed: the page cache may hold its bytes,
      // so the next open must not keep it (without keep_cache the kernel drops it).
      last_open_generation_.erase(last);
    }
  }
  if (it->second.empty()) open_generations_.erase(it);
}

absl::StatusOr<std::vector<std::string>> FsView::PollEvents(std::chrono::milliseconds wait) {
  std::lock_guard<std::mutex> poll(poll_mu_);
  std::uint64_t after;
  {
    std::lock_guard<std::mutex> lock(mu_);
    after = event_seq_;
    ++counters_.event_polls;
  }
  absl::StatusOr<std::vector<catalog::Event>> events = catalog_.ReadEvents(after, 10000, wait);
  if (!events.ok()) {
    // Changes may have been missed: trust nothing cached, and start again from now.
    InvalidateAll();
    absl::StatusOr<std::uint64_t> seq = catalog_.LastEventSeq();
    std::lock_guard<std::mutex> lock(mu_);
    ++counters_.event_polls;
    if (seq.ok()) event_seq_ = *seq;
    return events.status();
  }
  std::vector<std::string> dropped;
  std::lock_guard<std::mutex> lock(mu_);
  for (const catalog::Event& e : *events) {
    event_seq_ = std::max(event_seq_, e.seq);
    if (e.kind != catalog::EventKind::kReplica) continue;
    ++epoch_;  // answers fetched before this event are not kept (GetAttr, ReadDir, Open)
    // Pages a kernel kept from the last open may come from a replica now found bad (or a
    // generation now replaced): the next open does not keep them.
    last_open_generation_.erase(e.id);
    auto it = path_of_.find(e.id);
    if (it == path_of_.end()) continue;  // never shown: nothing cached to drop
    DropLocked(it->second);
    ++counters_.invalidated;
    if (std::find(dropped.begin(), dropped.end(), it->second) == dropped.end()) {
      dropped.push_back(it->second);
    }
  }
  return dropped;
}

void FsView::StartFollowing(std::function<void(const std::string& path)> on_invalidate) {
  follower_ = std::thread([this, on_invalidate = std::move(on_invalidate)] {
    while (!stop_) {
      absl::StatusOr<std::vector<std::string>> dropped = PollEvents(options_.event_wait);
      if (!dropped.ok()) {
        // The whole cache was dropped; wait a little before asking again (catalog down?).
        for (int i = 0; i < 10 && !stop_; ++i) {
          std::this_thread::sleep_for(options_.event_wait / 10);
        }
        continue;
      }
      if (on_invalidate) {
        for (const std::string& p : *dropped) on_invalidate(p);
      }
    }
  });
}

void FsView::InvalidateAll() {
  std::lock_guard<std::mutex> lock(mu_);
  entries_.clear();
  listings_.clear();
  last_open_generation_.clear();  // events may have been missed: keep no kernel pages
  ++epoch_;
}

void FsView::ForgetGeneration(catalog::InodeId inode) {
  std::lock_guard<std::mutex> lock(mu_);
  last_open_generation_.erase(inode);
}

FsView::Counters FsView::counters() const {
  std::lock_guard<std::mutex> lock(mu_);
  return counters_;
}

}  // namespace gfrep::replica
