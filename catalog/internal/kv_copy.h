#pragma once

// Moving a catalog between backends (RocksDB <-> PostgreSQL) through the storage seam:
// every table is copied key by key, and both sides are then compared by a digest of each
// table (row count + SHA-256 over the rows in key order), so a copy that lost, added or
// changed one byte is refused. Used by gfcatalog-migrate.
//
// Both stores must be opened raw (OpenRocksStore / OpenPgStore, not through a catalog,
// which would create a root directory) and must not be served while this runs: RocksDB's
// LOCK file and the PostgreSQL store's advisory lock keep a gfcatalogd away.

#include <array>
#include <cstdint>
#include <functional>
#include <string>

#include "absl/status/statusor.h"
#include "catalog/internal/kv_store.h"

namespace gfrep::catalog::internal {

struct TableDigest {
  std::uint64_t rows = 0;
  std::uint64_t bytes = 0;  // keys + values
  std::string sha256;       // hex, over (len(k), k, len(v), v) of every row in key order
  bool operator==(const TableDigest&) const = default;
};
using StoreDigest = std::array<TableDigest, kNumTables>;

absl::StatusOr<StoreDigest> DigestStore(KvStore& store);

// Copies every row of every table of `from` into `to`, whose tables must all be empty
// (kFailedPrecondition naming the first non-empty one otherwise: nothing is written).
// Batches of `batch_rows`, each written durably; progress(table, rows so far) after each batch.
// Then compares DigestStore of both: kDataLoss naming the table on any difference.
// Returns the digest (equal on both sides).
absl::StatusOr<StoreDigest> CopyStore(
    KvStore& from, KvStore& to, std::size_t batch_rows = 1000,
    const std::function<void(Table, std::uint64_t)>& progress = nullptr);

}  // namespace gfrep::catalog::internal
