#include "replica/client/fs_view.h"

#include <gtest/gtest.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <functional>
#include <utility>

#include "replica/core/spool.h"
#include "tests/replica/faulty_roles.h"
#include "tests/support/scratch_catalog.h"
#include "tests/support/temp_dir.h"

namespace gfrep::replica::client {
namespace {

namespace fs = std::filesystem;
using catalog::ReplicaState;

// Counts the namespace calls that reach the catalog.
class CountingCatalog : public testing::FaultyView {
 public:
  using FaultyView::FaultyView;
  absl::StatusOr<catalog::Attributes> Stat(std::string_view p) override {
    ++stats;
    absl::StatusOr<catalog::Attributes> a = FaultyView::Stat(p);
    // Runs once, after the catalog answered and before the view has the answer: "an event
    // arrives while the view waits for the catalog".
    if (std::function<void()> hook = std::exchange(after_stat, nullptr)) hook();
    return a;
  }
  std::function<void()> after_stat;
  absl::StatusOr<catalog::Location> Locate(std::string_view p) override {
    if (fail_locate) return absl::UnavailableError("test: catalog unreachable");
    absl::StatusOr<catalog::Location> l = FaultyView::Locate(p);
    // Runs once, after the catalog located the file for an open: "an event arrives while the
    // open runs".
    if (std::function<void()> hook = std::exchange(after_locate, nullptr)) hook();
    return l;
  }
  std::function<void()> after_locate;
  std::atomic<bool> fail_locate{false};
  absl::StatusOr<std::vector<catalog::DirEntry>> List(std::string_view p,
                                                      const catalog::ListOptions& o) override {
    ++lists;
    return FaultyView::List(p, o);
  }
  absl::StatusOr<std::vector<absl::StatusOr<catalog::Attributes>>> StatMany(
      const std::vector<std::string>& paths) override {
    stats += paths.size();
    return FaultyView::StatMany(paths);
  }
  std::atomic<std::uint64_t> stats{0};
  std::atomic<std::uint64_t> lists{0};
};

// An FsView over a real RocksDB catalog with one node ("n1" of site "s", spool in the temp
// dir) and an injected clock for the TTL.
class FsViewTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto c = gfrep::testing::OpenScratchCatalog(dir_.Sub("db"));
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
    catalog::Roles roles(rocks_.get());
    roles.view = counting_.get();
    auto v = FsView::Create(roles, options);
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
  auto changed = view_->PollEvents(std::chrono::milliseconds(0));
  ASSERT_TRUE(changed.ok()) << changed.status();
  EXPECT_EQ(*changed, std::vector<catalog::InodeId>{view_->GetAttr("/d/f")->inode});
  auto a = view_->GetAttr("/d/f");
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->generation, 2u);
  EXPECT_EQ(a->size, 6u);
  EXPECT_EQ(view_->ReadDir("/d")->at(0).attributes.size, 6u);
  EXPECT_GE(view_->counters().invalidated, 1u);
}

