// Two front ends on one PostgreSQL database (CatalogOptions::shared: the write gate of
// internal/kv_catalog.h), as two gfcatalogd processes would have them: two catalogs, each with its
// own connections, in one test. What each may decide alone in one process (a free name, the next
// id, which task to lease) must hold across both. The PostgreSQL server is private to the binary
// (tests/support/postgres_server.h); skipped, saying why, where it cannot start.

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <set>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "catalog/catalog.h"
#include "catalog/internal/kv_catalog.h"
#include "catalog/internal/kv_store.h"
#include "tests/support/postgres_server.h"

namespace gfrep::catalog {
namespace {

using namespace std::chrono_literals;

class SharedFrontEndsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<std::string> db = testing::SharedPostgres().CreateDatabase();
    if (!db.ok()) GFREP_SKIP_OR_FAIL_WITHOUT_POSTGRES(db.status());
    location_ = *db;
    a_ = OpenOrDie();
    b_ = OpenOrDie();
  }

  absl::StatusOr<std::unique_ptr<Catalog>> Open(bool shared) {
    CatalogOptions options;
    options.path = location_;
    options.shared = shared;
    return OpenCatalog(options);
  }
  std::unique_ptr<Catalog> OpenOrDie() {
    absl::StatusOr<std::unique_ptr<Catalog>> c = Open(true);
    EXPECT_TRUE(c.ok()) << c.status();
    return c.ok() ? std::move(*c) : nullptr;
  }

  void MakeTopology(Catalog& c) {
    ASSERT_TRUE(c.PutSite({"a", {}}).ok());
    ASSERT_TRUE(c.PutSite({"b", {}}).ok());
    for (const char* name : {"a1", "b1"}) {
      Node n;
      n.name = name;
      n.site = name[0] == 'a' ? "a" : "b";
      n.address = "127.0.0.1:1";
      ASSERT_TRUE(c.RegisterNode(n).ok());
    }
  }

  std::string location_;
  std::unique_ptr<Catalog> a_, b_;
};

TEST_F(SharedFrontEndsTest, ALoneCatalogAndSharedFrontEndsExcludeEachOther) {
  absl::StatusOr<std::unique_ptr<Catalog>> lone = Open(false);
  ASSERT_FALSE(lone.ok());
  EXPECT_EQ(lone.status().code(), absl::StatusCode::kFailedPrecondition) << lone.status();
  EXPECT_NE(lone.status().message().find("--shared"), std::string::npos) << lone.status();
  a_.reset();
  b_.reset();
  // At once: a closed store unlocks before it closes (the server would free a closed
  // session's locks only when its backend exits, a moment later; this open then failed).
  lone = Open(false);
  ASSERT_TRUE(lone.ok()) << lone.status() << " (the front ends' locks must go with them)";
  absl::StatusOr<std::unique_ptr<Catalog>> shared = Open(true);
  ASSERT_FALSE(shared.ok());
  EXPECT_EQ(shared.status().code(), absl::StatusCode::kFailedPrecondition) << shared.status();
  EXPECT_NE(shared.status().message().find("alone"), std::string::npos) << shared.status();

  // RocksDB has no front ends to share with.
  CatalogOptions rocks;
  rocks.path = "/nonexistent/should-not-be-created";
  rocks.shared = true;
  absl::StatusOr<std::unique_ptr<Catalog>> r = OpenCatalog(rocks);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << r.status();
}

TEST_F(SharedFrontEndsTest, AWriteOutsideTheWriteLockIsRefusedAndNothingIsWritten) {
  internal::KvStore* store = internal::StoreOf(*a_);
  ASSERT_NE(store, nullptr);
  EXPECT_TRUE(store->shared());
  internal::KvBatch batch;
  batch.Put(internal::kMeta, "probe", "1");
  absl::Status s = store->Write(batch, true, "probe");
  EXPECT_EQ(s.code(), absl::StatusCode::kInternal) << s;
  EXPECT_TRUE(absl::IsNotFound(store->Get(internal::kMeta, "probe", "probe").status()));
  {
    absl::StatusOr<std::unique_ptr<internal::KvWriteLock>> lock = store->LockWrites();
    ASSERT_TRUE(lock.ok()) << lock.status();
    absl::StatusOr<std::unique_ptr<internal::KvWriteLock>> again = store->LockWrites();
    ASSERT_TRUE(again.ok()) << again.status() << " (re-entry on one thread)";
    again->reset();
    EXPECT_TRUE(store->Write(batch, true, "probe").ok()) << "still held by the outer lock";
  }
  EXPECT_EQ(store->Get(internal::kMeta, "probe", "probe").value_or(""), "1");
  EXPECT_EQ(store->Write(batch, true, "probe").code(), absl::StatusCode::kInternal);
}

