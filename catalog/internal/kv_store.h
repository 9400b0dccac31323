#pragma once

// KvStore: the storage seam under the catalog. The catalog's rules (namespace, generations,
// replica and task state machines, the event log) live once, in KvCatalog
// (kv_catalog_impl.h), above this small interface; a backend only stores ordered keys:
//
//   rocks_store.{h,cc}  embedded RocksDB, one column family per table (the default)
//   pg_store.{h,cc}     PostgreSQL, one table (k bytea PRIMARY KEY, v bytea) per table
//
// Contract (both backends, checked by tests/catalog/internal/kv_store_test.cc):
//  - Keys and values are arbitrary bytes; keys of a table are ordered bytewise (memcmp),
//    so a prefix scan is an index range scan.
//  - Write(batch) applies every operation of the batch, in order, atomically: after a crash
//    either all of them are there or none. With sync, it returns OK only once the batch is
//    durable (WAL / commit record on disk). An error return applied nothing as far as the
//    caller can tell: the caller re-reads before deciding (see KvCatalog::WriteLocked).
//  - A read without a snapshot sees every batch whose Write returned before the read began.
//    A snapshot sees one point in time for all its reads. A Scan without one may see a
//    batch written during the scan in part (PostgreSQL reads pages apart; see pg_store.h).
//  - Concurrency control (who may read-modify-write what) is the caller's: KvCatalog holds
//    its locks across the reads and the Write. A store serves ONE catalog process at a time
//    (the PostgreSQL store refuses a second one: pg_store.h), unless it was opened shared
//    (PostgreSQL only: several gfcatalogd front ends on one database). A shared store
//    writes only under LockWrites, the federation-wide write lock, held by the caller
//    across its reads and its Write; a Write without it is refused (kInternal).
//
// Thread safety: every method may be called from any thread concurrently; a KvSnapshot is
// used by one thread at a time.

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace gfrep::catalog::internal {

// The catalog's tables (catalog/README.md "Tables and keys").
enum Table : int {
  kMeta = 0,  // inode id high-water mark, policies, id marks, revoked tokens
  kDentries,
  kInodes,
  kReplicas,
  kNodeReplicas,
  kSites,
  kNodes,
  kRoutes,
  kRequests,
  kTasks,
  kNodeTasks,
  kRequestTasks,
  kEvents,
  kRequestFiles,  // since PostgreSQL schema 3 (RocksDB: column families made on open)
  kRequestWanted,
  kNumTables
};

// Table names: RocksDB column families and PostgreSQL tables. kMeta is RocksDB's "default"
// column family (existing databases keep opening) and PostgreSQL's "meta".
inline constexpr const char* kTableNames[kNumTables] = {
    "default",    "dentries",      "inodes", "replicas",      "node_replicas",
    "sites",      "nodes",         "routes", "requests",      "tasks",
    "node_tasks", "request_tasks", "events", "request_files", "request_wanted"};

// An ordered list of puts and deletes, applied atomically by KvStore::Write.
class KvBatch {
 public:
  struct Op {
    Table table;
    bool put;  // false: delete `key` or, with `range`, every key in [key, value)
    std::string key;
    std::string value;
    bool range = false;
  };
  void Put(Table t, std::string_view key, std::string_view value) {
    ops_.push_back(Op{t, true, std::string(key), std::string(value)});
  }
  void Delete(Table t, std::string_view key) {
    ops_.push_back(Op{t, false, std::string(key), std::string()});
  }
  // Deletes every key k of the table with begin <= k < end.
  void DeleteRange(Table t, std::string_view begin, std::string_view end) {
    ops_.push_back(Op{t, false, std::string(begin), std::string(end), true});
  }
  std::size_t Count() const { return ops_.size(); }
  void Clear() { ops_.clear(); }
  const std::vector<Op>& ops() const { return ops_; }

 private:
  std::vector<Op> ops_;
};

// One point in time to read from (see KvStore::Snapshot).
class KvSnapshot {
 public:
  virtual ~KvSnapshot() = default;
};

// The federation-wide write lock of a shared store, held until destroyed (KvStore::LockWrites).
class KvWriteLock {
 public:
  virtual ~KvWriteLock() = default;
};

// A running watch for other processes' writes (KvStore::WatchWrites); stops when destroyed.
class KvWatch {
 public:
  virtual ~KvWatch() = default;
};

// fn(key, value) for each key in order; return false to stop. The views are valid only
// during the call. fn may call the store again (not through the same snapshot).
using KvScanFn = std::function<bool(std::string_view key, std::string_view value)>;

class KvStore {
 public:
  virtual ~KvStore() = default;

  // The value of `key`. kNotFound ("<what>: not found") when absent.
  virtual absl::StatusOr<std::string> Get(Table t, std::string_view key, std::string_view what,
                                          const KvSnapshot* snapshot = nullptr) = 0;

  // The values of `keys` of one table, in their order: each the value or kNotFound
  // ("<what>: not found"). Any other error fails the whole call. The default calls Get for
  // each key; PostgreSQL sends them all in one round trip (pipeline mode).
  virtual absl::StatusOr<std::vector<absl::StatusOr<std::string>>> MultiGet(
      Table t, const std::vector<std::string>& keys, std::string_view what,
      const KvSnapshot* snapshot = nullptr);

  // Keys that start with `prefix`, from `start` on (start >= prefix; empty: from the first
  // key with the prefix), ascending; or, with reverse, descending from the last key with the
  // prefix (`start` must be empty then).
  virtual absl::Status Scan(Table t, std::string_view prefix, std::string_view start,
                            const KvScanFn& fn, const KvSnapshot* snapshot = nullptr,
                            bool reverse = false) = 0;

  // Applies `batch` atomically; durable before it returns when `sync`. An empty batch is OK.
  virtual absl::Status Write(const KvBatch& batch, bool sync, std::string_view what) = 0;

  virtual std::unique_ptr<KvSnapshot> Snapshot() = 0;

  // Operator-facing figures (gfcatalogd's stats line, the /metrics page): names to numbers.
  virtual absl::StatusOr<std::map<std::string, std::uint64_t>> Stats() = 0;

  // A backend property for benchmarks (RocksDB: "rocksdb.stats"); kNotFound if unknown.
  virtual absl::StatusOr<std::string> Property(std::string_view name) = 0;

  // "rocksdb DIR" / "postgresql host=... dbname=..." (no password), for logs.
  virtual std::string Describe() const = 0;

  // True if other processes may write to this store meanwhile (a shared PostgreSQL store).
  // (This and the next three are pure so that a store wrapping another, e.g. in a test, must
  // pass them on.)
  virtual bool shared() const = 0;

  // Takes the write lock that serializes the writers of a shared store across processes;
  // this thread's Writes go through it until the returned lock is destroyed. Waits while
  // another process holds it. Re-entrant on one thread. kUnavailable if the database cannot
  // be reached. Not shared: a lock that holds nothing (the caller's own locks suffice).
  virtual absl::StatusOr<std::unique_ptr<KvWriteLock>> LockWrites() = 0;

  // Calls on_change, from a thread of the store, soon after another process wrote (and once
  // after each reconnection, as notices may have been missed then). Not shared: null (no
  // one else writes).
  virtual std::unique_ptr<KvWatch> WatchWrites(std::function<void()> on_change) = 0;

  // Whether this process leads the processes sharing the store (runs the planner, the
  // repairer and the policy engine): takes the leadership if no one holds it, and checks
  // that a held one is still held (one round trip). Call every second or so; false on
  // errors (the next call connects again). Not shared: always true.
  virtual bool HoldLeadership() = 0;
};

// The highest key of a table whose keys are U64Key (0 if empty).
absl::StatusOr<std::uint64_t> LastU64Key(KvStore& store, Table t);

// True for a PostgreSQL connection string ("postgresql://...", "postgres://..." or
// "postgresql:" followed by libpq's key=value form, e.g. "postgresql:host=/run/pg dbname=x").
bool IsPostgresUrl(std::string_view location);

}  // namespace gfrep::catalog::internal
