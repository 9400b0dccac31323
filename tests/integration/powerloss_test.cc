// Power cuts (issue 36): gfcatalogd's RocksDB catalog and node a1's spool live on a lazy
// disk (gfrep-test-lazyfs, tests/support/lazyfs/lazy_fs.h: what was not fsynced is lost at
// the cut), node b1 at another site on an ordinary one. Work is acknowledged (catalog
// creates, gfreg commits to a1, copies to a1 whose CompleteTask returned), then the machine
// of the lazy disk loses power: gfcatalogd and a1 are killed (kill -9), the disk drops what
// was never synced, a new mount comes up on what is left and the daemons restart on it.
// Everything acknowledged must be there and verify (size and checksum, through gfsck -c,
// gfexport --verify and the bytes themselves); nothing unacknowledged may be half there
// under a final name (every file under a1's .gfrep-data is whole). Kill -9 alone cannot
// show a missing fsync: the page cache survives it.
//
// Needs root and /dev/fuse (skipped with a message otherwise); ctest -L powerloss.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "catalog/client.h"
#include "tests/support/federation.h"
#include "tests/support/lazy_mount.h"

namespace gfrep {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;
using testing::RunResult;

class PowerLossTest : public testing::FederationTest {
 protected:
  PowerLossTest() : FederationTest("powerloss") {}

  void SetUp() override {
    if (std::string why = testing::LazyMount::Unavailable(); !why.empty()) {
      GTEST_SKIP() << "power-cut test " << why;
    }
    fs::create_directories(disk_);
    Mount();
    if (HasFatalFailure()) return;
    testing::FederationOptions o;
    // The daemons make their directories on the fresh disk themselves, as at a first start.
    o.db = (mnt_ / "catalog").string();
    o.spools = {{"a1", mnt_ / "spool-a1"}};
    StartFederation({{"a1", "A"}, {"b1", "B"}}, o);
  }

  void TearDown() override {
    // The daemons first: the lazyfs has to serve their files while they exit.
    catalogd_.Kill();
    for (auto& [node, agent] : agents_) agent.Kill();
  }

  void Mount() {
    absl::StatusOr<testing::LazyMount> m = testing::LazyMount::Start(disk_, mnt_);
    ASSERT_TRUE(m.ok()) << m.status();
    mount_ = std::move(*m);
  }

  // The machine of the lazy disk loses power: its processes die at once.
  void KillDiskDaemons() {
    catalogd_.Kill();
    agents_.at("a1").Kill();
  }

  // The disk keeps only what was synced; the machine comes back on it.
  void CutAndRestart() {
    absl::StatusOr<std::string> summary = mount_.Cut();
    ASSERT_TRUE(summary.ok()) << summary.status();
    Mount();
    if (HasFatalFailure()) return;
    StartCatalog();
    if (HasFatalFailure()) return;
    // A fresh client: the old one's connection went with the killed catalog.
    catalog::ClientOptions co;
    co.address = catalog_;
    co.timeout = 10s;
    absl::StatusOr<std::unique_ptr<catalog::CatalogClient>> client =
        catalog::CatalogClient::Create(co);
    ASSERT_TRUE(client.ok()) << client.status();
    client_ = std::move(*client);
    StartAgent("a1");
  }

  // a1's replica of `path`: complete in the catalog, and these bytes on its disk.
  void ExpectReplicaAtA1(const std::string& path, const std::string& bytes) {
    EXPECT_EQ(States(path)["a1"], "complete") << path;
    EXPECT_TRUE(Replica("a1", path) == bytes)
        << path << ": a1's replica file is not the bytes stored";
  }

