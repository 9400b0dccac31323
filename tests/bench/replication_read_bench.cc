// Local read path overhead: reading a local complete replica through replica::client::Open (one
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
#include "replica/client/reader.h"
#include "tests/support/temp_dir.h"
#include "transfer/checksum.h"
#include "transfer/spool_names.h"

namespace {

using Clock = std::chrono::steady_clock;

int Fail(const char* what, const absl::Status& s) {
  std::fprintf(stderr, "replication_read_bench: %s: %s\n", what, s.ToString().c_str());
  return 1;
}

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

double ReplicaRead(gfrep::catalog::Catalog& cat, const gfrep::replica::client::ReaderOptions& o,
                   std::vector<char>& buf) {
  auto t0 = Clock::now();
  auto r = gfrep::replica::client::Open(cat, "/bench/big", o);
  if (!r.ok() || !(*r)->local()) {  // a read that is not local measures nothing we want
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
  for (int i = 1; i < argc; i += 2) {
    std::string a = argv[i];
    if (i + 1 >= argc) {
      std::fprintf(stderr, "replication_read_bench: %s needs a value\n", a.c_str());
      return 2;
    }
    if (a == "--size-mib") {
      size_mib = std::strtoull(argv[i + 1], nullptr, 10);
    } else if (a == "--rounds") {
      rounds = std::max(1, std::atoi(argv[i + 1]));
    } else if (a == "--buffer-kib") {
      buffer_kib = std::max<std::size_t>(4, std::strtoull(argv[i + 1], nullptr, 10));
    } else {
      std::fprintf(stderr,
                   "replication_read_bench: unknown flag %s (--size-mib N --rounds N "
                   "--buffer-kib N)\n",
                   a.c_str());
      return 2;
    }
  }
  gfrep::testing::TempDir dir("readbench");
  gfrep::catalog::CatalogOptions co;
  co.path = dir.Sub("db");
  auto cat = gfrep::catalog::OpenRocksCatalog(co);
  if (!cat.ok()) return Fail("open catalog", cat.status());
  gfrep::catalog::Site site;
  site.name = "A";
  if (auto s = (*cat)->PutSite(site); !s.ok()) return Fail("put site", s);
  gfrep::catalog::Node node;
  node.name = "a1";
  node.site = "A";
  node.address = "127.0.0.1:1";
  node.spool = dir.Sub("spool");
  if (auto s = (*cat)->RegisterNode(node); !s.ok()) return Fail("register node", s);
  // The bytes first (to checksum them), then the catalog's record, then the replica under
  // its identity name as an agent stores it: <spool>/.gfrep-data/<inode>/<generation>.
  const std::string staged = dir.Sub("big.staged");
  gfrep::testing::WriteRandomFile(staged, size_mib << 20, 42);
  auto sum = gfrep::transfer::ComputeFileChecksum(staged, gfrep::transfer::ChecksumAlgorithm::kXxh3_128);
  if (!sum.ok()) return Fail("checksum", sum.status());
  gfrep::catalog::MkdirOptions m;
  m.parents = true;
  if (auto s = (*cat)->Mkdir("/bench", m); !s.ok()) return Fail("mkdir /bench", s.status());
  gfrep::catalog::FileContent c;
  c.size = size_mib << 20;
  c.checksum_algo = "xxh3-128";
  c.checksum = sum->substr(sum->find(':') + 1);
  auto attrs = (*cat)->CommitFile("/bench/big", c, "a1", std::nullopt);
  if (!attrs.ok()) return Fail("commit /bench/big", attrs.status());
  const std::filesystem::path file =
      std::filesystem::path(node.spool) /
      gfrep::transfer::ReplicaRelativePath(attrs->inode, attrs->generation);
  std::filesystem::create_directories(file.parent_path());
  std::filesystem::rename(staged, file);

  gfrep::replica::client::ReaderOptions o;
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
