// Local read path overhead: reading a local complete replica through replica::Open (one
// catalog lookup at open, then a plain descriptor) against a plain open+read of the same
// file, in the same run, alternating, page cache warm for both (the comparison is of the
// read path, not the disk). Prints one JSON object.
//
//   replication_read_bench [--size-mib 1024] [--rounds 5] [--buffer-kib 1024]
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "catalog/catalog.h"
#include "replica/reader.h"
#include "tests/support/temp_dir.h"
#include "transfer/checksum.h"

namespace {

using Clock = std::chrono::steady_clock;

double PlainRead(const std::string& file, std::vector<char>& buf) {
  auto t0 = Clock::now();
  int fd = ::open(file.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) std::abort();
  std::uint64_t total = 0;
  while (true) {
    ssize_t n = ::read(fd, buf.data(), buf.size());
    if (n < 0) std::abort();
    if (n == 0) break;
    total += static_cast<std::uint64_t>(n);
  }
  ::close(fd);
  (void)total;
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

double ReplicaRead(gfrep::catalog::Catalog& cat, const gfrep::replica::ReaderOptions& o,
                   std::vector<char>& buf) {
  auto t0 = Clock::now();
  auto r = gfrep::replica::Open(cat, "/bench/big", o);
  if (!r.ok() || !(*r)->local()) {
    std::fprintf(stderr, "open: %s\n", r.ok() ? "not local" : r.status().ToString().c_str());
    std::abort();
  }
  while (true) {
    auto n = (*r)->Read(buf.data(), buf.size());
    if (!n.ok()) std::abort();
    if (*n == 0) break;
  }
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

}  // namespace

int main(int argc, char** argv) {
  std::uint64_t size_mib = 1024;
  int rounds = 5;
  std::size_t buffer_kib = 1024;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string a = argv[i];
    if (a == "--size-mib") {
      size_mib = std::strtoull(argv[i + 1], nullptr, 10);
    } else if (a == "--rounds") {
      rounds = std::max(1, std::atoi(argv[i + 1]));
    } else if (a == "--buffer-kib") {
      buffer_kib = std::max<std::size_t>(4, std::strtoull(argv[i + 1], nullptr, 10));
    }
  }
  gfrep::testing::TempDir dir("readbench");
  gfrep::catalog::CatalogOptions co;
  co.path = dir.Sub("db");
  auto cat = gfrep::catalog::OpenRocksCatalog(co);
  if (!cat.ok()) return 1;
  gfrep::catalog::Site site;
  site.name = "A";
  (void)(*cat)->PutSite(site);
  gfrep::catalog::Node node;
  node.name = "a1";
  node.site = "A";
  node.address = "127.0.0.1:1";
  node.spool = dir.Sub("spool");
  (void)(*cat)->RegisterNode(node);
  std::string file = dir.Sub("spool") + "/bench/big";
  std::filesystem::create_directories(dir.Sub("spool") + "/bench");
  gfrep::testing::WriteRandomFile(file, size_mib << 20, 42);
  auto sum = gfrep::transfer::ComputeFileChecksum(file, gfrep::transfer::ChecksumAlgorithm::kXxh3_128);
  if (!sum.ok()) return 1;
  gfrep::catalog::MkdirOptions m;
  m.parents = true;
  (void)(*cat)->Mkdir("/bench", m);
  gfrep::catalog::FileContent c;
  c.size = size_mib << 20;
  c.checksum_algo = "xxh3-128";
  c.checksum = sum->substr(sum->find(':') + 1);
  if (!(*cat)->CommitFile("/bench/big", c, "a1", std::nullopt).ok()) return 1;

  gfrep::replica::ReaderOptions o;
  o.identity = {"A", "a1"};
  std::vector<char> buf(buffer_kib << 10);
  PlainRead(file, buf);  // warm the page cache
  std::vector<double> plain, replica;
  for (int i = 0; i < rounds; ++i) {
    plain.push_back(PlainRead(file, buf));
    replica.push_back(ReplicaRead(**cat, o, buf));
  }
  std::sort(plain.begin(), plain.end());
  std::sort(replica.begin(), replica.end());
  double p = plain[plain.size() / 2], r = replica[replica.size() / 2];
  double mib = static_cast<double>(size_mib);
  nlohmann::json j = {{"size_mib", size_mib},       {"rounds", rounds},
                      {"buffer_kib", buffer_kib},   {"plain_median_s", p},
                      {"replica_median_s", r},      {"plain_mib_s", mib / p},
                      {"replica_mib_s", mib / r},   {"overhead_pct", (r / p - 1) * 100}};
  std::printf("%s\n", j.dump().c_str());
  return 0;
}
