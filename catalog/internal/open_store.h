#pragma once

// Which backend a catalog location names (kv_store.h): a PostgreSQL address (IsPostgresUrl)
// or a RocksDB directory. OpenCatalog (catalog.h) and gfcatalog-migrate open through here.

#include <memory>

#include "absl/status/statusor.h"
#include "catalog/catalog.h"
#include "catalog/internal/kv_store.h"

namespace gfrep::catalog::internal {

// The store at options.path. With must_exist, a RocksDB directory without a database, or a
// PostgreSQL database without a gfrep catalog (no schema_version table), is kNotFound
// instead of being created.
absl::StatusOr<std::unique_ptr<KvStore>> OpenStore(const CatalogOptions& options,
                                                   bool must_exist = false);

}  // namespace gfrep::catalog::internal
