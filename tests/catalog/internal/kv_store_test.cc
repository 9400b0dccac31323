#include "catalog/internal/kv_store.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <ostream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "absl/strings/str_cat.h"
#include "catalog/internal/codec.h"
#include "catalog/internal/open_store.h"
#include "catalog/internal/pg_store.h"
#include "catalog/internal/rocks_store.h"
#include "tests/support/postgres_server.h"
#include "tests/support/temp_dir.h"

namespace gfrep::catalog::internal {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::StartsWith;
using KeyValues = std::vector<std::pair<std::string, std::string>>;

// What a backend's factory opens a store in, one per test: a temporary directory, and a
// fresh database on the binary's shared PostgreSQL server (made on first use). Every open
// in one test opens the same location, so a reopen sees what was written before.
class StoreEnv {
 public:
  const gfrep::testing::TempDir& dir() const { return dir_; }

  // This test's database: its conninfo.
  absl::StatusOr<std::string> PostgresDatabase() {
    if (pg_conninfo_.empty()) {
      absl::StatusOr<std::string> db = gfrep::testing::SharedPostgres().CreateDatabase();
      if (!db.ok()) {
        if (gfrep::testing::PostgresNotInstalled(db.status())) {
          skip_reason_ = absl::StrCat("PostgreSQL is not installed: ", db.status().ToString());
        }
        return db.status();
      }
      pg_conninfo_ = *db;
    }
    return pg_conninfo_;
  }

  // Set when the backend cannot run here (no server binaries, and GFREP_REQUIRE_POSTGRES is
  // not 1): the test is skipped. Any other failure to open fails the test.
  const std::string& skip_reason() const { return skip_reason_; }

 private:
  gfrep::testing::TempDir dir_{"kvstore"};
  std::string pg_conninfo_;
  std::string skip_reason_;
};

using StoreFactory = std::function<absl::StatusOr<std::unique_ptr<KvStore>>(StoreEnv&)>;

struct Backend {
  std::string name;
  StoreFactory open;
};

void PrintTo(const Backend& backend, std::ostream* os) { *os << backend.name; }

absl::StatusOr<std::unique_ptr<KvStore>> OpenPostgres(StoreEnv& env) {
  absl::StatusOr<std::string> db = env.PostgresDatabase();
  if (!db.ok()) return db.status();
  PgStoreOptions options;
  options.conninfo = *db;
  // Small, so that a store holding a connection while fn runs would hang the nested-call
  // tests, and the concurrency test waits for connections.
  options.max_connections = 2;
  return OpenPgStore(options);
}

absl::StatusOr<std::unique_ptr<KvStore>> OpenRocks(StoreEnv& env) {
  CatalogOptions options;
  options.path = env.dir().Sub("rocks");
  return OpenRocksStore(options);
}

std::string Key(std::initializer_list<unsigned char> bytes) {
  return std::string(bytes.begin(), bytes.end());
}

class KvStoreTest : public ::testing::TestWithParam<Backend> {
 protected:
  void SetUp() override {
    absl::StatusOr<std::unique_ptr<KvStore>> store = GetParam().open(env_);
    if (!store.ok() && !env_.skip_reason().empty()) GTEST_SKIP() << env_.skip_reason();
    ASSERT_TRUE(store.ok()) << store.status();
    store_ = std::move(*store);
  }

  void Reopen() {
    store_.reset();
    absl::StatusOr<std::unique_ptr<KvStore>> store = GetParam().open(env_);
    ASSERT_TRUE(store.ok()) << store.status();
    store_ = std::move(*store);
  }

  void Put(Table t, std::string_view key, std::string_view value) {
    KvBatch b;
    b.Put(t, key, value);
    absl::Status s = store_->Write(b, /*sync=*/true, "put");
    ASSERT_TRUE(s.ok()) << s;
  }

  KeyValues ScanAll(Table t, std::string_view prefix, std::string_view start = "",
                    bool reverse = false, const KvSnapshot* snapshot = nullptr) {
    KeyValues out;
    absl::Status s = store_->Scan(
        t, prefix, start,
        [&](std::string_view k, std::string_view v) {
          out.emplace_back(k, v);
          return true;
        },
        snapshot, reverse);
    EXPECT_TRUE(s.ok()) << s;
    return out;
  }

  static std::vector<std::string> Keys(const KeyValues& kvs) {
    std::vector<std::string> keys;
    for (const auto& [k, v] : kvs) keys.push_back(k);
    return keys;
  }

