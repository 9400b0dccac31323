#pragma once

// OpenScratchCatalog: a RocksDB catalog at `path` for a test's fixture, with writes not
// synced (a test's catalog need not survive a power cut; the durability tests open theirs
// with sync) and, if given, the test's clock. AddJapanUsSites: the policy tests' federation
// in it.

#include <memory>
#include <string>
#include <utility>
#include <vector>

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

// Sites kek and tsukuba (label region=jp) and sdsc (region=us), each with one node
// "SITE-n1" registered (not live: no heartbeat).
inline absl::Status AddJapanUsSites(catalog::Catalog& cat) {
  for (const auto& [name, region] : std::vector<std::pair<std::string, std::string>>{
           {"kek", "jp"}, {"tsukuba", "jp"}, {"sdsc", "us"}}) {
    if (absl::Status s = cat.PutSite({name, {{"region", region}}}); !s.ok()) return s;
    catalog::Node n;
    n.name = name + "-n1";
    n.site = name;
    n.address = "127.0.0.1:1";
    if (absl::Status s = cat.RegisterNode(n); !s.ok()) return s;
  }
  return absl::OkStatus();
}

}  // namespace gfrep::testing