TEST_F(FsViewTest, TheFollowerThreadDropsChangedEntriesAndReportsTheirInodes) {
  const catalog::InodeId inode = Put("/f", "one").inode;
  ASSERT_EQ(view_->GetAttr("/f")->size, 3u);
  std::mutex mu;
  std::vector<catalog::InodeId> told;
  view_->StartFollowing([&](const absl::StatusOr<std::vector<catalog::InodeId>>& changed) {
    ASSERT_TRUE(changed.ok()) << changed.status();
    EXPECT_FALSE(changed->empty());  // only answers that name inodes are given
    std::lock_guard<std::mutex> lock(mu);
    told.insert(told.end(), changed->begin(), changed->end());
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
  for (catalog::InodeId i : told) EXPECT_EQ(i, inode);
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
  EXPECT_EQ((*f)->generation(), 1u);
  EXPECT_EQ((*f)->inode(), view_->GetAttr("/f")->inode);
  EXPECT_EQ(ReadAll(**f), bytes);
  char c[4];
  EXPECT_EQ(*(*f)->ReadAt(bytes.size() - 2, c, 4), 2u);
  EXPECT_EQ(*(*f)->ReadAt(bytes.size() + 5, c, 4), 0u);
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
  // The next stat reports the size just opened, before the TTL.
  EXPECT_EQ(view_->GetAttr("/f")->size, 13u);
}

TEST_F(FsViewTest, AnOpenExpectingAnotherVersionIsAbortedAndDropsTheCachedEntry) {
  catalog::Attributes one = Put("/f", "old bytes");
  ASSERT_EQ(view_->GetAttr("/f")->generation, 1u);
  auto f = view_->Open("/f", FileVersion{one.inode, 1});
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(ReadAll(**f), "old bytes");
  Put("/f", "the new bytes");  // no PollEvents: the cache still says generation 1
  ASSERT_EQ(view_->GetAttr("/f")->generation, 1u);
  auto old = view_->Open("/f", FileVersion{one.inode, 1});
  EXPECT_TRUE(absl::IsAborted(old.status())) << old.status();
  // The caller looks the name up again: the catalog's generation, not the cached one.
  auto a = view_->GetAttr("/f");
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->generation, 2u);
  EXPECT_EQ(a->size, 13u);
  auto now = view_->Open("/f", FileVersion{one.inode, 2});
  ASSERT_TRUE(now.ok()) << now.status();
  EXPECT_EQ(ReadAll(**now), "the new bytes");
  // The handle opened before the rewrite still reads its own generation.
  EXPECT_EQ(ReadAll(**f), "old bytes");
}

TEST_F(FsViewTest, AnOpenExpectingAFileRemovedAndMadeAgainUnderItsNameIsAborted) {
  catalog::Attributes first = Put("/f", "first file");
  ASSERT_TRUE(rocks_->Remove("/f", false).ok());
  catalog::Attributes second = Put("/f", "second one");
  ASSERT_NE(first.inode, second.inode);
  ASSERT_EQ(first.generation, second.generation);  // only the inode tells them apart
  EXPECT_TRUE(absl::IsAborted(view_->Open("/f", FileVersion{first.inode, 1}).status()));
  auto f = view_->Open("/f", FileVersion{second.inode, 1});
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(ReadAll(**f), "second one");
  // A file without content is a version too (generation 0).
  catalog::FileContent c;
  auto empty = rocks_->CreateFile("/empty", c);
  ASSERT_TRUE(empty.ok());
  auto e = view_->Open("/empty", FileVersion{empty->inode, 0});
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_EQ((*e)->size(), 0u);
  Put("/empty", "now with bytes");
  EXPECT_TRUE(absl::IsAborted(view_->Open("/empty", FileVersion{empty->inode, 0}).status()));
  EXPECT_TRUE(absl::IsAborted(view_->Open("/f", FileVersion{second.inode, 7}).status()));
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

class FsNodesTest : public FsViewTest {
 protected:
  void SetUp() override {
    FsViewTest::SetUp();
    nodes_ = std::make_unique<FsNodes>(*view_);
  }

  // Looks `path` up from the root, one name at a time as the kernel does (each counts one
  // lookup of its node); returns the last node.
  FsNodes::Node Walk(const std::string& path) {
    FsNodes::Node n{FsNodes::kRootId, {}};
    std::size_t from = 1;
    while (from < path.size()) {
      std::size_t slash = path.find('/', from);
      if (slash == std::string::npos) slash = path.size();
      auto next = nodes_->Lookup(n.id, path.substr(from, slash - from));
      EXPECT_TRUE(next.ok()) << path << ": " << next.status();
      if (!next.ok()) return {};
      n = *next;
      from = slash + 1;
    }
    return n;
  }

  // A replica event of `inode` as gfmount's follower hands it on: the kernel names to drop.
  std::vector<FsNodes::KernelName> FollowEvents() {
    auto changed = view_->PollEvents(std::chrono::milliseconds(0));
    EXPECT_TRUE(changed.ok()) << changed.status();
    std::vector<FsNodes::KernelName> names;
    for (catalog::InodeId i : changed.ok() ? *changed : std::vector<catalog::InodeId>{}) {
      for (FsNodes::KernelName& n : nodes_->Changed(i)) names.push_back(std::move(n));
    }
    return names;
  }

  std::unique_ptr<FsNodes> nodes_;
};

TEST_F(FsNodesTest, AFileHasANodePerGenerationAndADirectoryOnePerInode) {
  ASSERT_TRUE(rocks_->Mkdir("/d", {}).ok());
  catalog::Attributes put = Put("/d/f", "eight by");
  auto root = nodes_->GetAttr(FsNodes::kRootId);
  ASSERT_TRUE(root.ok()) << root.status();
  EXPECT_EQ(root->type, catalog::FileType::kDirectory);
  FsNodes::Node d = Walk("/d");
  FsNodes::Node f1 = Walk("/d/f");
  EXPECT_NE(d.id, FsNodes::kRootId);
  EXPECT_NE(f1.id, d.id);
  EXPECT_EQ(f1.attributes.inode, put.inode);
  EXPECT_EQ(f1.attributes.generation, 1u);
  EXPECT_EQ(Walk("/d/f").id, f1.id);  // the same version: the same node
  EXPECT_EQ(nodes_->size(), 3u);

  Put("/d/f", "six b");
  EXPECT_EQ(FollowEvents(), (std::vector<FsNodes::KernelName>{{d.id, "f"}}));
  FsNodes::Node f2 = Walk("/d/f");
  EXPECT_NE(f2.id, f1.id);
  EXPECT_EQ(f2.attributes.generation, 2u);
  EXPECT_EQ(Walk("/d").id, d.id);
  // Each node keeps its generation's size, whatever the path holds now.
  EXPECT_EQ(nodes_->GetAttr(f1.id)->size, 8u);
  EXPECT_EQ(nodes_->GetAttr(f2.id)->size, 5u);
  EXPECT_EQ(nodes_->GetAttr(d.id)->type, catalog::FileType::kDirectory);
  EXPECT_TRUE(absl::IsFailedPrecondition(nodes_->Lookup(f2.id, "x").status()));
  EXPECT_TRUE(absl::IsNotFound(nodes_->Lookup(d.id, "missing").status()));
  EXPECT_TRUE(absl::IsNotFound(nodes_->GetAttr(12345).status()));
}

TEST_F(FsNodesTest, AnOlderGenerationsNodeDoesNotOpenButItsHandlesReadOn) {
  Put("/f", "old bytes");
  FsNodes::Node old = Walk("/f");
  auto held = nodes_->Open(old.id);
  ASSERT_TRUE(held.ok()) << held.status();
  EXPECT_EQ(held->path, "/f");
  Put("/f", "the new bytes");  // before any event: the view still shows generation 1
  auto stale = nodes_->Open(old.id);
  EXPECT_TRUE(absl::IsAborted(stale.status())) << stale.status();
  // The kernel looks the name up again (ESTALE): the new generation's node.
  FsNodes::Node now = Walk("/f");
  EXPECT_NE(now.id, old.id);
  EXPECT_EQ(now.attributes.size, 13u);
  auto fresh = nodes_->Open(now.id);
  ASSERT_TRUE(fresh.ok()) << fresh.status();
  EXPECT_EQ(ReadAll(*fresh->file), "the new bytes");
  EXPECT_EQ(ReadAll(*held->file), "old bytes");
  EXPECT_EQ(nodes_->GetAttr(old.id)->size, 9u);
  ASSERT_TRUE(rocks_->Mkdir("/dir", {}).ok());
  EXPECT_TRUE(absl::IsFailedPrecondition(nodes_->Open(Walk("/dir").id).status()));
  EXPECT_TRUE(absl::IsFailedPrecondition(nodes_->ReadDir(now.id).status()));
}

TEST_F(FsNodesTest, ANodeIsFreedWhenTheKernelForgetsItsLastLookupAndItsIdIsNotReused) {
  Put("/f", "bytes");
  FsNodes::Node a = Walk("/f");
  ASSERT_EQ(Walk("/f").id, a.id);  // two lookups
  nodes_->Forget(a.id, 1);
  EXPECT_TRUE(nodes_->GetAttr(a.id).ok());
  EXPECT_EQ(nodes_->size(), 2u);
  nodes_->Forget(a.id, 1);
  EXPECT_TRUE(absl::IsNotFound(nodes_->GetAttr(a.id).status()));
  EXPECT_TRUE(absl::IsNotFound(nodes_->Open(a.id).status()));
  EXPECT_EQ(nodes_->size(), 1u);
  FsNodes::Node b = Walk("/f");
  EXPECT_NE(b.id, a.id);
  nodes_->Forget(b.id, 5);  // the kernel's count at once (forget_multi, unmount)
  nodes_->Forget(b.id, 1);  // unknown ids are ignored
  nodes_->Forget(FsNodes::kRootId, 100);  // the root stays
  EXPECT_EQ(nodes_->size(), 1u);
  EXPECT_TRUE(nodes_->GetAttr(FsNodes::kRootId).ok());
  EXPECT_EQ(Walk("/f").id, b.id + 1);
}

TEST_F(FsNodesTest, ReadDirEntriesGetTheNodesLookupsGive) {
  ASSERT_TRUE(rocks_->Mkdir("/d", {}).ok());
  ASSERT_TRUE(rocks_->Mkdir("/d/sub", {}).ok());
  Put("/d/x", "xx");
  FsNodes::Node d = Walk("/d");
  auto list = nodes_->ReadDir(d.id);
  ASSERT_TRUE(list.ok()) << list.status();
  ASSERT_EQ(list->size(), 2u);
  auto sub = nodes_->LookupEntry(d.id, (*list)[0]);
  auto x = nodes_->LookupEntry(d.id, (*list)[1]);
  ASSERT_TRUE(sub.ok() && x.ok());
  EXPECT_EQ(sub->attributes.type, catalog::FileType::kDirectory);
  EXPECT_EQ(Walk("/d/sub").id, sub->id);
  EXPECT_EQ(Walk("/d/x").id, x->id);
  // Two lookups each now: one forget does not free them.
  nodes_->Forget(x->id, 1);
  EXPECT_TRUE(nodes_->GetAttr(x->id).ok());
  EXPECT_TRUE(absl::IsNotFound(nodes_->LookupEntry(999, (*list)[1]).status()));
}

TEST_F(FsNodesTest, ARenamedDirectoryKeepsItsNodeAndItsChildrenFollow) {
  ASSERT_TRUE(rocks_->Mkdir("/a", {}).ok());
  Put("/a/f", "in a");
  FsNodes::Node a = Walk("/a");
  ASSERT_TRUE(rocks_->Rename("/a", "/b").ok());  // writes no event: seen after the TTL
  Advance(std::chrono::milliseconds(1001));
  EXPECT_TRUE(absl::IsNotFound(nodes_->Lookup(FsNodes::kRootId, "a").status()));
  EXPECT_EQ(nodes_->GetAttr(a.id)->inode, a.attributes.inode);  // the last known
  FsNodes::Node b = Walk("/b");
  EXPECT_EQ(b.id, a.id);
  auto f = nodes_->Open(Walk("/b/f").id);
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(f->path, "/b/f");
  EXPECT_EQ(ReadAll(*f->file), "in a");
}

TEST_F(FsNodesTest, TheKernelKeepsANodesPagesUntilAReplicaEventOrAFailedRead) {
  catalog::Attributes a = Put("/f", "some bytes");
  catalog::Replica r;
  r.inode = a.inode;
  r.node = "n2";
  r.state = ReplicaState::kComplete;
  r.generation = a.generation;
  r.size = a.size;
  ASSERT_TRUE(rocks_->PutReplica(r).ok());
  ASSERT_TRUE(view_->PollEvents(std::chrono::milliseconds(0)).ok());
  FsNodes::Node f = Walk("/f");
  EXPECT_TRUE(nodes_->Open(f.id)->keep_cache);
  EXPECT_TRUE(nodes_->Open(f.id)->keep_cache);
  // n2's replica found corrupt: not this node's, but whatever a page cache holds is no
  // longer trusted. The name is dropped too (the next lookup finds the same node again).
  catalog::ReplicaTransition t;
  t.inode = a.inode;
  t.node = "n2";
  t.generation = a.generation;
  t.from = ReplicaState::kComplete;
  t.to = ReplicaState::kCorrupt;
  t.note = "test";
  ASSERT_TRUE(rocks_->TransitionReplicas({t}).ok());
  EXPECT_EQ(FollowEvents(), (std::vector<FsNodes::KernelName>{{FsNodes::kRootId, "f"}}));
  EXPECT_EQ(Walk("/f").id, f.id);
  auto after = nodes_->Open(f.id);
  ASSERT_TRUE(after.ok()) << after.status();
  EXPECT_FALSE(after->keep_cache);
  EXPECT_TRUE(after->file->local());
  EXPECT_EQ(ReadAll(*after->file), "some bytes");
  EXPECT_TRUE(nodes_->Open(f.id)->keep_cache);
  // A failed read (a streamed file whose whole-file check failed, say): the same.
  nodes_->ReadFailed(f.id);
  EXPECT_FALSE(nodes_->Open(f.id)->keep_cache);
  EXPECT_TRUE(nodes_->Open(f.id)->keep_cache);
  // Events may have been missed (the log could not be read): every node.
  nodes_->ChangedAll();
  EXPECT_FALSE(nodes_->Open(f.id)->keep_cache);
  EXPECT_TRUE(nodes_->Open(f.id)->keep_cache);
}

TEST_F(FsNodesTest, AnEventDuringAnOpenDropsThePagesAtItAndAtTheNextOpen) {
  catalog::Attributes a = Put("/f", "some bytes");
  catalog::Replica r;
  r.inode = a.inode;
  r.node = "n2";
  r.state = ReplicaState::kComplete;
  r.generation = a.generation;
  r.size = a.size;
  ASSERT_TRUE(rocks_->PutReplica(r).ok());
  FsNodes::Node f = Walk("/f");
  ASSERT_TRUE(nodes_->Open(f.id)->keep_cache);
  // n2's replica is found corrupt while an open runs (after it located the file): that open
  // drops the pages, and so does the next one (the first one's reads may put them back).
  counting_->after_locate = [&] {
    catalog::ReplicaTransition t;
    t.inode = a.inode;
    t.node = "n2";
    t.generation = a.generation;
    t.from = ReplicaState::kComplete;
    t.to = ReplicaState::kCorrupt;
    t.note = "test";
    ASSERT_TRUE(rocks_->TransitionReplicas({t}).ok());
    FollowEvents();
  };
  auto during = nodes_->Open(f.id);
  ASSERT_TRUE(during.ok()) << during.status();
  ASSERT_EQ(counting_->after_locate, nullptr);  // the event did come during the open
  EXPECT_FALSE(during->keep_cache);
  auto next = nodes_->Open(f.id);
  ASSERT_TRUE(next.ok());
  EXPECT_FALSE(next->keep_cache);
  EXPECT_TRUE(nodes_->Open(f.id)->keep_cache);
  // An open that fails drops nothing: the next one still must.
  nodes_->ReadFailed(f.id);
  counting_->fail_locate = true;
  EXPECT_TRUE(absl::IsUnavailable(nodes_->Open(f.id).status()));
  counting_->fail_locate = false;
  EXPECT_FALSE(nodes_->Open(f.id)->keep_cache);
}

}  // namespace
}  // namespace gfrep::replica::client