  StoreEnv env_;
  std::unique_ptr<KvStore> store_;
};

TEST_P(KvStoreTest, GetsPutsAndDeletes) {
  const std::string binary_value("\0v\xff\x80", 4);
  Put(kDentries, "a", binary_value);
  Put(kInodes, "a", "other table");
  Put(kMeta, "empty", "");
  EXPECT_EQ(store_->Get(kDentries, "a", "a").value_or("?"), binary_value);
  EXPECT_EQ(store_->Get(kInodes, "a", "a").value_or("?"), "other table");
  EXPECT_EQ(store_->Get(kMeta, "empty", "empty").value_or("?"), "");

  Put(kDentries, "a", "second");
  EXPECT_EQ(store_->Get(kDentries, "a", "a").value_or("?"), "second");

  KvBatch b;
  b.Delete(kDentries, "a");
  b.Delete(kDentries, "never there");  // deleting an absent key is fine
  ASSERT_TRUE(store_->Write(b, true, "delete").ok());
  absl::StatusOr<std::string> gone = store_->Get(kDentries, "a", "entry /x");
  EXPECT_TRUE(absl::IsNotFound(gone.status())) << gone.status();
  EXPECT_THAT(std::string(gone.status().message()), HasSubstr("entry /x: not found"));
  EXPECT_EQ(store_->Get(kInodes, "a", "a").value_or("?"), "other table");
}

// MultiGet answers each key as Get would, in order, across PostgreSQL's pages of 1,024
// pipelined reads, and through a snapshot as of the snapshot.
TEST_P(KvStoreTest, MultiGetAnswersEachKeyInOrder) {
  KvBatch b;
  for (int i = 0; i < 2500; i += 2) b.Put(kDentries, fmt::format("k{:05}", i), fmt::format("v{}", i));
  ASSERT_TRUE(store_->Write(b, true, "fill").ok());
  std::vector<std::string> keys;
  for (int i = 2499; i >= 0; --i) keys.push_back(fmt::format("k{:05}", i));  // odd ones absent
  keys.push_back("k00010");                                                   // twice
  absl::StatusOr<std::vector<absl::StatusOr<std::string>>> got =
      store_->MultiGet(kDentries, keys, "entry");
  ASSERT_TRUE(got.ok()) << got.status();
  ASSERT_EQ(got->size(), keys.size());
  for (std::size_t i = 0; i < keys.size(); ++i) {
    const int n = std::stoi(keys[i].substr(1));
    if (n % 2 == 0) {
      EXPECT_EQ((*got)[i].value_or("?"), fmt::format("v{}", n)) << keys[i];
    } else {
      EXPECT_TRUE(absl::IsNotFound((*got)[i].status())) << keys[i] << ": " << (*got)[i].status();
      EXPECT_THAT(std::string((*got)[i].status().message()), HasSubstr("entry: not found"));
    }
  }
  EXPECT_TRUE(store_->MultiGet(kDentries, {}, "none")->empty());
  EXPECT_TRUE(absl::IsNotFound((*store_->MultiGet(kInodes, {"k00000"}, "x"))[0].status()))
      << "another table";

  std::unique_ptr<KvSnapshot> snap = store_->Snapshot();
  KvBatch later;
  later.Put(kDentries, "k00001", "new");
  later.Delete(kDentries, "k00000");
  ASSERT_TRUE(store_->Write(later, true, "later").ok());
  absl::StatusOr<std::vector<absl::StatusOr<std::string>>> then =
      store_->MultiGet(kDentries, {"k00000", "k00001"}, "entry", snap.get());
  ASSERT_TRUE(then.ok()) << then.status();
  EXPECT_EQ((*then)[0].value_or("?"), "v0");
  EXPECT_TRUE(absl::IsNotFound((*then)[1].status()));
  snap.reset();
  absl::StatusOr<std::vector<absl::StatusOr<std::string>>> now =
      store_->MultiGet(kDentries, {"k00000", "k00001"}, "entry");
  ASSERT_TRUE(now.ok()) << now.status();
  EXPECT_TRUE(absl::IsNotFound((*now)[0].status()));
  EXPECT_EQ((*now)[1].value_or("?"), "new");
}

TEST_P(KvStoreTest, EmptyBatchIsOk) {
  EXPECT_TRUE(store_->Write(KvBatch(), true, "nothing").ok());
  EXPECT_TRUE(store_->Write(KvBatch(), false, "nothing").ok());
}

// Bytes 0x00, 0x7f, 0x80 and 0xff, keys shorter than, equal to and longer than the prefix.
class ScanOrderTest : public KvStoreTest {
 protected:
  void SetUp() override {
    KvStoreTest::SetUp();
    if (IsSkipped() || HasFatalFailure()) return;
    KvBatch b;
    for (const std::string& k : all_) b.Put(kNodeTasks, k, "v" + k);
    ASSERT_TRUE(store_->Write(b, true, "fill").ok());
  }

