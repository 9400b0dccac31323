// What a flood of queued tasks costs the catalog (issue 12: "a flood of CreateTasks must not
// stall others").
//
//   build/bin/catalog_claim_bench [--open 0,1000,10000,100000] [--claims 200]
//
// For each size N: N queued tasks for node "flooded" (as one huge gfrep -r would make), then
// (1) the latency of ClaimTasks(flooded, 32 owners) that each claim 32 tasks and complete them,
// and of ExpireLeases (the planner's, every tick) after each,
// (2) the latency of ClaimTasks for another node "quiet" with one task, and of Stat, while a
// thread claims for "flooded" without pause: what the others wait.
// A durable catalog (WAL synced) in a temporary directory. See RESULTS.md (ctest runs it
// small: bench_smoke.catalog_claim_bench).
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "catalog/catalog.h"
#include "tests/bench/bench_util.h"
#include "tests/support/temp_dir.h"

namespace {

using namespace gfrep::catalog;
using namespace gfrep::bench;



std::vector<std::string> Owners(const std::string& prefix, int n) {
  std::vector<std::string> out;
  for (int i = 0; i < n; ++i) out.push_back(fmt::format("{}-w{}", prefix, i));
  return out;
}

void Run(std::uint64_t open, int claims) {
  gfrep::testing::TempDir dir("claim-bench");
  CatalogOptions co;
  co.path = dir.Sub("db");
  auto opened = OpenRocksCatalog(co);
  Check(opened.status(), "open");
  Catalog& cat = **opened;
  for (const char* site : {"s1", "s2"}) Check(cat.PutSite({site, {}}), "site");
  for (auto [node, site] : {std::pair{"src", "s1"}, {"flooded", "s2"}, {"quiet", "s2"}}) {
    Node n;
    n.name = node;
    n.site = site;
    n.address = "127.0.0.1:1";
    Check(cat.RegisterNode(n), "node");
  }
  MkdirOptions mo;
  Check(cat.Mkdir("/d", mo).status(), "mkdir");
  // One file per task (a task per file, as gfrep -r makes), created in batches.
  const std::uint64_t total = open + static_cast<std::uint64_t>(claims) * 32 + 1000;
  for (std::uint64_t i = 0; i < total; i += 1000) {
    std::vector<NewFile> files;
    for (std::uint64_t j = i; j < std::min(total, i + 1000); ++j) {
      FileContent fc;
      fc.size = 1;
      fc.checksum_algo = "xxh3-128";
      fc.checksum = "00";
      files.push_back(NewFile{fmt::format("/d/f{}", j), fc});
    }
    Check(cat.CreateFiles(files).status(), "files");
  }
  auto make_tasks = [&](std::uint64_t from, std::uint64_t n, const std::string& dst) {
    for (std::uint64_t i = from; i < from + n; i += 1000) {
      std::vector<TaskSpec> specs;
      for (std::uint64_t j = i; j < std::min(from + n, i + 1000); ++j) {
        TaskSpec t;
        t.path = fmt::format("/d/f{}", j);
        t.src_node = "src";
        t.dst_node = dst;
        specs.push_back(t);
      }
      Check(cat.CreateTasks(specs).status(), "tasks");
    }
  };
  make_tasks(0, total - 1000, "flooded");
  const std::vector<std::string> owners = Owners("flooded", 32);
  std::vector<double> flooded_ms, expire_ms;
  for (int i = 0; i < claims; ++i) {
    auto t0 = SteadyClock::now();
    absl::StatusOr<std::vector<Task>> got = cat.ClaimTasks("flooded", owners, std::chrono::seconds(60),
                                                          std::chrono::milliseconds(0));
    flooded_ms.push_back(Ms(SteadyClock::now() - t0));
    Check(got.status(), "claim");
    for (const Task& t : *got) Check(cat.CompleteTask(t.id, t.lease_owner).status(), "complete");
    t0 = SteadyClock::now();
    Check(cat.ExpireLeases().status(), "expire");
    expire_ms.push_back(Ms(SteadyClock::now() - t0));
  }
  // Others while "flooded" claims without pause (nothing to complete: leases pile up, which
  // the scan still walks).
  std::atomic<bool> stop{false};
  std::thread flood([&] {
    while (!stop) (void)cat.ClaimTasks("flooded", Owners("flood2", 1), std::chrono::seconds(600), std::chrono::milliseconds(0));
  });
  std::vector<double> quiet_ms, stat_ms;
  for (int i = 0; i < claims; ++i) {
    make_tasks(total - 1000 + static_cast<std::uint64_t>(i), 1, "quiet");
    auto t0 = SteadyClock::now();
    absl::StatusOr<std::vector<Task>> got = cat.ClaimTasks("quiet", Owners("quiet", 1), std::chrono::seconds(60),
                                                          std::chrono::milliseconds(0));
    quiet_ms.push_back(Ms(SteadyClock::now() - t0));
    Check(got.status(), "claim quiet");
    t0 = SteadyClock::now();
    Check(cat.Stat("/d/f1").status(), "stat");
    stat_ms.push_back(Ms(SteadyClock::now() - t0));
  }
  stop = true;
  flood.join();
  Percentiles f = Summarise(flooded_ms), e = Summarise(expire_ms), q = Summarise(quiet_ms), s = Summarise(stat_ms);
  std::printf("| %llu | %.2f | %.2f | %.2f | %.2f | %.2f | %.2f | %.3f | %.3f |\n",
              static_cast<unsigned long long>(open), f.p50, f.p99, e.p50, e.p99, q.p50, q.p99, s.p50, s.p99);
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"catalog_claim_bench: ClaimTasks with many queued tasks, and what others wait meanwhile"};
  std::string sizes = "0,1000,10000,100000";
  int claims = 200;
  app.add_option("--open", sizes, "queued tasks of the flooded node, comma-separated sizes");
  app.add_option("--claims", claims, "claims measured per size")->check(CLI::Range(1, 100000));
  CLI11_PARSE(app, argc, argv);
  std::printf("| queued tasks | claim 32 p50 ms | p99 ms | ExpireLeases p50 ms | p99 ms | other node's claim p50 ms | p99 ms | Stat p50 ms | p99 ms |\n");
  std::printf("|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
  std::stringstream in(sizes);
  for (std::string item; std::getline(in, item, ',');) Run(std::stoull(item), claims);
  return 0;
}
