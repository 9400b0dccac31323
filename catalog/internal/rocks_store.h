#pragma once

// The RocksDB backend of kv_store.h: one column family per Table (named by kTableNames;
// kMeta is the "default" family, so catalogs written before the storage seam open as they
// are). Write is one rocksdb::WriteBatch; with sync, WriteOptions::sync = true, so
// concurrent writers share one WAL append + fsync (RocksDB's write-group leader: group
// commit). Reads see the latest committed batch; a snapshot is a ManagedSnapshot.

#include <cstddef>
#include <memory>

#include "absl/status/statusor.h"
#include "catalog/catalog.h"
#include "catalog/internal/kv_store.h"

namespace gfrep::catalog::internal {

// Opens (creating if missing) the RocksDB database at options.path, with
// options.block_cache_bytes of block cache. The directory (and any parent made for it) is
// made durable in the directory holding it before the database opens.
absl::StatusOr<std::unique_ptr<KvStore>> OpenRocksStore(const CatalogOptions& options);

// The memtables' allocation block (rocksdb arena_block_size): Stats()'s memtable_bytes is
// within a block per table of the memory the memtables fill. Not smaller: gfcatalogd gives
// blocks of 256 KiB and more their own mappings (replica/core/heap.h), so a flushed
// memtable's blocks go back to the system; smaller ones stayed in malloc's arenas, freed
// but resident (64 KiB blocks: 12 MiB kept after the recovery flush at each restart).
inline constexpr std::size_t kMemtableBlockBytes = 256 << 10;

}  // namespace gfrep::catalog::internal