  // Nothing partial under a final name: every file under a1's .gfrep-data/<inode>/<gen>
  // holds all the bytes some store of the inode's path sent (`sources`: every store tried,
  // acknowledged or not).
  void ExpectOnlyWholeReplicaFiles(const std::map<std::string, std::string>& sources) {
    std::error_code ec;
    int files = 0;
    for (fs::recursive_directory_iterator it(Spool("a1") / ".gfrep-data", ec), end;
         !ec && it != end; it.increment(ec)) {
      if (!it->is_regular_file()) continue;
      ++files;
      const fs::path file = it->path();
      const catalog::InodeId inode = std::stoull(file.parent_path().filename().string());
      absl::StatusOr<std::string> path = client_->PathOf(inode);
      ASSERT_TRUE(path.ok()) << file << ": inode unknown to the catalog: " << path.status();
      auto source = sources.find(*path);
      ASSERT_NE(source, sources.end()) << file << ": " << *path << " was never stored";
      EXPECT_TRUE(testing::ReadFile(file) == source->second)
          << file << " (" << *path << ", " << fs::file_size(file) << " bytes of "
          << source->second.size() << ") is not a whole file stored";
    }
    EXPECT_FALSE(ec) << ec.message();
    EXPECT_GT(files, 0);
  }

  // gfsck -c of a1 after the restart: every replica record checked with its checksum.
  nlohmann::json Fsck() {
    RunResult r = Tool({"gfsck", "--node", "a1", "-c", "--json"});
    nlohmann::json j = nlohmann::json::parse(r.out, nullptr, false);
    EXPECT_TRUE(j.is_object()) << r.out << r.err;
    return j.is_object() ? j : nlohmann::json::object();
  }

  // Paths of `paths` whose a1 replica is complete now.
  std::set<std::string> CompleteAtA1(const std::vector<std::string>& paths) {
    std::set<std::string> out;
    for (const std::string& p : paths) {
      absl::StatusOr<catalog::Attributes> a = client_->Stat(p);
      if (!a.ok()) continue;
      absl::StatusOr<std::vector<catalog::Replica>> rs = client_->GetReplicas(a->inode);
      if (!rs.ok()) continue;
      for (const catalog::Replica& r : *rs) {
        if (r.node == "a1" && r.state == catalog::ReplicaState::kComplete &&
            r.generation == a->generation) {
          out.insert(p);
        }
      }
    }
    return out;
  }

