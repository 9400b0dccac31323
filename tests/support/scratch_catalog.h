#pragma once

// OpenScratchCatalog: a RocksDB catalog at `path` for a test's fixture, with writes not
// synced (a test's catalog need not survive a power cut; the durability tests open theirs
// with sync) and, if given, the test's clock.

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "catalog/catalog.h"

namespace gfrep::testing {

inline absl::StatusOr<std::unique_ptr<catalog::Catalog>> OpenScratchCatalog(
    const std::string& path, catalog::Clock clock = nullptr) {
  catalog::CatalogOptions o;
  o.path = path;
  o.sync = false;
  o.clock = std::move(clock);
  return catalog::OpenRocksCatalog(o);
}

}  // namespace gfrep::testing
