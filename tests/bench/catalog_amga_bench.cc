// The AMGA experiment on the gfrep catalog (issue 4), over gRPC on loopback.
//
//   build-*/bin/catalog_amga_bench [--max-dirs 10000] [--entries 100] [--samples 300] [--mtls [--rate N] [--as-user]]
//                                  [--tree-db ADDR --db ADDR [--front-ends N]]
//                                  [--big-dirs 10] [--big-entries 1000]
//
// --tree-db and --db put the two catalogs into PostgreSQL (empty databases, e.g. from
// tools/pg-private start DIR tree / ... durable) instead of RocksDB in a temporary directory.
//
// 1. Grows a tree to 1, 100, 1K, 10K (... --max-dirs) directories of --entries files each,
//    plus 10 directories of 1,000 entries (--big-dirs, --big-entries), and after each size
//    times `ls` (List over gRPC) of randomly chosen directories: p50/p99. In the same process
//    and run, a baseline keyed by full path that finds children by scanning and matching a
//    pattern (AMGA 2.4) gets the same tree and the same lookups.
// 2. creates/s, stats/s, lists/s with 1, 8 and 64 concurrent clients (own channels) against
//    a durable catalog (every create WAL-synced), and RocksDB's WAL writes-per-sync count,
//    which shows group commit.
// Prints markdown tables. Run by hand, see tests/bench/RESULTS.md (ctest runs it small:
// bench_smoke.catalog_amga_bench).
#include <rocksdb/db.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <random>
#include <regex>
#include <thread>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "catalog/catalog.h"
#include "catalog/catalog_service.h"
#include "catalog/client.h"
#include "catalog/internal/kv_catalog.h"
#include "tests/bench/bench_util.h"
#include "tests/support/temp_dir.h"

namespace {

using namespace gfrep::catalog;
using namespace gfrep::bench;



// AMGA 2.4's layout: one table keyed by full path; a listing scans it and matches
// "^<dir>/[^/]+$" against every key.
class PathKeyedBaseline {
 public:
  explicit PathKeyedBaseline(const std::string& path) {
    rocksdb::Options o;
    o.create_if_missing = true;
    rocksdb::DB* db = nullptr;
    rocksdb::Status s = rocksdb::DB::Open(o, path, &db);
    if (!s.ok()) {
      std::fprintf(stderr, "baseline open: %s\n", s.ToString().c_str());
      std::exit(1);
    }
    db_.reset(db);
  }
  void Add(const std::string& path, const std::string& attrs) {
    rocksdb::WriteOptions wo;
    wo.disableWAL = true;  // bulk load; durability is not what this baseline measures
    (void)db_->Put(wo, path, attrs);  // ignored: a failed put only shortens a listing
  }
  std::size_t List(const std::string& dir) {
    std::regex child("^" + dir + "/[^/]+$");
    std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(rocksdb::ReadOptions()));
    std::size_t n = 0;
    for (it->SeekToFirst(); it->Valid(); it->Next()) {
      std::string key = it->key().ToString();
      // A cheap prefix test first, as a database would with LIKE 'dir/%', then the pattern.
      if (key.compare(0, dir.size() + 1, dir + "/") == 0 && std::regex_match(key, child)) ++n;
    }
    return n;
  }