TEST_F(SharedFrontEndsTest, WhatOneAcknowledgesTheOtherServes) {
  ASSERT_TRUE(a_->Mkdir("/d", {}).ok());
  FileContent content;
  content.size = 5;
  absl::StatusOr<Attributes> f = b_->CreateFile("/d/f", content);
  ASSERT_TRUE(f.ok()) << f.status();
  absl::StatusOr<Attributes> seen = a_->Stat("/d/f");
  ASSERT_TRUE(seen.ok()) << seen.status();
  EXPECT_EQ(seen->inode, f->inode);
  EXPECT_EQ(a_->CreateFile("/d/f", content).status().code(), absl::StatusCode::kAlreadyExists);
  ASSERT_TRUE(a_->Rename("/d/f", "/d/g").ok());
  EXPECT_TRUE(absl::IsNotFound(b_->Stat("/d/f").status()));
  EXPECT_TRUE(b_->Stat("/d/g").ok());
}

TEST_F(SharedFrontEndsTest, RacingCreatesOnBothLoseNothingAndEachNameHasOneWinner) {
  ASSERT_TRUE(a_->Mkdir("/race", {}).ok());
  constexpr int kThreads = 4, kEach = 40, kContested = 40;
  std::atomic<int> contested_wins{0}, other_errors{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      Catalog& c = t % 2 == 0 ? *a_ : *b_;
      FileContent content;
      for (int i = 0; i < kEach; ++i) {
        // Its own name, then a name every thread wants.
        if (!c.CreateFile(fmt::format("/race/t{}-{}", t, i), content).ok()) ++other_errors;
        absl::StatusOr<Attributes> same = c.CreateFile(fmt::format("/race/same{}", i % kContested), content);
        if (same.ok()) {
          ++contested_wins;
        } else if (!absl::IsAlreadyExists(same.status())) {
          ++other_errors;
        }
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(other_errors.load(), 0);
  EXPECT_EQ(contested_wins.load(), kContested) << "a name created twice: one create was lost";
  absl::StatusOr<std::vector<DirEntry>> list = b_->List("/race", {});
  ASSERT_TRUE(list.ok()) << list.status();
  EXPECT_EQ(list->size(), static_cast<std::size_t>(kThreads * kEach + kContested));
  std::set<InodeId> inodes;
  for (const DirEntry& e : *list) inodes.insert(e.attributes.inode);
  EXPECT_EQ(inodes.size(), list->size()) << "two entries share an inode id";
}

TEST_F(SharedFrontEndsTest, RequestAndTaskIdsFromBothNeverRepeat) {
  MakeTopology(*a_);
  FileContent content;
  content.size = 1;
  content.checksum_algo = "xxh3-128";
  content.checksum = "c";
  ASSERT_TRUE(a_->CommitFile("/f", content, "a1", std::nullopt).ok());
  std::uint64_t last_request = 0, last_task = 0;
  for (int i = 0; i < 10; ++i) {
    Catalog& c = i % 2 == 0 ? *a_ : *b_;
    RequestSpec spec;
    spec.paths = {"/f"};
    absl::StatusOr<Request> r = c.CreateRequest(spec);
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_GT(r->id, last_request) << "front end " << i % 2;
    last_request = r->id;
    TaskSpec ts;
    ts.request_id = r->id;
    ts.path = "/f";
    ts.src_node = "a1";
    ts.dst_node = "b1";
    absl::StatusOr<std::vector<Task>> tasks = c.CreateTasks({ts});
    ASSERT_TRUE(tasks.ok()) << tasks.status();
    EXPECT_GT(tasks->front().id, last_task) << "front end " << i % 2;
    last_task = tasks->front().id;
  }
  absl::StatusOr<std::vector<Request>> all = b_->ListRequests(true, RequestState::kQueued, 100);
  ASSERT_TRUE(all.ok()) << all.status();
  EXPECT_EQ(all->size(), 10u);
}

TEST_F(SharedFrontEndsTest, ATaskIsLeasedByOneFrontEndOnly) {
  MakeTopology(*a_);
  FileContent content;
  content.size = 1;
  content.checksum_algo = "xxh3-128";
  content.checksum = "c";
  std::vector<TaskSpec> specs;
  for (int i = 0; i < 30; ++i) {
    const std::string path = fmt::format("/f{}", i);
    ASSERT_TRUE(a_->CommitFile(path, content, "a1", std::nullopt).ok());
    TaskSpec ts;
    ts.path = path;
    ts.src_node = "a1";
    ts.dst_node = "b1";
    specs.push_back(ts);
  }
  ASSERT_TRUE(a_->CreateTasks(specs).ok());
  std::vector<std::vector<std::uint64_t>> claimed(2);
  std::vector<std::thread> threads;
  for (int t = 0; t < 2; ++t) {
    threads.emplace_back([&, t] {
      Catalog& c = t == 0 ? *a_ : *b_;
      for (int round = 0; round < 40; ++round) {
        absl::StatusOr<std::vector<Task>> got = c.ClaimTasks(
            "b1", {fmt::format("w{}-{}a", t, round), fmt::format("w{}-{}b", t, round)}, 60s, 0ms);
        if (!got.ok() || got->empty()) continue;
        for (const Task& task : *got) claimed[t].push_back(task.id);
      }
    });
  }
  for (std::thread& t : threads) t.join();
  std::multiset<std::uint64_t> all(claimed[0].begin(), claimed[0].end());
  all.insert(claimed[1].begin(), claimed[1].end());
  std::set<std::uint64_t> distinct(all.begin(), all.end());
  EXPECT_EQ(all.size(), distinct.size()) << "a task leased twice";
  EXPECT_EQ(distinct.size(), 30u);
  EXPECT_FALSE(claimed[0].empty());
  EXPECT_FALSE(claimed[1].empty());
}

TEST_F(SharedFrontEndsTest, ALongPollOnOneWakesForTheOthersWrite) {
  absl::StatusOr<std::uint64_t> seq = b_->LastEventSeq();
  ASSERT_TRUE(seq.ok()) << seq.status();
  absl::StatusOr<std::vector<Event>> got;
  std::chrono::steady_clock::duration waited{};
  std::thread waiter([&] {
    const auto start = std::chrono::steady_clock::now();
    got = b_->ReadEvents(*seq, 10, 30s);
    waited = std::chrono::steady_clock::now() - start;
  });
  std::this_thread::sleep_for(300ms);
  ASSERT_TRUE(a_->RecordAudit("tester", "poke", "from a").ok());
  waiter.join();
  ASSERT_TRUE(got.ok()) << got.status();
  ASSERT_FALSE(got->empty());
  EXPECT_EQ(got->front().state, "poke");
  // Woken by the notice, not by the end of the 30 s wait.
  EXPECT_LT(waited, 20s);
  absl::StatusOr<std::uint64_t> last = b_->LastEventSeq();
  ASSERT_TRUE(last.ok());
  EXPECT_EQ(*last, got->back().seq) << "b's newest event is the one a wrote";
}

TEST_F(SharedFrontEndsTest, OneLeaderAtATimeAndTheOtherTakesOverWhenItGoes) {
  internal::KvStore* a = internal::StoreOf(*a_);
  internal::KvStore* b = internal::StoreOf(*b_);
  ASSERT_TRUE(a->HoldLeadership());
  EXPECT_FALSE(b->HoldLeadership());
  EXPECT_TRUE(a->HoldLeadership()) << "a keeps what it holds";
  a_.reset();
  EXPECT_TRUE(b->HoldLeadership()) << "the leadership stayed with a closed front end";
}

}  // namespace
}  // namespace gfrep::catalog
