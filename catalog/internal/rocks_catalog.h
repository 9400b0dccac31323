#pragma once

// RocksCatalog: the Catalog on an embedded RocksDB (one column family per table, see
// internal/codec.h for keys). Every mutation is one rocksdb::WriteBatch written with
// sync=true; concurrent writers are merged by RocksDB's write-group leader into one WAL
// write + fsync (group commit).
//
// Concurrency (lock order top to bottom):
//   tree_mu_      shared by entry creation; exclusive for Remove and Rename, so a subtree
//                 cannot change under a cycle check or a recursive delete.
//   name_locks_   striped by (parent, name): two creates of the same name serialize.
//   id_mu_        inode id allocation (ids come in persisted blocks, never reused).
//   work_mu_      replicas, topology, requests, tasks and the event log (read-modify-write
//                 and event seq order = commit order).
// Reads take no locks (RocksDB gives each Get/iterator a consistent view).
//
// Thread safety: fully thread-safe; blocking (disk I/O, fsync) on the caller's thread.

#include <array>
#include <memory>

#include "absl/synchronization/mutex.h"
#include "catalog/catalog.h"

namespace rocksdb {
class DB;
class ColumnFamilyHandle;
class WriteBatch;
}  // namespace rocksdb

namespace gfrep::catalog::internal {

absl::StatusOr<std::unique_ptr<Catalog>> OpenRocks(const CatalogOptions& options);

}  // namespace gfrep::catalog::internal

namespace gfrep::catalog::internal {

// A RocksDB property of a catalog opened by OpenRocksCatalog (e.g. "rocksdb.stats", whose
// "Cumulative WAL: N writes, M syncs" line shows group commit at work). kInvalidArgument
// for another Catalog implementation, kNotFound for an unknown property. Benchmarks only.
absl::StatusOr<std::string> GetDbProperty(Catalog& catalog, std::string_view property);

}  // namespace gfrep::catalog::internal
