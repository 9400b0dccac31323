#include "catalog/internal/rocks_store.h"

#include <rocksdb/cache.h>
#include <rocksdb/db.h>
#include <rocksdb/env.h>
#include <rocksdb/filter_policy.h>
#include <rocksdb/listener.h>
#include <rocksdb/options.h>
#include <rocksdb/table.h>
#include <rocksdb/write_batch.h>

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <set>

#include "absl/synchronization/mutex.h"
#include "catalog/internal/codec.h"
#include "catalog/internal/rocks_status.h"

namespace gfrep::catalog::internal {
namespace {

std::string_view View(const rocksdb::Slice& s) { return {s.data(), s.size()}; }

rocksdb::Slice Sl(std::string_view s) { return {s.data(), s.size()}; }

#if defined(__SANITIZE_THREAD__)
extern "C" void AnnotateIgnoreReadsBegin(const char* file, int line);
extern "C" void AnnotateIgnoreReadsEnd(const char* file, int line);
#endif

// In a ThreadSanitizer build, this thread's memory accesses are not checked while one lives
// (TSan's ignore region covers reads and writes, interceptors included); elsewhere nothing.
// Debian's librocksdb is not instrumented: TSan sees the memcpys it makes on our behalf but
// not the atomics and futexes that order them, so its hand-offs between threads look like
// races: a write group's leader appending a follower's WriteBatch (KvCatalog::Write from
// SendHeartbeat against one from Mkdir, replica_agent_tests), a reader of a memtable entry
// against its writer (ReadEvents against CommitFile). Our code's own accesses stay checked:
// a region covers only RocksDB's work on data already handed to it.
class UncheckedByTsan {
 public:
#if defined(__SANITIZE_THREAD__)
  UncheckedByTsan() { AnnotateIgnoreReadsBegin(__FILE__, __LINE__); }
  ~UncheckedByTsan() { AnnotateIgnoreReadsEnd(__FILE__, __LINE__); }
#else
  UncheckedByTsan() {}  // user-provided: a scope variable is not "unused"
#endif
  UncheckedByTsan(const UncheckedByTsan&) = delete;
  UncheckedByTsan& operator=(const UncheckedByTsan&) = delete;
};

// Calls fn with the iterator's entry. A TSan build copies the entry unchecked (above) and fn
// reads the copies; other builds pass views.
bool Visit(const rocksdb::Iterator& it, const KvScanFn& fn) {
#if defined(__SANITIZE_THREAD__)
  std::string key;
  std::string value;
  {
    UncheckedByTsan unchecked;
    key.assign(it.key().data(), it.key().size());
    value.assign(it.value().data(), it.value().size());
  }
  return fn(key, value);
#else
  return fn(View(it.key()), View(it.value()));
#endif
}

// RocksDB's info log, on stderr (warnings and errors only), never a LOG file in the database
// directory: on a full file system that file's writer fails first, and Debian's librocksdb
// (built with assertions) aborts the process at the next line written to it
// (WritableFileWriter::AssertFalseAndGetStatusForPrevError) before any caller has seen an
// error.
class StderrInfoLog final : public rocksdb::Logger {
 public:
  StderrInfoLog() : rocksdb::Logger(rocksdb::InfoLogLevel::WARN_LEVEL) {}
  using rocksdb::Logger::Logv;
  void Logv(const char* format, va_list ap) override {
    char line[2048];
    std::vsnprintf(line, sizeof(line), format, ap);
    std::fprintf(stderr, "rocksdb: %s\n", line);
  }
};

// The database's background-error state, from RocksDB's own events. A failed write (a full
// disk: ENOSPC while appending to the WAL) puts RocksDB in a background error; it then
// refuses writes itself and, for a full disk, recovers by itself (its SstFileManager polls
// the free space and resumes the database once a memtable's worth is free). While the error
// stands, Write refuses at once (kResourceExhausted for a full disk) and makes no write
// call at all; a Write at most once a second also asks for a Resume(), for errors RocksDB
// does not recover from by itself once their cause is gone.
class ErrorState final : public rocksdb::EventListener {
 public:
  void OnBackgroundError(rocksdb::BackgroundErrorReason, rocksdb::Status* bg_error) override {
    absl::MutexLock l(&mu_);
    error_ = *bg_error;
    failed_ = true;
  }
  void OnErrorRecoveryEnd(const rocksdb::BackgroundErrorRecoveryInfo& info) override {
    if (!info.new_bg_error.ok()) return;
    absl::MutexLock l(&mu_);
    failed_ = false;
    error_ = rocksdb::Status::OK();
  }

  // The standing error (OK if none).
  rocksdb::Status error() const {
    if (!failed_.load()) return rocksdb::Status::OK();
    absl::MutexLock l(&mu_);
    return error_;
  }
  void Cleared() {
    absl::MutexLock l(&mu_);
    failed_ = false;
    error_ = rocksdb::Status::OK();
  }
  // True at most once a second: time to ask RocksDB to resume.
  bool ResumeDue() {
    const std::int64_t now = std::chrono::duration_cast<std::chrono::milliseconds>(
                                 std::chrono::steady_clock::now().time_since_epoch())
                                 .count();
    std::int64_t last = last_resume_ms_.load();
    return now - last >= 1000 && last_resume_ms_.compare_exchange_strong(last, now);
  }

