#include "replica/agent/internal/spool_keeper.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <map>
#include <optional>
#include <utility>
#include <vector>

#include "replica/core/spool.h"
#include "transfer/durable_file.h"
#include "transfer/spool_names.h"

namespace gfrep::replica::agent::internal {
namespace {

namespace fs = std::filesystem;

constexpr std::size_t kKeeperPage = 1000;
constexpr std::string_view kLayoutFile = ".gfrep-layout";
constexpr std::string_view kLegacyIndexDir = ".gfrep-index";

std::optional<std::uint64_t> ParseDecimal(const std::string& text) {
  if (text.empty() || text.size() > 19 || (text.size() > 1 && text[0] == '0')) return std::nullopt;
  std::uint64_t v = 0;
  for (char c : text) {
    if (c < '0' || c > '9') return std::nullopt;
    v = v * 10 + static_cast<std::uint64_t>(c - '0');
  }
  return v;
}

fs::path DataDir(const fs::path& spool) { return spool / transfer::kReplicaDirName; }

// Generation -> file, for the files of one inode directory (others are ignored).
std::map<std::uint64_t, fs::path> Generations(const fs::path& inode_dir) {
  std::map<std::uint64_t, fs::path> out;
  std::error_code ec;
  for (const fs::directory_entry& e : fs::directory_iterator(inode_dir, ec)) {
    if (std::optional<std::uint64_t> g = ParseDecimal(e.path().filename().string())) {
      out.emplace(*g, e.path());
    }
  }
  return out;
}

// Time since the file was last written or renamed (the later of mtime and ctime).
std::chrono::nanoseconds Age(const fs::path& file) {
  struct stat st {};
  if (::lstat(file.c_str(), &st) != 0) return std::chrono::nanoseconds(0);
  auto ns = [](const struct timespec& t) {
    return std::chrono::seconds(t.tv_sec) + std::chrono::nanoseconds(t.tv_nsec);
  };
  auto changed = std::max(ns(st.st_mtim), ns(st.st_ctim));
  struct timespec now {};
  ::clock_gettime(CLOCK_REALTIME, &now);
  return ns(now) - changed;
}

}  // namespace

SpoolKeeper::SpoolKeeper(SpoolKeeperOptions options) : options_(std::move(options)) {}

absl::StatusOr<std::uint64_t> SpoolKeeper::SweepDeleting() {
  const catalog::Roles& cat = options_.catalog;
  std::uint64_t deleted = 0;
  catalog::InodeId after = 0;
  while (!Stopping()) {
    absl::StatusOr<std::vector<catalog::Replica>> page =
        cat.view->ListNodeReplicas(options_.node, after, kKeeperPage);
    if (!page.ok()) return page.status();
    for (const catalog::Replica& r : *page) {
      if (Stopping()) return deleted;
      after = r.inode;
      if (r.state != catalog::ReplicaState::kDeleting) continue;
      fs::path dir = DataDir(options_.spool) / std::to_string(r.inode);
      bool unlinked = true;
      for (const auto& [gen, file] : Generations(dir)) {
        if (gen > r.generation) continue;  // a newer replica of the same inode, not ours
        std::error_code ec;
        if (!fs::remove(file, ec) && ec) {
          options_.logger->warn("inode={} unlink {}: {}", r.inode, file.string(), ec.message());
          unlinked = false;
        }
      }
      if (!unlinked) continue;  // retried on the next pass
      std::error_code ec;
      fs::remove(dir, ec);  // ignored: only succeeds when empty
      absl::Status s = cat.replicas->RemoveReplica(r.inode, options_.node);
      if (!s.ok() && !absl::IsNotFound(s)) return s;
      options_.logger->info("inode={} generation={} replica deleted", r.inode, r.generation);
      ++deleted;
    }
    if (page->size() < kKeeperPage) break;
  }
  return deleted;
}

absl::StatusOr<std::uint64_t> SpoolKeeper::CollectGarbage() {
  std::uint64_t removed = 0;
  absl::Status s = ScanGarbage([&](const DarkFile& f) {
    if (!f.due) return;
    std::error_code rm;
    if (fs::remove(f.file, rm)) {
      ++removed;
      options_.logger->info("removed {} ({})", f.file.string(), f.why);
      fs::remove(f.file.parent_path(), rm);  // ignored: only succeeds when empty
    } else if (rm) {
      options_.logger->warn("remove {}: {}", f.file.string(), rm.message());
    }
  });
  if (!s.ok()) return s;
  return removed;
}

absl::StatusOr<std::vector<SpoolKeeper::DarkFile>> SpoolKeeper::FindGarbage() {
  std::vector<DarkFile> out;
  absl::Status s = ScanGarbage([&](const DarkFile& f) { out.push_back(f); });
  if (!s.ok()) return s;
  return out;
}

absl::Status SpoolKeeper::ScanGarbage(const std::function<void(const DarkFile&)>& found) {
  const catalog::Roles& cat = options_.catalog;
  std::vector<catalog::InodeId> inodes;
  std::error_code ec;
  for (const fs::directory_entry& e : fs::directory_iterator(DataDir(options_.spool), ec)) {
    if (std::optional<std::uint64_t> i = ParseDecimal(e.path().filename().string())) {
      inodes.push_back(*i);
    }
  }
  std::sort(inodes.begin(), inodes.end());
  // Merge the sorted inode directories with the node's records (also in inode order).
  std::size_t next = 0;
  catalog::InodeId after = 0;
  bool more = true;
  std::vector<catalog::Replica> page;
  std::size_t pos = 0;
  while (next < inodes.size() && !Stopping()) {
    catalog::InodeId inode = inodes[next++];
    while (more && (pos == page.size() || page.back().inode < inode)) {
      absl::StatusOr<std::vector<catalog::Replica>> p =
          cat.view->ListNodeReplicas(options_.node, after, kKeeperPage);
      if (!p.ok()) return p.status();
      page = std::move(*p);
      pos = 0;
      more = page.size() == kKeeperPage;
      if (!page.empty()) after = page.back().inode;
      if (page.empty()) break;
    }
    while (pos < page.size() && page[pos].inode < inode) ++pos;
    const catalog::Replica* record =
        pos < page.size() && page[pos].inode == inode ? &page[pos] : nullptr;
    if (record != nullptr && record->state == catalog::ReplicaState::kDeleting) {
      continue;  // SweepDeleting's job
    }
    fs::path dir = DataDir(options_.spool) / std::to_string(inode);
    std::map<std::uint64_t, fs::path> gens = Generations(dir);
    bool inode_gone = false;
    if (record == nullptr) {
      absl::StatusOr<catalog::Attributes> a = cat.view->StatInode(inode);
      if (!a.ok() && !absl::IsNotFound(a.status())) return a.status();
      inode_gone = !a.ok();
    }
    for (const auto& [gen, file] : gens) {
      if (inode_gone) {
        found({file, "its file was removed", true});
      } else if (record != nullptr && gen == record->generation) {
        continue;
      } else if (record != nullptr && gen < record->generation) {
        found({file, fmt::format("superseded by generation {}", record->generation), true});
      } else {
        found({file, "no replica record", Age(file) > options_.orphan_grace});
      }
    }
    if (gens.empty()) {
      std::error_code rm;
      fs::remove(dir, rm);  // ignored: only succeeds when empty
    }
  }
  return absl::OkStatus();
}

absl::Status SpoolKeeper::MigrateLegacyLayout() {
  const fs::path& spool = options_.spool;
  std::error_code ec;
  if (fs::exists(spool / kLayoutFile, ec)) return absl::OkStatus();
  bool legacy = false;
  for (const fs::directory_entry& e : fs::directory_iterator(spool, ec)) {
    legacy = legacy || e.path().filename().string().rfind(".gfrep-", 0) != 0;
  }
  if (legacy || fs::exists(spool / kLegacyIndexDir, ec)) {
    const catalog::Roles& cat = options_.catalog;
    std::uint64_t moved = 0, corrupt = 0, unlinked = 0;
    catalog::InodeId after = 0;
    while (true) {
      if (Stopping()) return absl::CancelledError("stopped during the spool migration");
      absl::StatusOr<std::vector<catalog::Replica>> page =
          cat.view->ListNodeReplicas(options_.node, after, kKeeperPage);
      if (!page.ok()) return page.status();
      for (const catalog::Replica& r : *page) {
        after = r.inode;
        if (r.state == catalog::ReplicaState::kDeleting) {
          // The old layout's index is the only way to the bytes of a removed file.
          std::string rel;
          std::ifstream in(spool / kLegacyIndexDir / std::to_string(r.inode), std::ios::binary);
          if (in) std::getline(in, rel, '\0');
          absl::StatusOr<std::string> ok_rel = LegacySpoolRelativePath("/" + rel);
          if (!rel.empty() && ok_rel.ok() && fs::remove(spool / *ok_rel, ec)) ++unlinked;
          continue;
        }
        if (r.state != catalog::ReplicaState::kComplete &&
            r.state != catalog::ReplicaState::kStale) {
          continue;
        }
        absl::StatusOr<std::string> path = cat.view->PathOf(r.inode);
        if (!path.ok()) continue;
        absl::StatusOr<std::string> rel = LegacySpoolRelativePath(*path);
        if (!rel.ok()) continue;
        fs::path old_file = spool / *rel;
        if (!fs::is_regular_file(fs::symlink_status(old_file, ec))) continue;
        fs::path target = ReplicaFile(spool, r.inode, r.generation);
        if (r.state == catalog::ReplicaState::kComplete) {
          absl::StatusOr<catalog::Attributes> attrs = cat.view->StatInode(r.inode);
          if (!attrs.ok()) continue;
          if (attrs->generation == r.generation) {
            if (absl::Status v = VerifyFile(old_file, *attrs); !v.ok()) {
              options_.logger->warn("migration: {} does not match the catalog ({}); replica marked corrupt",
                                    old_file.string(), std::string(v.message()));
              catalog::Replica bad = r;
              bad.state = catalog::ReplicaState::kCorrupt;
              if (absl::Status s = cat.replicas->PutReplica(bad); !s.ok()) return s;
              ++corrupt;
              continue;
            }
          }
        }
        fs::create_directories(target.parent_path(), ec);
        if (absl::Status s = transfer::RenameNoReplace(old_file, target); !s.ok()) {
          options_.logger->warn("migration: {}", s.ToString());
          continue;
        }
        if (absl::Status s = transfer::SyncDirectoryChain(spool, target.parent_path()); !s.ok())
          return s;
        ++moved;
      }
      if (page->size() < kKeeperPage) break;
    }
    std::uint64_t left = 0;
    for (auto it = fs::recursive_directory_iterator(spool, ec);
         it != fs::recursive_directory_iterator(); it.increment(ec)) {
      if (it.depth() == 0 && it->path().filename().string().rfind(".gfrep-", 0) == 0) {
        it.disable_recursion_pending();
        continue;
      }
      if (it->is_regular_file(ec)) ++left;
    }
    options_.logger->info(
        "spool migrated to the identity layout: {} replicas moved, {} marked corrupt, {} "
        "deleted; {} files of the old layout left in place (no replica record)",
        moved, corrupt, unlinked, left);
    fs::remove_all(spool / kLegacyIndexDir, ec);
  }
  return transfer::WriteFileDurably(spool / kLayoutFile, "2\n");
}

}  // namespace gfrep::replica::agent::internal
