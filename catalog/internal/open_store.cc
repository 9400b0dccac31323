#include "catalog/internal/open_store.h"

#include <filesystem>

#include <fmt/format.h>

#include "catalog/internal/kv_catalog.h"
#include "catalog/internal/pg_store.h"
#include "catalog/internal/rocks_store.h"

namespace gfrep::catalog {
namespace internal {

absl::StatusOr<std::unique_ptr<KvStore>> OpenStore(const CatalogOptions& options,
                                                   bool must_exist) {
  if (IsPostgresUrl(options.path)) {
    PgStoreOptions pg;
    pg.conninfo = options.path;
    pg.must_exist = must_exist;
    pg.shared = options.shared;
    return OpenPgStore(pg);
  }
  if (options.shared) {
    return absl::InvalidArgumentError(fmt::format(
        "{}: several front ends share a PostgreSQL catalog only, not a RocksDB directory",
        options.path));
  }
  std::error_code ec;
  if (must_exist && !std::filesystem::exists(std::filesystem::path(options.path) / "CURRENT", ec)) {
    return absl::NotFoundError(fmt::format("{}: no RocksDB catalog there", options.path));
  }
  return OpenRocksStore(options);
}

}  // namespace internal

absl::StatusOr<std::unique_ptr<Catalog>> OpenCatalog(const CatalogOptions& options) {
  absl::StatusOr<std::unique_ptr<internal::KvStore>> store = internal::OpenStore(options);
  if (!store.ok()) return store.status();
  return internal::OpenKvCatalog(options, std::move(*store));
}

}  // namespace gfrep::catalog