  const std::string p_ = Key({'p', 0x00});
  const std::vector<std::string> in_p_ = {Key({'p', 0x00}),
                                          Key({'p', 0x00, 0x00}),
                                          Key({'p', 0x00, 0x01}),
                                          Key({'p', 0x00, 0x7f}),
                                          Key({'p', 0x00, 0x80}),
                                          Key({'p', 0x00, 0xff}),
                                          Key({'p', 0x00, 0xff, 0xff})};
  const std::vector<std::string> all_ = {Key({'o', 0xff}),
                                         Key({'p'}),
                                         in_p_[5],
                                         in_p_[0],
                                         in_p_[3],
                                         in_p_[1],
                                         in_p_[6],
                                         in_p_[4],
                                         in_p_[2],
                                         Key({'p', 0x01}),
                                         Key({0xff}),
                                         Key({0xff, 0xff}),
                                         Key({0xff, 0xff, 0x00}),
                                         Key({0xff, 0xff, 0xff, 0xff}),
                                         Key({0xff, 0xfe}),
                                         Key({0x00})};
};

TEST_P(ScanOrderTest, ScansAPrefixInBytewiseOrder) {
  EXPECT_EQ(Keys(ScanAll(kNodeTasks, p_)), in_p_);
  KeyValues kvs = ScanAll(kNodeTasks, p_);
  ASSERT_FALSE(kvs.empty());
  EXPECT_EQ(kvs[0].second, "v" + in_p_[0]);
  // An all-0xff prefix has no successor: the scan runs to the end of the table.
  EXPECT_THAT(
      Keys(ScanAll(kNodeTasks, Key({0xff, 0xff}))),
      ElementsAre(Key({0xff, 0xff}), Key({0xff, 0xff, 0x00}), Key({0xff, 0xff, 0xff, 0xff})));
  // The empty prefix is the whole table.
  std::vector<std::string> sorted = all_;
  std::sort(sorted.begin(), sorted.end());  // std::string compares bytes as unsigned char
  EXPECT_EQ(Keys(ScanAll(kNodeTasks, "")), sorted);
  EXPECT_TRUE(ScanAll(kNodeTasks, "q").empty());
  EXPECT_TRUE(ScanAll(kTasks, "").empty()) << "other tables are apart";
}

TEST_P(ScanOrderTest, StartsInTheMiddle) {
  EXPECT_EQ(Keys(ScanAll(kNodeTasks, p_, in_p_[3])),
            std::vector<std::string>(in_p_.begin() + 3, in_p_.end()));
  // A start between keys begins at the next key.
  EXPECT_EQ(Keys(ScanAll(kNodeTasks, p_, Key({'p', 0x00, 0x02}))),
            std::vector<std::string>(in_p_.begin() + 3, in_p_.end()));
  EXPECT_TRUE(ScanAll(kNodeTasks, p_, Key({'p', 0x00, 0xff, 0xff, 0x00})).empty());
}

TEST_P(ScanOrderTest, StopsWhenFnSaysSo) {
  std::vector<std::string> seen;
  absl::Status s = store_->Scan(kNodeTasks, p_, "", [&](std::string_view k, std::string_view) {
    seen.emplace_back(k);
    return seen.size() < 2;
  });
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_THAT(seen, ElementsAre(in_p_[0], in_p_[1]));
}

TEST_P(ScanOrderTest, ScansInReverse) {
  std::vector<std::string> reversed(in_p_.rbegin(), in_p_.rend());
  EXPECT_EQ(Keys(ScanAll(kNodeTasks, p_, "", /*reverse=*/true)), reversed);
  EXPECT_THAT(
      Keys(ScanAll(kNodeTasks, Key({0xff, 0xff}), "", true)),
      ElementsAre(Key({0xff, 0xff, 0xff, 0xff}), Key({0xff, 0xff, 0x00}), Key({0xff, 0xff})));
  std::vector<std::string> sorted = all_;
  std::sort(sorted.rbegin(), sorted.rend());
  EXPECT_EQ(Keys(ScanAll(kNodeTasks, "", "", true)), sorted);
}

TEST_P(KvStoreTest, ScansAcrossManyPages) {
  // Past several pages of the PostgreSQL store (512 rows), inside prefix "a" with neighbours
  // on both sides.
  constexpr int kRows = 1300;
  KvBatch b;
  for (int i = 0; i < kRows; ++i) b.Put(kEvents, absl::StrCat("a", U64Key(i)), absl::StrCat(i));
  b.Put(kEvents, "0", "before");
  b.Put(kEvents, "b", "after");
  ASSERT_TRUE(store_->Write(b, true, "fill").ok());

  KeyValues forward = ScanAll(kEvents, "a");
  ASSERT_EQ(forward.size(), static_cast<std::size_t>(kRows));
  for (int i = 0; i < kRows; ++i) {
    ASSERT_EQ(forward[i].first, absl::StrCat("a", U64Key(i)));
    ASSERT_EQ(forward[i].second, absl::StrCat(i));
  }
  KeyValues backward = ScanAll(kEvents, "a", "", true);
  ASSERT_EQ(backward.size(), static_cast<std::size_t>(kRows));
  for (int i = 0; i < kRows; ++i) {
    ASSERT_EQ(backward[i].first, absl::StrCat("a", U64Key(kRows - 1 - i)));
  }
  KeyValues from = ScanAll(kEvents, "a", absl::StrCat("a", U64Key(600)));
  ASSERT_EQ(from.size(), static_cast<std::size_t>(kRows - 600));
  EXPECT_EQ(from.front().first, absl::StrCat("a", U64Key(600)));
  EXPECT_EQ(ScanAll(kEvents, "").size(), static_cast<std::size_t>(kRows + 2));
}

TEST_P(KvStoreTest, FnMayUseTheStoreDuringAScan) {
  constexpr int kRows = 1100;
  KvBatch b;
  for (int i = 0; i < kRows; ++i) b.Put(kTasks, U64Key(i), absl::StrCat(i));
  ASSERT_TRUE(store_->Write(b, true, "fill").ok());
  int rows = 0;
  absl::Status s = store_->Scan(kTasks, "", "", [&](std::string_view k, std::string_view v) {
    ++rows;
    EXPECT_EQ(store_->Get(kTasks, k, "same key").value_or("?"), v);
    KvBatch copy;
    copy.Put(kRequestTasks, k, v);
    EXPECT_TRUE(store_->Write(copy, false, "copy").ok());
    if (rows % 300 == 0) {
      int inner = 0;
      EXPECT_TRUE(
          store_
              ->Scan(kTasks, "", k, [&](std::string_view, std::string_view) { return ++inner < 3; })
              .ok());
      EXPECT_EQ(inner, 3);
    }
    return true;
  });
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_EQ(rows, kRows);
  EXPECT_EQ(ScanAll(kRequestTasks, "").size(), static_cast<std::size_t>(kRows));
}

TEST_P(KvStoreTest, AppliesTheOpsOfABatchInOrder) {
  Put(kReplicas, "deleted then put", "old");
  KvBatch b;
  b.Put(kReplicas, "put then deleted", "x");
  b.Delete(kReplicas, "put then deleted");
  b.Delete(kReplicas, "deleted then put");
  b.Put(kReplicas, "deleted then put", "new");
  b.Put(kReplicas, "put twice", "1");
  b.Put(kReplicas, "put twice", "2");
  b.Put(kNodeReplicas, "other table", "y");
  ASSERT_TRUE(store_->Write(b, true, "ordered").ok());
  EXPECT_TRUE(absl::IsNotFound(store_->Get(kReplicas, "put then deleted", "k").status()));
  EXPECT_EQ(store_->Get(kReplicas, "deleted then put", "k").value_or("?"), "new");
  EXPECT_EQ(store_->Get(kReplicas, "put twice", "k").value_or("?"), "2");
  EXPECT_EQ(store_->Get(kNodeReplicas, "other table", "k").value_or("?"), "y");
}

TEST_P(KvStoreTest, DeleteRangeRemovesTheHalfOpenRangeOfItsTableOnly) {
  for (char c : std::string("abcdef")) {
    Put(kEvents, std::string(1, c), "v");
    Put(kTasks, std::string(1, c), "v");
  }
  KvBatch b;
  b.DeleteRange(kEvents, "b", "e");
  b.Put(kEvents, "c", "put after the range delete");
  ASSERT_TRUE(store_->Write(b, true, "range").ok());
  EXPECT_THAT(Keys(ScanAll(kEvents, "")), ElementsAre("a", "c", "e", "f"));
  EXPECT_EQ(store_->Get(kEvents, "c", "k").value_or("?"), "put after the range delete");
  EXPECT_EQ(ScanAll(kTasks, "").size(), 6u);
}

TEST_P(KvStoreTest, ASnapshotDoesNotSeeLaterWrites) {
  Put(kSites, "a", "1");
  Put(kSites, "c", "1");
  std::unique_ptr<KvSnapshot> snap = store_->Snapshot();
  KvBatch b;
  b.Put(kSites, "a", "2");
  b.Put(kSites, "b", "2");
  b.Delete(kSites, "c");
  ASSERT_TRUE(store_->Write(b, true, "later").ok());

  EXPECT_EQ(store_->Get(kSites, "a", "a", snap.get()).value_or("?"), "1");
  EXPECT_TRUE(absl::IsNotFound(store_->Get(kSites, "b", "b", snap.get()).status()));
  EXPECT_EQ(store_->Get(kSites, "c", "c", snap.get()).value_or("?"), "1");
  EXPECT_EQ(ScanAll(kSites, "", "", false, snap.get()), (KeyValues{{"a", "1"}, {"c", "1"}}));
  EXPECT_EQ(ScanAll(kSites, "", "", true, snap.get()), (KeyValues{{"c", "1"}, {"a", "1"}}));
  // Without the snapshot: the latest.
  EXPECT_EQ(ScanAll(kSites, ""), (KeyValues{{"a", "2"}, {"b", "2"}}));
  snap.reset();
  EXPECT_EQ(store_->Get(kSites, "a", "a").value_or("?"), "2");
}

TEST_P(KvStoreTest, LastU64KeyIsTheHighestKey) {
  EXPECT_EQ(LastU64Key(*store_, kRequests).value_or(99), 0u);
  KvBatch b;
  for (std::uint64_t id : {5ull, 1ull << 40, 3ull, 0xfedcba9876543210ull, 7ull}) {
    b.Put(kRequests, U64Key(id), "r");
  }
  b.Put(kTasks, U64Key(~0ull), "another table");
  ASSERT_TRUE(store_->Write(b, true, "ids").ok());
  EXPECT_EQ(LastU64Key(*store_, kRequests).value_or(99), 0xfedcba9876543210ull);
}

TEST_P(KvStoreTest, DataSurvivesClosingAndReopening) {
  const std::string route_key("a\0b", 3);
  Put(kRoutes, route_key, "route");
  KvBatch b;
  b.Put(kMeta, "inode_hwm", U64Key(65536));
  ASSERT_TRUE(store_->Write(b, /*sync=*/false, "not synced, but closed").ok());
  ASSERT_NO_FATAL_FAILURE(Reopen());
  EXPECT_EQ(store_->Get(kRoutes, route_key, "route").value_or("?"), "route");
  EXPECT_EQ(store_->Get(kMeta, "inode_hwm", "hwm").value_or("?"), U64Key(65536));
}

TEST_P(KvStoreTest, ServesManyThreadsAtOnce) {
  constexpr int kThreads = 8;
  constexpr int kWrites = 40;
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kWrites; ++i) {
        const std::string key = absl::StrCat("t", t, "/", U64Key(i));
        KvBatch b;
        b.Put(kNodes, key, key);
        if (!store_->Write(b, true, "write").ok()) ++failures;
        if (store_->Get(kNodes, key, "read").value_or("?") != key) ++failures;
        int seen = 0;
        if (!store_
                 ->Scan(kNodes, absl::StrCat("t", t, "/"), "",
                        [&](std::string_view, std::string_view) { return ++seen > 0; })
                 .ok() ||
            seen != i + 1) {
          ++failures;
        }
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_EQ(ScanAll(kNodes, "").size(), static_cast<std::size_t>(kThreads * kWrites));
}

TEST_P(KvStoreTest, DescribesItselfAndCountsAndRefusesUnknownProperties) {
  EXPECT_FALSE(store_->Describe().empty());
  Put(kDentries, "a", "b");
  absl::StatusOr<std::map<std::string, std::uint64_t>> stats = store_->Stats();
  ASSERT_TRUE(stats.ok()) << stats.status();
  EXPECT_FALSE(stats->empty());
  EXPECT_TRUE(absl::IsNotFound(store_->Property("no.such.property").status()));
}

INSTANTIATE_TEST_SUITE_P(Backends, KvStoreTest,
                         ::testing::Values(Backend{"rocksdb", OpenRocks},
                                           Backend{"postgresql", OpenPostgres}),
                         [](const ::testing::TestParamInfo<Backend>& info) {
                           return info.param.name;
                         });
INSTANTIATE_TEST_SUITE_P(Backends, ScanOrderTest,
                         ::testing::Values(Backend{"rocksdb", OpenRocks},
                                           Backend{"postgresql", OpenPostgres}),
                         [](const ::testing::TestParamInfo<Backend>& info) {
                           return info.param.name;
                         });

// The memtables' bytes stand for memory they hold: at most a block per table more than
// what was written. With RocksDB's 1 MiB blocks a fresh catalog counted 15 MiB of
// memtables (a block per table) that were not resident until they filled.
static_assert(kMemtableBlockBytes <= (256 << 10));
TEST(RocksStoreMemoryTest, MemtableBytesFollowWhatWasWritten) {
  StoreEnv env;
  absl::StatusOr<std::unique_ptr<KvStore>> store = OpenRocks(env);
  ASSERT_TRUE(store.ok()) << store.status();
  KvBatch first;  // a few KiB a table: past the arenas' inline bytes, into their blocks
  for (int t = 0; t < static_cast<int>(kNumTables); ++t) {
    for (int i = 0; i < 8; ++i) first.Put(static_cast<Table>(t), fmt::format("k{}", i), std::string(1000, 'v'));
  }
  ASSERT_TRUE((*store)->Write(first, true, "8 KB a table").ok());
  absl::StatusOr<std::map<std::string, std::uint64_t>> at_start = (*store)->Stats();
  ASSERT_TRUE(at_start.ok()) << at_start.status();
  const std::uint64_t slack = kNumTables * (kMemtableBlockBytes + (16 << 10));
  EXPECT_LE(at_start->at("memtable_bytes"), slack);
  constexpr std::uint64_t kWritten = 4 << 20;
  for (int batch = 0; batch < 64; ++batch) {
    KvBatch b;
    for (int i = 0; i < 64; ++i) {
      b.Put(kEvents, fmt::format("e{:03}{:03}", batch, i), std::string(kWritten / 64 / 64, 'x'));
    }
    ASSERT_TRUE((*store)->Write(b, false, "events").ok());
  }
  absl::StatusOr<std::map<std::string, std::uint64_t>> after = (*store)->Stats();
  ASSERT_TRUE(after.ok()) << after.status();
  EXPECT_GE(after->at("memtable_bytes"), kWritten);
  EXPECT_LE(after->at("memtable_bytes"), kWritten + kWritten / 4 + slack);
}

TEST(IsPostgresUrlTest, KnowsTheThreeForms) {
  EXPECT_TRUE(IsPostgresUrl("postgresql://u@host/db"));
  EXPECT_TRUE(IsPostgresUrl("postgres://host/db"));
  EXPECT_TRUE(IsPostgresUrl("postgresql:host=/run/pg dbname=x"));
  EXPECT_FALSE(IsPostgresUrl("/var/lib/gfrep/catalog"));
  EXPECT_FALSE(IsPostgresUrl("postgres:host=x"));
  EXPECT_FALSE(IsPostgresUrl("catalog.db"));
}

// What only the PostgreSQL store does: the database lock, the schema version, SQL errors,
// and a server that crashes or restarts under it.
class PgStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<std::string> db = server().CreateDatabase();
    // (Also starts the server again if a failed test left it stopped.)
    if (!db.ok()) GFREP_SKIP_OR_FAIL_WITHOUT_POSTGRES(db.status());
    conninfo_ = *db;
    dbname_ = conninfo_.substr(conninfo_.rfind("dbname=") + 7);
  }

  static gfrep::testing::PostgresServer& server() { return gfrep::testing::SharedPostgres(); }

  absl::StatusOr<std::unique_ptr<KvStore>> Open(std::size_t max_connections = 4) {
    PgStoreOptions options;
    options.conninfo = conninfo_;
    options.max_connections = max_connections;
    return OpenPgStore(options);
  }

  absl::Status Sql(std::string_view sql) { return server().Sql(dbname_, sql).status(); }

  std::string conninfo_;
  std::string dbname_;
};

