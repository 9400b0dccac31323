#include "catalog/internal/rocks_store.h"

#include <rocksdb/cache.h>
#include <rocksdb/db.h>
#include <rocksdb/filter_policy.h>
#include <rocksdb/options.h>
#include <rocksdb/table.h>
#include <rocksdb/write_batch.h>

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <set>

#include "catalog/internal/codec.h"
#include "catalog/internal/rocks_status.h"

namespace gfrep::catalog::internal {
namespace {

std::string_view View(const rocksdb::Slice& s) { return {s.data(), s.size()}; }

rocksdb::Slice Sl(std::string_view s) { return {s.data(), s.size()}; }

// Makes the catalog's directory (and missing parents) and fsyncs the directory holding each
// directory made, and the one holding the catalog's: RocksDB syncs its own directory but
// never its parent, so a power cut soon after a first start lost the whole catalog,
// acknowledged writes and all (tests/integration/powerloss_test.cc).
absl::Status MakeDurableDirectory(const std::filesystem::path& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::path dir = fs::absolute(path, ec).lexically_normal();
  if (ec) return absl::InternalError(fmt::format("catalog path {}: {}", path.string(), ec.message()));
  if (!dir.has_filename()) dir = dir.parent_path();  // "/a/db/" -> "/a/db"
  std::vector<fs::path> missing;
  for (fs::path p = dir; !fs::exists(p, ec) && p.has_relative_path(); p = p.parent_path()) {
    missing.push_back(p);
  }
  std::set<fs::path> to_sync = {dir.parent_path()};
  for (auto it = missing.rbegin(); it != missing.rend(); ++it) {
    if (::mkdir(it->c_str(), 0755) != 0 && errno != EEXIST) {
      return absl::InternalError(fmt::format("create {}: {}", it->string(), std::strerror(errno)));
    }
    to_sync.insert(it->parent_path());
  }
  for (const fs::path& d : to_sync) {
    const int fd = ::open(d.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return absl::InternalError(fmt::format("open {}: {}", d.string(), std::strerror(errno)));
    const int rc = ::fsync(fd);
    const int err = errno;
    ::close(fd);
    if (rc != 0) return absl::InternalError(fmt::format("fsync {}: {}", d.string(), std::strerror(err)));
  }
  return absl::OkStatus();
}

class RocksSnapshot final : public KvSnapshot {
 public:
  explicit RocksSnapshot(rocksdb::DB* db) : snapshot_(db) {}
  const rocksdb::Snapshot* get() const { return snapshot_.snapshot(); }

 private:
  mutable rocksdb::ManagedSnapshot snapshot_;  // snapshot() is not const
};

class RocksStore final : public KvStore {
 public:
  RocksStore(std::string path, rocksdb::DB* db, std::vector<rocksdb::ColumnFamilyHandle*> cfs)
      : path_(std::move(path)), db_(db), cfs_(std::move(cfs)) {}

  ~RocksStore() override {
    for (auto* h : cfs_) {
      (void)db_->DestroyColumnFamilyHandle(h);  // ignored: shutting down
    }
    (void)db_->Close();  // ignored: nothing left to do with an error here
    delete db_;
  }

  absl::StatusOr<std::string> Get(Table t, std::string_view key, std::string_view what,
                                  const KvSnapshot* snapshot) override {
    std::string value;
    rocksdb::Status s = db_->Get(ReadAt(snapshot), cfs_[t], Sl(key), &value);
    if (s.IsNotFound()) return absl::NotFoundError(fmt::format("{}: not found", what));
    if (!s.ok()) return FromRocks(s, what);
    return value;
  }

  absl::Status Scan(Table t, std::string_view prefix, std::string_view start, const KvScanFn& fn,
                    const KvSnapshot* snapshot, bool reverse) override {
    if (reverse && !start.empty()) {
      return absl::InvalidArgumentError("a reverse scan starts at the end of its prefix");
    }
    rocksdb::ReadOptions ro = ReadAt(snapshot);
    std::string upper = PrefixSuccessor(prefix);
    rocksdb::Slice upper_slice(upper);
    rocksdb::Slice lower_slice(Sl(prefix));
    if (!upper.empty()) ro.iterate_upper_bound = &upper_slice;
    if (!prefix.empty()) ro.iterate_lower_bound = &lower_slice;
    std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(ro, cfs_[t]));
    if (reverse) {
      for (it->SeekToLast(); it->Valid(); it->Prev()) {
        if (!fn(View(it->key()), View(it->value()))) break;
      }
    } else {
      for (it->Seek(Sl(start.empty() ? prefix : start)); it->Valid(); it->Next()) {
        if (!fn(View(it->key()), View(it->value()))) break;
      }
    }
    return FromRocks(it->status(), "scan");
  }

  absl::Status Write(const KvBatch& batch, bool sync, std::string_view what) override {
    if (batch.Count() == 0) return absl::OkStatus();
    rocksdb::WriteBatch wb;
    for (const KvBatch::Op& op : batch.ops()) {
      rocksdb::Status s = op.put     ? wb.Put(cfs_[op.table], Sl(op.key), Sl(op.value))
                          : op.range ? wb.DeleteRange(cfs_[op.table], Sl(op.key), Sl(op.value))
                                     : wb.Delete(cfs_[op.table], Sl(op.key));
      if (!s.ok()) return FromRocks(s, what);
    }
    rocksdb::WriteOptions wo;
    wo.sync = sync;
    return FromRocks(db_->Write(wo, &wb), what);
  }

  std::unique_ptr<KvSnapshot> Snapshot() override { return std::make_unique<RocksSnapshot>(db_); }

  absl::StatusOr<std::map<std::string, std::uint64_t>> Stats() override {
    // Summed over the column families (GetAggregatedIntProperty).
    static constexpr std::pair<const char*, const char*> kProperties[] = {
        {"estimated_keys", "rocksdb.estimate-num-keys"},
        {"sst_bytes", "rocksdb.total-sst-files-size"},
        {"live_sst_bytes", "rocksdb.live-sst-files-size"},
        {"memtable_bytes", "rocksdb.cur-size-all-mem-tables"},
        {"pending_compaction_bytes", "rocksdb.estimate-pending-compaction-bytes"},
        {"running_compactions", "rocksdb.num-running-compactions"},
        {"running_flushes", "rocksdb.num-running-flushes"},
    };
    std::map<std::string, std::uint64_t> out;
    for (const auto& [name, property] : kProperties) {
      std::uint64_t v = 0;
      if (db_->GetAggregatedIntProperty(property, &v)) out[name] = v;
    }
    return out;
  }

  absl::StatusOr<std::string> Property(std::string_view name) override {
    std::string value;
    if (!db_->GetProperty(Sl(name), &value)) {
      return absl::NotFoundError(fmt::format("no RocksDB property {}", name));
    }
    return value;
  }

  std::string Describe() const override { return "rocksdb " + path_; }

  // One process owns a RocksDB directory (RocksDB's LOCK file): nothing is shared.
  bool shared() const override { return false; }
  absl::StatusOr<std::unique_ptr<KvWriteLock>> LockWrites() override {
    return std::make_unique<KvWriteLock>();
  }
  std::unique_ptr<KvWatch> WatchWrites(std::function<void()>) override { return nullptr; }
  bool HoldLeadership() override { return true; }

 private:
  static rocksdb::ReadOptions ReadAt(const KvSnapshot* snapshot) {
    rocksdb::ReadOptions ro;
    if (snapshot != nullptr) ro.snapshot = static_cast<const RocksSnapshot*>(snapshot)->get();
    return ro;
  }

  const std::string path_;
  rocksdb::DB* const db_;
  const std::vector<rocksdb::ColumnFamilyHandle*> cfs_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<KvStore>> OpenRocksStore(const CatalogOptions& options) {
  if (options.path.empty()) return absl::InvalidArgumentError("catalog path is empty");
  if (absl::Status s = MakeDurableDirectory(options.path); !s.ok()) return s;
  rocksdb::Options db_options;
  db_options.create_if_missing = true;
  db_options.create_missing_column_families = true;
  db_options.IncreaseParallelism(2);
  db_options.max_open_files = 512;
  rocksdb::BlockBasedTableOptions table;
  table.block_cache = rocksdb::NewLRUCache(options.block_cache_bytes);
  table.filter_policy.reset(rocksdb::NewBloomFilterPolicy(10));
  rocksdb::ColumnFamilyOptions cf_options(db_options);
  cf_options.table_factory.reset(rocksdb::NewBlockBasedTableFactory(table));
  std::vector<rocksdb::ColumnFamilyDescriptor> descriptors;
  for (const char* name : kTableNames) descriptors.emplace_back(name, cf_options);
  rocksdb::DB* db = nullptr;
  std::vector<rocksdb::ColumnFamilyHandle*> handles;
  rocksdb::Status s = rocksdb::DB::Open(rocksdb::DBOptions(db_options), options.path,
                                        descriptors, &handles, &db);
  if (!s.ok()) return FromRocks(s, fmt::format("open catalog {}", options.path));
  return std::unique_ptr<KvStore>(std::make_unique<RocksStore>(options.path, db, std::move(handles)));
}

}  // namespace gfrep::catalog::internal
