// gfcatalog-migrate --from SRC --to DST: moves a federation's catalog between backends
// (RocksDB directory <-> PostgreSQL database), every table row by row, then proves the copy
// by a per-table digest (rows + SHA-256 in key order) of both sides. The destination must
// be empty; neither side may be served meanwhile (gfcatalogd stopped: RocksDB's LOCK file
// and the PostgreSQL store's advisory lock refuse a second user anyway).
//   gfcatalog-migrate --from /var/lib/gfrep/catalog --to postgresql://gfrep@db/gfrep
//   gfcatalog-migrate --verify --from A --to B     compare only
// Exit status: 0 copied (or equal), 1 refused or failed (nothing served is touched), 2 usage.
#include <iostream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "catalog/internal/kv_copy.h"
#include "catalog/internal/kv_store.h"
#include "catalog/internal/open_store.h"
#include "tools/internal/cli.h"

namespace {

nlohmann::json DigestJson(const gfrep::catalog::internal::StoreDigest& d) {
  nlohmann::json tables = nlohmann::json::object();
  for (int t = 0; t < gfrep::catalog::internal::kNumTables; ++t) {
    tables[gfrep::catalog::internal::kTableNames[t]] = {
        {"rows", d[t].rows}, {"bytes", d[t].bytes}, {"sha256", d[t].sha256}};
  }
  return tables;
}

void PrintDigest(const gfrep::catalog::internal::StoreDigest& d) {
  std::cout << fmt::format("{:<14} {:>10} {:>12}  {}\n", "table", "rows", "bytes", "sha256");
  for (int t = 0; t < gfrep::catalog::internal::kNumTables; ++t) {
    std::cout << fmt::format("{:<14} {:>10} {:>12}  {}\n", gfrep::catalog::internal::kTableNames[t],
                             d[t].rows, d[t].bytes, d[t].sha256.substr(0, 16));
  }
}

}  // namespace

int main(int argc, char** argv) {
  using namespace gfrep;
  constexpr const char* kProgram = "gfcatalog-migrate";
  CLI::App app{
      "gfcatalog-migrate: copy a catalog between RocksDB and PostgreSQL, verified by per-table "
      "row counts and SHA-256"};
  tools::CommonFlags common;
  std::string from, to;
  bool verify_only = false, json = false;
  std::size_t batch_rows = 1000;
  tools::AddCommonFlags(app, common);
  app.add_option("--from", from, "Source catalog: RocksDB directory or postgresql://... address")
      ->required();
  app.add_option("--to", to,
                 "Destination: a new RocksDB directory or an empty PostgreSQL database")
      ->required();
  app.add_flag("--verify", verify_only, "Only compare the two catalogs (exit 1 if they differ)");
  app.add_option("--batch", batch_rows, "Rows per durable write")->check(CLI::Range(1, 1000000))
      ->capture_default_str();
  app.add_flag("--json", json, "Print the digest as JSON");
  CLI11_PARSE(app, argc, argv);
  auto log = tools::MakeLogger(kProgram, common);
  if (from == to) return tools::Fail(kProgram, "--from and --to are the same catalog", 2);

  catalog::CatalogOptions src_options;
  src_options.path = from;
  absl::StatusOr<std::unique_ptr<catalog::internal::KvStore>> src =
      catalog::internal::OpenStore(src_options, /*must_exist=*/true);
  if (!src.ok()) return tools::Fail(kProgram, fmt::format("--from: {}", src.status().ToString()));
  catalog::CatalogOptions dst_options;
  dst_options.path = to;
  absl::StatusOr<std::unique_ptr<catalog::internal::KvStore>> dst =
      catalog::internal::OpenStore(dst_options, /*must_exist=*/verify_only);
  if (!dst.ok()) return tools::Fail(kProgram, fmt::format("--to: {}", dst.status().ToString()));

  absl::StatusOr<catalog::internal::StoreDigest> digest;
  if (verify_only) {
    digest = catalog::internal::DigestStore(**src);
    absl::StatusOr<catalog::internal::StoreDigest> other = catalog::internal::DigestStore(**dst);
    if (!digest.ok()) return tools::Fail(kProgram, digest.status().ToString());
    if (!other.ok()) return tools::Fail(kProgram, other.status().ToString());
    for (int t = 0; t < catalog::internal::kNumTables; ++t) {
      if (!((*digest)[t] == (*other)[t])) {
        return tools::Fail(kProgram,
                           fmt::format("table {} differs: {} rows ({}) vs {} rows ({})",
                                       catalog::internal::kTableNames[t], (*digest)[t].rows,
                                       (*digest)[t].sha256.substr(0, 16), (*other)[t].rows,
                                       (*other)[t].sha256.substr(0, 16)));
      }
    }
  } else {
    log->info("copying {} -> {}", (*src)->Describe(), (*dst)->Describe());
    digest = catalog::internal::CopyStore(
        **src, **dst, batch_rows, [&](catalog::internal::Table t, std::uint64_t rows) {
          log->debug("{}: {} rows", catalog::internal::kTableNames[t], rows);
        });
    if (!digest.ok()) return tools::Fail(kProgram, digest.status().ToString());
  }
  if (json) {
    std::cout << nlohmann::json{{"from", (*src)->Describe()},
                                {"to", (*dst)->Describe()},
                                {"copied", !verify_only},
                                {"equal", true},
                                {"tables", DigestJson(*digest)}}
                     .dump()
              << "\n";
  } else {
    std::cout << fmt::format("{} {} -> {}: every table equal\n", verify_only ? "compared" : "copied",
                             (*src)->Describe(), (*dst)->Describe());
    PrintDigest(*digest);
  }
  return 0;
}