TEST_F(PgStoreTest, RefusesASecondProcessWhileTheFirstIsOpen) {
  absl::StatusOr<std::unique_ptr<KvStore>> first = Open();
  ASSERT_TRUE(first.ok()) << first.status();
  absl::StatusOr<std::unique_ptr<KvStore>> second = Open();
  EXPECT_TRUE(absl::IsFailedPrecondition(second.status())) << second.status();
  EXPECT_THAT(std::string(second.status().message()),
              HasSubstr("another gfcatalogd is serving this database (to run several front "
                        "ends on one database, start each with --shared)"));
  first->reset();
  absl::StatusOr<std::unique_ptr<KvStore>> third = Open();
  EXPECT_TRUE(third.ok()) << third.status();
}

TEST_F(PgStoreTest, RefusesADatabaseWithANewerSchema) {
  ASSERT_TRUE(Open().ok());  // creates the schema, then closes
  absl::StatusOr<std::string> current = server().Sql(dbname_, "SELECT version FROM schema_version");
  ASSERT_TRUE(current.ok()) << current.status();
  ASSERT_TRUE(Sql("UPDATE schema_version SET version = 1000").ok());
  absl::StatusOr<std::unique_ptr<KvStore>> store = Open();
  EXPECT_TRUE(absl::IsFailedPrecondition(store.status())) << store.status();
  EXPECT_THAT(std::string(store.status().message()),
              HasSubstr("database schema version 1000 is newer than this program ("));
  EXPECT_THAT(std::string(store.status().message()), HasSubstr("): upgrade gfcatalogd"));
  // The refusal changed nothing, and let go of the database lock.
  ASSERT_TRUE(Sql(absl::StrCat("UPDATE schema_version SET version = ", *current)).ok());
  EXPECT_TRUE(Open().ok());
}

