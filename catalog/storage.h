#pragma once

// What a daemon serving a catalog asks of the storage under it (a catalog opened by
// OpenCatalog, catalog.h): whether a location names PostgreSQL, where the data lies, and the
// leadership among front ends sharing one database.
//
// Thread safety: as the catalog's own methods.

#include <string>
#include <string_view>

#include "catalog/catalog.h"

namespace gfrep::catalog {

// True for what OpenCatalog opens as a PostgreSQL database ("postgresql://...",
// "postgres://..." or "postgresql:" followed by libpq's key=value text), false for a
// RocksDB directory.
bool IsPostgresLocation(std::string_view location);

// Where a catalog opened by OpenCatalog keeps its data, for logs ("" for another Catalog).
std::string DescribeStorage(Catalog& catalog);

// Whether this process leads the front ends sharing the catalog's database (CatalogOptions::
// shared; the leader runs the planner, the repairer and the policy engine): takes the
// leadership if no one holds it, checks a held one (one round trip). Call every second or so;
// false on errors (the next call connects again). True for a catalog not shared, and for
// another Catalog implementation.
bool HoldLeadership(Catalog& catalog);

}  // namespace gfrep::catalog
