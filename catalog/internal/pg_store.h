#pragma once

// PgStore: the KvStore of kv_store.h on PostgreSQL, through libpq. Each Table is one SQL
// table (k bytea PRIMARY KEY, v bytea NOT NULL), named kTableNames[t] except kMeta, which is
// "meta". bytea compares bytewise, so a prefix scan is a range scan of the primary-key index.
//
// Opening:
//  - One catalog process per database: the store takes a session advisory lock
//    (pg_try_advisory_lock) on a connection of its own, held until the store is destroyed.
//    If another process holds it, OpenPgStore fails with kFailedPrecondition. The catalog's
//    in-process locks are its only concurrency control then. Each such open also takes the
//    next serving epoch (table serve_epoch), and every Write checks under a row share lock
//    that it is still the current one: a process that lost the database to a later open
//    fails every Write with kFailedPrecondition (even if its lock connection only looks
//    alive, e.g. after a server failover).
//  - Several front ends (options.shared): each takes the same advisory lock in share mode
//    (pg_try_advisory_lock_shared), so shared opens coexist and exclude a lone one both
//    ways. They read the epoch without taking a new one. Writers are serialized across
//    processes by LockWrites: a session advisory lock (pg_advisory_lock, waiting) on a
//    connection pinned to the calling thread until the KvWriteLock is destroyed; the
//    thread's Writes run on that connection, so a write never commits once the lock's
//    session is gone (a lost connection fails the write). Each shared Write also sends
//    NOTIFY gfrep_catalog in its transaction; WatchWrites LISTENs on a connection of its
//    own and calls back (PostgreSQL delivers the notice at commit, to every listener).
//  - Schema: a one-row schema_version table and a numbered list of migration steps (pg_store.cc),
//    applied at open in one transaction under pg_advisory_xact_lock. A database newer than
//    this program is refused with kFailedPrecondition.
//
// Operations:
//  - Connections come from a pool (up to max_connections, made on demand, reused). A
//    connection found broken is discarded and the operation fails with kUnavailable naming
//    the cause; the next operation connects again. Idle connections are checked before use,
//    so after a server restart mostly only operations in flight fail.
//  - Get and Scan without a snapshot are autocommit statements: each sees every committed
//    Write. Scan reads pages of 512 rows by key range and calls fn only after the page has
//    been read and its connection returned to the pool, so fn may use the store. Unlike
//    RocksDB's iterator, a scan of more than one page without a snapshot is not one point in
//    time: a write committed between two pages (e.g. a rename inside a directory of more than
//    512 entries) may show an entry twice or not at all. The catalog's mutations scan under
//    its own locks, where no write can come between; lock-free listings may see this. Pass
//    a snapshot for one point in time (it holds a connection while fn runs).
//  - Write is one transaction in one round trip (libpq pipeline mode: BEGIN, the batch's
//    upserts and deletes in order, COMMIT). OK only once COMMIT succeeded; with sync, that
//    is after the commit record was flushed (synchronous_commit set on for the transaction,
//    whatever the server's or the database's setting); without, it is off. Any error rolls all of it back.
//  - Snapshot holds a pooled connection inside a REPEATABLE READ READ ONLY transaction until
//    it is destroyed: keep snapshots short, and fewer than max_connections at a time.
//  - If the lock connection is lost (server restart), the next Write takes the lock again on
//    a new connection, or fails with kFailedPrecondition if another process took it meanwhile.
//
// Error codes: no connection or a broken one, server shutting down (SQLSTATE 08xxx, 57P0x)
// -> kUnavailable; disk full (53100) -> kResourceExhausted; serialization failure or
// deadlock (40001, 40P01) -> kAborted; corrupt data (XX001, XX002) -> kDataLoss; anything
// else -> kInternal. Messages carry the caller's `what`, the server's message and SQLSTATE.
// A statement waits for the server without a time limit; put connect_timeout, keepalives or
// options='-c statement_timeout=...' into the conninfo to bound it.
//
// Thread safety: as kv_store.h (any thread; a snapshot by one thread at a time). Blocking:
// every call makes database round trips on the caller's thread.

#include <cstddef>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "catalog/internal/kv_store.h"

namespace gfrep::catalog::internal {

struct PgStoreOptions {
  // Where the database is: "postgresql://..." or "postgres://..." (a libpq URI), or
  // "postgresql:" followed by libpq key=value text, e.g. "postgresql:host=/run/pg dbname=x"
  // (see IsPostgresUrl). libpq's environment variables (PGPASSWORD, PGSSLMODE, ...) and
  // ~/.pgpass fill in what it leaves out.
  std::string conninfo;

  // Most connections the store opens at once (besides the one holding the database lock).
  // Each snapshot holds one while it lives; other calls hold one per statement.
  std::size_t max_connections = 16;

  // Refuse (kNotFound) a database without a gfrep catalog instead of creating one (a
  // migration's source).
  bool must_exist = false;

  // One of several front ends on this database (gfcatalogd --shared): the open does not
  // take the database for itself, and writes run under LockWrites (kv_store.h). A shared
  // open is refused while a process serves the database alone, and the other way round.
  bool shared = false;
};

// Connects, takes the database lock and brings the schema up to date (creating it in an
// empty database). kInvalidArgument for a malformed conninfo or max_connections == 0,
// kUnavailable if the server cannot be reached, kFailedPrecondition if another process
// serves the database or its schema is newer than this program.
absl::StatusOr<std::unique_ptr<KvStore>> OpenPgStore(const PgStoreOptions& options);

}  // namespace gfrep::catalog::internal