TEST_F(PgStoreTest, AFailingBatchAppliesNothing) {
  absl::StatusOr<std::unique_ptr<KvStore>> store = Open(1);
  ASSERT_TRUE(store.ok()) << store.status();
  KvStore& s = **store;
  KvBatch setup;
  setup.Put(kMeta, "kept", "1");
  ASSERT_TRUE(s.Write(setup, true, "setup").ok());
  ASSERT_TRUE(Sql("DROP TABLE tasks").ok());

  KvBatch b;
  b.Put(kDentries, "before", "x");
  b.Delete(kMeta, "kept");
  b.Put(kTasks, "fails", "x");  // no such table any more
  b.Put(kInodes, "after", "x");
  absl::Status w = s.Write(b, true, "create /f");
  EXPECT_TRUE(absl::IsInternal(w)) << w;
  EXPECT_THAT(std::string(w.message()), StartsWith("create /f: "));
  EXPECT_THAT(std::string(w.message()), HasSubstr("tasks"));
  // Nothing of the batch is there, and the (only) connection is usable again.
  EXPECT_TRUE(absl::IsNotFound(s.Get(kDentries, "before", "k").status()));
  EXPECT_EQ(s.Get(kMeta, "kept", "k").value_or("?"), "1");
  EXPECT_TRUE(absl::IsNotFound(s.Get(kInodes, "after", "k").status()));
  KvBatch ok;
  ok.Put(kDentries, "later", "y");
  EXPECT_TRUE(s.Write(ok, true, "later").ok());
}

