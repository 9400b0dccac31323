// Integration: kill -9 of gfcatalogd while clients create 10,000 files; after a restart
// every acknowledged create is there and nothing is half-made.
#include <gtest/gtest.h>

#include <atomic>
#include <mutex>
#include <set>
#include <thread>

#include <fmt/format.h>

#include "catalog/client.h"
#include "tests/support/subprocess.h"
#include "tests/support/temp_dir.h"

namespace gfrep {
namespace {

using namespace std::chrono_literals;
using testing::BinPath;
using testing::Subprocess;

constexpr int kFiles = 10000;
constexpr int kClients = 8;

absl::StatusOr<Subprocess> StartDaemon(const std::string& db, std::string* address) {
  absl::StatusOr<Subprocess> d =
      Subprocess::Start({BinPath("gfcatalogd"), "--db", db, "--listen", "127.0.0.1:0"});
  if (!d.ok()) return d.status();
  absl::StatusOr<std::string> a = d->WaitForListen(30s);
  if (!a.ok()) return a.status();
  *address = *a;
  return d;
}

std::unique_ptr<catalog::CatalogClient> Connect(const std::string& address) {
  catalog::ClientOptions o;
  o.address = address;
  o.timeout = 20s;
  absl::StatusOr<std::unique_ptr<catalog::CatalogClient>> c = catalog::CatalogClient::Create(o);
  EXPECT_TRUE(c.ok());
  return c.ok() ? std::move(*c) : nullptr;
}

TEST(CatalogDurabilityTest, AcknowledgedCreatesSurviveKillNine) {
  testing::TempDir dir("catalog-kill");
  std::string db = dir.Sub("db");
  std::string address;
  absl::StatusOr<Subprocess> daemon = StartDaemon(db, &address);
  ASSERT_TRUE(daemon.ok()) << daemon.status();
  std::unique_ptr<catalog::CatalogClient> client = Connect(address);
  ASSERT_TRUE(client->Mkdir("/d", {}).ok());

  std::mutex mu;
  std::set<int> acked;
  std::atomic<int> next{0};
  std::atomic<int> acks{0};
  std::vector<std::thread> clients;
  for (int t = 0; t < kClients; ++t) {
    clients.emplace_back([&] {
      std::unique_ptr<catalog::CatalogClient> c = Connect(address);
      while (true) {
        int i = next.fetch_add(1);
        if (i >= kFiles) return;
        catalog::FileContent content;
        content.size = static_cast<std::uint64_t>(i);
        content.checksum = fmt::format("{:08x}", i);
        absl::StatusOr<catalog::Attributes> a = c->CreateFile(fmt::format("/d/f{}", i), content);
        if (!a.ok()) return;  // the daemon is gone: this create was not acknowledged
        std::lock_guard<std::mutex> l(mu);
        acked.insert(i);
        ++acks;
      }
    });
  }
  // Kill once a good part of the creates has been acknowledged (or all of them, on a very
  // fast machine: then the test still checks the restart).
  while (acks.load() < kFiles / 3 && next.load() < kFiles) std::this_thread::yield();
  daemon->Kill();
  for (auto& t : clients) t.join();
  ASSERT_GT(acked.size(), 0u);

  daemon = StartDaemon(db, &address);
  ASSERT_TRUE(daemon.ok()) << daemon.status();
  client = Connect(address);
  for (int i : acked) {
    absl::StatusOr<catalog::Attributes> a = client->Stat(fmt::format("/d/f{}", i));
    ASSERT_TRUE(a.ok()) << "acknowledged create /d/f" << i << " lost: " << a.status();
    EXPECT_EQ(a->size, static_cast<std::uint64_t>(i));
  }
  // Nothing half-made: every listed entry is complete, and its inode record agrees.
  absl::StatusOr<std::vector<catalog::DirEntry>> list = client->List("/d", {});
  ASSERT_TRUE(list.ok()) << list.status();
  EXPECT_GE(list->size(), acked.size());
  std::set<int> present;
  for (const catalog::DirEntry& e : *list) {
    int i = std::stoi(e.name.substr(1));
    present.insert(i);
    EXPECT_EQ(e.attributes.size, static_cast<std::uint64_t>(i));
    EXPECT_EQ(e.attributes.checksum, fmt::format("{:08x}", i));
    absl::StatusOr<std::string> path = client->PathOf(e.attributes.inode);
    ASSERT_TRUE(path.ok()) << path.status();
    EXPECT_EQ(*path, "/d/" + e.name);
  }
  // Finish the 10,000 after the restart; inode numbers are never reused.
  for (int i = 0; i < kFiles; ++i) {
    if (present.count(i)) continue;
    ASSERT_TRUE(client->CreateFile(fmt::format("/d/f{}", i), {}).ok()) << i;
  }
  list = client->List("/d", {});
  ASSERT_EQ(list->size(), static_cast<std::size_t>(kFiles));
  std::set<catalog::InodeId> inodes;
  for (const catalog::DirEntry& e : *list) inodes.insert(e.attributes.inode);
  EXPECT_EQ(inodes.size(), static_cast<std::size_t>(kFiles));
}

}  // namespace
}  // namespace gfrep
