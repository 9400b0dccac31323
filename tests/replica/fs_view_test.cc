#include "replica/fs_view.h"

#include <gtest/gtest.h>

#include <functional>
#include <utility>

#include <atomic>
#include <filesystem>
#include <fstream>

#include "replica/spool.h"
#include "tests/replica/faulty_catalog.h"
#include "tests/support/temp_dir.h"

namespace gfrep::replica {
namespace {

namespace fs = std::filesystem;
using catalog::ReplicaState;

// Counts the namespace calls that reach the catalog.
class CountingCatalog : public testing::FaultyCatalog {
 public:
  using FaultyCatalog::FaultyCatalog;
  absl::StatusOr<catalog::Attributes> Stat(std::string_view p) override {
    ++stats;
    absl::StatusOr<catalog::Attributes> a = FaultyCatalog::Stat(p);
    // Runs once, after the catalog answered and before the view has the answer: "an event
    // arrives while the view waits for the catalog".
    if (std::function<void()> hook = std::exchange(after_stat, nullptr)) hook();
    return a;
  }
  std::function<void()> after_stat;
  absl::StatusOr<std::vector<catalog::DirEntry>> List(std::string_view p,
                                                      const catalog::ListOptions& o) override {
    ++lists;
    return FaultyCatalog::List(p, o);
  }
  absl::StatusOr<std::vector<absl::StatusOr<catalog::Attributes>>> StatMany(
      const std::vector<std::string>& paths) override {
    stats += paths.size();
    return FaultyCatalog::StatMany(paths);
  }
  std::atomic<std::uint64_t> stats{0};
  std::atomic<std::uint64_t> lists{0};
};

// An FsView over a real RocksDB catalog with one node ("n1" of site "s", spool in the temp
// dir) and an injected clock for the TTL.
class FsViewTest : public ::testing::Test {
 protected:
  void SetUp() override {
    catalog::CatalogOptions o;
    o.path = dir_.Sub("db");
    o.sync = false;
    auto c = catalog::OpenRocksCatalog(o);
    ASSERT_TRUE(c.ok()) << c.status();
    rocks_ = std::move(*c);
    counting_ = std::make_unique<CountingCatalog>(rocks_.get());
    ASSERT_TRUE(rocks_->PutSite({"s", {}}).ok());
    for (const char* name : {"n1", "n2"}) {
      catalog::Node n;
      n.name = name;
      n.site = "s";
      n.address = "127.0.0.1:1";  // nobody listens: a remote read fails at once
      n.spool = dir_.Sub(std::string("spool-") + name);
      ASSERT_TRUE(rocks_->RegisterNode(n).ok());
    }
    FsViewOptions options;
    options.ttl = std::chrono::seconds(1);
    options.list_page = 1000;
    options.now_ns = [this] { return now_ns_.load(); };
    options.reader.identity = {"s", "n1"};
    options.reader.transfer.shared_key = std::string(32, 'k');
    auto v = FsView::Create(*counting_, options);
    ASSERT_TRUE(v.ok()) << v.status();
    view_ = std::move(*v);
  }

  // Commits a new generation of `path` with `bytes`, its replica written to `node`'s spool.
  catalog::Attributes Put(const std::string& path, const std::string& bytes,
                          const std::string& node = "n1") {
    catalog::FileContent c;
    c.size = bytes.size();
    c.checksum_algo = "xxh3-128";
    c.checksum = "00";
    auto a = rocks_->CommitFile(path, c, node, std::nullopt);
    EXPECT_TRUE(a.ok()) << a.status();
    fs::path file = ReplicaFile(dir_.Sub("spool-" + node), a->inode, a->generation);
    fs::create_directories(file.parent_path());
    std::ofstream(file, std::ios::binary) << bytes;
    return *a;
  }

  std::string ReadAll(OpenFile& f) {
    std::string out(f.size() + 10, '\0');
    auto n = f.ReadAt(0, out.data(), out.size());
    EXPECT_TRUE(n.ok()) << n.status();
    out.resize(n.ok() ? *n : 0);
    return out;
  }

  void Advance(std::chrono::milliseconds d) { now_ns_ += std::chrono::nanoseconds(d).count(); }