TEST_F(PgStoreTest, NestedCallsNeedNoSpareConnection) {
  absl::StatusOr<std::unique_ptr<KvStore>> store = Open(1);
  ASSERT_TRUE(store.ok()) << store.status();
  KvStore& s = **store;
  KvBatch b;
  for (int i = 0; i < 600; ++i) b.Put(kEvents, U64Key(i), "e");
  ASSERT_TRUE(s.Write(b, true, "fill").ok());
  int rows = 0;
  absl::Status scan = s.Scan(kEvents, "", "", [&](std::string_view k, std::string_view) {
    ++rows;
    KvBatch w;
    w.Delete(kEvents, k);
    return s.Get(kEvents, k, "k").ok() && s.Write(w, false, "delete").ok();
  });
  ASSERT_TRUE(scan.ok()) << scan;
  EXPECT_EQ(rows, 600);
  EXPECT_EQ(LastU64Key(s, kEvents).value_or(99), 0u);
}

TEST_F(PgStoreTest, SyncedWritesSurviveACrash) {
  {
    absl::StatusOr<std::unique_ptr<KvStore>> store = Open();
    ASSERT_TRUE(store.ok()) << store.status();
    KvBatch b;
    for (int i = 0; i < 100; ++i) b.Put(kDentries, U64Key(i), absl::StrCat("entry ", i));
    ASSERT_TRUE((*store)->Write(b, /*sync=*/true, "create").ok());
    ASSERT_TRUE(server().Stop("immediate").ok());  // a crash: no checkpoint, no flush
    ASSERT_TRUE(server().Start().ok());            // recovers from the WAL
  }
  absl::StatusOr<std::unique_ptr<KvStore>> store = Open();
  ASSERT_TRUE(store.ok()) << store.status();
  EXPECT_EQ(LastU64Key(**store, kDentries).value_or(0), 99u);
  EXPECT_EQ((*store)->Get(kDentries, U64Key(42), "k").value_or("?"), "entry 42");
}

TEST_F(PgStoreTest, RecoversFromAServerRestart) {
  absl::StatusOr<std::unique_ptr<KvStore>> store = Open();
  ASSERT_TRUE(store.ok()) << store.status();
  KvStore& s = **store;
  KvBatch b;
  b.Put(kSites, "a", "1");
  ASSERT_TRUE(s.Write(b, true, "put a").ok());
  ASSERT_TRUE(s.Get(kSites, "a", "a").ok());  // leaves an idle pooled connection

  ASSERT_TRUE(server().Stop("fast").ok());
  absl::StatusOr<std::string> down = s.Get(kSites, "a", "site a");
  EXPECT_TRUE(absl::IsUnavailable(down.status())) << down.status();
  EXPECT_THAT(std::string(down.status().message()), StartsWith("site a: "));
  absl::Status w = s.Write(b, true, "put a");
  EXPECT_TRUE(absl::IsUnavailable(w)) << w;

  ASSERT_TRUE(server().Start().ok());
  EXPECT_EQ(s.Get(kSites, "a", "a").value_or("?"), "1");
  b.Put(kSites, "b", "2");
  absl::Status again = s.Write(b, true, "put b");
  EXPECT_TRUE(again.ok()) << again;
  // The write took the database lock again.
  absl::StatusOr<std::unique_ptr<KvStore>> second = Open();
  EXPECT_TRUE(absl::IsFailedPrecondition(second.status())) << second.status();
}

TEST_F(PgStoreTest, AConnectionBrokenMidScanIsUnavailableAndTheStoreRecovers) {
  absl::StatusOr<std::unique_ptr<KvStore>> store = Open();
  ASSERT_TRUE(store.ok()) << store.status();
  KvStore& s = **store;
  KvBatch b;
  for (int i = 0; i < 600; ++i) b.Put(kEvents, U64Key(i), "e");
  ASSERT_TRUE(s.Write(b, true, "fill").ok());

  // The snapshot's connection serves every page; it is cut after the first page.
  std::unique_ptr<KvSnapshot> snap = s.Snapshot();
  int rows = 0;
  absl::Status scan = s.Scan(
      kEvents, "", "",
      [&](std::string_view, std::string_view) {
        if (++rows == 1) {
          // Every connection of the store, the lock's too; waits until they are gone.
          absl::Status kill = Sql(absl::StrCat(
              "SELECT pg_terminate_backend(pid, 10000) FROM pg_stat_activity WHERE datname = '",
              dbname_, "' AND pid <> pg_backend_pid()"));
          EXPECT_TRUE(kill.ok()) << kill;
        }
        return true;
      },
      snap.get());
  EXPECT_TRUE(absl::IsUnavailable(scan)) << scan;
  EXPECT_THAT(std::string(scan.message()), StartsWith("scan events: "));
  EXPECT_EQ(rows, 512);
  snap.reset();

  EXPECT_EQ(s.Get(kEvents, U64Key(7), "k").value_or("?"), "e");
  KvBatch w;
  w.Put(kEvents, U64Key(1000), "new");
  absl::Status again = s.Write(w, true, "put");
  EXPECT_TRUE(again.ok()) << again;
  EXPECT_EQ(LastU64Key(s, kEvents).value_or(0), 1000u);
}

// A synced write is durable even where the database's own setting says otherwise
// (synchronous_commit = off for the database, a common tuning): it failed before the store
// set synchronous_commit itself, as the crash lost the commit still in the WAL buffers.
TEST_F(PgStoreTest, ASyncedWriteIsDurableWhateverTheDatabaseSetting) {
  ASSERT_TRUE(Sql(absl::StrCat("ALTER DATABASE ", dbname_, " SET synchronous_commit = off")).ok());
  // The WAL writer flushes asynchronous commits only every 10 s now.
  ASSERT_TRUE(Sql("ALTER SYSTEM SET wal_writer_delay = '10s'").ok());
  ASSERT_TRUE(Sql("SELECT pg_reload_conf()").ok());
  {
    absl::StatusOr<std::unique_ptr<KvStore>> store = Open();
    ASSERT_TRUE(store.ok()) << store.status();
    KvBatch b;
    b.Put(kDentries, "acknowledged", "1");
    ASSERT_TRUE((*store)->Write(b, /*sync=*/true, "create").ok());
    ASSERT_TRUE(server().Stop("immediate").ok());  // a crash right after the acknowledgement
    ASSERT_TRUE(server().Start().ok());
  }
  absl::Status reset = Sql("ALTER SYSTEM RESET wal_writer_delay");
  ASSERT_TRUE(Sql("SELECT pg_reload_conf()").ok());
  ASSERT_TRUE(reset.ok()) << reset;
  absl::StatusOr<std::unique_ptr<KvStore>> store = Open();
  ASSERT_TRUE(store.ok()) << store.status();
  EXPECT_EQ((*store)->Get(kDentries, "acknowledged", "k").value_or("lost"), "1");
}