  fs::path disk_ = dir_.path() / "disk";
  fs::path mnt_ = dir_.path() / "mnt";
  testing::LazyMount mount_;
};

catalog::FileContent ContentOf(int i) {
  catalog::FileContent c;
  c.size = static_cast<std::uint64_t>(i);
  c.checksum_algo = "xxh3-128";
  c.checksum = fmt::format("{:032x}", i);
  return c;
}

TEST_F(PowerLossTest, AcknowledgedEntriesAndReplicasSurviveACut) {
  // Catalog entries: a directory made with gfmkdir, files created by a client.
  RunResult r = Tool({"gfmkdir", "/meta"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  constexpr int kEntries = 20;
  for (int i = 0; i < kEntries; ++i) {
    ASSERT_TRUE(client_->CreateFile(fmt::format("/meta/f{}", i), ContentOf(i)).ok()) << i;
  }
  // Files stored at a1 by gfreg (their bytes are written on the lazy disk), and files
  // stored at b1 that gfrep -N 2 copies to a1 (done: every CompleteTask was acknowledged).
  std::map<std::string, std::string> stored;
  for (int i = 0; i < 3; ++i) {
    const std::string up = fmt::format("/up/f{}", i);
    stored[up] = Store(up, (1 << 20) + 4099 * i, 100 + i, "a1");
    const std::string rep = fmt::format("/rep/f{}", i);
    stored[rep] = Store(rep, (1 << 20) + 511 * i, 200 + i, "b1");
  }
  ASSERT_FALSE(HasFailure());
  r = Tool({"gfrep", "-N", "2", "-r", "/rep"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  // Written and never synced: if the cut kept it, this test would prove nothing.
  std::ofstream(mnt_ / "unsynced") << "not durable";

  KillDiskDaemons();
  CutAndRestart();
  if (HasFatalFailure()) return;

  EXPECT_FALSE(fs::exists(disk_ / "unsynced"));
  absl::StatusOr<catalog::Attributes> meta = client_->Stat("/meta");
  ASSERT_TRUE(meta.ok()) << "gfmkdir /meta lost: " << meta.status();
  EXPECT_EQ(meta->type, catalog::FileType::kDirectory);
  for (int i = 0; i < kEntries; ++i) {
    absl::StatusOr<catalog::Attributes> a = client_->Stat(fmt::format("/meta/f{}", i));
    ASSERT_TRUE(a.ok()) << "acknowledged create /meta/f" << i << " lost: " << a.status();
    EXPECT_EQ(a->size, static_cast<std::uint64_t>(i));
    EXPECT_EQ(a->checksum, ContentOf(i).checksum);
  }
  for (const auto& [path, bytes] : stored) {
    ExpectReplicaAtA1(path, bytes);
    // The read path serves a1's replica only if it is as recorded (size, mtime stamp) and,
    // with --verify, its checksum matches: /up files have no other replica.
    r = Tool({"gfexport", "--site", "A", "--node", "a1", "--verify", path});
    EXPECT_EQ(r.exit_code, 0) << path << ": " << r.err;
    EXPECT_TRUE(r.out == bytes) << "gfexport --verify " << path << " at a1 read other bytes";
  }
  ExpectOnlyWholeReplicaFiles(stored);
  nlohmann::json fsck = Fsck();
  EXPECT_EQ(fsck.value("good", -1), static_cast<int>(stored.size())) << fsck.dump();
  EXPECT_EQ(fsck.value("lost", -1), 0) << fsck.dump();
  EXPECT_EQ(fsck.value("corrupt", -1), 0) << fsck.dump();
  EXPECT_TRUE(fsck["dark"].empty()) << fsck.dump();
}

TEST_F(PowerLossTest, AcknowledgedWorkSurvivesACutInTheMiddleOfAStream) {
  // A replication to a1 that the cut interrupts: files at b1, copied two at a time over a
  // paced route, so that copies are in flight when the power goes.
  std::map<std::string, std::string> sources;  // every store tried: path -> bytes
  std::vector<std::string> rep_paths;
  constexpr int kReplicated = 16;
  for (int i = 0; i < kReplicated; ++i) {
    rep_paths.push_back(fmt::format("/rep/f{}", i));
    sources[rep_paths.back()] = Store(rep_paths.back(), 2 << 20, 300 + i, "b1");
  }
  ASSERT_FALSE(HasFailure());
  catalog::Route route;
  route.src_site = "B";
  route.dst_site = "A";
  route.route_rate_bps = 80'000'000;  // 10 MB/s: a 2 MiB copy takes about 0.2 s
  ASSERT_TRUE(client_->PutRoute(route).ok());
  RunResult r = Tool({"gfrep", "-N", "2", "-r", "-j", "2", "--detach", "/rep"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::uint64_t request = std::stoull(r.out);

  // Meanwhile, clients create catalog entries and gfreg stores files at a1, each recording
  // what was acknowledged; they stop at their first failure (the catalog or a1 is gone), or
  // when told (a failed check).
  ASSERT_TRUE(client_->Mkdir("/stream", {}).ok());
  std::mutex mu;
  std::condition_variable acked_cv;
  std::set<int> created;
  std::set<std::string> uploaded;
  std::atomic<int> next{0};
  std::atomic<bool> stop{false};
  std::vector<std::thread> streams;
  struct Joiner {
    std::atomic<bool>& stop;
    std::vector<std::thread>& threads;
    ~Joiner() {
      stop = true;
      for (std::thread& t : threads) {
        if (t.joinable()) t.join();
      }
    }
  } joiner{stop, streams};
  for (int t = 0; t < 3; ++t) {
    streams.emplace_back([&] {
      catalog::ClientOptions o;
      o.address = catalog_;
      o.timeout = 10s;
      absl::StatusOr<std::unique_ptr<catalog::CatalogClient>> c = catalog::CatalogClient::Create(o);
      if (!c.ok()) return;
      while (!stop) {
        const int i = next++;
        if (!(*c)->CreateFile(fmt::format("/stream/c{}", i), ContentOf(i)).ok()) return;
        std::lock_guard<std::mutex> lock(mu);
        created.insert(i);
        acked_cv.notify_all();
      }
    });
  }
  streams.emplace_back([&] {
    for (int k = 0; !stop; ++k) {
      const std::string path = fmt::format("/stream/u{}", k);
      const fs::path local = dir_.path() / fmt::format("upload-{}", k);
      testing::WriteRandomFile(local, (1 << 20) + 511 * k, 1000 + k);
      {
        std::lock_guard<std::mutex> lock(mu);
        sources[path] = testing::ReadFile(local);
      }
      if (Tool({"gfreg", local.string(), path, "--node", "a1"}, 60s).exit_code != 0) return;
      std::lock_guard<std::mutex> lock(mu);
      uploaded.insert(path);
      acked_cv.notify_all();
    }
  });

  // Cut once each kind of work has been acknowledged a few times, with copies still to do.
  {
    std::unique_lock<std::mutex> lock(mu);
    ASSERT_TRUE(acked_cv.wait_for(lock, 120s,
                                  [&] { return created.size() >= 200 && uploaded.size() >= 2; }))
        << created.size() << " creates and " << uploaded.size() << " uploads acknowledged";
  }
  std::set<std::string> copied = CompleteAtA1(rep_paths);
  const auto deadline = std::chrono::steady_clock::now() + 120s;
  for (std::uint64_t seq = *client_->LastEventSeq();
       copied.size() < 3 && std::chrono::steady_clock::now() < deadline;) {
    absl::StatusOr<std::vector<catalog::Event>> ev = client_->ReadEvents(seq, 1000, 1s);
    ASSERT_TRUE(ev.ok()) << ev.status();
    if (!ev->empty()) seq = ev->back().seq;
    copied = CompleteAtA1(rep_paths);
  }
  ASSERT_GE(copied.size(), 3u) << "copies to a1 did not complete";
  KillDiskDaemons();
  for (std::thread& t : streams) t.join();  // each stops at its first failure
  std::set<int> acked_creates;
  std::set<std::string> acked_uploads;
  {
    std::lock_guard<std::mutex> lock(mu);
    acked_creates = created;
    acked_uploads = uploaded;
  }
  CutAndRestart();
  if (HasFatalFailure()) return;

  for (int i : acked_creates) {
    absl::StatusOr<catalog::Attributes> a = client_->Stat(fmt::format("/stream/c{}", i));
    ASSERT_TRUE(a.ok()) << "acknowledged create /stream/c" << i << " lost: " << a.status();
    EXPECT_EQ(a->size, static_cast<std::uint64_t>(i));
  }
  for (const std::string& path : acked_uploads) ExpectReplicaAtA1(path, sources.at(path));
  for (const std::string& path : copied) ExpectReplicaAtA1(path, sources.at(path));
  ExpectOnlyWholeReplicaFiles(sources);
  nlohmann::json fsck = Fsck();
  EXPECT_EQ(fsck.value("lost", -1), 0) << fsck.dump();
  EXPECT_EQ(fsck.value("corrupt", -1), 0) << fsck.dump();
  EXPECT_GE(fsck.value("good", -1), static_cast<int>(acked_uploads.size() + copied.size()))
      << fsck.dump();

  // The interrupted request carries on after the restart and every copy is right.
  catalog::Request done = WaitRequest(request, 120s);
  EXPECT_EQ(done.state, catalog::RequestState::kDone) << done.error;
  for (const std::string& path : rep_paths) ExpectReplicaAtA1(path, sources.at(path));
  ::testing::Test::RecordProperty("acked_creates", static_cast<int>(acked_creates.size()));
  ::testing::Test::RecordProperty("acked_uploads", static_cast<int>(acked_uploads.size()));
  ::testing::Test::RecordProperty("acked_copies", static_cast<int>(copied.size()));
}

}  // namespace
}  // namespace gfrep
