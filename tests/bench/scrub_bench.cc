// Cost of the consistency checks (replica/agent/replica_check.h) on a node holding many replicas:
// a stat pass over every replica, and the checksum scrub at full speed and at a set rate,
// against `cat` of the same files into /dev/null (the disk's and page cache's reference) in
// the same run. CPU is this process's (getrusage), wall by the clock; the page cache is
// dropped before each read pass when run as root (--drop-caches), so the figures are the
// disk's. Prints one JSON object.
//
//   TMPDIR=/var/tmp scrub_bench [--replicas 10000] [--size-kib 256] [--rate-mib 32]
//                               [--keep-caches]
// --keep-caches: never drop the page cache, even as root (the smoke run: it must not slow
// what runs beside it).
#include <sys/resource.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>
#include <spdlog/sinks/null_sink.h>
#include <spdlog/spdlog.h>

#include "catalog/catalog.h"
#include "replica/agent/replica_check.h"
#include "replica/core/spool.h"
#include "tests/support/temp_dir.h"
#include "transfer/checksum.h"

namespace {

using Clock = std::chrono::steady_clock;
namespace fs = std::filesystem;

double CpuSeconds() {
  struct rusage ru {};
  ::getrusage(RUSAGE_SELF, &ru);
  return static_cast<double>(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
         static_cast<double>(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
}

void DropCaches(bool drop) {
  if (!drop) return;
  ::sync();
  std::ofstream("/proc/sys/vm/drop_caches") << "3\n";
}

std::string Arg(int argc, char** argv, const std::string& name, const std::string& def) {
  for (int i = 1; i + 1 < argc; ++i) {
    if (argv[i] == name) return argv[i + 1];
  }
  return def;
}

struct Pass {
  double wall = 0;
  double cpu = 0;
};

template <typename F>
Pass Time(F&& f) {
  double c0 = CpuSeconds();
  auto t0 = Clock::now();
  f();
  return {std::chrono::duration<double>(Clock::now() - t0).count(), CpuSeconds() - c0};
}

}  // namespace

int main(int argc, char** argv) {
  using namespace gfrep;
  const int replicas = std::stoi(Arg(argc, argv, "--replicas", "10000"));
  const std::uint64_t size = std::stoull(Arg(argc, argv, "--size-kib", "256")) << 10;
  const std::uint64_t rate = std::stoull(Arg(argc, argv, "--rate-mib", "32")) << 20;
  bool keep_caches = false;
  for (int i = 1; i < argc; ++i) {
    keep_caches = keep_caches || std::strcmp(argv[i], "--keep-caches") == 0;
  }
  const bool drop = ::geteuid() == 0 && !keep_caches;
  testing::TempDir dir("scrub-bench");  // under $TMPDIR
  catalog::CatalogOptions co;
  co.path = dir.Sub("db");
  co.sync = false;
  auto cat = catalog::OpenRocksCatalog(co);
  if (!cat.ok()) return std::fprintf(stderr, "%s\n", cat.status().ToString().c_str()), 1;
  (void)(*cat)->PutSite({"S", {}});
  catalog::Node node;
  node.name = "n1";
  node.site = "S";
  node.address = "127.0.0.1:1";
  const fs::path spool = dir.path() / "spool";
  node.spool = spool.string();
  (void)(*cat)->RegisterNode(node);
  catalog::MkdirOptions m;
  m.parents = true;
  (void)(*cat)->Mkdir("/d", m);
  std::vector<fs::path> files;
  for (int i = 0; i < replicas; ++i) {
    const std::string path = "/d/f" + std::to_string(i);
    auto reserved = (*cat)->BeginWrite(path, catalog::FileContent{});
    if (!reserved.ok()) return 1;
    fs::path file = replica::ReplicaFile(spool, reserved->attributes.inode, reserved->generation);
    fs::create_directories(file.parent_path());
    testing::WriteRandomFile(file, size, static_cast<std::uint64_t>(i) + 1);
    auto sum = transfer::ComputeFileChecksum(file, transfer::ChecksumAlgorithm::kXxh3_128);
    catalog::FileContent c;
    c.size = size;
    c.checksum_algo = "xxh3-128";
    c.checksum = sum->substr(sum->find(':') + 1);
    c.generation = reserved->generation;
    if (!(*cat)->CommitFile(path, c, "n1", std::nullopt).ok()) return 1;
    files.push_back(file);
  }
  auto logger =
      std::make_shared<spdlog::logger>("bench", std::make_shared<spdlog::sinks::null_sink_mt>());
  auto checker = [&](std::uint64_t r) {
    replica::agent::ReplicaCheckerOptions o;
    o.catalog = cat->get();
    o.node = "n1";
    o.spool = spool;
    o.scrub_rate_bytes = r;
    o.scrub_period = std::chrono::hours(1);
    o.logger = logger;
    return replica::agent::ReplicaChecker(o);
  };
  const double total_mb = static_cast<double>(size) * replicas / 1e6;
  nlohmann::json out = {{"replicas", replicas}, {"size_bytes", size}, {"dir", dir.path().string()},
                        {"page_cache_dropped", drop}};

  // Reference: cat of every file (one process per 500 files), into /dev/null; run before and
  // after the full-speed scrub (a virtual disk's host may cache what the first pass read).
  auto cat_all = [&] {
    for (std::size_t i = 0; i < files.size(); i += 500) {
      std::string cmd = "cat";
      for (std::size_t j = i; j < std::min(files.size(), i + 500); ++j) cmd += " " + files[j].string();
      cmd += " > /dev/null";
      if (std::system(cmd.c_str()) != 0) std::abort();
    }
  };
  DropCaches(drop);
  Pass cat_pass = Time(cat_all);
  out["cat_before"] = {{"wall_s", cat_pass.wall}, {"mb_per_s", total_mb / cat_pass.wall}};

  // Full-speed scrub (stamps every replica: the first pass of a node).
  DropCaches(drop);
  replica::agent::CheckSummary full;
  Pass scrub = Time([&] { full = *checker(0).ScrubPass(true); });
  out["scrub_unlimited"] = {{"wall_s", scrub.wall},
                            {"cpu_s", scrub.cpu},
                            {"mb_per_s", total_mb / scrub.wall},
                            {"cpu_s_per_gb", scrub.cpu / (total_mb / 1000)},
                            {"good", full.good},
                           };
  DropCaches(drop);
  Pass cat_after = Time(cat_all);
  out["cat_after"] = {{"wall_s", cat_after.wall}, {"mb_per_s", total_mb / cat_after.wall}};
  out["scrub_unlimited"]["ratio_to_cat_after"] = cat_after.wall / scrub.wall;

  // Stat pass over every replica.
  replica::agent::CheckSummary stat;
  Pass stat_pass = Time([&] { stat = *checker(0).StatPass(); });
  out["stat_pass"] = {{"wall_s", stat_pass.wall},
                      {"cpu_s", stat_pass.cpu},
                      {"replicas_per_s", stat.checked / stat_pass.wall}};

  // Paced scrub of a quarter of the replicas' bytes at --rate-mib.
  DropCaches(drop);
  const int paced_n = std::max(1, replicas / 4);
  std::vector<catalog::InodeId> inodes;
  auto page = (*cat)->ListNodeReplicas("n1", 0, static_cast<std::size_t>(paced_n));
  for (const auto& r : *page) inodes.push_back(r.inode);
  replica::agent::CheckSummary paced;
  Pass paced_pass = Time([&] { paced = *checker(rate).CheckFiles(inodes, true); });
  const double paced_mb = static_cast<double>(paced.bytes_read) / 1e6;
  out["scrub_paced"] = {{"rate_mib_s", rate >> 20},
                        {"replicas", paced.checked},
                        {"wall_s", paced_pass.wall},
                        {"mb_per_s", paced_mb / paced_pass.wall},
                        {"cpu_percent", 100 * paced_pass.cpu / paced_pass.wall}};
  std::printf("%s\n", out.dump(2).c_str());
  return 0;
}