// A store that lost the database to a later open never writes again, even once that other
// process is gone and the advisory lock is free (it re-took the lock and wrote with its stale
// ids before the serving epoch).
TEST_F(PgStoreTest, AStoreThatLostTheDatabaseToALaterOpenNeverWritesAgain) {
  absl::StatusOr<std::unique_ptr<KvStore>> first = Open();
  ASSERT_TRUE(first.ok()) << first.status();
  KvBatch b;
  b.Put(kRequests, U64Key(1), "first's request 1");
  ASSERT_TRUE((*first)->Write(b, true, "request 1").ok());
  // The first one's lock connection dies (a failover, a network cut): a second process
  // opens the database and writes.
  ASSERT_TRUE(Sql("SELECT pg_terminate_backend(pid, 10000) FROM pg_locks WHERE locktype = "
                  "'advisory' AND granted")
                  .ok());
  {
    absl::StatusOr<std::unique_ptr<KvStore>> second = Open();
    ASSERT_TRUE(second.ok()) << second.status();
    KvBatch w;
    w.Put(kRequests, U64Key(2), "second's request 2");
    ASSERT_TRUE((*second)->Write(w, true, "request 2").ok());
  }  // ... and goes away: the lock is free again
  KvBatch stale;
  stale.Put(kRequests, U64Key(2), "first's request 2");
  absl::Status w = (*first)->Write(stale, true, "request 2");
  EXPECT_TRUE(absl::IsFailedPrecondition(w)) << w;
  EXPECT_THAT(std::string(w.message()),
              HasSubstr("request 2: another gfcatalogd opened this database after this one"));
  absl::StatusOr<std::unique_ptr<KvStore>> third = Open();  // (first's lock was let go)
  ASSERT_TRUE(third.ok()) << third.status();
  EXPECT_EQ((*third)->Get(kRequests, U64Key(2), "k").value_or("?"), "second's request 2");
  EXPECT_EQ((*third)->Get(kRequests, U64Key(1), "k").value_or("?"), "first's request 1");
}

// A migration's source must be a catalog: an empty or wrong database is refused, not given
// an empty catalog (gfcatalog-migrate then copied nothing and said every table was equal).
TEST_F(PgStoreTest, OpeningAnExistingCatalogRefusesADatabaseWithoutOne) {
  CatalogOptions options;
  options.path = conninfo_;
  absl::StatusOr<std::unique_ptr<KvStore>> store = OpenStore(options, /*must_exist=*/true);
  EXPECT_TRUE(absl::IsNotFound(store.status())) << store.status();
  EXPECT_THAT(std::string(store.status().message()), HasSubstr("no gfrep catalog in this database"));
  absl::StatusOr<std::string> tables = server().Sql(
      dbname_, "SELECT count(*) FROM pg_tables WHERE schemaname = 'public'");
  ASSERT_TRUE(tables.ok()) << tables.status();
  EXPECT_EQ(*tables, "0\n");  // nothing was created
  ASSERT_TRUE(OpenStore(options).ok());  // creates it
  EXPECT_TRUE(OpenStore(options, /*must_exist=*/true).ok());
}

TEST_F(PgStoreTest, DescribesWithoutThePassword) {
  PgStoreOptions options;
  options.conninfo = conninfo_ + " password='s3cret word'";  // trust: the server ignores it
  absl::StatusOr<std::unique_ptr<KvStore>> store = OpenPgStore(options);
  ASSERT_TRUE(store.ok()) << store.status();
  const std::string d = (*store)->Describe();
  EXPECT_THAT(d, StartsWith("postgresql "));
  EXPECT_THAT(d, HasSubstr("dbname=" + dbname_));
  EXPECT_THAT(d, HasSubstr("host=" + server().socket_dir()));
  EXPECT_THAT(d, ::testing::Not(HasSubstr("s3cret")));
  EXPECT_THAT((*store)->Property("pg.server_version").value_or("?"),
              ::testing::MatchesRegex("[0-9]+.*"));
  store->reset();

  // The URI form, with the password in the user part.
  options.conninfo = absl::StrCat("postgresql://gfrep:s3cret@/", dbname_,
                                  "?host=", server().socket_dir(), "&port=", server().port());
  store = OpenPgStore(options);
  ASSERT_TRUE(store.ok()) << store.status();
  EXPECT_THAT((*store)->Describe(), ::testing::Not(HasSubstr("s3cret")));
  EXPECT_THAT((*store)->Describe(), HasSubstr("dbname=" + dbname_));
}

TEST_F(PgStoreTest, CountsRowsAndBytes) {
  absl::StatusOr<std::unique_ptr<KvStore>> store = Open();
  ASSERT_TRUE(store.ok()) << store.status();
  KvBatch b;
  for (int i = 0; i < 50; ++i) b.Put(kDentries, U64Key(i), "d");
  ASSERT_TRUE((*store)->Write(b, true, "fill").ok());
  ASSERT_TRUE(Sql("ANALYZE dentries").ok());
  absl::StatusOr<std::map<std::string, std::uint64_t>> stats = (*store)->Stats();
  ASSERT_TRUE(stats.ok()) << stats.status();
  EXPECT_GT((*stats)["db_bytes"], 0u);
  EXPECT_EQ((*stats)["dentries_rows"], 50u);
  EXPECT_EQ(stats->count("meta_rows"), 1u);
  EXPECT_EQ(stats->count("events_rows"), 1u);
}

