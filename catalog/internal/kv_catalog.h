#pragma once

// KvCatalog: the Catalog's rules (namespace, generations, replica records, requests, tasks
// and leases, the event log) written once above the storage seam of kv_store.h, on either
// backend: RocksDB (rocks_store.h, the default) or PostgreSQL (pg_store.h). Every mutation
// is one KvBatch written atomically and, unless CatalogOptions::sync is off, durably before
// it is acknowledged (RocksDB: WAL fsync, concurrent writers merged into one group commit;
// PostgreSQL: COMMIT with synchronous_commit).
//
// Concurrency (lock order top to bottom), in this process:
//   write gate    every mutation opens it first and holds it to its end (KvCatalog::
//                 WriteGate). On a shared store (PostgreSQL, several gfcatalogd front
//                 ends: CatalogOptions::shared) it is the store's federation-wide write
//                 lock (KvStore::LockWrites), after which the marks other front ends may
//                 have moved (event seq, request and task ids, the inode block, the claim
//                 queues) are read again, so the mutation decides on the database as the
//                 last writer, whichever process, left it. On a store of its own: nothing.
//   tree_mu_      shared by entry creation; exclusive for Remove and Rename, so a subtree
//                 cannot change under a cycle check or a recursive delete.
//   name_locks_   striped by (parent, name): two creates of the same name serialize.
//   id_mu_        inode id allocation (ids come in persisted blocks, never reused).
//   work_mu_      replicas, topology, requests, tasks and the event log (read-modify-write
//                 and event seq order = commit order).
// Reads take no locks (each Get/Scan sees committed batches; StatInode/PathOf read one
// snapshot). These locks are the concurrency control: one catalog process per store (the
// PostgreSQL store refuses a second process on the same database), unless the store is
// shared; then the write gate serializes the mutations of every front end (reads are not
// serialized), and another front end's writes wake this one's waiters (ReadEvents' long
// poll) through KvStore::WatchWrites (LISTEN/NOTIFY on PostgreSQL).
//
// Thread safety: fully thread-safe; blocking (disk I/O, fsync, database round trips) on the
// caller's thread.

#include <memory>
#include <string>
#include <string_view>

#include "catalog/catalog.h"

namespace gfrep::catalog::internal {

class KvStore;

// The catalog on `store` (initialised: root directory, id marks). options.path is unused.
absl::StatusOr<std::unique_ptr<Catalog>> OpenKvCatalog(const CatalogOptions& options,
                                                       std::unique_ptr<KvStore> store);

// A backend property of a catalog opened by OpenCatalog (e.g. "rocksdb.stats", whose
// "Cumulative WAL: N writes, M syncs" line shows group commit at work). kInvalidArgument
// for another Catalog implementation, kNotFound for an unknown property. Benchmarks only.
absl::StatusOr<std::string> GetDbProperty(Catalog& catalog, std::string_view property);

// The KvStore under a catalog opened by OpenCatalog (nullptr for another implementation):
// export/import and tests.
KvStore* StoreOf(Catalog& catalog);

}  // namespace gfrep::catalog::internal
