// Cost of enforcing replication policies (replica/plan/policy_engine.h) on a large namespace:
// 100 continuous rules over N catalog entries. Measures (1) applying every rule to the files
// that exist (what a reload does: a namespace walk per rule and one request per 100,000
// files), and (2) keeping up with new files: K commits, then one engine step that matches
// each new generation against every rule (events per second). RocksDB catalog in-process
// (sync off), under $TMPDIR. Prints one JSON object.
//
//   TMPDIR=/var/tmp policy_bench [--files 1000000] [--rules 100] [--new 10000]
#include <chrono>
#include <cstdio>
#include <string>

#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <spdlog/sinks/null_sink.h>
#include <spdlog/spdlog.h>

#include "catalog/catalog.h"
#include "replica/plan/policy_engine.h"
#include "tests/support/temp_dir.h"

namespace {

using Clock = std::chrono::steady_clock;

std::string Arg(int argc, char** argv, const std::string& name, const std::string& def) {
  for (int i = 1; i + 1 < argc; ++i) {
    if (argv[i] == name) return argv[i + 1];
  }
  return def;
}

double Since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

}  // namespace

int main(int argc, char** argv) {
  using namespace gfrep;
  const int files = std::stoi(Arg(argc, argv, "--files", "1000000"));
  const int rules = std::stoi(Arg(argc, argv, "--rules", "100"));
  const int fresh = std::stoi(Arg(argc, argv, "--new", "10000"));
  testing::TempDir dir("policy-bench");
  catalog::CatalogOptions co;
  co.path = dir.Sub("db");
  co.sync = false;
  auto cat = catalog::OpenRocksCatalog(co);
  if (!cat.ok()) return std::fprintf(stderr, "%s\n", cat.status().ToString().c_str()), 1;
  (void)(*cat)->PutSite({"s", {{"region", "x"}}});
  catalog::Node node;
  node.name = "n1";
  node.site = "s";
  node.address = "127.0.0.1:1";
  (void)(*cat)->RegisterNode(node);
  catalog::MkdirOptions m;
  m.parents = true;
  // Files spread over one directory per rule (and as many again that no rule covers).
  const int dirs = 2 * rules;
  for (int d = 0; d < dirs; ++d) (void)(*cat)->Mkdir(fmt::format("/d{}", d), m);
  auto t0 = Clock::now();
  std::vector<catalog::NewFile> batch;
  for (int i = 0; i < files; ++i) {
    batch.push_back({fmt::format("/d{}/f{}", i % dirs, i), {}});
    if (batch.size() == 10000 || i + 1 == files) {
      auto made = (*cat)->CreateFiles(batch);
      if (!made.ok()) return std::fprintf(stderr, "%s\n", made.status().ToString().c_str()), 1;
      batch.clear();
    }
  }
  const double create_s = Since(t0);
  std::string yaml = "rules:\n";
  for (int r = 0; r < rules; ++r) {
    yaml += fmt::format("  - name: r{}\n    paths: [\"/d{}/**\"]\n    copies: 2\n    sites: \"region=x\"\n", r, r);
  }
  auto parsed = replica::plan::ParsePolicies(yaml, "bench.yaml");
  if (!parsed.ok()) return std::fprintf(stderr, "%s\n", parsed.status().ToString().c_str()), 1;
  replica::plan::PolicyEngineOptions po;
  po.catalog = cat->get();
  po.logger = std::make_shared<spdlog::logger>("bench", std::make_shared<spdlog::sinks::null_sink_mt>());
  replica::plan::PolicyEngine engine(po);
  engine.Reload(*parsed);
  t0 = Clock::now();
  auto applied = engine.Step();
  const double apply_s = Since(t0);
  if (!applied.ok()) return std::fprintf(stderr, "%s\n", applied.status().ToString().c_str()), 1;

  // New files: commits (each a "complete" replica event), then one step.
  catalog::FileContent c;
  c.size = 1;
  c.checksum_algo = "xxh3-128";
  c.checksum = "00";
  t0 = Clock::now();
  for (int i = 0; i < fresh; ++i) {
    if (!(*cat)->CommitFile(fmt::format("/d{}/new{}", i % dirs, i), c, "n1", std::nullopt).ok()) return 1;
  }
  const double commit_s = Since(t0);
  t0 = Clock::now();
  auto step = engine.Step();
  const double step_s = Since(t0);
  if (!step.ok()) return std::fprintf(stderr, "%s\n", step.status().ToString().c_str()), 1;
  nlohmann::json out = {
      {"files", files},
      {"rules", rules},
      {"create_files_s", create_s},
      {"apply_all_rules", {{"seconds", apply_s},
                           {"files_requested", applied->files_requested},
                           {"requests", applied->requests_created},
                           {"files_per_s", applied->files_requested / apply_s}}},
      {"new_files", {{"commits", fresh},
                     {"commit_s", commit_s},
                     {"step_s", step_s},
                     {"files_requested", step->files_requested},
                     {"requests", step->requests_created},
                     {"events_per_s", fresh / step_s}}}};
  std::printf("%s\n", out.dump(2).c_str());
  return 0;
}
