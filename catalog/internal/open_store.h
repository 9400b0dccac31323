#pragma once

// Which backend a catalog location names (kv_store.h): a PostgreSQL address (IsPostgresUrl)
// or a RocksDB directory. OpenCatalog (catalog.h) and gfcatalog-migrate open through here.

#include <memory>

#include "absl/status/statusor.h"
#include "catalog/catalog.h"
#include "catalog/internal/kv_store.h"

namespace gfrep::catalog::internal {

// The store at options.path. With must_exist, a RocksDB directory without a database is
// kNotFound instead of being created (a PostgreSQL database always exists once reachable;
// its tables are created by the schema migration).
absl::StatusOr<std::unique_ptr<KvStore>> OpenStore(const CatalogOptions& options,
                                                   bool must_exist = false);

}  // namespace gfrep::catalog::internal