TEST_F(PgStoreTest, RefusesBadOptionsAndAMissingServer) {
  PgStoreOptions options;
  options.conninfo = conninfo_;
  options.max_connections = 0;
  EXPECT_TRUE(absl::IsInvalidArgument(OpenPgStore(options).status()));
  options.max_connections = 1;
  options.conninfo = "postgresql:host=/x dbname";  // not key=value
  EXPECT_TRUE(absl::IsInvalidArgument(OpenPgStore(options).status()));
  gfrep::testing::TempDir empty("no-server");
  options.conninfo = absl::StrCat("postgresql:host=", empty.path().string(), " dbname=x");
  absl::StatusOr<std::unique_ptr<KvStore>> store = OpenPgStore(options);
  EXPECT_TRUE(absl::IsUnavailable(store.status())) << store.status();
}

// A small tmpfs for a test (root only): mounted at construction, unmounted (lazily, so a
// failing test cannot leave it busy) and removed at destruction.
class SmallTmpfs {
 public:
  explicit SmallTmpfs(std::uint64_t mib) : dir_("tmpfs") {
    const std::string cmd = fmt::format("mount -t tmpfs -o size={}m gfrep-test {} 2>&1", mib,
                                        dir_.path().string());
    mounted_ = ::geteuid() == 0 && std::system(cmd.c_str()) == 0;
  }
  ~SmallTmpfs() {
    if (mounted_) {
      (void)std::system(fmt::format("umount -l {}", dir_.path().string()).c_str());  // ignored: best effort
    }
  }
  bool mounted() const { return mounted_; }
  std::string Sub(const std::string& name) const { return dir_.Sub(name); }

 private:
  gfrep::testing::TempDir dir_;
  bool mounted_ = false;
};

// Fills the file system of `path` with `path`, leaving about `leave` bytes free.
void FillLeaving(const std::string& path, std::uint64_t leave) {
  struct statvfs st {};
  ASSERT_EQ(::statvfs(std::filesystem::path(path).parent_path().c_str(), &st), 0);
  const std::uint64_t free_bytes = static_cast<std::uint64_t>(st.f_bavail) * st.f_frsize;
  ASSERT_GT(free_bytes, leave);
  std::FILE* f = std::fopen(path.c_str(), "w");
  ASSERT_NE(f, nullptr);
  std::string block(1 << 20, 'f');
  for (std::uint64_t n = 0; n + block.size() <= free_bytes - leave; n += block.size()) {
    if (std::fwrite(block.data(), 1, block.size(), f) != block.size()) break;
  }
  std::fclose(f);
}

// A full disk under the catalog (issue 37): callers get kResourceExhausted, the process lives
// (Debian's librocksdb aborted on an assertion in its LOG file's writer), reads go on, and
// writes come back by themselves once space is freed, with nothing acknowledged lost.
TEST(RocksStoreFullDiskTest, RefusesWritesWhileFullAndRecoversWithoutAReopen) {
  SmallTmpfs fs(192);
  if (!fs.mounted()) GTEST_SKIP() << "needs root to mount a small tmpfs";
  CatalogOptions options;
  options.path = fs.Sub("db");
  absl::StatusOr<std::unique_ptr<KvStore>> store = OpenRocksStore(options);
  ASSERT_TRUE(store.ok()) << store.status();
  KvBatch first;
  first.Put(kMeta, "acknowledged", "yes");
  ASSERT_TRUE((*store)->Write(first, /*sync=*/true, "first").ok());
  ASSERT_NO_FATAL_FAILURE(FillLeaving(fs.Sub("filler"), 512 << 10));

  std::vector<std::string> acked;
  absl::Status refused;
  const std::string value(64 << 10, 'v');
  for (int i = 0; i < 3000 && refused.ok(); ++i) {
    KvBatch b;
    const std::string key = fmt::format("k{:04}", i);
    b.Put(kMeta, key, value);
    refused = (*store)->Write(b, /*sync=*/true, "fill");
    if (refused.ok()) acked.push_back(key);
  }
  ASSERT_FALSE(refused.ok()) << "the file system never filled";
  EXPECT_TRUE(absl::IsResourceExhausted(refused)) << refused;
  // Refused again, at once, without a write reaching RocksDB.
  KvBatch again;
  again.Put(kMeta, "again", "x");
  absl::Status second = (*store)->Write(again, /*sync=*/true, "again");
  EXPECT_TRUE(absl::IsResourceExhausted(second)) << second;
  EXPECT_THAT(std::string(second.message()), ::testing::HasSubstr("full"));
  // Reads go on.
  absl::StatusOr<std::string> v = (*store)->Get(kMeta, "acknowledged", "get", nullptr);
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(*v, "yes");

  std::filesystem::remove(fs.Sub("filler"));
  absl::Status after = absl::UnknownError("not tried");
  for (int i = 0; i < 300 && !after.ok(); ++i) {
    KvBatch b;
    b.Put(kMeta, "after", "space");
    after = (*store)->Write(b, /*sync=*/true, "after");
    if (!after.ok()) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  ASSERT_TRUE(after.ok()) << "writes did not come back within 30 s of freeing space: " << after;
  for (const std::string& key : acked) {
    absl::StatusOr<std::string> got = (*store)->Get(kMeta, key, "get", nullptr);
    ASSERT_TRUE(got.ok()) << key << ": " << got.status();
  }
  // And after a reopen.
  store->reset();
  store = OpenRocksStore(options);
  ASSERT_TRUE(store.ok()) << store.status();
  for (const std::string& key : {std::string("acknowledged"), std::string("after")}) {
    EXPECT_TRUE((*store)->Get(kMeta, key, "get", nullptr).ok()) << key;
  }
}

}  // namespace
}  // namespace gfrep::catalog::internal