 private:
  std::unique_ptr<rocksdb::DB> db_;
};

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"catalog_amga_bench: AMGA-style ls scaling and catalog throughput"};
  int max_dirs = 10000, entries = 100, samples = 300, big_dirs = 10, big_entries = 1000;
  int baseline_samples = 20;
  int batch = 100;
  double seconds = 3;
  std::string sizes_text;
  app.add_option("--max-dirs", max_dirs, "Largest tree, directories")->capture_default_str();
  app.add_option("--entries", entries, "Entries per directory")->capture_default_str();
  app.add_option("--samples", samples, "ls samples per size")->capture_default_str();
  app.add_option("--baseline-samples", baseline_samples, "ls samples of the baseline per size")
      ->capture_default_str();
  app.add_option("--batch", batch, "Paths per CreateFiles/StatMany call")->capture_default_str();
  app.add_option("--seconds", seconds, "Duration of each throughput run")->capture_default_str();
  app.add_option("--big-dirs", big_dirs, "Large directories beside the tree")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--big-entries", big_entries, "Entries per large directory")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  bool mtls = false;
  double rate = 0;
  app.add_flag("--mtls", mtls,
               "Mutual TLS with authorization (gfca certificates; every client is the admin 'bench')");
  bool as_user = false;
  app.add_flag("--as-user", as_user,
               "With --mtls: the clients are the user 'bench' (owner of the directories it writes), so "
               "every call also checks the namespace's permissions");
  app.add_option("--rate", rate, "With --mtls: max calls a second per identity (0: no limit)")
      ->capture_default_str();
  std::string tree_db, durable_db;
  app.add_option("--tree-db", tree_db,
                 "Catalog for the ls part: a PostgreSQL address of an empty database (default: "
                 "RocksDB in a temporary directory)");
  app.add_option("--db", durable_db, "Catalog for the throughput part, as --tree-db");
  int front_ends = 1;
  app.add_option("--front-ends", front_ends,
                 "Throughput part: this many catalogs opened shared on --db (PostgreSQL; "
                 "gfcatalogd --shared), each behind its own server; client c calls front end "
                 "c % N")
      ->check(CLI::Range(1, 8))
      ->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  if (front_ends > 1 && durable_db.empty()) {
    std::fprintf(stderr, "--front-ends needs a PostgreSQL --db\n");
    return 2;
  }

  gfrep::testing::TempDir dir("catalog-bench");
  ServerOptions so;
  ClientOptions co;
  if (mtls) {
    const std::string ca = dir.Sub("ca");
    const std::string gfca = (std::filesystem::read_symlink("/proc/self/exe").parent_path() / "gfca").string();
    for (const std::string& args : {std::string("init"), std::string("issue catalog cat --host 127.0.0.1"),
                                    std::string(as_user ? "issue user bench" : "issue admin bench")}) {
      Check(std::system(fmt::format("'{}' {} --dir '{}' >/dev/null", gfca, args, ca).c_str()) == 0
                ? absl::OkStatus()
                : absl::InternalError("gfca " + args),
            "certificates");
    }
    so.tls_cert_pem = gfrep::testing::ReadFile(ca + "/cat.pem");
    so.tls_key_pem = gfrep::testing::ReadFile(ca + "/cat.key");
    so.tls_client_ca_pem = gfrep::testing::ReadFile(ca + "/ca.pem");
    so.max_calls_per_identity = rate;
    co.tls_root_pem = so.tls_client_ca_pem;
    co.tls_cert_pem = gfrep::testing::ReadFile(ca + "/bench.pem");
    co.tls_key_pem = gfrep::testing::ReadFile(ca + "/bench.key");
    std::printf("mutual TLS, authorization as %s, %s\n", as_user ? "user bench (permission checks)" : "admin bench",
                rate > 0 ? fmt::format("at most {:g} calls/s per identity", rate).c_str() : "no rate limit");
  }
  CatalogOptions bulk;
  bulk.path = tree_db.empty() ? dir.Sub("tree") : tree_db;
  bulk.sync = false;  // tree building only; the throughput part below syncs every write
  absl::StatusOr<std::unique_ptr<Catalog>> tree = OpenCatalog(bulk);
  Check(tree.status(), "open tree catalog");
  absl::StatusOr<std::unique_ptr<CatalogServer>> server = CatalogServer::Start(**tree, so);
  Check(server.status(), "start server");
  co.address = (*server)->address();
  absl::StatusOr<std::unique_ptr<CatalogClient>> client = CatalogClient::Create(co);
  Check(client.status(), "client");
  PathKeyedBaseline baseline(dir.Sub("baseline"));

  std::mt19937_64 rng(2026);
  Check((*tree)->Mkdir("/t", {}).status(), "mkdir /t");
  Check((*tree)->Mkdir("/big", {}).status(), "mkdir /big");
  FileContent content;
  content.size = 4096;
  content.checksum_algo = "xxh3-128";
  content.checksum = std::string(32, 'a');
  auto add_dir = [&](const std::string& d, int n) {
    Check((*tree)->Mkdir(d, {}).status(), "mkdir");
    baseline.Add(d, "d");
    for (int i = 0; i < n; ++i) {
      std::string f = fmt::format("{}/file{:05}", d, i);
      Check((*tree)->CreateFile(f, content).status(), "create");
      baseline.Add(f, std::string(64, 'x'));
    }
  };
  for (int b = 0; b < big_dirs; ++b) add_dir(fmt::format("/big/b{:02}", b), big_entries);

  std::printf("## ls latency over gRPC (ms), %d entries/dir; baseline = path-keyed scan\n\n",
              entries);
  std::printf("| directories | entries total | ls p50 | ls p99 | ls %d-entry p50 | "
              "ls %d-entry p99 | baseline ls p50 | baseline ls p99 | build s |\n",
              big_entries, big_entries);
  std::printf("|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
  std::fflush(stdout);
  int built = 0;
  for (int size = 1; size <= max_dirs; size *= (size == 1 ? 100 : 10)) {
    auto t0 = SteadyClock::now();
    for (; built < size; ++built) add_dir(fmt::format("/t/d{:07}", built), entries);
    double build_s = Ms(SteadyClock::now() - t0) / 1000;
    Check(absl::OkStatus(), "");
    std::vector<double> ls, ls_big, base;
    for (int s = 0; s < samples; ++s) {
      std::string d = fmt::format("/t/d{:07}", rng() % built);
      auto a = SteadyClock::now();
      absl::StatusOr<std::vector<DirEntry>> l = (*client)->List(d, {});
      ls.push_back(Ms(SteadyClock::now() - a));
      Check(l.status(), "ls");
      if (static_cast<int>(l->size()) != entries) Check(absl::InternalError("short ls"), "ls");
      std::string b = fmt::format("/big/b{:02}", rng() % big_dirs);
      a = SteadyClock::now();
      l = (*client)->List(b, {});
      ls_big.push_back(Ms(SteadyClock::now() - a));
      Check(l.status(), "ls big");
    }
    for (int s = 0; s < baseline_samples; ++s) {
      std::string d = fmt::format("/t/d{:07}", rng() % built);
      auto a = SteadyClock::now();
      std::size_t n = baseline.List(d);
      base.push_back(Ms(SteadyClock::now() - a));
      if (static_cast<int>(n) != entries) Check(absl::InternalError("baseline short"), "baseline");
    }
    Percentiles p = Summarise(ls), pb = Summarise(ls_big), pbase = Summarise(base);
    std::printf("| %d | %lld | %.3f | %.3f | %.3f | %.3f | %.2f | %.2f | %.1f |\n", size,
                static_cast<long long>(size) * entries + big_dirs * big_entries, p.p50, p.p99,
                pb.p50, pb.p99, pbase.p50, pbase.p99, build_s);
    std::fflush(stdout);
  }
  (*server)->Shutdown();

  // Throughput against a durable catalog.
  CatalogOptions durable;
  durable.path = durable_db.empty() ? dir.Sub("durable") : durable_db;
  durable.shared = front_ends > 1;
  // Front end i: a catalog on the database and a server; client c calls front end c % N.
  std::vector<std::unique_ptr<Catalog>> front_catalogs;
  std::vector<std::unique_ptr<CatalogServer>> front_servers;
  for (int i = 0; i < front_ends; ++i) {
    absl::StatusOr<std::unique_ptr<Catalog>> c = OpenCatalog(durable);
    Check(c.status(), "open durable catalog");
    absl::StatusOr<std::unique_ptr<CatalogServer>> srv = CatalogServer::Start(**c, so);
    Check(srv.status(), "start server 2");
    front_catalogs.push_back(std::move(*c));
    front_servers.push_back(std::move(*srv));
  }
  std::unique_ptr<Catalog>* store = &front_catalogs[0];
  std::printf("\n## Throughput over gRPC, durable catalog (sync=true) on %s%s, ops/s\n\n",
              durable_db.empty() ? "RocksDB" : "PostgreSQL",
              front_ends > 1 ? fmt::format(", {} front ends (--shared)", front_ends).c_str() : "");
  std::printf("| clients | creates/s | stats/s | lists/s (100 entries) | WAL writes per sync "
              "(creates) | creates/s, %d per CreateFiles | stats/s, %d per StatMany |\n"
              "|---:|---:|---:|---:|---:|---:|---:|\n", batch, batch);
  MkdirOptions writable;
  writable.owner = "bench";  // the user writes here (--as-user)
  Check((*store)->Mkdir("/c", writable).status(), "mkdir /c");
  Check((*store)->Mkdir("/l", {}).status(), "mkdir /l");
  for (int i = 0; i < 100; ++i) {
    Check((*store)->CreateFile(fmt::format("/l/f{:03}", i), content).status(), "create");
  }
  auto wal = [&]() -> std::pair<double, double> {
    absl::StatusOr<std::string> stats = gfrep::catalog::internal::GetDbProperty(**store, "rocksdb.stats");
    if (!stats.ok()) return {0, 0};
    std::smatch m;
    std::regex re(R"(Cumulative WAL: ([0-9.]+)([KMG]?) writes, ([0-9.]+)([KMG]?) syncs)");
    if (!std::regex_search(*stats, m, re)) return {0, 0};
    auto scale = [](const std::string& s) {
      return s == "K" ? 1e3 : s == "M" ? 1e6 : s == "G" ? 1e9 : 1.0;
    };
    return {std::stod(m[1]) * scale(m[2]), std::stod(m[3]) * scale(m[4])};
  };
  for (int clients : {1, 8, 64}) {
    std::vector<std::unique_ptr<CatalogClient>> cs;
    for (int c = 0; c < clients; ++c) {
      co.address = front_servers[c % front_ends]->address();
      absl::StatusOr<std::unique_ptr<CatalogClient>> cl = CatalogClient::Create(co);
      Check(cl.status(), "client");
      cs.push_back(std::move(*cl));
    }
    auto run = [&](auto op) {
      std::atomic<long> ops{0};
      std::atomic<bool> stop{false};
      std::vector<std::thread> threads;
      auto start = SteadyClock::now();
      for (int c = 0; c < clients; ++c) {
        threads.emplace_back([&, c] {
          long k = 0;
          while (!stop.load(std::memory_order_relaxed)) {
            op(*cs[c], c, k++);
            ops.fetch_add(1, std::memory_order_relaxed);
          }
        });
      }
      std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
      stop = true;
      for (auto& t : threads) t.join();
      return ops.load() / (Ms(SteadyClock::now() - start) / 1000);
    };
    auto [w0, s0] = wal();
    double creates = run([&](CatalogClient& c, int id, long k) {
      Check(c.CreateFile(fmt::format("/c/n{}-{}-{}", clients, id, k), content).status(), "create");
    });
    auto [w1, s1] = wal();
    double stats = run([&](CatalogClient& c, int, long k) {
      Check(c.Stat(fmt::format("/l/f{:03}", k % 100)).status(), "stat");
    });
    double lists = run([&](CatalogClient& c, int, long) { Check(c.List("/l", {}).status(), "list"); });
    double per_sync = s1 > s0 ? (w1 - w0) / (s1 - s0) : 0;
    double batched_creates = batch * run([&](CatalogClient& c, int id, long k) {
      std::vector<NewFile> files;
      for (int i = 0; i < batch; ++i) {
        files.push_back({fmt::format("/c/b{}-{}-{}-{}", clients, id, k, i), content});
      }
      Check(c.CreateFiles(files).status(), "create files");
    });
    std::vector<std::string> stat_paths;
    for (int i = 0; i < batch; ++i) stat_paths.push_back(fmt::format("/l/f{:03}", i % 100));
    double batched_stats = batch * run([&](CatalogClient& c, int, long) {
      Check(c.StatMany(stat_paths).status(), "stat many");
    });
    std::printf("| %d | %.0f | %.0f | %.0f | %.1f | %.0f | %.0f |\n", clients, creates, stats,
                lists, per_sync, batched_creates, batched_stats);
    std::fflush(stdout);
  }
  for (auto& srv : front_servers) srv->Shutdown();
  return 0;
}