 private:
  mutable absl::Mutex mu_;
  std::atomic<bool> failed_{false};  // a fast path for error(): set with error_
  rocksdb::Status error_ ABSL_GUARDED_BY(mu_);
  std::atomic<std::int64_t> last_resume_ms_{0};
};

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
  RocksStore(std::string path, rocksdb::DB* db, std::vector<rocksdb::ColumnFamilyHandle*> cfs,
             std::shared_ptr<ErrorState> errors)
      : path_(std::move(path)), db_(db), cfs_(std::move(cfs)), errors_(std::move(errors)) {}

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
        if (!Visit(*it, fn)) break;
      }
    } else {
      for (it->Seek(Sl(start.empty() ? prefix : start)); it->Valid(); it->Next()) {
        if (!Visit(*it, fn)) break;
      }
    }
    return FromRocks(it->status(), "scan");
  }

  absl::Status Write(const KvBatch& batch, bool sync, std::string_view what) override {
    if (batch.Count() == 0) return absl::OkStatus();
    if (absl::Status s = Writable(what); !s.ok()) return s;
    rocksdb::WriteBatch wb;
    for (const KvBatch::Op& op : batch.ops()) {
      rocksdb::Status s = op.put     ? wb.Put(cfs_[op.table], Sl(op.key), Sl(op.value))
                          : op.range ? wb.DeleteRange(cfs_[op.table], Sl(op.key), Sl(op.value))
                                     : wb.Delete(cfs_[op.table], Sl(op.key));
      if (!s.ok()) return FromRocks(s, what);
    }
    rocksdb::WriteOptions wo;
    wo.sync = sync;
    rocksdb::Status written;
    {
      UncheckedByTsan unchecked;  // the write group's hand-offs (UncheckedByTsan)
      written = db_->Write(wo, &wb);
    }
    return FromRocks(written, what);
  }

  std::unique_ptr<KvSnapshot> Snapshot() override { return std::make_unique<RocksSnapshot>(db_); }

  // OK when writes may be tried: no background error stands (or a Resume just cleared it).
  absl::Status Writable(std::string_view what) {
    rocksdb::Status bg = errors_->error();
    if (bg.ok()) return absl::OkStatus();
    if (errors_->ResumeDue() && HasRoom()) {
      rocksdb::Status resumed = db_->Resume();
      if (resumed.ok()) {
        errors_->Cleared();
        return absl::OkStatus();
      }
      // kBusy: RocksDB's own recovery is under way.
    }
    absl::Status s = FromRocks(bg, fmt::format("{}: the catalog database refuses writes until "
                                               "its error clears", what));
    if (bg.IsNoSpace()) {
      return absl::ResourceExhaustedError(fmt::format(
          "{}: the catalog database's file system is full ({}); writes resume by themselves "
          "once space is freed",
          what, bg.ToString()));
    }
    return s;
  }

  // Free space for a memtable's flush (what RocksDB's own recovery waits for).
  bool HasRoom() const {
    struct statvfs st {};
    if (::statvfs(path_.c_str(), &st) != 0) return true;  // unknown: let Resume decide
    return static_cast<std::uint64_t>(st.f_bavail) * st.f_frsize >= kRoomForResume;
  }

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
    // Memory that grows until its bound (the soak judges the daemon's RSS without it): index
    // and filter blocks of open tables, summed over the column families, and the block
    // cache, which they all share (counted once).
    std::uint64_t v = 0;
    if (db_->GetAggregatedIntProperty("rocksdb.estimate-table-readers-mem", &v)) {
      out["table_readers_bytes"] = v;
    }
    if (db_->GetIntProperty(rocksdb::DB::Properties::kBlockCacheUsage, &v)) {
      out["block_cache_bytes"] = v;
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

  // A memtable (write_buffer_size, 64 MiB by default) must fit for a resume to flush it.
  static constexpr std::uint64_t kRoomForResume = 64u << 20;

  const std::string path_;
  rocksdb::DB* const db_;
  const std::vector<rocksdb::ColumnFamilyHandle*> cfs_;
  const std::shared_ptr<ErrorState> errors_;
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
  db_options.info_log = std::make_shared<StderrInfoLog>();
  auto errors = std::make_shared<ErrorState>();
  db_options.listeners.push_back(errors);
  rocksdb::BlockBasedTableOptions table;
  table.block_cache = rocksdb::NewLRUCache(options.block_cache_bytes);
  table.filter_policy.reset(rocksdb::NewBloomFilterPolicy(10));
  rocksdb::ColumnFamilyOptions cf_options(db_options);
  cf_options.table_factory.reset(rocksdb::NewBlockBasedTableFactory(table));
  // Memtables take memory in blocks of this size (RocksDB's default is 1 MiB, or an eighth of
  // the write buffer): each of the 15 tables holds one from its first write, counted in the
  // memtable's bytes at once but resident only as it fills, so the figure ran up to 15 MiB
  // ahead of the memory it stood for (and of what the soak subtracts from the RSS); with
  // 256 KiB, at most 3.75 MiB.
  cf_options.arena_block_size = kMemtableBlockBytes;
  std::vector<rocksdb::ColumnFamilyDescriptor> descriptors;
  for (const char* name : kTableNames) descriptors.emplace_back(name, cf_options);
  rocksdb::DB* db = nullptr;
  std::vector<rocksdb::ColumnFamilyHandle*> handles;
  rocksdb::Status s = rocksdb::DB::Open(rocksdb::DBOptions(db_options), options.path,
                                        descriptors, &handles, &db);
  if (!s.ok()) return FromRocks(s, fmt::format("open catalog {}", options.path));
  return std::unique_ptr<KvStore>(
      std::make_unique<RocksStore>(options.path, db, std::move(handles), std::move(errors)));
}

}  // namespace gfrep::catalog::internal