  gfrep::testing::TempDir dir_{"fs-view"};
  std::unique_ptr<catalog::Catalog> rocks_;
  std::unique_ptr<CountingCatalog> counting_;
  std::atomic<std::int64_t> now_ns_{1'000'000'000};
  std::unique_ptr<FsView> view_;
};

TEST_F(FsViewTest, GetAttrReportsFilesDirectoriesAndTheRoot) {
  ASSERT_TRUE(rocks_->Mkdir("/exp", {}).ok());
  catalog::Attributes put = Put("/exp/a", "hello");
  auto root = view_->GetAttr("/");
  ASSERT_TRUE(root.ok()) << root.status();
  EXPECT_EQ(root->type, catalog::FileType::kDirectory);
  auto dir = view_->GetAttr("/exp");
  ASSERT_TRUE(dir.ok());
  EXPECT_EQ(dir->type, catalog::FileType::kDirectory);
  auto file = view_->GetAttr("/exp/a");
  ASSERT_TRUE(file.ok());
  EXPECT_EQ(file->type, catalog::FileType::kFile);
  EXPECT_EQ(file->size, 5u);
  EXPECT_EQ(file->inode, put.inode);
  EXPECT_EQ(file->generation, 1u);
}

TEST_F(FsViewTest, MissingNamesAreNotFoundAndRememberedForTheTtl) {
  EXPECT_TRUE(absl::IsNotFound(view_->GetAttr("/nope").status()));
  const std::uint64_t stats = counting_->stats;
  EXPECT_TRUE(absl::IsNotFound(view_->GetAttr("/nope").status()));
  EXPECT_EQ(counting_->stats, stats);  // negative entry
  Put("/nope", "now it exists");
  EXPECT_TRUE(absl::IsNotFound(view_->GetAttr("/nope").status()));  // within the TTL
  Advance(std::chrono::milliseconds(1001));
  auto a = view_->GetAttr("/nope");
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->size, 13u);
  EXPECT_TRUE(absl::IsNotFound(view_->ReadDir("/nothing").status()));
  EXPECT_TRUE(absl::IsInvalidArgument(view_->GetAttr("relative").status()));
}

TEST_F(FsViewTest, ReadDirListsChildrenWithAttributesAndAnswersLookupsFromTheListing) {
  ASSERT_TRUE(rocks_->Mkdir("/d", {}).ok());
  ASSERT_TRUE(rocks_->Mkdir("/d/sub", {}).ok());
  Put("/d/x", "xx");
  Put("/d/y", "yyy");
  auto list = view_->ReadDir("/d");
  ASSERT_TRUE(list.ok()) << list.status();
  ASSERT_EQ(list->size(), 3u);
  EXPECT_EQ((*list)[0].name, "sub");
  EXPECT_EQ((*list)[0].attributes.type, catalog::FileType::kDirectory);
  EXPECT_EQ((*list)[1].name, "x");
  EXPECT_EQ((*list)[1].attributes.size, 2u);
  EXPECT_EQ((*list)[2].name, "y");
  EXPECT_EQ((*list)[2].attributes.size, 3u);
  const std::uint64_t stats = counting_->stats, lists = counting_->lists;
  EXPECT_EQ(view_->GetAttr("/d/y")->size, 3u);
  EXPECT_TRUE(absl::IsNotFound(view_->GetAttr("/d/z").status()));  // a fresh listing lacks it
  EXPECT_TRUE(view_->ReadDir("/d").ok());
  EXPECT_EQ(counting_->stats, stats);
  EXPECT_EQ(counting_->lists, lists);
  EXPECT_TRUE(absl::IsFailedPrecondition(view_->ReadDir("/d/x").status()));
}

TEST_F(FsViewTest, ChangesWithoutEventsAreSeenWhenTheTtlExpires) {
  ASSERT_TRUE(rocks_->Mkdir("/d", {}).ok());
  ASSERT_EQ(view_->ReadDir("/d")->size(), 0u);
  ASSERT_TRUE(rocks_->Mkdir("/d/new", {}).ok());  // mkdir writes no event
  ASSERT_TRUE(view_->PollEvents(std::chrono::milliseconds(0)).ok());
  EXPECT_EQ(view_->ReadDir("/d")->size(), 0u);
  Advance(std::chrono::milliseconds(999));
  EXPECT_EQ(view_->ReadDir("/d")->size(), 0u);
  Advance(std::chrono::milliseconds(2));
  EXPECT_EQ(view_->ReadDir("/d")->size(), 1u);
}

TEST_F(FsViewTest, ANewGenerationDropsTheCachedEntryAndListingAtItsEvent) {
  ASSERT_TRUE(rocks_->Mkdir("/d", {}).ok());
  Put("/d/f", "one");
  ASSERT_EQ(view_->ReadDir("/d")->at(0).attributes.size, 3u);
  ASSERT_EQ(view_->GetAttr("/d/f")->generation, 1u);
  Put("/d/f", "second", "n2");
  // Within the TTL and before the event is read: the cached attributes.
  EXPECT_EQ(view_->GetAttr("/d/f")->generation, 1u);
  auto dropped = view_->PollEvents(std::chrono::milliseconds(0));
  ASSERT_TRUE(dropped.ok()) << dropped.status();
  EXPECT_EQ(*dropped, std::vector<std::string>{"/d/f"});
  auto a = view_->GetAttr("/d/f");
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->generation, 2u);
  EXPECT_EQ(a->size, 6u);
  EXPECT_EQ(view_->ReadDir("/d")->at(0).attributes.size, 6u);
  EXPECT_GE(view_->counters().invalidated, 1u);
}

TEST_F(FsViewTest, TheFollowerThreadDropsChangedEntriesAndReportsTheirPaths) {
  Put("/f", "one");
  ASSERT_EQ(view_->GetAttr("/f")->size, 3u);
  std::mutex mu;
  std::vector<std::string> told;
  view_->StartFollowing([&](const std::string& p) {
    std::lock_guard<std::mutex> lock(mu);
    told.push_back(p);
  });
  Put("/f", "four", "n2");
  for (int i = 0; i < 500; ++i) {
    {
      std::lock_guard<std::mutex> lock(mu);
      if (!told.empty()) break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  std::lock_guard<std::mutex> lock(mu);
  // One or more reports (the commit's events may come in one poll or two), all of /f.
  ASSERT_FALSE(told.empty());
  for (const std::string& p : told) EXPECT_EQ(p, "/f");
  EXPECT_EQ(view_->GetAttr("/f")->size, 4u);
}

TEST_F(FsViewTest, ListingTenThousandEntriesAndStatingEachMakesABoundedNumberOfCalls) {
  ASSERT_TRUE(rocks_->Mkdir("/big", {}).ok());
  std::vector<catalog::NewFile> files;
  for (int i = 0; i < 10000; ++i) {
    catalog::NewFile f;
    f.path = "/big/f" + std::to_string(100000 + i);
    files.push_back(f);
  }
  ASSERT_TRUE(rocks_->CreateFiles(files).ok());
  const std::uint64_t stats = counting_->stats, lists = counting_->lists;
  // What `ls -l /big` asks: the directory, its listing, then each entry.
  ASSERT_TRUE(view_->GetAttr("/big").ok());
  auto list = view_->ReadDir("/big");
  ASSERT_TRUE(list.ok()) << list.status();
  ASSERT_EQ(list->size(), 10000u);
  for (const catalog::DirEntry& e : *list) {
    ASSERT_TRUE(view_->GetAttr("/big/" + e.name).ok());
  }
  // 10 pages of 1000 (and one empty last page at most), one Stat of the directory.
  EXPECT_LE(counting_->lists - lists, 11u);
  EXPECT_LE(counting_->stats - stats, 1u);
  EXPECT_EQ((*list)[9999].name, "f109999");
}

TEST_F(FsViewTest, OpenReadsThisNodesReplicaThroughItsDescriptor) {
  const std::string bytes(100000, 'q');
  Put("/f", bytes);
  ASSERT_TRUE(view_->GetAttr("/f").ok());
  auto f = view_->Open("/f");
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_TRUE((*f)->local());
  EXPECT_EQ((*f)->source_node(), "n1");
  EXPECT_EQ((*f)->size(), bytes.size());
  EXPECT_FALSE((*f)->same_generation_as_last_open());
  EXPECT_FALSE((*f)->attributes_changed());
  EXPECT_EQ(ReadAll(**f), bytes);
  char c[4];
  EXPECT_EQ(*(*f)->ReadAt(bytes.size() - 2, c, 4), 2u);
  EXPECT_EQ(*(*f)->ReadAt(bytes.size() + 5, c, 4), 0u);
  // Opened again at the same generation: the kernel may keep its pages.
  auto again = view_->Open("/f");
  ASSERT_TRUE(again.ok());
  EXPECT_TRUE((*again)->same_generation_as_last_open());
}

TEST_F(FsViewTest, AReplicaEventOfTheFileEndsKeepingTheKernelsPages) {
  catalog::Attributes a = Put("/f", "some bytes");
  catalog::Replica r;
  r.inode = a.inode;
  r.node = "n2";
  r.state = ReplicaState::kComplete;
  r.generation = a.generation;
  r.size = a.size;
  ASSERT_TRUE(rocks_->PutReplica(r).ok());
  ASSERT_TRUE(view_->GetAttr("/f").ok());
  ASSERT_TRUE(view_->Open("/f").ok());
  ASSERT_TRUE((*view_->Open("/f"))->same_generation_as_last_open());
  // n2's replica found corrupt: not this node's, but whatever a page cache holds is no
  // longer trusted.
  catalog::ReplicaTransition t;
  t.inode = a.inode;
  t.node = "n2";
  t.generation = a.generation;
  t.from = ReplicaState::kComplete;
  t.to = ReplicaState::kCorrupt;
  t.note = "test";
  ASSERT_TRUE(rocks_->TransitionReplicas({t}).ok());
  ASSERT_TRUE(view_->PollEvents(std::chrono::milliseconds(0)).ok());
  ASSERT_TRUE(view_->GetAttr("/f").ok());
  auto f = view_->Open("/f");
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_TRUE((*f)->local());
  EXPECT_FALSE((*f)->same_generation_as_last_open());
  EXPECT_EQ(ReadAll(**f), "some bytes");
}

TEST_F(FsViewTest, AnEventThatArrivesWhileTheCatalogAnswersIsNotUndone) {
  catalog::Attributes a = Put("/f", "some bytes");
  ASSERT_TRUE(view_->PollEvents(std::chrono::milliseconds(0)).ok());
  // A replica event (n2 gets a replica) while the view waits for the catalog's stat: the
  // answer is returned but not kept, so the next stat asks again.
  catalog::Replica r;
  r.inode = a.inode;
  r.node = "n2";
  r.state = ReplicaState::kComplete;
  r.generation = a.generation;
  r.size = a.size;
  counting_->after_stat = [&] {
    ASSERT_TRUE(rocks_->PutReplica(r).ok());
    ASSERT_TRUE(view_->PollEvents(std::chrono::milliseconds(0)).ok());
  };
  ASSERT_TRUE(view_->GetAttr("/f").ok());
  const std::uint64_t stats = counting_->stats;
  ASSERT_TRUE(view_->GetAttr("/f").ok());
  EXPECT_EQ(counting_->stats, stats + 1);
  ASSERT_TRUE(view_->Open("/f").ok());
  ASSERT_TRUE((*view_->Open("/f"))->same_generation_as_last_open());
  // n2's replica is found corrupt during an open (in its confirming stat): that open keeps no
  // pages, and neither does the next one (the event's erasure is not written over).
  counting_->after_stat = [&] {
    catalog::ReplicaTransition t;
    t.inode = a.inode;
    t.node = "n2";
    t.generation = a.generation;
    t.from = ReplicaState::kComplete;
    t.to = ReplicaState::kCorrupt;
    t.note = "test";
    ASSERT_TRUE(rocks_->TransitionReplicas({t}).ok());
    ASSERT_TRUE(view_->PollEvents(std::chrono::milliseconds(0)).ok());
  };
  ASSERT_TRUE(view_->GetAttr("/f").ok());
  ASSERT_NE(counting_->after_stat, nullptr);  // that was a cache hit: the open's stat is next
  auto during = view_->Open("/f");
  ASSERT_TRUE(during.ok()) << during.status();
  ASSERT_EQ(counting_->after_stat, nullptr);  // the event did come during the open
  EXPECT_FALSE((*during)->same_generation_as_last_open());
  ASSERT_TRUE(view_->GetAttr("/f").ok());
  auto next = view_->Open("/f");
  ASSERT_TRUE(next.ok());
  EXPECT_FALSE((*next)->same_generation_as_last_open());
}

TEST_F(FsViewTest, OpenServesTheNewGenerationAndNeverTheOldOne) {
  Put("/f", "old bytes");
  ASSERT_EQ(view_->GetAttr("/f")->size, 9u);
  ASSERT_TRUE(view_->Open("/f").ok());
  Put("/f", "the new bytes");  // no PollEvents: the cache still says generation 1
  ASSERT_EQ(view_->GetAttr("/f")->generation, 1u);
  auto f = view_->Open("/f");
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ((*f)->generation(), 2u);
  EXPECT_EQ(ReadAll(**f), "the new bytes");
  EXPECT_TRUE((*f)->attributes_changed());
  EXPECT_FALSE((*f)->same_generation_as_last_open());
  // The next stat reports the size just opened, before the TTL.
  EXPECT_EQ(view_->GetAttr("/f")->size, 13u);
}

TEST_F(FsViewTest, WhileAnOlderGenerationIsOpenTheNewOneBypassesThePageCache) {
  Put("/f", "old bytes");
  ASSERT_TRUE(view_->GetAttr("/f").ok());
  auto old_handle = view_->Open("/f");  // a reader keeps generation 1 open
  ASSERT_TRUE(old_handle.ok());
  EXPECT_FALSE((*old_handle)->bypass_page_cache());
  Put("/f", "the new bytes");
  auto b = view_->Open("/f");
  ASSERT_TRUE(b.ok());
  EXPECT_EQ((*b)->generation(), 2u);
  // Generation 1's reads may fill the shared page cache: generation 2 reads around it.
  EXPECT_TRUE((*b)->bypass_page_cache());
  EXPECT_FALSE((*b)->same_generation_as_last_open());
  ASSERT_TRUE(view_->GetAttr("/f").ok());  // the kernel looks a name up before it opens it
  auto c = view_->Open("/f");
  ASSERT_TRUE(c.ok());
  EXPECT_TRUE((*c)->bypass_page_cache());
  EXPECT_FALSE((*c)->same_generation_as_last_open());
  old_handle->reset();  // the last handle of generation 1 closes
  ASSERT_TRUE(view_->GetAttr("/f").ok());  // the kernel looks a name up before it opens it
  auto d = view_->Open("/f");
  ASSERT_TRUE(d.ok());
  EXPECT_FALSE((*d)->bypass_page_cache());
  // Its pages may still be in the cache: this open must not keep them.
  EXPECT_FALSE((*d)->same_generation_as_last_open());
  ASSERT_TRUE(view_->GetAttr("/f").ok());  // the kernel looks a name up before it opens it
  auto e = view_->Open("/f");
  ASSERT_TRUE(e.ok());
  EXPECT_FALSE((*e)->bypass_page_cache());
  EXPECT_TRUE((*e)->same_generation_as_last_open());
}

TEST_F(FsViewTest, AStaleOrCorruptReplicaOfThisNodeIsNotServed) {
  catalog::Attributes a = Put("/f", "generation one");
  // Generation 2 written at n2: n1's replica becomes stale; n2 cannot be reached.
  Put("/f", "generation two", "n2");
  auto f = view_->Open("/f");
  EXPECT_TRUE(absl::IsUnavailable(f.status())) << f.status();

  catalog::Attributes b = Put("/g", "good bytes");
  catalog::ReplicaTransition t;
  t.inode = b.inode;
  t.node = "n1";
  t.generation = b.generation;
  t.from = ReplicaState::kComplete;
  t.to = ReplicaState::kCorrupt;
  t.note = "test";
  ASSERT_TRUE(rocks_->TransitionReplicas({t}).ok());
  auto g = view_->Open("/g");
  EXPECT_FALSE(g.ok());
  EXPECT_TRUE(absl::IsUnavailable(g.status())) << g.status();
  (void)a;
}

TEST_F(FsViewTest, AFileWithoutContentReadsEmptyAndADirectoryCannotBeOpened) {
  catalog::FileContent c;
  ASSERT_TRUE(rocks_->CreateFile("/empty", c).ok());
  auto f = view_->Open("/empty");
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ((*f)->size(), 0u);
  EXPECT_EQ(ReadAll(**f), "");
  ASSERT_TRUE(rocks_->Mkdir("/d", {}).ok());
  EXPECT_TRUE(absl::IsFailedPrecondition(view_->Open("/d").status()));
  EXPECT_TRUE(absl::IsNotFound(view_->Open("/missing").status()));
}

}  // namespace
}  // namespace gfrep::replica
