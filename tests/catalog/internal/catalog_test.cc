#include "catalog/catalog.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <limits>
#include <map>
#include <random>
#include <set>
#include <thread>

#include "catalog/internal/kv_catalog.h"
#include "catalog/internal/kv_store.h"
#include "catalog/internal/open_store.h"
#include "tests/support/postgres_server.h"
#include "tests/support/temp_dir.h"

namespace gfrep::catalog {
namespace {

using namespace std::chrono_literals;

MkdirOptions Parents() {
  MkdirOptions o;
  o.parents = true;
  return o;
}

FileContent Content(std::uint64_t size, std::string checksum = "") {
  FileContent c;
  c.size = size;
  c.checksum = std::move(checksum);
  return c;
}

RequestSpec Req(std::string path, std::uint32_t copies = 1) {
  RequestSpec r;
  r.paths = {std::move(path)};
  r.copies = copies;
  return r;
}

TaskFilter ByRequest(std::uint64_t id) {
  TaskFilter f;
  f.request_id = id;
  return f;
}

TaskFilter OpenFor(std::string node) {
  TaskFilter f;
  f.dst_node = std::move(node);
  f.any_state = false;
  f.state = TaskState::kQueued;
  return f;
}

Replica Rep(InodeId inode, std::string node, ReplicaState state, std::uint64_t gen) {
  Replica r;
  r.inode = inode;
  r.node = std::move(node);
  r.state = state;
  r.generation = gen;
  return r;
}

Heartbeat Beat(std::string node, std::uint64_t free_bytes = 0, double load = 0) {
  Heartbeat h;
  h.node = std::move(node);
  h.free_bytes = free_bytes;
  h.load = load;
  return h;
}

// The whole suite runs on both backends of the storage seam (catalog/internal/kv_store.h):
// the rules live once in KvCatalog, so both must give the same answers. PostgreSQL is a
// private server started once for this binary (tests/support/postgres_server.h), one fresh
// database per test; the tests are skipped, saying why, where it cannot start.
class CatalogTest : public ::testing::TestWithParam<const char*> {
 protected:
  void SetUp() override {
    if (std::string_view(GetParam()).starts_with("postgresql")) {
      absl::StatusOr<std::string> db = testing::SharedPostgres().CreateDatabase();
      if (!db.ok()) GFREP_SKIP_OR_FAIL_WITHOUT_POSTGRES(db.status());
      location_ = *db;
      shared_ = std::string_view(GetParam()) == "postgresql_shared";
    } else {
      location_ = dir_.Sub("db");
    }
    Open();
  }

  void Open() {
    catalog_.reset();
    CatalogOptions options;
    options.path = location_;
    options.shared = shared_;
    options.clock = [this] { return now_.load(); };
    options.write_fault = [this](std::string_view what) {
      return fail_next_write_.exchange(false)
                 ? absl::UnavailableError(fmt::format("{}: injected write failure", what))
                 : absl::OkStatus();
    };
    absl::StatusOr<std::unique_ptr<Catalog>> c = OpenCatalog(options);
    ASSERT_TRUE(c.ok()) << c.status();
    catalog_ = std::move(*c);
  }

  // Two sites with one node each, and a file /f of generation 1 on node a1.
  void MakeTopologyAndFile() {
    ASSERT_TRUE(catalog_->PutSite({"a", {{"region", "jp"}}}).ok());
    ASSERT_TRUE(catalog_->PutSite({"b", {}}).ok());
    Node n;
    n.name = "a1";
    n.site = "a";
    n.address = "127.0.0.1:1";
    ASSERT_TRUE(catalog_->RegisterNode(n).ok());
    n.name = "b1";
    n.site = "b";
    ASSERT_TRUE(catalog_->RegisterNode(n).ok());
    FileContent content;
    content.size = 10;
    content.checksum_algo = "xxh3-128";
    content.checksum = "c1";
    absl::StatusOr<Attributes> a = catalog_->CommitFile("/f", content, "a1", std::nullopt);
    ASSERT_TRUE(a.ok()) << a.status();
    ASSERT_EQ(a->generation, 1u);
  }

  absl::StatusOr<Task> OneTask() {
    TaskSpec spec;
    spec.path = "/f";
    spec.src_node = "a1";
    spec.dst_node = "b1";
    spec.max_attempts = 3;
    absl::StatusOr<std::vector<Task>> tasks = catalog_->CreateTasks({spec});
    if (!tasks.ok()) return tasks.status();
    return tasks->front();
  }

  Task GetTaskOrDie(std::uint64_t id) {
    absl::StatusOr<Task> t = catalog_->GetTask(id);
    EXPECT_TRUE(t.ok()) << t.status();
    return t.ok() ? *t : Task{};
  }

  // The replica record of (path's inode, node); kNotFound if none.
  absl::StatusOr<Replica> RecordOf(const std::string& path, const std::string& node) {
    absl::StatusOr<Location> loc = catalog_->Locate(path);
    if (!loc.ok()) return loc.status();
    for (const Replica& r : loc->replicas) {
      if (r.node == node) return r;
    }
    return absl::NotFoundError(node);
  }

  absl::StatusOr<Task> TaskTo(const std::string& path, const std::string& dst,
                              std::int32_t priority = 0) {
    TaskSpec spec;
    spec.path = path;
    spec.src_node = "a1";
    spec.dst_node = dst;
    spec.priority = priority;
    spec.max_attempts = 3;
    absl::StatusOr<std::vector<Task>> tasks = catalog_->CreateTasks({spec});
    if (!tasks.ok()) return tasks.status();
    return tasks->front();
  }

  testing::TempDir dir_{"catalog"};
  std::string location_;
  bool shared_ = false;  // opened as one of several front ends
  std::atomic<std::int64_t> now_{1'000'000'000'000};
  std::atomic<bool> fail_next_write_{false};
  std::unique_ptr<Catalog> catalog_;
};

TEST_P(CatalogTest, ListsChildrenInNameOrderWithAttributes) {
  ASSERT_TRUE(catalog_->Mkdir("/d", {}).ok());
  for (std::string name : {"c", "a", "b"}) {
    ASSERT_TRUE(catalog_->Mkdir("/d/" + name, {}).ok());
  }
  ASSERT_TRUE(catalog_->CreateFile("/d/file", Content(5)).ok());
  ASSERT_TRUE(catalog_->Mkdir("/e", {}).ok());
  ASSERT_TRUE(catalog_->Mkdir("/e/zz", {}).ok());
  absl::StatusOr<std::vector<DirEntry>> list = catalog_->List("/d", {});
  ASSERT_TRUE(list.ok());
  ASSERT_EQ(list->size(), 4u);
  EXPECT_EQ((*list)[0].name, "a");
  EXPECT_EQ((*list)[3].name, "file");
  EXPECT_EQ((*list)[3].attributes.type, FileType::kFile);
  EXPECT_EQ((*list)[3].attributes.size, 5u);
  absl::StatusOr<std::vector<DirEntry>> page = catalog_->List("/d", ListOptions{"a", 2});
  ASSERT_TRUE(page.ok());
  ASSERT_EQ(page->size(), 2u);
  EXPECT_EQ((*page)[0].name, "b");
  EXPECT_EQ(catalog_->List("/d/file", {}).status().code(), absl::StatusCode::kFailedPrecondition);
}

TEST_P(CatalogTest, CreateFilesIsAllOrNothing) {
  ASSERT_TRUE(catalog_->Mkdir("/a", {}).ok());
  ASSERT_TRUE(catalog_->Mkdir("/b", {}).ok());
  std::vector<NewFile> files;
  for (int i = 0; i < 50; ++i) files.push_back({fmt::format("/{}/f{}", i % 2 ? "a" : "b", i), Content(i)});
  absl::StatusOr<std::vector<Attributes>> made = catalog_->CreateFiles(files);
  ASSERT_TRUE(made.ok()) << made.status();
  ASSERT_EQ(made->size(), 50u);
  EXPECT_EQ((*made)[7].size, 7u);
  EXPECT_EQ(*catalog_->PathOf((*made)[7].inode), "/a/f7");
  // One taken name, one missing parent, one duplicate: each refuses the whole batch.
  std::vector<NewFile> taken = {{"/a/new1", Content(1)}, {"/a/f1", Content(1)}};
  EXPECT_EQ(catalog_->CreateFiles(taken).status().code(), absl::StatusCode::kAlreadyExists);
  std::vector<NewFile> orphan = {{"/a/new2", Content(1)}, {"/zz/f", Content(1)}};
  EXPECT_EQ(catalog_->CreateFiles(orphan).status().code(), absl::StatusCode::kNotFound);
  std::vector<NewFile> twice = {{"/a/new3", Content(1)}, {"/a//new3", Content(1)}};
  EXPECT_EQ(catalog_->CreateFiles(twice).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(catalog_->List("/a", {})->size(), 25u);
  absl::StatusOr<std::vector<absl::StatusOr<Attributes>>> stats =
      catalog_->StatMany({"/a/f1", "/nope", "/a/.."});
  ASSERT_TRUE(stats.ok());
  ASSERT_EQ(stats->size(), 3u);
  EXPECT_EQ((*stats)[0]->size, 1u);
  EXPECT_EQ((*stats)[1].status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ((*stats)[2].status().code(), absl::StatusCode::kInvalidArgument);
}

// StatMany resolves all its paths level by level together (one batched read per level):
// each answer, code and message must be what Stat says of that path alone.
TEST_P(CatalogTest, StatManyAnswersEachPathAsStatDoes) {
  ASSERT_TRUE(catalog_->Mkdir("/d/e/f", Parents()).ok());
  ASSERT_TRUE(catalog_->CreateFile("/d/file", {}).ok());
  ASSERT_TRUE(catalog_->CreateFile("/d/e/f/deep", {}).ok());
  const std::vector<std::string> paths = {
      "/", "/d", "/d/e/f/deep", "/d/file", "/d/file/under", "/d/file/under/more", "/d/nope",
      "/d/nope/x", "/nope", "/d/e/f/deep", "/d/e/../e", "relative", "/d//e", "/d/e/f"};
  absl::StatusOr<std::vector<absl::StatusOr<Attributes>>> many = catalog_->StatMany(paths);
  ASSERT_TRUE(many.ok()) << many.status();
  ASSERT_EQ(many->size(), paths.size());
  for (std::size_t i = 0; i < paths.size(); ++i) {
    absl::StatusOr<Attributes> one = catalog_->Stat(paths[i]);
    const absl::StatusOr<Attributes>& got = (*many)[i];
    EXPECT_EQ(got.status(), one.status()) << paths[i];
    if (got.ok() && one.ok()) {
      EXPECT_EQ(got->inode, one->inode) << paths[i];
      EXPECT_EQ(got->name, one->name) << paths[i];
      EXPECT_EQ(got->type, one->type) << paths[i];
    }
  }
  EXPECT_TRUE(catalog_->StatMany({})->empty());
}

TEST_P(CatalogTest, MkdirReportsTheRightCodes) {
  EXPECT_EQ(catalog_->Mkdir("/x/y", {}).status().code(), absl::StatusCode::kNotFound);
  ASSERT_TRUE(catalog_->Mkdir("/x/y/z", Parents()).ok());
  EXPECT_TRUE(catalog_->Mkdir("/x/y", Parents()).ok());
  EXPECT_EQ(catalog_->Mkdir("/x/y", {}).status().code(), absl::StatusCode::kAlreadyExists);
  ASSERT_TRUE(catalog_->CreateFile("/x/f", {}).ok());
  EXPECT_EQ(catalog_->Mkdir("/x/f/g", {}).status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(catalog_->Mkdir("/x/f/g", Parents()).status().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(catalog_->Mkdir("/x/..", {}).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(catalog_->Mkdir("/x/" + std::string(256, 'n'), {}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(catalog_->CreateFile("/x/f", {}).status().code(), absl::StatusCode::kAlreadyExists);
}

TEST_P(CatalogTest, StatInodeAndPathOfFollowRenames) {
  ASSERT_TRUE(catalog_->Mkdir("/a/b", Parents()).ok());
  absl::StatusOr<Attributes> f = catalog_->CreateFile("/a/b/f", {});
  ASSERT_TRUE(f.ok());
  EXPECT_EQ(*catalog_->PathOf(f->inode), "/a/b/f");
  ASSERT_TRUE(catalog_->Mkdir("/c", {}).ok());
  ASSERT_TRUE(catalog_->Rename("/a/b", "/c/b2").ok());
  EXPECT_EQ(*catalog_->PathOf(f->inode), "/c/b2/f");
  EXPECT_EQ(catalog_->StatInode(f->inode)->name, "f");
  EXPECT_EQ(catalog_->Stat("/a/b/f").status().code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(catalog_->Stat("/c/b2/f").ok());
}

TEST_P(CatalogTest, RenameRefusesCyclesExistingTargetsAndRoot) {
  ASSERT_TRUE(catalog_->Mkdir("/a/b/c", Parents()).ok());
  EXPECT_EQ(catalog_->Rename("/a", "/a/b/c/a").code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(catalog_->Rename("/a", "/a/x").code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(catalog_->Rename("/a/b", "/a").code(), absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(catalog_->Rename("/", "/z").code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(catalog_->Rename("/nope", "/z").code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(catalog_->Rename("/a/b/c", "/c").ok());
  EXPECT_TRUE(catalog_->Stat("/c").ok());
}

TEST_P(CatalogTest, RemoveNeedsRecursiveForNonEmptyDirectories) {
  MakeTopologyAndFile();
  ASSERT_TRUE(catalog_->Mkdir("/d/e", Parents()).ok());
  ASSERT_TRUE(catalog_->Rename("/f", "/d/e/f").ok());
  EXPECT_EQ(catalog_->Remove("/d", false).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(catalog_->Remove("/", true).code(), absl::StatusCode::kFailedPrecondition);
  absl::StatusOr<Attributes> f = catalog_->Stat("/d/e/f");
  ASSERT_TRUE(f.ok());
  ASSERT_TRUE(catalog_->Remove("/d", true).ok());
  EXPECT_EQ(catalog_->Stat("/d").status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(catalog_->StatInode(f->inode).status().code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(catalog_->List("/", {})->empty());
  // The replica is left for its node to delete, visible through the reverse index.
  absl::StatusOr<std::vector<Replica>> held = catalog_->ListNodeReplicas("a1", 0, 100);
  ASSERT_TRUE(held.ok());
  ASSERT_EQ(held->size(), 1u);
  EXPECT_EQ((*held)[0].state, ReplicaState::kDeleting);
  ASSERT_TRUE(catalog_->RemoveReplica(f->inode, "a1").ok());
  EXPECT_TRUE(catalog_->ListNodeReplicas("a1", 0, 100)->empty());
}

TEST_P(CatalogTest, NewGenerationMarksOtherReplicasStale) {
  MakeTopologyAndFile();
  absl::StatusOr<Attributes> f = catalog_->Stat("/f");
  ASSERT_TRUE(catalog_->PutReplica(Rep(f->inode, "b1", ReplicaState::kComplete, 1)).ok());
  // A replica claiming an old generation cannot be made complete.
  FileContent v2;
  v2.size = 20;
  v2.checksum = "c2";
  EXPECT_EQ(catalog_->CommitFile("/f", v2, "b1", 7).status().code(), absl::StatusCode::kAborted);
  absl::StatusOr<Attributes> g2 = catalog_->CommitFile("/f", v2, "b1", 1);
  ASSERT_TRUE(g2.ok()) << g2.status();
  EXPECT_EQ(g2->generation, 2u);
  std::map<std::string, Replica> by_node;
  absl::StatusOr<std::vector<Replica>> reps = catalog_->GetReplicas(f->inode);
  ASSERT_TRUE(reps.ok());
  for (const Replica& r : *reps) by_node[r.node] = r;
  EXPECT_EQ(by_node["a1"].state, ReplicaState::kStale);
  EXPECT_EQ(by_node["a1"].generation, 1u);
  EXPECT_EQ(by_node["b1"].state, ReplicaState::kComplete);
  EXPECT_EQ(by_node["b1"].generation, 2u);
  EXPECT_EQ(catalog_->PutReplica(Rep(f->inode, "a1", ReplicaState::kComplete, 1))
                .code(),
            absl::StatusCode::kAborted);
  EXPECT_EQ(catalog_->CommitFile("/", v2, "", std::nullopt).status().code(),
            absl::StatusCode::kFailedPrecondition);
}

TEST_P(CatalogTest, DataAndIdsSurviveReopen) {
  MakeTopologyAndFile();
  absl::StatusOr<Attributes> before = catalog_->CreateFile("/g", {});
  ASSERT_TRUE(before.ok());
  absl::StatusOr<Request> req = catalog_->CreateRequest(Req("/f", 2));
  ASSERT_TRUE(req.ok());
  std::uint64_t seq = *catalog_->LastEventSeq();
  ASSERT_TRUE(catalog_->Remove("/g", false).ok());
  ASSERT_NO_FATAL_FAILURE(Open());
  EXPECT_EQ(catalog_->Stat("/f")->generation, 1u);
  EXPECT_EQ(catalog_->Stat("/g").status().code(), absl::StatusCode::kNotFound);
  absl::StatusOr<Attributes> after = catalog_->CreateFile("/g", {});
  ASSERT_TRUE(after.ok());
  EXPECT_GT(after->inode, before->inode);  // never reused
  absl::StatusOr<Request> req2 = catalog_->CreateRequest(Req("/f"));
  ASSERT_TRUE(req2.ok());
  EXPECT_EQ(req2->id, req->id + 1);
  EXPECT_GE(*catalog_->LastEventSeq(), seq);
  EXPECT_EQ(catalog_->GetNode("b1")->site, "b");
}

DiskProfile SampleDisk() {
  DiskProfile d;
  d.dir = "/spool/b1";
  d.write_io_size_bytes = 1 << 20;
  d.direct = true;
  d.flush_interval_bytes = 256 << 20;
  d.write_mbps = 812.5;
  d.read_mbps = 1400.25;
  d.measured_ns = 1'700'000'000'000'000'000;
  return d;
}

TEST_P(CatalogTest, NodeDiskProfileIsStoredAndSurvivesReRegistrationHeartbeatsAndReopen) {
  MakeTopologyAndFile();  // sites a, b; nodes a1, b1
  EXPECT_EQ(catalog_->GetNode("b1")->disk.measured_ns, 0) << "never measured";
  ASSERT_TRUE(catalog_->PutNodeDisk("b1", SampleDisk()).ok());
  auto expect_sample = [&](std::string_view when) {
    absl::StatusOr<Node> n = catalog_->GetNode("b1");
    ASSERT_TRUE(n.ok()) << n.status();
    EXPECT_EQ(n->disk.dir, "/spool/b1") << when;
    EXPECT_EQ(n->disk.write_io_size_bytes, 1u << 20) << when;
    EXPECT_TRUE(n->disk.direct) << when;
    EXPECT_EQ(n->disk.flush_interval_bytes, 256u << 20) << when;
    EXPECT_DOUBLE_EQ(n->disk.write_mbps, 812.5) << when;
    EXPECT_DOUBLE_EQ(n->disk.read_mbps, 1400.25) << when;
    EXPECT_EQ(n->disk.measured_ns, 1'700'000'000'000'000'000) << when;
  };
  expect_sample("stored");
  // The site agent re-registers (it knows nothing of the disk) and sends heartbeats.
  Node again;
  again.name = "b1";
  again.site = "b";
  again.address = "127.0.0.1:2";
  again.workers = 4;
  ASSERT_TRUE(catalog_->RegisterNode(again).ok());
  expect_sample("after RegisterNode");
  EXPECT_EQ(catalog_->GetNode("b1")->address, "127.0.0.1:2");
  ASSERT_TRUE(catalog_->SendHeartbeat(Beat("b1", 7, 0.5)).ok());
  expect_sample("after a heartbeat");
  // Even a RegisterNode carrying another profile leaves the stored one alone.
  again.disk.write_io_size_bytes = 4096;
  again.disk.measured_ns = 5;
  ASSERT_TRUE(catalog_->RegisterNode(again).ok());
  expect_sample("after RegisterNode with a disk");
  ASSERT_NO_FATAL_FAILURE(Open());
  expect_sample("after reopen");
  absl::StatusOr<std::vector<Node>> listed = catalog_->ListNodes("b");
  ASSERT_TRUE(listed.ok()) << listed.status();
  ASSERT_EQ(listed->size(), 1u);
  EXPECT_EQ(listed->front().disk.write_io_size_bytes, 1u << 20);
  EXPECT_EQ(catalog_->GetNode("a1")->disk.write_io_size_bytes, 0u);
}

TEST_P(CatalogTest, ANodesModeIsTheOperatorsAndSurvivesReRegistrationAndReopen) {
  MakeTopologyAndFile();  // sites a, b; nodes a1, b1
  EXPECT_EQ(catalog_->GetNode("b1")->mode, NodeMode::kNormal);
  absl::StatusOr<std::uint64_t> seq = catalog_->LastEventSeq();
  ASSERT_TRUE(catalog_->SetNodeMode("b1", NodeMode::kDraining).ok());
  EXPECT_EQ(catalog_->SetNodeMode("nope", NodeMode::kReadOnly).code(), absl::StatusCode::kNotFound);
  absl::StatusOr<std::vector<Event>> events = catalog_->ReadEvents(*seq, 10, 0ms);
  ASSERT_TRUE(events.ok());
  ASSERT_EQ(events->size(), 1u);
  EXPECT_EQ((*events)[0].kind, EventKind::kNode);
  EXPECT_EQ((*events)[0].state, "mode");
  EXPECT_EQ((*events)[0].detail, "draining");
  // The agent re-registers (it knows nothing of the mode): the operator's mode stays.
  Node again;
  again.name = "b1";
  again.site = "b";
  again.address = "127.0.0.1:2";
  again.mode = NodeMode::kNormal;
  ASSERT_TRUE(catalog_->RegisterNode(again).ok());
  EXPECT_EQ(catalog_->GetNode("b1")->mode, NodeMode::kDraining);
  ASSERT_NO_FATAL_FAILURE(Open());
  EXPECT_EQ(catalog_->GetNode("b1")->mode, NodeMode::kDraining);
  EXPECT_EQ(catalog_->ListNodes("b")->front().mode, NodeMode::kDraining);
  ASSERT_TRUE(catalog_->SetNodeMode("b1", NodeMode::kReadOnly).ok());
  EXPECT_EQ(catalog_->GetNode("b1")->mode, NodeMode::kReadOnly);
  EXPECT_EQ(catalog_->GetNode("a1")->mode, NodeMode::kNormal);
  EXPECT_EQ(ParseNodeMode("read-only").value(), NodeMode::kReadOnly);
  EXPECT_FALSE(ParseNodeMode("gone").ok());
}

TEST_P(CatalogTest, PutNodeDiskRefusesUnknownNodesAndBadProfiles) {
  MakeTopologyAndFile();
  EXPECT_EQ(catalog_->PutNodeDisk("zz", SampleDisk()).code(), absl::StatusCode::kNotFound);
  DiskProfile d = SampleDisk();
  d.write_mbps = -1;
  EXPECT_EQ(catalog_->PutNodeDisk("b1", d).code(), absl::StatusCode::kInvalidArgument);
  d = SampleDisk();
  d.write_io_size_bytes = 1000;  // direct needs 4096-multiples
  EXPECT_EQ(catalog_->PutNodeDisk("b1", d).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(catalog_->GetNode("b1")->disk.measured_ns, 0) << "nothing written";
}

TEST_P(CatalogTest, HeartbeatsTeachRoutesWhatTheCopiesSaw) {
  MakeTopologyAndFile();  // sites a, b; nodes a1, b1
  // b1 received copies from site a: the route a -> b gets a record with what they saw.
  Heartbeat hb = Beat("b1", 1, 0);
  hb.routes = {{"a", 5'000'000, 200.5, 260.0, 0.001, 800'000'000, "highspeed"}};
  ASSERT_TRUE(catalog_->SendHeartbeat(hb).ok());
  absl::StatusOr<Route> r = catalog_->GetRoute("a", "b");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->streams, 0u);  // settings untouched: defaults
  EXPECT_DOUBLE_EQ(r->observed.rtt_ms, 200.5);
  EXPECT_DOUBLE_EQ(r->observed.srtt_ms, 260.0);
  EXPECT_DOUBLE_EQ(r->observed.loss, 0.001);
  EXPECT_EQ(r->observed.peak_bps, 800'000'000u);
  EXPECT_EQ(r->observed.bytes, 5'000'000u);
  EXPECT_EQ(r->observed.at_ns, now_.load());
  EXPECT_EQ(r->observed.congestion, "highspeed");  // what the senders' sockets ran
  // gfroute set replaces the settings and keeps what was learnt.
  Route set;
  set.src_site = "a";
  set.dst_site = "b";
  set.streams = 8;
  set.observed.rtt_ms = 1;  // ignored
  ASSERT_TRUE(catalog_->PutRoute(set).ok());
  r = catalog_->GetRoute("a", "b");
  EXPECT_EQ(r->streams, 8u);
  EXPECT_DOUBLE_EQ(r->observed.rtt_ms, 200.5);
  // A later report: bytes add up, a lower peak does not replace the best one, a report
  // without RTT (no copy ended) keeps the RTT; a day later a lower peak does replace it.
  now_ += 2'000'000'000;
  hb.routes = {{"a", 1'000, 0, 0, 0, 300'000'000, ""}};
  ASSERT_TRUE(catalog_->SendHeartbeat(hb).ok());
  r = catalog_->GetRoute("a", "b");
  EXPECT_EQ(r->observed.congestion, "highspeed");  // no copy ended: the last one stands
  EXPECT_EQ(r->observed.bytes, 5'001'000u);
  EXPECT_EQ(r->observed.peak_bps, 800'000'000u);
  EXPECT_DOUBLE_EQ(r->observed.rtt_ms, 200.5);
  now_ += 25LL * 3600 * 1'000'000'000;
  ASSERT_TRUE(catalog_->SendHeartbeat(hb).ok());
  EXPECT_EQ(catalog_->GetRoute("a", "b")->observed.peak_bps, 300'000'000u);
  // Observations about the node's own site, or from a site that is gone, change nothing.
  hb.routes = {{"b", 9, 1, 1, 0, 1, ""}, {"nosuch", 9, 1, 1, 0, 1, ""}};
  ASSERT_TRUE(catalog_->SendHeartbeat(hb).ok());
  EXPECT_EQ(catalog_->GetRoute("b", "b").status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(catalog_->ListRoutes()->size(), 1u);
}

// Agents cache routes (one listing, kept for a while): an operator's PutRoute and RemoveRoute
// write a route event that tells the destination site's agents to look again; what the
// copies teach a route (heartbeats) writes none.
TEST_P(CatalogTest, RouteSettingsMakeARouteEventAndObservationsNone) {
  MakeTopologyAndFile();  // sites a, b; nodes a1, b1
  absl::StatusOr<std::uint64_t> seq = catalog_->LastEventSeq();
  ASSERT_TRUE(seq.ok());
  auto route_events = [&]() {
    std::vector<Event> out;
    absl::StatusOr<std::vector<Event>> events = catalog_->ReadEvents(*seq, 100, 0ms);
    EXPECT_TRUE(events.ok()) << events.status();
    if (!events.ok()) return out;
    for (Event& e : *events) {
      seq = std::max(*seq, e.seq);
      if (e.kind == EventKind::kRoute) out.push_back(std::move(e));
    }
    return out;
  };
  Heartbeat hb = Beat("b1", 1, 0);
  hb.routes = {{"a", 5'000'000, 200.5, 260.0, 0.001, 800'000'000, "bbr"}};
  ASSERT_TRUE(catalog_->SendHeartbeat(hb).ok());
  EXPECT_TRUE(route_events().empty()) << "a heartbeat's observations made a route event";
  Route set;
  set.src_site = "a";
  set.dst_site = "b";
  set.streams = 2;
  ASSERT_TRUE(catalog_->PutRoute(set).ok());
  std::vector<Event> events = route_events();
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(ToString(events[0].kind), "route");
  EXPECT_EQ(events[0].node, "b");  // the site whose agents pull over it
  EXPECT_EQ(events[0].state, "set");
  EXPECT_EQ(events[0].detail, "a->b");
  ASSERT_TRUE(catalog_->RemoveRoute("a", "b").ok());
  events = route_events();
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].state, "removed");
  EXPECT_EQ(events[0].detail, "a->b");
}

TEST_P(CatalogTest, AHeartbeatWithABadRouteObservationChangesNothing) {
  MakeTopologyAndFile();
  const std::int64_t before = catalog_->GetNode("b1")->last_heartbeat_ns;
  now_ += 1'000'000'000;
  for (RouteObservation bad : {RouteObservation{"a", 1, std::nan(""), 0, 0, 0, ""},
                               RouteObservation{"a", 1, -1, 0, 0, 0, ""},
                               RouteObservation{"a", 1, 1e9, 0, 0, 0, ""},
                               RouteObservation{"a", 1, 200, 0, 1.5, 0, ""},
                               RouteObservation{"a", 1, 200, 0, 0, kMaxObservedBps + 1, ""},
                               RouteObservation{"../x", 1, 200, 0, 0, 0, ""},
                               RouteObservation{"a", 1, 200, 0, 0, 0, "High Speed"},
                               RouteObservation{"a", 1, 200, 0, 0, 0, "a_sixteen_chars_"}}) {
    Heartbeat hb = Beat("b1", 1, 0);
    hb.routes = {bad};
    EXPECT_EQ(catalog_->SendHeartbeat(hb).code(), absl::StatusCode::kInvalidArgument)
        << bad.src_site << " " << bad.min_rtt_ms;
  }
  Heartbeat many = Beat("b1", 1, 0);
  many.routes.assign(kMaxRouteObservations + 1, RouteObservation{"a", 1, 200, 0, 0, 0, ""});
  EXPECT_EQ(catalog_->SendHeartbeat(many).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(catalog_->GetNode("b1")->last_heartbeat_ns, before);  // not even the heartbeat
  EXPECT_EQ(catalog_->GetRoute("a", "b").status().code(), absl::StatusCode::kNotFound);
}

TEST_P(CatalogTest, TopologyTablesValidateReferences) {
  Node orphan;
  orphan.name = "n";
  orphan.site = "nosuch";
  EXPECT_EQ(catalog_->RegisterNode(orphan).code(), absl::StatusCode::kNotFound);
  MakeTopologyAndFile();
  Route r;
  r.src_site = "a";
  r.dst_site = "b";
  r.streams = 16;
  r.congestion_control = "bbr";
  ASSERT_TRUE(catalog_->PutRoute(r).ok());
  EXPECT_EQ(catalog_->GetRoute("a", "b")->streams, 16u);
  EXPECT_EQ(catalog_->GetRoute("b", "a").status().code(), absl::StatusCode::kNotFound);
  r.dst_site = "zz";
  EXPECT_EQ(catalog_->PutRoute(r).code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(catalog_->RemoveSite("a").code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(catalog_->ListNodes("a")->size(), 1u);
  EXPECT_EQ(catalog_->ListNodes("")->size(), 2u);
  now_ += 5'000'000'000;
  ASSERT_TRUE(catalog_->SendHeartbeat(Beat("a1", 99, 0.5)).ok());
  absl::StatusOr<Node> n = catalog_->GetNode("a1");
  EXPECT_EQ(n->free_bytes, 99u);
  EXPECT_EQ(n->last_heartbeat_ns, now_.load());
  EXPECT_EQ(catalog_->SendHeartbeat(Beat("zz")).code(), absl::StatusCode::kNotFound);
}

TEST_P(CatalogTest, LeasesAreRenewedInOneBatchEachAsRenewLeaseWouldHaveBeen) {
  MakeTopologyAndFile();
  ASSERT_TRUE(OneTask().ok());
  absl::StatusOr<Task> mine = catalog_->ClaimTask("b1", "agent-1", 10s);
  ASSERT_TRUE(mine.ok()) << mine.status();
  now_ += 9'000'000'000;
  // Mine renewed; a wrong owner and an unknown task refused, each for itself.
  absl::StatusOr<std::vector<absl::Status>> r = catalog_->RenewLeases(
      {{mine->id, "agent-1"}, {mine->id, "agent-2"}, {mine->id + 1000, "agent-1"}}, 10s);
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->size(), 3u);
  EXPECT_TRUE((*r)[0].ok()) << (*r)[0];
  EXPECT_EQ((*r)[1].code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ((*r)[2].code(), absl::StatusCode::kNotFound);
  now_ += 9'000'000'000;  // 18 s after the claim, 9 s after the renewal: still leased
  EXPECT_EQ(catalog_->ClaimTask("b1", "agent-2", 10s).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(catalog_->GetTask(mine->id)->state, TaskState::kLeased);
  now_ += 2'000'000'000;  // past the renewed lease: the next claimant gets it
  absl::StatusOr<Task> theirs = catalog_->ClaimTask("b1", "agent-2", 10s);
  ASSERT_TRUE(theirs.ok()) << theirs.status();
  EXPECT_EQ(theirs->id, mine->id);
  r = catalog_->RenewLeases({{mine->id, "agent-1"}}, 10s);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->front().code(), absl::StatusCode::kFailedPrecondition) << "a lost lease renewed";
  EXPECT_TRUE(catalog_->RenewLeases({}, 10s).ok());
  EXPECT_EQ(catalog_->RenewLeases({{mine->id, "agent-2"}}, -1s).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_P(CatalogTest, ExpiredLeaseIsGivenToTheNextClaimant) {
  MakeTopologyAndFile();
  ASSERT_TRUE(OneTask().ok());
  absl::StatusOr<Task> first = catalog_->ClaimTask("b1", "agent-1", 10s);
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_EQ(first->attempts, 1u);
  EXPECT_EQ(catalog_->ClaimTask("b1", "agent-2", 10s).status().code(),
            absl::StatusCode::kNotFound);
  // The destination now has a pending replica.
  absl::StatusOr<Location> loc = catalog_->Locate("/f");
  ASSERT_EQ(loc->replicas.size(), 2u);
  now_ += 9'000'000'000;
  ASSERT_TRUE(catalog_->RenewLease(first->id, "agent-1", 10s).ok());
  now_ += 9'000'000'000;
  EXPECT_EQ(catalog_->ClaimTask("b1", "agent-2", 10s).status().code(),
            absl::StatusCode::kNotFound);  // renewed: still valid
  now_ += 2'000'000'000;
  absl::StatusOr<Task> second = catalog_->ClaimTask("b1", "agent-2", 10s);
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_EQ(second->id, first->id);
  EXPECT_EQ(second->attempts, 2u);
  EXPECT_NE(second->last_error.find("expired"), std::string::npos);
  EXPECT_EQ(catalog_->CompleteTask(first->id, "agent-1").status().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(catalog_->RenewLease(first->id, "agent-1", 10s).status().code(),
            absl::StatusCode::kFailedPrecondition);
  absl::StatusOr<Task> done = catalog_->CompleteTask(first->id, "agent-2");
  ASSERT_TRUE(done.ok()) << done.status();
  EXPECT_EQ(done->state, TaskState::kDone);
  absl::StatusOr<Location> where = catalog_->Locate("/f");
  ASSERT_TRUE(where.ok());
  for (const Replica& r : where->replicas) {
    EXPECT_EQ(r.state, ReplicaState::kComplete) << r.node;
    EXPECT_EQ(r.generation, 1u);
  }
  EXPECT_TRUE(catalog_->ListTasks(OpenFor("b1"))->empty());
}

// Files /g1.. /gN of generation 1 on a1, each with its own checksum "sum-<i>".
void CommitFiles(Catalog& c, int n) {
  for (int i = 1; i <= n; ++i) {
    FileContent content;
    content.size = 100 + static_cast<std::uint64_t>(i);
    content.checksum_algo = "xxh3-128";
    content.checksum = fmt::format("sum-{}", i);
    ASSERT_TRUE(c.CommitFile(fmt::format("/g{}", i), content, "a1", std::nullopt).ok());
  }
}

TEST_P(CatalogTest, ClaimTasksLeasesManyInClaimOrderWithTheirChecksums) {
  MakeTopologyAndFile();
  CommitFiles(*catalog_, 4);
  ASSERT_TRUE(TaskTo("/g1", "b1", 0).ok());
  ASSERT_TRUE(TaskTo("/g2", "b1", 5).ok());
  ASSERT_TRUE(TaskTo("/g3", "b1", 0).ok());
  ASSERT_TRUE(TaskTo("/g4", "b1", 5).ok());
  const std::uint64_t seq = *catalog_->LastEventSeq();
  absl::StatusOr<std::vector<Task>> first = catalog_->ClaimTasks("b1", {"w#1", "w#2", "w#3"}, 10s, 0ms);
  ASSERT_TRUE(first.ok()) << first.status();
  ASSERT_EQ(first->size(), 3u);
  // Highest priority first, then oldest; the i-th owner leases the i-th task.
  EXPECT_EQ((*first)[0].spec.path, "/g2");
  EXPECT_EQ((*first)[1].spec.path, "/g4");
  EXPECT_EQ((*first)[2].spec.path, "/g1");
  for (std::size_t i = 0; i < first->size(); ++i) {
    const Task& t = (*first)[i];
    EXPECT_EQ(t.state, TaskState::kLeased);
    EXPECT_EQ(t.lease_owner, fmt::format("w#{}", i + 1));
    EXPECT_EQ(t.attempts, 1u);
    EXPECT_EQ(t.checksum_algo, "xxh3-128");
    EXPECT_EQ(t.checksum, fmt::format("sum-{}", t.spec.path.substr(2)));
    EXPECT_EQ(GetTaskOrDie(t.id).lease_owner, t.lease_owner);  // stored, not just returned
    absl::StatusOr<Replica> pending = RecordOf(t.spec.path, "b1");
    ASSERT_TRUE(pending.ok()) << t.spec.path;
    EXPECT_EQ(pending->state, ReplicaState::kPending);
  }
  // One write: every change of the batch became visible at once, its events in one run.
  absl::StatusOr<std::vector<Event>> events = catalog_->ReadEvents(seq, 100, 0ms);
  ASSERT_TRUE(events.ok());
  EXPECT_GE(events->size(), 6u);  // 3 tasks leased + 3 pending replicas
  // Fewer claimable than owners: the rest, then nothing (an empty list, not an error).
  absl::StatusOr<std::vector<Task>> rest = catalog_->ClaimTasks("b1", {"w#4", "w#5"}, 10s, 0ms);
  ASSERT_TRUE(rest.ok()) << rest.status();
  ASSERT_EQ(rest->size(), 1u);
  EXPECT_EQ(rest->front().spec.path, "/g3");
  EXPECT_EQ(rest->front().lease_owner, "w#4");
  absl::StatusOr<std::vector<Task>> none = catalog_->ClaimTasks("b1", {"w#6"}, 10s, 0ms);
  ASSERT_TRUE(none.ok());
  EXPECT_TRUE(none->empty());
  EXPECT_EQ(catalog_->ClaimTask("b1", "w#7", 10s).status().code(), absl::StatusCode::kNotFound);
}

TEST_P(CatalogTest, AClaimThatWaitsIsAnsweredWhenATaskIsQueuedForItsNode) {
  // A long poll: nothing is claimable, so the claim waits; a task queued for another node
  // does not end it; one queued for its node does, long before its wait is over.
  MakeTopologyAndFile();
  CommitFiles(*catalog_, 2);
  Node other;
  other.name = "b2";
  other.site = "b";
  other.address = "127.0.0.1:2";
  ASSERT_TRUE(catalog_->RegisterNode(other).ok());
  std::atomic<bool> answered{false};
  absl::StatusOr<std::vector<Task>> got;
  std::chrono::steady_clock::duration took{};
  const auto start = std::chrono::steady_clock::now();
  std::thread claimer([&] {
    got = catalog_->ClaimTasks("b1", {"w#1", "w#2"}, 10s, 20s);
    took = std::chrono::steady_clock::now() - start;
    answered = true;
  });
  std::this_thread::sleep_for(300ms);
  EXPECT_TRUE(TaskTo("/g1", "b2").ok());
  std::this_thread::sleep_for(300ms);
  EXPECT_FALSE(answered.load()) << "the claim ended without a task for its node";
  EXPECT_TRUE(TaskTo("/g2", "b1").ok());
  claimer.join();
  ASSERT_TRUE(got.ok()) << got.status();
  ASSERT_EQ(got->size(), 1u);
  EXPECT_EQ(got->front().spec.path, "/g2");
  EXPECT_EQ(got->front().lease_owner, "w#1");
  EXPECT_LT(took, 10s) << "answered at the end of its wait, not as the task came";
  // With nothing queued for it: empty, after the wait.
  const auto again = std::chrono::steady_clock::now();
  absl::StatusOr<std::vector<Task>> none = catalog_->ClaimTasks("b1", {"w#3"}, 10s, 300ms);
  ASSERT_TRUE(none.ok()) << none.status();
  EXPECT_TRUE(none->empty());
  EXPECT_GE(std::chrono::steady_clock::now() - again, 300ms);
}

TEST_P(CatalogTest, ClaimTasksRefusesBadOwnersAndChangesNothing) {
  MakeTopologyAndFile();
  ASSERT_TRUE(OneTask().ok());
  EXPECT_EQ(catalog_->ClaimTasks("b1", {"w#1", "w#1"}, 10s, 0ms).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(catalog_->ClaimTasks("b1", {"w#1", ""}, 10s, 0ms).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(catalog_->ClaimTasks("b1", std::vector<std::string>(kMaxBatchPaths + 1, "x"), 10s, 0ms)
                .status()
                .code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(catalog_->ClaimTasks("b1", {}, 10s, 0ms)->empty());
  EXPECT_EQ(catalog_->ListTasks(OpenFor("b1"))->size(), 1u);  // still queued
}

TEST_P(CatalogTest, ClaimTasksFindsEveryOpenTaskAfterManyHaveFinished) {
  // Claims start their scan at the node's lowest open task: a task that finished below it,
  // one put back below it and ones made after it must all be handled right.
  MakeTopologyAndFile();
  CommitFiles(*catalog_, 6);
  for (int i = 1; i <= 3; ++i) ASSERT_TRUE(TaskTo(fmt::format("/g{}", i), "b1").ok());
  absl::StatusOr<std::vector<Task>> got = catalog_->ClaimTasks("b1", {"o1", "o2", "o3"}, 10s, 0ms);
  ASSERT_TRUE(got.ok());
  ASSERT_EQ(got->size(), 3u);
  ASSERT_TRUE(catalog_->CompleteTask((*got)[1].id, "o2").ok());  // the middle one finishes
  // The lowest one goes back to the queue: still claimable.
  ASSERT_TRUE(catalog_->FailTask((*got)[0].id, "o1", "try again", true, 0ms).ok());
  absl::StatusOr<std::vector<Task>> again = catalog_->ClaimTasks("b1", {"o4", "o5"}, 10s, 0ms);
  ASSERT_TRUE(again.ok());
  ASSERT_EQ(again->size(), 1u);
  EXPECT_EQ(again->front().id, (*got)[0].id);
  ASSERT_TRUE(catalog_->CompleteTask((*got)[0].id, "o4").ok());
  ASSERT_TRUE(catalog_->CompleteTask((*got)[2].id, "o3").ok());
  // Nothing open now; tasks made after that are found.
  EXPECT_TRUE(catalog_->ClaimTasks("b1", {"o6"}, 10s, 0ms)->empty());
  ASSERT_TRUE(TaskTo("/g4", "b1").ok());
  ASSERT_TRUE(TaskTo("/g5", "b1").ok());
  absl::StatusOr<std::vector<Task>> later = catalog_->ClaimTasks("b1", {"o7", "o8", "o9"}, 10s, 0ms);
  ASSERT_TRUE(later.ok());
  ASSERT_EQ(later->size(), 2u);
  EXPECT_EQ(later->front().spec.path, "/g4");
  // And after a reopen (nothing remembered), the same.
  ASSERT_TRUE(TaskTo("/g6", "b1").ok());
  ASSERT_NO_FATAL_FAILURE(Open());
  absl::StatusOr<std::vector<Task>> reopened = catalog_->ClaimTasks("b1", {"o10", "o11"}, 10s, 0ms);
  ASSERT_TRUE(reopened.ok());
  ASSERT_EQ(reopened->size(), 1u);
  EXPECT_EQ(reopened->front().spec.path, "/g6");
}

TEST_P(CatalogTest, CompleteTasksGivesEachItemWhatCompleteTaskWould) {
  MakeTopologyAndFile();
  CommitFiles(*catalog_, 3);
  for (int i = 1; i <= 3; ++i) ASSERT_TRUE(TaskTo(fmt::format("/g{}", i), "b1").ok());
  absl::StatusOr<std::vector<Task>> got = catalog_->ClaimTasks("b1", {"o1", "o2", "o3"}, 10s, 0ms);
  ASSERT_TRUE(got.ok());
  ASSERT_EQ(got->size(), 3u);
  // /g2 moves to generation 2 during its copy.
  FileContent next;
  next.size = 7;
  next.checksum_algo = "xxh3-128";
  next.checksum = "new";
  ASSERT_TRUE(catalog_->CommitFile("/g2", next, "a1", 1).ok());
  absl::StatusOr<std::vector<absl::StatusOr<Task>>> results = catalog_->CompleteTasks({
      {(*got)[0].id, "o1"},      // fine
      {(*got)[1].id, "o2"},      // the file changed: kAborted, its record stale
      {(*got)[2].id, "other"},   // not the owner: kFailedPrecondition, nothing changes
      {(*got)[0].id, "o1"},      // the same task twice: kInvalidArgument
      {999999, "o1"},            // no such task
  });
  ASSERT_TRUE(results.ok()) << results.status();
  ASSERT_EQ(results->size(), 5u);
  ASSERT_TRUE((*results)[0].ok()) << (*results)[0].status();
  EXPECT_EQ((*results)[0]->state, TaskState::kDone);
  EXPECT_EQ((*results)[1].status().code(), absl::StatusCode::kAborted);
  EXPECT_EQ((*results)[2].status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ((*results)[3].status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ((*results)[4].status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(RecordOf("/g1", "b1")->state, ReplicaState::kComplete);
  EXPECT_EQ(RecordOf("/g2", "b1")->state, ReplicaState::kStale);
  EXPECT_EQ(RecordOf("/g3", "b1")->state, ReplicaState::kPending);
  EXPECT_EQ(GetTaskOrDie((*got)[1].id).state, TaskState::kFailed);
  EXPECT_EQ(GetTaskOrDie((*got)[2].id).state, TaskState::kLeased);
  // The third one's owner completes it later, alone.
  ASSERT_TRUE(catalog_->CompleteTask((*got)[2].id, "o3").ok());
  EXPECT_EQ(RecordOf("/g3", "b1")->state, ReplicaState::kComplete);
}

// Claims take tasks from an in-memory claim order (claim_queue.h) rather than reading every
// open task: it must follow every change made after it was loaded, and lose nothing when a
// write fails or the catalog reopens.
TEST_P(CatalogTest, TheClaimOrderFollowsNewTasksFailedWritesRenewalsRetriesAndReopening) {
  MakeTopologyAndFile();
  CommitFiles(*catalog_, 6);
  auto claim = [&](std::vector<std::string> owners) -> std::vector<std::string> {
    absl::StatusOr<std::vector<Task>> got = catalog_->ClaimTasks("b1", owners, 10s, 0ms);
    EXPECT_TRUE(got.ok()) << got.status();
    std::vector<std::string> paths;
    for (const Task& t : got.ok() ? *got : std::vector<Task>{}) paths.push_back(t.spec.path);
    return paths;
  };
  absl::StatusOr<Task> g1 = TaskTo("/g1", "b1", 0);
  absl::StatusOr<Task> g2 = TaskTo("/g2", "b1", 5);
  absl::StatusOr<Task> g3 = TaskTo("/g3", "b1", 0);
  ASSERT_TRUE(g1.ok() && g2.ok() && g3.ok());
  EXPECT_EQ(claim({"o1"}), std::vector<std::string>{"/g2"});  // loads b1's order
  // A task made after the load, of a higher priority, comes next.
  ASSERT_TRUE(TaskTo("/g4", "b1", 9).ok());
  EXPECT_EQ(claim({"o2"}), std::vector<std::string>{"/g4"});
  // A claim whose write fails changes nothing and forgets nothing.
  fail_next_write_ = true;
  EXPECT_EQ(catalog_->ClaimTasks("b1", {"o3", "o4"}, 10s, 0ms).status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(GetTaskOrDie(g1->id).state, TaskState::kQueued);
  EXPECT_EQ(claim({"o3", "o4"}), (std::vector<std::string>{"/g1", "/g3"}));
  EXPECT_TRUE(claim({"o5"}).empty());
  // A renewed lease is not taken at its old expiry; it is at the new one, in the same call
  // that notices it.
  now_ += 8'000'000'000;
  ASSERT_TRUE(catalog_->RenewLease(g2->id, "o1", 10s).ok());
  now_ += 3'000'000'000;  // 11 s after the claims: o2..o4's leases ran out, o1's not
  std::vector<std::string> after = claim({"o6", "o7", "o8", "o9"});
  std::sort(after.begin(), after.end());
  EXPECT_EQ(after, (std::vector<std::string>{"/g1", "/g3", "/g4"}));
  now_ += 8'000'000'000;
  EXPECT_EQ(claim({"o10"}), std::vector<std::string>{"/g2"});
  // A retry delay holds a task back until it is due.
  const absl::StatusOr<Task> g5 = TaskTo("/g5", "b1", 7);
  ASSERT_TRUE(g5.ok());
  EXPECT_EQ(claim({"o11"}), std::vector<std::string>{"/g5"});
  ASSERT_TRUE(catalog_->FailTask(g5->id, "o11", "refused", true, 30s).ok());
  EXPECT_TRUE(claim({"o12"}).empty());
  now_ += 31'000'000'000;
  // Reopened, the order is read again from the database: g5 is due, the leases of o6..o10
  // ran out meanwhile.
  ASSERT_NO_FATAL_FAILURE(Open());
  after = claim({"a", "b", "c", "d", "e", "f"});
  EXPECT_EQ(after.front(), "/g4");  // priority 9 first
  std::sort(after.begin(), after.end());
  EXPECT_EQ(after, (std::vector<std::string>{"/g1", "/g2", "/g3", "/g4", "/g5"}));
  absl::StatusOr<std::vector<Task>> open = catalog_->ListTasks(OpenFor("b1"));
  ASSERT_TRUE(open.ok()) << open.status();
  for (const Task& t : *open) EXPECT_EQ(t.state, TaskState::kLeased) << t.spec.path;
}

// ExpireLeases reads every node's open tasks once, then follows them in memory: a node
// that had none then, and one whose expiry write failed, still get their leases expired.
TEST_P(CatalogTest, ExpireLeasesAfterItsFirstRunSeesNodesItNeverSawAndSurvivesAFailedWrite) {
  MakeTopologyAndFile();
  ASSERT_EQ(*catalog_->ExpireLeases(), 0u);
  Node n;
  n.name = "b2";
  n.site = "b";
  n.address = "127.0.0.1:2";
  ASSERT_TRUE(catalog_->RegisterNode(n).ok());
  absl::StatusOr<Task> t = TaskTo("/f", "b2");
  ASSERT_TRUE(t.ok());
  ASSERT_TRUE(catalog_->ClaimTask("b2", "o1", 10s).ok());
  now_ += 11'000'000'000;
  fail_next_write_ = true;
  EXPECT_EQ(catalog_->ExpireLeases().status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(GetTaskOrDie(t->id).state, TaskState::kLeased);
  ASSERT_EQ(*catalog_->ExpireLeases(), 1u);
  EXPECT_EQ(GetTaskOrDie(t->id).state, TaskState::kQueued);
  EXPECT_EQ(*catalog_->ExpireLeases(), 0u);
  absl::StatusOr<Task> again = catalog_->ClaimTask("b2", "o2", 10s);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->id, t->id);
  EXPECT_EQ(again->attempts, 2u);
}

// Revocations are kept until their token expires, durably, and no longer: until 2026-11-24
// the records of expired tokens stayed forever.
TEST_P(CatalogTest, RevocationsSurviveReopeningAndAreForgottenOnceTheirTokenExpired) {
  const std::int64_t now_s = now_.load() / 1'000'000'000;
  ASSERT_TRUE(catalog_->RevokeToken("soon", now_s + 10).ok());
  ASSERT_TRUE(catalog_->RevokeToken("later", now_s + 3600).ok());
  EXPECT_TRUE(absl::IsInvalidArgument(catalog_->RevokeToken("", now_s)));
  ASSERT_NO_FATAL_FAILURE(Open());
  absl::StatusOr<std::vector<std::pair<std::string, std::int64_t>>> list = catalog_->RevokedTokens();
  ASSERT_TRUE(list.ok()) << list.status();
  std::sort(list->begin(), list->end());
  EXPECT_EQ(*list, (std::vector<std::pair<std::string, std::int64_t>>{{"later", now_s + 3600}, {"soon", now_s + 10}}));
  now_ += 11'000'000'000;  // "soon" expired: the next revocation forgets it
  ASSERT_TRUE(catalog_->RevokeToken("third", now_s + 7200).ok());
  list = catalog_->RevokedTokens();
  ASSERT_TRUE(list.ok());
  std::sort(list->begin(), list->end());
  EXPECT_EQ(*list, (std::vector<std::pair<std::string, std::int64_t>>{{"later", now_s + 3600}, {"third", now_s + 7200}}));
}

TEST_P(CatalogTest, CompleteTasksWhoseWriteFailsChangeNothing) {
  MakeTopologyAndFile();
  CommitFiles(*catalog_, 2);
  for (int i = 1; i <= 2; ++i) ASSERT_TRUE(TaskTo(fmt::format("/g{}", i), "b1").ok());
  absl::StatusOr<std::vector<Task>> got = catalog_->ClaimTasks("b1", {"o1", "o2"}, 10s, 0ms);
  ASSERT_TRUE(got.ok());
  ASSERT_EQ(got->size(), 2u);
  const std::uint64_t seq = *catalog_->LastEventSeq();
  fail_next_write_ = true;
  absl::StatusOr<std::vector<absl::StatusOr<Task>>> results =
      catalog_->CompleteTasks({{(*got)[0].id, "o1"}, {(*got)[1].id, "o2"}});
  ASSERT_TRUE(results.ok());
  for (const absl::StatusOr<Task>& r : *results) {
    EXPECT_EQ(r.status().code(), absl::StatusCode::kUnavailable) << r.status();
  }
  EXPECT_EQ(*catalog_->LastEventSeq(), seq);
  EXPECT_EQ(RecordOf("/g1", "b1")->state, ReplicaState::kPending);
  EXPECT_EQ(GetTaskOrDie((*got)[0].id).state, TaskState::kLeased);
  // Retried, it goes through.
  results = catalog_->CompleteTasks({{(*got)[0].id, "o1"}, {(*got)[1].id, "o2"}});
  ASSERT_TRUE(results.ok());
  EXPECT_TRUE((*results)[0].ok() && (*results)[1].ok());
  EXPECT_EQ(RecordOf("/g2", "b1")->state, ReplicaState::kComplete);
}

TEST_P(CatalogTest, OpenOnlyListsQueuedAndLeasedTasksOfEveryNode) {
  MakeTopologyAndFile();
  CommitFiles(*catalog_, 3);
  absl::StatusOr<Request> req = catalog_->CreateRequest(Req("/g1"));
  ASSERT_TRUE(req.ok());
  TaskSpec spec;
  spec.request_id = req->id;
  spec.src_node = "a1";
  spec.dst_node = "b1";
  std::vector<TaskSpec> specs;
  for (int i = 1; i <= 3; ++i) {
    spec.path = fmt::format("/g{}", i);
    specs.push_back(spec);
  }
  ASSERT_TRUE(catalog_->CreateTasks(specs).ok());
  absl::StatusOr<std::vector<Task>> got = catalog_->ClaimTasks("b1", {"o1", "o2"}, 10s, 0ms);
  ASSERT_TRUE(got.ok());
  ASSERT_TRUE(catalog_->CompleteTask((*got)[0].id, "o1").ok());
  TaskFilter f;
  f.open_only = true;
  absl::StatusOr<std::vector<Task>> open = catalog_->ListTasks(f);
  ASSERT_TRUE(open.ok());
  ASSERT_EQ(open->size(), 2u);
  for (const Task& t : *open) {
    EXPECT_TRUE(t.state == TaskState::kQueued || t.state == TaskState::kLeased);
    EXPECT_NE(t.id, (*got)[0].id);
  }
  f.request_id = req->id + 1;  // another request: none
  EXPECT_TRUE(catalog_->ListTasks(f)->empty());
  f.request_id = req->id;
  f.dst_node = "a1";  // another node: none
  EXPECT_TRUE(catalog_->ListTasks(f)->empty());
}

TEST_P(CatalogTest, FailedAttemptsBackOffThenGiveUp) {
  MakeTopologyAndFile();
  absl::StatusOr<Task> t = OneTask();
  ASSERT_TRUE(t.ok());
  for (std::uint32_t attempt = 1; attempt <= 3; ++attempt) {
    absl::StatusOr<Task> c = catalog_->ClaimTask("b1", "agent", 10s);
    ASSERT_TRUE(c.ok()) << "attempt " << attempt << ": " << c.status();
    absl::StatusOr<Task> f = catalog_->FailTask(c->id, "agent", "source refused", true, 30s);
    ASSERT_TRUE(f.ok());
    if (attempt < 3) {
      EXPECT_EQ(f->state, TaskState::kQueued);
      EXPECT_EQ(catalog_->ClaimTask("b1", "agent", 10s).status().code(),
                absl::StatusCode::kNotFound);  // backing off
      now_ += 31'000'000'000;
    } else {
      EXPECT_EQ(f->state, TaskState::kFailed);
      EXPECT_EQ(f->last_error, "source refused");
    }
  }
  now_ += 3600'000'000'000;
  EXPECT_EQ(catalog_->ClaimTask("b1", "agent", 10s).status().code(), absl::StatusCode::kNotFound);
  // The pending replica of the last attempt was dropped.
  EXPECT_EQ(catalog_->Locate("/f")->replicas.size(), 1u);
}

TEST_P(CatalogTest, CompletingACopyOfAnOldGenerationIsAborted) {
  MakeTopologyAndFile();
  ASSERT_TRUE(OneTask().ok());
  absl::StatusOr<Task> c = catalog_->ClaimTask("b1", "agent", 10s);
  ASSERT_TRUE(c.ok());
  ASSERT_TRUE(catalog_->CommitFile("/f", Content(3, "c2"), "a1", 1).ok());
  EXPECT_EQ(catalog_->CompleteTask(c->id, "agent").status().code(), absl::StatusCode::kAborted);
  absl::StatusOr<Location> where = catalog_->Locate("/f");
  ASSERT_TRUE(where.ok());
  for (const Replica& r : where->replicas) {
    if (r.node == "b1") {
      EXPECT_EQ(r.state, ReplicaState::kStale);
    }
  }
  EXPECT_EQ(catalog_->GetTask(c->id)->state, TaskState::kFailed);
}

TEST_P(CatalogTest, ClaimsHighestPriorityFirstAndCancelStopsTasks) {
  MakeTopologyAndFile();
  absl::StatusOr<Request> req = catalog_->CreateRequest(Req("/f", 2));
  ASSERT_TRUE(req.ok());
  TaskSpec low;
  low.request_id = req->id;
  low.path = "/f";
  low.src_node = "a1";
  low.dst_node = "b1";
  TaskSpec high = low;
  high.priority = 5;
  absl::StatusOr<std::vector<Task>> tasks = catalog_->CreateTasks({low, high});
  ASSERT_TRUE(tasks.ok()) << tasks.status();
  EXPECT_EQ(catalog_->ClaimTask("b1", "x", 1s)->id, (*tasks)[1].id);
  EXPECT_EQ(catalog_->ListTasks(ByRequest(req->id))->size(), 2u);
  ASSERT_TRUE(catalog_->CancelRequest(req->id).ok());
  EXPECT_EQ(catalog_->GetRequest(req->id)->state, RequestState::kCancelled);
  EXPECT_EQ(catalog_->ClaimTask("b1", "x", 1s).status().code(), absl::StatusCode::kNotFound);
  // A cancelled request takes no new tasks.
  EXPECT_EQ(catalog_->CreateTasks({low}).status().code(), absl::StatusCode::kFailedPrecondition);
  // Tasks for a missing file or a directory are refused as a whole.
  TaskSpec free = low;
  free.request_id = 0;
  TaskSpec bad = free;
  bad.path = "/nope";
  EXPECT_EQ(catalog_->CreateTasks({free, bad}).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(catalog_->ListTasks(TaskFilter{})->size(), 2u);
}

TEST_P(CatalogTest, EventsArriveInOrderAndWakeWaiters) {
  MakeTopologyAndFile();
  std::uint64_t start = *catalog_->LastEventSeq();
  std::thread writer([&] {
    (void)catalog_->CreateRequest(Req("/f"));  // checked through the events below
  });
  absl::StatusOr<std::vector<Event>> events = catalog_->ReadEvents(start, 10, 10s);
  writer.join();
  ASSERT_TRUE(events.ok());
  ASSERT_EQ(events->size(), 1u);
  EXPECT_EQ((*events)[0].kind, EventKind::kRequest);
  EXPECT_EQ((*events)[0].state, "queued");
  absl::StatusOr<std::vector<Event>> all = catalog_->ReadEvents(0, 1000, 0ms);
  ASSERT_TRUE(all.ok());
  for (std::size_t i = 1; i < all->size(); ++i) EXPECT_LT((*all)[i - 1].seq, (*all)[i].seq);
  EXPECT_TRUE(catalog_->ReadEvents(*catalog_->LastEventSeq(), 10, 0ms)->empty());
}

TEST_P(CatalogTest, ConcurrentCreatesOfOneNameHaveOneWinner) {
  ASSERT_TRUE(catalog_->Mkdir("/d", {}).ok());
  std::atomic<int> wins{0}, exists{0};
  std::vector<std::thread> threads;
  for (int i = 0; i < 8; ++i) {
    threads.emplace_back([&] {
      for (int k = 0; k < 50; ++k) {
        absl::StatusOr<Attributes> a = catalog_->CreateFile(fmt::format("/d/f{}", k), {});
        if (a.ok()) ++wins;
        if (absl::IsAlreadyExists(a.status())) ++exists;
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(wins.load(), 50);
  EXPECT_EQ(exists.load(), 7 * 50);
  EXPECT_EQ(catalog_->List("/d", {})->size(), 50u);
}

// Walks the tree from the root: every entry reachable once, PathOf agrees with the walk.
void CheckTree(Catalog& c, const std::string& path, std::set<InodeId>& seen) {
  absl::StatusOr<std::vector<DirEntry>> list = c.List(path, {});
  ASSERT_TRUE(list.ok()) << path << ": " << list.status();
  for (const DirEntry& e : *list) {
    std::string child = (path == "/" ? "" : path) + "/" + e.name;
    ASSERT_TRUE(seen.insert(e.attributes.inode).second) << "inode seen twice: " << child;
    ASSERT_EQ(*c.PathOf(e.attributes.inode), child);
    if (e.attributes.type == FileType::kDirectory) CheckTree(c, child, seen);
  }
}

TEST_P(CatalogTest, ConcurrentRenamesAndRemovesKeepTheTreeConsistent) {
  std::vector<std::string> dirs;
  for (int i = 0; i < 6; ++i) {
    std::string d = fmt::format("/d{}", i);
    ASSERT_TRUE(catalog_->Mkdir(d, {}).ok());
    dirs.push_back(d);
  }
  std::vector<std::thread> threads;
  std::atomic<int> cycles_refused{0};
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937 rng(t);
      for (int k = 0; k < 300; ++k) {
        // Directories are named by number so they can be found anywhere: try moving a
        // random one under another random one (often into its own subtree).
        std::string from_name = fmt::format("d{}", rng() % 6);
        std::string to_name = fmt::format("d{}", rng() % 6);
        std::string from, to_parent;
        // Find current paths by walking (the tree is tiny).
        std::function<void(const std::string&)> find = [&](const std::string& p) {
          absl::StatusOr<std::vector<DirEntry>> l = catalog_->List(p, {});
          if (!l.ok()) return;
          for (const DirEntry& e : *l) {
            std::string c = (p == "/" ? "" : p) + "/" + e.name;
            if (e.name == from_name) from = c;
            if (e.name == to_name) to_parent = c;
            if (e.attributes.type == FileType::kDirectory) find(c);
          }
        };
        find("/");
        if (from.empty()) continue;
        switch (rng() % 4) {
          case 0: {
            absl::Status s = catalog_->Rename(from, "/" + from_name);
            (void)s;  // ignored: may be in place already or moved meanwhile
            break;
          }
          case 1: {
            (void)catalog_->CreateFile(from + fmt::format("/f{}", rng() % 5), {});  // may exist
            break;
          }
          case 2: {
            (void)catalog_->Remove(from + fmt::format("/f{}", rng() % 5), false);  // may be gone
            break;
          }
          default: {
            if (to_parent.empty()) break;
            absl::Status s = catalog_->Rename(from, to_parent + "/" + from_name);
            if (absl::IsFailedPrecondition(s)) ++cycles_refused;
          }
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  std::set<InodeId> seen;
  CheckTree(*catalog_, "/", seen);
  int dirs_found = 0;
  std::function<void(const std::string&)> count = [&](const std::string& p) {
    absl::StatusOr<std::vector<DirEntry>> l = catalog_->List(p, {});
    ASSERT_TRUE(l.ok());
    for (const DirEntry& e : *l) {
      std::string c = (p == "/" ? "" : p) + "/" + e.name;
      if (e.attributes.type == FileType::kDirectory) {
        ++dirs_found;
        count(c);
      }
    }
  };
  count("/");
  EXPECT_EQ(dirs_found, 6);  // none lost in a cycle, none duplicated
  EXPECT_GT(cycles_refused.load(), 0);
}

TEST_P(CatalogTest, CancellingALeasedTaskDropsItsPendingReplica) {
  MakeTopologyAndFile();
  absl::StatusOr<Request> req = catalog_->CreateRequest(Req("/f", 2));
  ASSERT_TRUE(req.ok());
  TaskSpec spec;
  spec.request_id = req->id;
  spec.path = "/f";
  spec.src_node = "a1";
  spec.dst_node = "b1";
  ASSERT_TRUE(catalog_->CreateTasks({spec}).ok());
  absl::StatusOr<Task> c = catalog_->ClaimTask("b1", "agent", 10s);
  ASSERT_TRUE(c.ok()) << c.status();
  ASSERT_EQ(catalog_->Locate("/f")->replicas.size(), 2u);  // a1 complete, b1 pending
  ASSERT_TRUE(catalog_->CancelRequest(req->id).ok());
  // The agent's lease is gone, so it can neither complete nor fail the task: nobody else
  // would ever drop the pending replica, and it would count as a copy in flight forever.
  EXPECT_EQ(catalog_->CompleteTask(c->id, "agent").status().code(),
            absl::StatusCode::kFailedPrecondition);
  absl::StatusOr<Location> where = catalog_->Locate("/f");
  ASSERT_TRUE(where.ok());
  for (const Replica& r : where->replicas) {
    EXPECT_NE(r.state, ReplicaState::kPending) << r.node;
  }
  EXPECT_EQ(where->replicas.size(), 1u);
}

TEST_P(CatalogTest, HugeLeasesAndRetryDelaysAreRefused) {
  MakeTopologyAndFile();
  ASSERT_TRUE(OneTask().ok());
  // 10^16 ms overflows a nanosecond deadline: the lease would be born expired (or worse).
  const std::chrono::milliseconds huge(10'000'000'000'000'000);
  EXPECT_EQ(catalog_->ClaimTask("b1", "agent", huge).status().code(),
            absl::StatusCode::kInvalidArgument);
  absl::StatusOr<Task> c = catalog_->ClaimTask("b1", "agent", 10s);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(catalog_->RenewLease(c->id, "agent", huge).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(catalog_->FailTask(c->id, "agent", "x", true, huge).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(catalog_->FailTask(c->id, "agent", "x", true, -1s).status().code(),
            absl::StatusCode::kInvalidArgument);
  // The lease is untouched by the refused calls.
  absl::StatusOr<Task> t = catalog_->GetTask(c->id);
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->state, TaskState::kLeased);
  EXPECT_EQ(t->lease_expiry_ns, now_.load() + 10'000'000'000);
}

// A failed write must not leave phantom progress: no gap in seqs, and long polls keep
// waiting instead of waking at once (which made every Watch/ReadEvents poller spin).
TEST_P(CatalogTest, AFailedWriteLeavesNoEventGapAndWaitersKeepWaiting) {
  MakeTopologyAndFile();
  ASSERT_TRUE(catalog_->CreateRequest(Req("/x")).ok());
  std::uint64_t before = *catalog_->LastEventSeq();

  // A batch refused half-built (its first task's event already numbered) takes no seq either.
  TaskSpec good;
  good.path = "/f";
  good.src_node = "a1";
  good.dst_node = "b1";
  good.max_attempts = 3;
  TaskSpec bad = good;
  bad.path = "/missing";
  EXPECT_EQ(catalog_->CreateTasks({good, bad}).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(*catalog_->LastEventSeq(), before);

  fail_next_write_ = true;
  absl::StatusOr<Request> failed = catalog_->CreateRequest(Req("/y"));
  ASSERT_FALSE(failed.ok());
  EXPECT_EQ(failed.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(*catalog_->LastEventSeq(), before);

  // Nothing new was committed: the long poll waits out its time (at least `wait`, a lower
  // bound the wait guarantees, not a speed measurement) and returns empty.
  auto start = std::chrono::steady_clock::now();
  absl::StatusOr<std::vector<Event>> none = catalog_->ReadEvents(before, 10, 300ms);
  ASSERT_TRUE(none.ok()) << none.status();
  EXPECT_TRUE(none->empty());
  EXPECT_GE(std::chrono::steady_clock::now() - start, 300ms);

  // A waiter, then another failed write, then a good one: the waiter returns exactly the
  // good one's event, numbered before + 1. (Before the fix it returned empty at once if it
  // was already waiting at the failure, or an event with a skipped seq if not.)
  absl::StatusOr<std::vector<Event>> got;
  std::thread waiter([&] { got = catalog_->ReadEvents(before, 10, 60s); });
  fail_next_write_ = true;
  ASSERT_FALSE(catalog_->CreateRequest(Req("/w")).ok());
  absl::StatusOr<Request> ok = catalog_->CreateRequest(Req("/z"));
  waiter.join();
  ASSERT_TRUE(ok.ok()) << ok.status();
  ASSERT_TRUE(got.ok()) << got.status();
  ASSERT_EQ(got->size(), 1u);
  EXPECT_EQ(got->front().seq, before + 1);
  EXPECT_EQ(got->front().id, ok->id);
  EXPECT_EQ(*catalog_->LastEventSeq(), before + 1);
}

// A store whose next write is applied but answered with an error, as when PostgreSQL's
// connection breaks after COMMIT was sent and the reply is lost.
class LosesAReplyStore : public internal::KvStore {
 public:
  LosesAReplyStore(std::unique_ptr<internal::KvStore> inner, std::atomic<bool>* lose)
      : inner_(std::move(inner)), lose_(lose) {}
  absl::StatusOr<std::string> Get(internal::Table t, std::string_view key, std::string_view what,
                                  const internal::KvSnapshot* snap) override {
    return inner_->Get(t, key, what, snap);
  }
  absl::Status Scan(internal::Table t, std::string_view prefix, std::string_view start,
                    const internal::KvScanFn& fn, const internal::KvSnapshot* snap,
                    bool reverse) override {
    return inner_->Scan(t, prefix, start, fn, snap, reverse);
  }
  absl::Status Write(const internal::KvBatch& batch, bool sync, std::string_view what) override {
    absl::Status s = inner_->Write(batch, sync, what);
    if (s.ok() && lose_->exchange(false)) {
      return absl::UnavailableError(fmt::format("{}: connection lost after COMMIT", what));
    }
    return s;
  }
  std::unique_ptr<internal::KvSnapshot> Snapshot() override { return inner_->Snapshot(); }
  absl::StatusOr<std::map<std::string, std::uint64_t>> Stats() override { return inner_->Stats(); }
  absl::StatusOr<std::string> Property(std::string_view name) override {
    return inner_->Property(name);
  }
  std::string Describe() const override { return inner_->Describe(); }
  bool shared() const override { return inner_->shared(); }
  absl::StatusOr<std::unique_ptr<internal::KvWriteLock>> LockWrites() override {
    return inner_->LockWrites();
  }
  std::unique_ptr<internal::KvWatch> WatchWrites(std::function<void()> on_change) override {
    return inner_->WatchWrites(std::move(on_change));
  }
  bool HoldLeadership() override { return inner_->HoldLeadership(); }

 private:
  std::unique_ptr<internal::KvStore> inner_;
  std::atomic<bool>* lose_;
};

// A write that was applied although it failed (its reply lost) gives none of its ids away
// again: before, the next request took the same id and seq and overwrote the first one and
// its event.
TEST_P(CatalogTest, AWriteAppliedButAnsweredWithAnErrorGivesNoIdAway) {
  catalog_.reset();
  CatalogOptions options;
  options.path = location_;
  options.shared = shared_;
  options.clock = [this] { return now_.load(); };
  absl::StatusOr<std::unique_ptr<internal::KvStore>> store = internal::OpenStore(options);
  ASSERT_TRUE(store.ok()) << store.status();
  std::atomic<bool> lose{false};
  absl::StatusOr<std::unique_ptr<Catalog>> c = internal::OpenKvCatalog(
      options, std::make_unique<LosesAReplyStore>(std::move(*store), &lose));
  ASSERT_TRUE(c.ok()) << c.status();
  catalog_ = std::move(*c);
  MakeTopologyAndFile();
  const std::uint64_t before = *catalog_->LastEventSeq();

  lose = true;
  absl::StatusOr<Request> lost = catalog_->CreateRequest(Req("/f", 1));
  EXPECT_TRUE(absl::IsUnavailable(lost.status())) << lost.status();
  absl::StatusOr<Request> next = catalog_->CreateRequest(Req("/f", 2));
  ASSERT_TRUE(next.ok()) << next.status();
  ASSERT_GT(next->id, 1u);
  absl::StatusOr<Request> first = catalog_->GetRequest(next->id - 1);
  ASSERT_TRUE(first.ok()) << first.status();  // the applied one is still there, unchanged
  EXPECT_EQ(first->spec.copies, 1u);
  EXPECT_EQ(catalog_->GetRequest(next->id)->spec.copies, 2u);
  // Both requests' events are in the log, one seq each, none written over.
  absl::StatusOr<std::vector<Event>> events = catalog_->ReadEvents(before, 100, 0ms);
  ASSERT_TRUE(events.ok()) << events.status();
  std::set<std::uint64_t> ids;
  std::uint64_t seq = before;
  for (const Event& e : *events) {
    EXPECT_EQ(e.seq, ++seq);
    ids.insert(e.id);
  }
  EXPECT_TRUE(ids.count(first->id) == 1 && ids.count(next->id) == 1) << events->size();
  EXPECT_EQ(*catalog_->LastEventSeq(), seq);
}

// Review 3.2.2: a task queued for generation G and claimed after gfreg committed G+1 at its
// destination must not turn the node's complete G+1 record into a pending G one.
TEST_P(CatalogTest, AQueuedTaskOfAnOlderGenerationIsCancelledAtClaimAndTouchesNoRecord) {
  MakeTopologyAndFile();
  absl::StatusOr<Task> old = TaskTo("/f", "b1", 5);
  ASSERT_TRUE(old.ok()) << old.status();
  ASSERT_TRUE(catalog_->CommitFile("/g", Content(4, "g1"), "a1", std::nullopt).ok());
  absl::StatusOr<Task> other = TaskTo("/g", "b1");
  ASSERT_TRUE(other.ok()) << other.status();
  ASSERT_TRUE(catalog_->CommitFile("/f", Content(3, "c2"), "b1", std::nullopt).ok());

  // The obsolete task comes first by priority; the claim cancels it and moves on.
  absl::StatusOr<Task> claimed = catalog_->ClaimTask("b1", "agent", 10s);
  ASSERT_TRUE(claimed.ok()) << claimed.status();
  EXPECT_EQ(claimed->id, other->id);
  absl::StatusOr<Task> cancelled = catalog_->GetTask(old->id);
  ASSERT_TRUE(cancelled.ok());
  EXPECT_EQ(cancelled->state, TaskState::kCancelled);
  EXPECT_EQ(cancelled->last_error, "obsolete: file is at generation 2");
  EXPECT_EQ(cancelled->attempts, 0u);
  absl::StatusOr<Replica> b1 = RecordOf("/f", "b1");
  ASSERT_TRUE(b1.ok()) << b1.status();
  EXPECT_EQ(b1->state, ReplicaState::kComplete);
  EXPECT_EQ(b1->generation, 2u);
  EXPECT_EQ(catalog_->ClaimTask("b1", "agent", 10s).status().code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(catalog_->ListTasks(OpenFor("b1"))->empty());
}

// Review 3.2.1: a leased copy of generation G that finishes after G+1 was committed at its
// destination must not mark the node's G+1 record stale.
TEST_P(CatalogTest, CompletingAnOldGenerationAfterANewerCommitAtItsNodeKeepsTheNewRecord) {
  MakeTopologyAndFile();
  ASSERT_TRUE(OneTask().ok());
  absl::StatusOr<Task> c = catalog_->ClaimTask("b1", "agent", 10s);
  ASSERT_TRUE(c.ok()) << c.status();
  ASSERT_TRUE(catalog_->CommitFile("/f", Content(3, "c2"), "b1", std::nullopt).ok());
  absl::StatusOr<Task> done = catalog_->CompleteTask(c->id, "agent");
  EXPECT_EQ(done.status().code(), absl::StatusCode::kAborted) << done.status();
  absl::StatusOr<Replica> b1 = RecordOf("/f", "b1");
  ASSERT_TRUE(b1.ok()) << b1.status();
  EXPECT_EQ(b1->state, ReplicaState::kComplete);
  EXPECT_EQ(b1->generation, 2u);
  EXPECT_EQ(catalog_->GetTask(c->id)->state, TaskState::kFailed);
  // Failing it instead (or its lease running out) leaves the record alone too.
  ASSERT_TRUE(catalog_->CommitFile("/f", Content(5, "c3"), "a1", std::nullopt).ok());
  ASSERT_TRUE(OneTask().ok());
  absl::StatusOr<Task> c3 = catalog_->ClaimTask("b1", "agent", 10s);
  ASSERT_TRUE(c3.ok()) << c3.status();
  ASSERT_TRUE(catalog_->CommitFile("/f", Content(6, "c4"), "b1", std::nullopt).ok());
  ASSERT_TRUE(catalog_->FailTask(c3->id, "agent", "aborted", false, 0s).ok());
  b1 = RecordOf("/f", "b1");
  ASSERT_TRUE(b1.ok()) << b1.status();
  EXPECT_EQ(b1->state, ReplicaState::kComplete);
  EXPECT_EQ(b1->generation, 4u);
}

// An attempt that fails or whose lease runs out drops only its own pending record: not
// the pending record of a newer generation's copy to the same node.
TEST_P(CatalogTest, FailingOrExpiringAnOldAttemptLeavesANewerGenerationsRecord) {
  MakeTopologyAndFile();
  ASSERT_TRUE(catalog_->CommitFile("/h", Content(4, "h1"), "a1", std::nullopt).ok());
  for (const std::string path : {"/f", "/h"}) {
    SCOPED_TRACE(path);
    absl::StatusOr<Task> old = TaskTo(path, "b1");
    ASSERT_TRUE(old.ok()) << old.status();
    absl::StatusOr<Task> first = catalog_->ClaimTask("b1", "agent-1", 10s);
    ASSERT_TRUE(first.ok()) << first.status();
    ASSERT_EQ(first->id, old->id);
    ASSERT_TRUE(catalog_->CommitFile(path, Content(3, "v2"), "a1", std::nullopt).ok());
    absl::StatusOr<Task> fresh = TaskTo(path, "b1");
    ASSERT_TRUE(fresh.ok()) << fresh.status();
    absl::StatusOr<Task> second = catalog_->ClaimTask("b1", "agent-2", 60s);
    ASSERT_TRUE(second.ok()) << second.status();
    ASSERT_EQ(second->id, fresh->id);
    if (path == "/f") {
      ASSERT_TRUE(catalog_->FailTask(old->id, "agent-1", "aborted", false, 0s).ok());
    } else {
      now_ += 11'000'000'000;  // agent-1's lease runs out; agent-2's does not
      EXPECT_EQ(catalog_->ClaimTask("b1", "agent-3", 10s).status().code(),
                absl::StatusCode::kNotFound);
      EXPECT_NE(catalog_->GetTask(old->id)->state, TaskState::kLeased);
    }
    absl::StatusOr<Replica> b1 = RecordOf(path, "b1");
    ASSERT_TRUE(b1.ok()) << b1.status();
    EXPECT_EQ(b1->state, ReplicaState::kPending);
    EXPECT_EQ(b1->generation, 2u);
    ASSERT_TRUE(catalog_->CompleteTask(fresh->id, "agent-2").ok());
    b1 = RecordOf(path, "b1");
    ASSERT_TRUE(b1.ok()) << b1.status();
    EXPECT_EQ(b1->state, ReplicaState::kComplete);
    EXPECT_EQ(b1->generation, 2u);
  }
}

// Review 3.1: StatInode (and CompleteTask, which uses it) must never see a file that is
// being renamed as missing: CompleteTask would mark a live file's replica deleting.
TEST_P(CatalogTest, StatInodeNeverMissesAFileThatIsBeingRenamed) {
  ASSERT_TRUE(catalog_->Mkdir("/x", {}).ok());
  absl::StatusOr<Attributes> f = catalog_->CreateFile("/x/a", {});
  ASSERT_TRUE(f.ok());
  std::atomic<bool> done{false};
  std::thread renamer([&] {
    for (int i = 0; i < 1000; ++i) {
      EXPECT_TRUE(catalog_->Rename(i % 2 ? "/x/b" : "/x/a", i % 2 ? "/x/a" : "/x/b").ok());
    }
    done = true;
  });
  int misses = 0, looks = 0;
  while (!done) {
    ++looks;
    if (!catalog_->StatInode(f->inode).ok()) ++misses;
  }
  renamer.join();
  EXPECT_EQ(misses, 0) << "of " << looks;
}

FileContent Reserved(std::uint64_t generation, std::uint64_t size, std::string checksum) {
  FileContent c = Content(size, std::move(checksum));
  c.generation = generation;
  return c;
}

TEST_P(CatalogTest, BeginWriteReservesDistinctIncreasingGenerationsThatReadersDoNotSee) {
  MakeTopologyAndFile();
  absl::StatusOr<WriteReservation> w2 = catalog_->BeginWrite("/f", {});
  absl::StatusOr<WriteReservation> w3 = catalog_->BeginWrite("/f", {});
  ASSERT_TRUE(w2.ok()) << w2.status();
  ASSERT_TRUE(w3.ok()) << w3.status();
  EXPECT_EQ(w2->generation, 2u);
  EXPECT_EQ(w3->generation, 3u);
  EXPECT_EQ(w3->attributes.generation, 1u);
  EXPECT_EQ(w3->attributes.inode, catalog_->Stat("/f")->inode);
  absl::StatusOr<Location> loc = catalog_->Locate("/f");
  ASSERT_TRUE(loc.ok());
  EXPECT_EQ(loc->attributes.generation, 1u);
  EXPECT_EQ(loc->attributes.checksum, "c1");

  // The later reservation commits first, exactly at its number.
  absl::StatusOr<Attributes> c3 = catalog_->CommitFile("/f", Reserved(3, 30, "c3"), "b1", {});
  ASSERT_TRUE(c3.ok()) << c3.status();
  EXPECT_EQ(c3->generation, 3u);
  absl::StatusOr<Replica> b1 = RecordOf("/f", "b1");
  ASSERT_TRUE(b1.ok());
  EXPECT_EQ(b1->state, ReplicaState::kComplete);
  EXPECT_EQ(b1->generation, 3u);
  // A fresh generation (0) skips every reserved one; unreserved numbers are refused.
  absl::StatusOr<Attributes> c4 = catalog_->CommitFile("/f", Content(40, "c4"), "a1", {});
  ASSERT_TRUE(c4.ok()) << c4.status();
  EXPECT_EQ(c4->generation, 4u);
  absl::StatusOr<Attributes> bad = catalog_->CommitFile("/f", Reserved(9, 9, "c9"), "a1", {});
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kAborted);
  EXPECT_NE(bad.status().message().find("generation 9 was not reserved"), std::string::npos)
      << bad.status();
  absl::StatusOr<WriteReservation> w5 = catalog_->BeginWrite("/f", {});
  ASSERT_TRUE(w5.ok());
  EXPECT_EQ(w5->generation, 5u);
  // Reservations are durable.
  ASSERT_NO_FATAL_FAILURE(Open());
  absl::StatusOr<WriteReservation> w6 = catalog_->BeginWrite("/f", {});
  ASSERT_TRUE(w6.ok()) << w6.status();
  EXPECT_EQ(w6->generation, 6u);
  absl::StatusOr<Attributes> c5 = catalog_->CommitFile("/f", Reserved(5, 50, "c5"), "a1", {});
  ASSERT_TRUE(c5.ok()) << c5.status();
  EXPECT_EQ(c5->generation, 5u);
}

TEST_P(CatalogTest, CommittingAReservedGenerationOlderThanTheCommittedOneChangesNothing) {
  MakeTopologyAndFile();
  absl::StatusOr<WriteReservation> slow = catalog_->BeginWrite("/f", {});
  absl::StatusOr<WriteReservation> fast = catalog_->BeginWrite("/f", {});
  ASSERT_TRUE(slow.ok() && fast.ok());
  ASSERT_TRUE(catalog_->CommitFile("/f", Reserved(fast->generation, 3, "fast"), "b1", {}).ok());
  absl::StatusOr<Location> before = catalog_->Locate("/f");
  ASSERT_TRUE(before.ok());
  std::uint64_t seq = *catalog_->LastEventSeq();
  absl::StatusOr<Attributes> late =
      catalog_->CommitFile("/f", Reserved(slow->generation, 2, "slow"), "a1", {});
  EXPECT_EQ(late.status().code(), absl::StatusCode::kAborted);
  EXPECT_NE(late.status().message().find("generation 3 was committed meanwhile"), std::string::npos)
      << late.status();
  absl::StatusOr<Location> after = catalog_->Locate("/f");
  ASSERT_TRUE(after.ok());
  EXPECT_EQ(after->attributes.generation, 3u);
  EXPECT_EQ(after->attributes.checksum, "fast");
  ASSERT_EQ(after->replicas.size(), before->replicas.size());
  for (std::size_t i = 0; i < after->replicas.size(); ++i) {
    EXPECT_EQ(after->replicas[i].node, before->replicas[i].node);
    EXPECT_EQ(after->replicas[i].state, before->replicas[i].state);
    EXPECT_EQ(after->replicas[i].generation, before->replicas[i].generation);
  }
  EXPECT_EQ(*catalog_->LastEventSeq(), seq);
}

TEST_P(CatalogTest, AWriteWhoseFileWasReplacedMeanwhileCannotCommitOntoTheNewFile) {
  MakeTopologyAndFile();
  absl::StatusOr<WriteReservation> old_write = catalog_->BeginWrite("/f", {});
  ASSERT_TRUE(old_write.ok());
  ASSERT_TRUE(catalog_->Remove("/f", false).ok());
  // The path is re-created and written often enough that the old reserved number exists
  // for the new inode too.
  for (int i = 0; i < 3; ++i) {
    absl::StatusOr<WriteReservation> w = catalog_->BeginWrite("/f", {});
    ASSERT_TRUE(w.ok());
    ASSERT_NE(w->attributes.inode, old_write->attributes.inode);
  }
  FileContent c = Reserved(old_write->generation, 2, "old");
  c.inode = old_write->attributes.inode;
  absl::StatusOr<Attributes> late = catalog_->CommitFile("/f", c, "a1", {});
  EXPECT_EQ(late.status().code(), absl::StatusCode::kAborted) << late.status();
  absl::StatusOr<Attributes> now = catalog_->Stat("/f");
  ASSERT_TRUE(now.ok());
  EXPECT_EQ(now->generation, 0u);
  EXPECT_EQ(now->checksum, "");
}

TEST_P(CatalogTest, BeginWriteOnANewPathCreatesAnEmptyEntry) {
  FileContent c;
  c.mode = 0600;
  c.owner = "alice";
  EXPECT_EQ(catalog_->BeginWrite("/d/x", c).status().code(), absl::StatusCode::kNotFound);
  ASSERT_TRUE(catalog_->Mkdir("/d", {}).ok());
  EXPECT_EQ(catalog_->BeginWrite("/d", c).status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(catalog_->BeginWrite("/", c).status().code(), absl::StatusCode::kFailedPrecondition);
  absl::StatusOr<WriteReservation> w = catalog_->BeginWrite("/d/x", c);
  ASSERT_TRUE(w.ok()) << w.status();
  EXPECT_EQ(w->generation, 1u);
  EXPECT_EQ(w->attributes.generation, 0u);
  absl::StatusOr<Location> loc = catalog_->Locate("/d/x");
  ASSERT_TRUE(loc.ok()) << loc.status();
  EXPECT_EQ(loc->attributes.inode, w->attributes.inode);
  EXPECT_EQ(loc->attributes.type, FileType::kFile);
  EXPECT_EQ(loc->attributes.generation, 0u);
  EXPECT_EQ(loc->attributes.mode, 0600u);
  EXPECT_EQ(loc->attributes.owner, "alice");
  EXPECT_TRUE(loc->replicas.empty());
  // A removed and re-created path is a new inode with generations of its own.
  ASSERT_TRUE(catalog_->Remove("/d/x", false).ok());
  absl::StatusOr<WriteReservation> again = catalog_->BeginWrite("/d/x", c);
  ASSERT_TRUE(again.ok());
  EXPECT_NE(again->attributes.inode, w->attributes.inode);
  EXPECT_EQ(again->generation, 1u);
  // The removed inode's reservation does not carry over.
  EXPECT_EQ(catalog_->CommitFile("/d/x", Reserved(2, 1, "x"), "", {}).status().code(),
            absl::StatusCode::kAborted);
}

TEST_P(CatalogTest, ConcurrentWritersNeverGetTheSameGeneration) {
  MakeTopologyAndFile();
  std::vector<std::thread> threads;
  std::vector<std::vector<std::uint64_t>> got(4);
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int k = 0; k < 25; ++k) {
        if (k % 5 == 4) {
          absl::StatusOr<Attributes> a = catalog_->CommitFile("/f", Content(1), "", {});
          if (a.ok()) got[t].push_back(a->generation);
        } else {
          absl::StatusOr<WriteReservation> w = catalog_->BeginWrite("/f", {});
          if (w.ok()) got[t].push_back(w->generation);
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  std::set<std::uint64_t> all;
  for (const auto& g : got) {
    EXPECT_EQ(g.size(), 25u);
    EXPECT_TRUE(std::is_sorted(g.begin(), g.end()));
    all.insert(g.begin(), g.end());
  }
  EXPECT_EQ(all.size(), 100u);
  EXPECT_EQ(*all.begin(), 2u);
  EXPECT_EQ(*all.rbegin(), 101u);
}

TEST_P(CatalogTest, ExpireLeasesExpiresEveryNodesRunOutLeases) {
  MakeTopologyAndFile();
  ASSERT_TRUE(OneTask().ok());
  absl::StatusOr<Task> t = catalog_->ClaimTask("b1", "agent", 10s);
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(*catalog_->ExpireLeases(), 0u);
  std::uint64_t seq = *catalog_->LastEventSeq();
  now_ += 9'000'000'000;
  EXPECT_EQ(*catalog_->ExpireLeases(), 0u);
  EXPECT_EQ(*catalog_->LastEventSeq(), seq);  // nothing written
  now_ += 2'000'000'000;
  // b1 never claims again (its agent is dead): the expiry happens anyway.
  EXPECT_EQ(*catalog_->ExpireLeases(), 1u);
  absl::StatusOr<Task> after = catalog_->GetTask(t->id);
  ASSERT_TRUE(after.ok());
  EXPECT_EQ(after->state, TaskState::kQueued);
  EXPECT_EQ(after->attempts, 1u);
  EXPECT_EQ(after->last_error, "lease of agent expired");
  EXPECT_TRUE(after->lease_owner.empty());
  EXPECT_EQ(RecordOf("/f", "b1").status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(*catalog_->ExpireLeases(), 0u);
  EXPECT_EQ(catalog_->CompleteTask(t->id, "agent").status().code(),
            absl::StatusCode::kFailedPrecondition);
  // The last attempt's expiry fails the task.
  for (int attempt = 2; attempt <= 3; ++attempt) {
    ASSERT_TRUE(catalog_->ClaimTask("b1", "agent", 10s).ok());
    now_ += 11'000'000'000;
    EXPECT_EQ(*catalog_->ExpireLeases(), 1u);
  }
  EXPECT_EQ(catalog_->GetTask(t->id)->state, TaskState::kFailed);
}

TEST_P(CatalogTest, AbandonTaskCancelsOpenTasksWithoutCountingAnAttempt) {
  MakeTopologyAndFile();
  absl::StatusOr<Task> queued = OneTask();
  ASSERT_TRUE(queued.ok());
  absl::StatusOr<Task> gone = catalog_->AbandonTask(queued->id, "destination node b1 is down");
  ASSERT_TRUE(gone.ok()) << gone.status();
  EXPECT_EQ(gone->state, TaskState::kCancelled);
  EXPECT_EQ(gone->last_error, "destination node b1 is down");
  EXPECT_EQ(gone->attempts, 0u);

  absl::StatusOr<Task> leased_task = OneTask();
  ASSERT_TRUE(leased_task.ok());
  absl::StatusOr<Task> leased = catalog_->ClaimTask("b1", "agent", 10s);
  ASSERT_TRUE(leased.ok());
  ASSERT_EQ(RecordOf("/f", "b1")->state, ReplicaState::kPending);
  absl::StatusOr<Task> abandoned = catalog_->AbandonTask(leased->id, "destination node b1 is down");
  ASSERT_TRUE(abandoned.ok()) << abandoned.status();
  EXPECT_EQ(abandoned->state, TaskState::kCancelled);
  EXPECT_EQ(abandoned->attempts, 1u);
  EXPECT_TRUE(abandoned->lease_owner.empty());
  EXPECT_EQ(RecordOf("/f", "b1").status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(catalog_->CompleteTask(leased->id, "agent").status().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(catalog_->ListTasks(OpenFor("b1"))->empty());
  // Final tasks come back unchanged.
  absl::StatusOr<Task> again = catalog_->AbandonTask(leased->id, "other reason");
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->last_error, "destination node b1 is down");
  EXPECT_EQ(catalog_->AbandonTask(9999, "x").status().code(), absl::StatusCode::kNotFound);

  // A leased copy of an old generation abandoned after its node got the new one keeps it.
  ASSERT_TRUE(OneTask().ok());
  absl::StatusOr<Task> old = catalog_->ClaimTask("b1", "agent", 10s);
  ASSERT_TRUE(old.ok());
  ASSERT_TRUE(catalog_->CommitFile("/f", Content(3, "c2"), "b1", std::nullopt).ok());
  ASSERT_TRUE(catalog_->AbandonTask(old->id, "destination node b1 is down").ok());
  absl::StatusOr<Replica> b1 = RecordOf("/f", "b1");
  ASSERT_TRUE(b1.ok());
  EXPECT_EQ(b1->state, ReplicaState::kComplete);
  EXPECT_EQ(b1->generation, 2u);
}

TEST_P(CatalogTest, ATaskForARemovedFileIsCancelledAtClaimAndLeavesTheDeletingRecord) {
  MakeTopologyAndFile();
  ASSERT_TRUE(
      catalog_->PutReplica(Rep(catalog_->Stat("/f")->inode, "b1", ReplicaState::kComplete, 1))
          .ok());
  absl::StatusOr<Task> t = TaskTo("/f", "b1");
  ASSERT_TRUE(t.ok());
  ASSERT_TRUE(catalog_->Remove("/f", false).ok());
  EXPECT_EQ(catalog_->ClaimTask("b1", "agent", 10s).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(catalog_->GetTask(t->id)->state, TaskState::kCancelled);
  EXPECT_EQ(catalog_->GetTask(t->id)->last_error, "obsolete: file was removed");
  absl::StatusOr<std::vector<Replica>> held = catalog_->ListNodeReplicas("b1", 0, 10);
  ASSERT_TRUE(held.ok());
  ASSERT_EQ(held->size(), 1u);
  EXPECT_EQ(held->front().state, ReplicaState::kDeleting);
}

// Final request states stay final: a planner that read a request before it was cancelled
// (or before another planner finished it) can neither revive it nor add tasks to it.
// A request's files move with its tasks in the catalog's own writes (issue 39): several
// tasks of one request completed in one batch each move the counters, a copy that gave up
// from a source that still holds the file fails it, and a copy from a source found bad
// meanwhile makes it wanted again; the write of the last file ends the request.
TEST_P(CatalogTest, AYieldedTaskIsCancelledAndItsFileNamesTheSlowSourceAndIsWantedAgain) {
  MakeTopologyAndFile();
  RequestSpec spec;
  spec.paths = {"/f"};
  spec.dst_sites = {"b"};
  absl::StatusOr<Request> req = catalog_->CreateRequest(spec);
  ASSERT_TRUE(req.ok()) << req.status();
  ASSERT_TRUE(catalog_->AddRequestFiles(req->id, {{"/f", ""}}, true).ok());
  TaskSpec t;
  t.request_id = req->id;
  t.path = "/f";
  t.src_node = "a1";
  t.dst_node = "b1";
  t.max_attempts = 2;
  ASSERT_TRUE(catalog_->CreateTasks({t}).ok());
  absl::StatusOr<Task> claimed = catalog_->ClaimTask("b1", "w1", 30s);
  ASSERT_TRUE(claimed.ok()) << claimed.status();
  EXPECT_EQ(catalog_->YieldTask(claimed->id, "w2", "straggler: slow").status().code(),
            absl::StatusCode::kFailedPrecondition);
  // Only a1 holds the file: nothing to gain, the copy goes on.
  EXPECT_EQ(catalog_->YieldTask(claimed->id, "w1", "straggler: slow").status().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(catalog_->GetTask(claimed->id)->state, TaskState::kLeased);
  Node a2;
  a2.name = "a2";
  a2.site = "a";
  a2.address = "127.0.0.1:2";
  ASSERT_TRUE(catalog_->RegisterNode(a2).ok());
  Replica copy;
  copy.inode = catalog_->Stat("/f")->inode;
  copy.node = "a2";
  copy.state = ReplicaState::kComplete;
  copy.generation = 1;
  copy.size = 10;
  ASSERT_TRUE(catalog_->PutReplica(copy).ok());
  absl::StatusOr<Task> yielded = catalog_->YieldTask(claimed->id, "w1", "straggler: 0.8 Mbit/s");
  ASSERT_TRUE(yielded.ok()) << yielded.status();
  EXPECT_EQ(yielded->state, TaskState::kCancelled);
  EXPECT_EQ(yielded->last_error, "straggler: 0.8 Mbit/s");
  EXPECT_EQ(yielded->attempts, 1u) << "a given-back copy is not a failed attempt";
  // The destination's pending replica is gone; the file is wanted again, naming a1.
  absl::StatusOr<Location> loc = catalog_->Locate("/f");
  ASSERT_TRUE(loc.ok());
  for (const Replica& r : loc->replicas) EXPECT_NE(r.node, "b1");
  absl::StatusOr<std::vector<RequestFile>> rows = catalog_->ListRequestFiles(req->id, {});
  ASSERT_TRUE(rows.ok());
  ASSERT_EQ(rows->size(), 1u);
  EXPECT_EQ(rows->front().state, RequestFileState::kWanted);
  EXPECT_EQ(rows->front().slow_sources, std::vector<std::string>{"a1"});
  EXPECT_EQ(rows->front().attempts, 0u);
  EXPECT_EQ(rows->front().reason, "straggler: 0.8 Mbit/s");
  EXPECT_EQ(catalog_->GetRequest(req->id)->state, RequestState::kRunning);
  // A second copy from a1 given back: a1 is named once.
  ASSERT_TRUE(catalog_->CreateTasks({t}).ok());
  claimed = catalog_->ClaimTask("b1", "w3", 30s);
  ASSERT_TRUE(claimed.ok()) << claimed.status();
  ASSERT_TRUE(catalog_->YieldTask(claimed->id, "w3", "straggler: again").ok());
  rows = catalog_->ListRequestFiles(req->id, {});
  ASSERT_TRUE(rows.ok());
  EXPECT_EQ(rows->front().slow_sources, std::vector<std::string>{"a1"});
  // From a2, the last source not named slow: refused (a1 is slow, nothing better is left).
  t.src_node = "a2";
  ASSERT_TRUE(catalog_->CreateTasks({t}).ok());
  claimed = catalog_->ClaimTask("b1", "w4", 30s);
  ASSERT_TRUE(claimed.ok()) << claimed.status();
  EXPECT_EQ(catalog_->YieldTask(claimed->id, "w4", "straggler: a2 too").status().code(),
            absl::StatusCode::kFailedPrecondition);
}

TEST_P(CatalogTest, ARequestsFilesMoveWithItsTasksInTheSameWrite) {
  MakeTopologyAndFile();
  FileContent content;
  content.size = 20;
  content.checksum_algo = "xxh3-128";
  content.checksum = "c2";
  for (const char* path : {"/g", "/h", "/k"}) {
    ASSERT_TRUE(catalog_->CommitFile(path, content, "a1", std::nullopt).ok());
  }
  RequestSpec spec;
  spec.paths = {"/f", "/g", "/h", "/k"};
  spec.dst_sites = {"b"};  // a1's replicas are not the copies wanted
  absl::StatusOr<Request> req = catalog_->CreateRequest(spec);
  ASSERT_TRUE(req.ok()) << req.status();
  absl::StatusOr<Request> expanded = catalog_->AddRequestFiles(
      req->id, {{"/f", ""}, {"/g", ""}, {"/h", ""}, {"/k", ""}, {"/f", ""}}, true);
  ASSERT_TRUE(expanded.ok()) << expanded.status();
  EXPECT_EQ(expanded->files_total, 4u) << "a file listed twice counts once";
  EXPECT_EQ(expanded->bytes_total, 70u);
  EXPECT_EQ(catalog_->AddRequestFiles(req->id, {{"/f", ""}}, true).status().code(),
            absl::StatusCode::kFailedPrecondition);
  RequestFileFilter wanted;
  wanted.any_state = false;
  EXPECT_EQ(catalog_->ListRequestFiles(req->id, wanted)->size(), 4u);
  std::vector<TaskSpec> specs;
  for (const char* path : {"/f", "/g", "/h", "/k"}) {
    TaskSpec t;
    t.request_id = req->id;
    t.path = path;
    t.src_node = "a1";
    t.dst_node = "b1";
    t.max_attempts = 2;
    specs.push_back(t);
  }
  ASSERT_TRUE(catalog_->CreateTasks(specs).ok());
  EXPECT_TRUE(catalog_->ListRequestFiles(req->id, wanted)->empty());
  EXPECT_EQ(catalog_->GetRequest(req->id)->state, RequestState::kRunning);
  absl::StatusOr<std::vector<Task>> claimed =
      catalog_->ClaimTasks("b1", {"w1", "w2", "w3", "w4"}, 30s, 0ms);
  ASSERT_TRUE(claimed.ok()) << claimed.status();
  ASSERT_EQ(claimed->size(), 4u);
  std::map<std::string, Task> by_path;
  for (const Task& t : *claimed) by_path[t.spec.path] = t;
  // /f and /g complete in one batch: both counted.
  absl::StatusOr<std::vector<absl::StatusOr<Task>>> done =
      catalog_->CompleteTasks({{by_path["/f"].id, by_path["/f"].lease_owner, 0},
                               {by_path["/g"].id, by_path["/g"].lease_owner, 0}});
  ASSERT_TRUE(done.ok()) << done.status();
  Request r = *catalog_->GetRequest(req->id);
  EXPECT_EQ(r.files_done, 2u);
  EXPECT_EQ(r.bytes_done, 30u);
  // /h: the copy gives up, its source still holds the file: the file fails.
  ASSERT_TRUE(
      catalog_->FailTask(by_path["/h"].id, by_path["/h"].lease_owner, "DATA_LOSS: disk", false, 0ms)
          .ok());
  // /k: its source is found bad, then the copy gives up: wanted again, not failed.
  absl::StatusOr<Attributes> k = catalog_->Stat("/k");
  ASSERT_TRUE(k.ok());
  ReplicaTransition bad;
  bad.inode = k->inode;
  bad.node = "a1";
  bad.generation = k->generation;
  bad.from = ReplicaState::kComplete;
  bad.to = ReplicaState::kCorrupt;
  bad.note = "checksum mismatch";
  ASSERT_TRUE(catalog_->TransitionReplicas({bad}).ok());
  ASSERT_TRUE(catalog_
                  ->FailTask(by_path["/k"].id, by_path["/k"].lease_owner,
                             "FAILED_PRECONDITION: bad source", false, 0ms)
                  .ok());
  r = *catalog_->GetRequest(req->id);
  EXPECT_EQ(r.files_done, 2u);
  EXPECT_EQ(r.files_failed, 1u);
  EXPECT_EQ(r.state, RequestState::kRunning);
  absl::StatusOr<std::vector<RequestFile>> again = catalog_->ListRequestFiles(req->id, wanted);
  ASSERT_TRUE(again.ok() && again->size() == 1u);
  EXPECT_EQ((*again)[0].path, "/k");
  EXPECT_EQ((*again)[0].attempts, 1u);
  // The planner finds /k cannot be copied (its only source is bad): the last file, the end.
  EXPECT_EQ(catalog_->SettleRequestFile(req->id, (*again)[0].id, RequestFileState::kWanted, "")
                .status()
                .code(),
            absl::StatusCode::kInvalidArgument);
  ASSERT_TRUE(catalog_
                  ->SettleRequestFile(req->id, (*again)[0].id, RequestFileState::kFailed,
                                      "no complete replica to copy from")
                  .ok());
  EXPECT_EQ(catalog_->SettleRequestFile(req->id, (*again)[0].id, RequestFileState::kFailed, "x")
                .status()
                .code(),
            absl::StatusCode::kFailedPrecondition);
  r = *catalog_->GetRequest(req->id);
  EXPECT_EQ(r.state, RequestState::kFailed);
  EXPECT_EQ(r.files_failed, 2u);
  EXPECT_NE(r.error.find("2 of 4 files failed"), std::string::npos) << r.error;
  EXPECT_NE(r.error.find("/h: copy a1 -> b1 failed after 1 attempts: DATA_LOSS: disk"),
            std::string::npos)
      << r.error;
  EXPECT_NE(r.error.find("/k: no complete replica to copy from"), std::string::npos) << r.error;
  // Forgotten with the request.
  EXPECT_EQ(*catalog_->PurgeFinishedRequests(std::numeric_limits<std::int64_t>::max(), 10), 1u);
  EXPECT_EQ(catalog_->ListRequestFiles(req->id, {}).status().code(), absl::StatusCode::kNotFound);
}

TEST_P(CatalogTest, FinalRequestStatesAreNotOverwrittenAndCancelledTakeNoTasks) {
  MakeTopologyAndFile();
  absl::StatusOr<Request> req = catalog_->CreateRequest(Req("/f"));
  ASSERT_TRUE(req.ok()) << req.status();
  RequestUpdate u;
  u.id = req->id;
  u.set_state = true;
  u.state = RequestState::kRunning;
  ASSERT_TRUE(catalog_->UpdateRequest(u).ok());
  ASSERT_TRUE(catalog_->CancelRequest(req->id).ok());

  for (RequestState s : {RequestState::kRunning, RequestState::kDone, RequestState::kQueued}) {
    u.state = s;
    EXPECT_EQ(catalog_->UpdateRequest(u).status().code(), absl::StatusCode::kFailedPrecondition)
        << ToString(s);
  }
  EXPECT_EQ(catalog_->GetRequest(req->id)->state, RequestState::kCancelled);
  TaskSpec spec;
  spec.request_id = req->id;
  spec.path = "/f";
  spec.src_node = "a1";
  spec.dst_node = "b1";
  spec.max_attempts = 3;
  EXPECT_EQ(catalog_->CreateTasks({spec}).status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(catalog_->ListTasks(ByRequest(req->id))->empty());
  // Nor files: a cancelled request is not expanded any more.
  EXPECT_EQ(catalog_->AddRequestFiles(req->id, {{"/f", ""}}, true).status().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(catalog_->GetRequest(req->id)->state, RequestState::kCancelled);

  // done and failed are final too (the planner never reopens them).
  absl::StatusOr<Request> other = catalog_->CreateRequest(Req("/f"));
  ASSERT_TRUE(other.ok());
  u.id = other->id;
  u.state = RequestState::kDone;
  ASSERT_TRUE(catalog_->UpdateRequest(u).ok());
  u.state = RequestState::kRunning;
  EXPECT_EQ(catalog_->UpdateRequest(u).status().code(), absl::StatusCode::kFailedPrecondition);
  u.state = RequestState::kDone;
  EXPECT_TRUE(catalog_->UpdateRequest(u).ok());  // same state: not a change
}


ReplicaTransition Move(InodeId inode, std::string node, std::uint64_t gen, ReplicaState from,
                       ReplicaState to, std::string note = "") {
  ReplicaTransition t;
  t.inode = inode;
  t.node = std::move(node);
  t.generation = gen;
  t.from = from;
  t.to = to;
  t.note = std::move(note);
  return t;
}

TEST_P(CatalogTest, AReplicaFoundDamagedBecomesCorruptWithItsReasonAndAnEvent) {
  MakeTopologyAndFile();
  absl::StatusOr<Attributes> f = catalog_->Stat("/f");
  ASSERT_TRUE(f.ok());
  absl::StatusOr<std::uint64_t> seq = catalog_->LastEventSeq();
  ASSERT_TRUE(seq.ok());
  absl::StatusOr<std::vector<absl::Status>> r = catalog_->TransitionReplicas(
      {Move(f->inode, "a1", 1, ReplicaState::kComplete, ReplicaState::kCorrupt, "checksum x != y")});
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->size(), 1u);
  EXPECT_TRUE((*r)[0].ok()) << (*r)[0];
  absl::StatusOr<Replica> rec = RecordOf("/f", "a1");
  ASSERT_TRUE(rec.ok());
  EXPECT_EQ(rec->state, ReplicaState::kCorrupt);
  EXPECT_EQ(rec->note, "checksum x != y");
  absl::StatusOr<std::vector<Event>> events = catalog_->ReadEvents(*seq, 10, 0ms);
  ASSERT_TRUE(events.ok());
  ASSERT_EQ(events->size(), 1u);
  EXPECT_EQ((*events)[0].kind, EventKind::kReplica);
  EXPECT_EQ((*events)[0].id, f->inode);
  EXPECT_EQ((*events)[0].state, "corrupt");
  EXPECT_EQ((*events)[0].detail, "checksum x != y");
  // The note and state survive a restart (stored with the record).
  ASSERT_NO_FATAL_FAILURE(Open());
  rec = RecordOf("/f", "a1");
  ASSERT_TRUE(rec.ok());
  EXPECT_EQ(rec->state, ReplicaState::kCorrupt);
  EXPECT_EQ(rec->note, "checksum x != y");
}

TEST_P(CatalogTest, AReplicaTransitionIsACompareAndSet) {
  MakeTopologyAndFile();
  absl::StatusOr<Attributes> f = catalog_->Stat("/f");
  ASSERT_TRUE(f.ok());
  absl::StatusOr<std::vector<absl::Status>> r = catalog_->TransitionReplicas({
      Move(f->inode, "a1", 2, ReplicaState::kComplete, ReplicaState::kLost),   // other generation
      Move(f->inode, "b1", 1, ReplicaState::kComplete, ReplicaState::kLost),   // no record
      Move(f->inode, "a1", 1, ReplicaState::kStale, ReplicaState::kDeleting),  // other state
      Move(f->inode, "a1", 1, ReplicaState::kPending, ReplicaState::kComplete),  // not allowed
  });
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->size(), 4u);
  EXPECT_TRUE(absl::IsAborted((*r)[0])) << (*r)[0];
  EXPECT_TRUE(absl::IsNotFound((*r)[1])) << (*r)[1];
  EXPECT_TRUE(absl::IsAborted((*r)[2])) << (*r)[2];
  EXPECT_TRUE(absl::IsInvalidArgument((*r)[3])) << (*r)[3];
  absl::StatusOr<Replica> rec = RecordOf("/f", "a1");
  ASSERT_TRUE(rec.ok());
  EXPECT_EQ(rec->state, ReplicaState::kComplete);
  // The same record twice in one call: the second is refused, the first applied.
  r = catalog_->TransitionReplicas(
      {Move(f->inode, "a1", 1, ReplicaState::kComplete, ReplicaState::kLost, "missing"),
       Move(f->inode, "a1", 1, ReplicaState::kComplete, ReplicaState::kCorrupt)});
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE((*r)[0].ok());
  EXPECT_TRUE(absl::IsInvalidArgument((*r)[1])) << (*r)[1];
  rec = RecordOf("/f", "a1");
  ASSERT_TRUE(rec.ok());
  EXPECT_EQ(rec->state, ReplicaState::kLost);
  // A failed write changes nothing.
  fail_next_write_ = true;
  r = catalog_->TransitionReplicas(
      {Move(f->inode, "a1", 1, ReplicaState::kLost, ReplicaState::kDeleting)});
  ASSERT_TRUE(r.ok());
  EXPECT_FALSE((*r)[0].ok());
  rec = RecordOf("/f", "a1");
  ASSERT_TRUE(rec.ok());
  EXPECT_EQ(rec->state, ReplicaState::kLost);
}

TEST_P(CatalogTest, TheLastCompleteReplicaIsNeverDropped) {
  MakeTopologyAndFile();
  absl::StatusOr<Attributes> f = catalog_->Stat("/f");
  ASSERT_TRUE(f.ok());
  ASSERT_TRUE(catalog_->PutReplica(Rep(f->inode, "b1", ReplicaState::kComplete, 1)).ok());
  // Both in one call: one may go, the other is then the last.
  absl::StatusOr<std::vector<absl::Status>> r = catalog_->TransitionReplicas(
      {Move(f->inode, "a1", 1, ReplicaState::kComplete, ReplicaState::kDeleting),
       Move(f->inode, "b1", 1, ReplicaState::kComplete, ReplicaState::kDeleting)});
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE((*r)[0].ok()) << (*r)[0];
  EXPECT_TRUE(absl::IsFailedPrecondition((*r)[1])) << (*r)[1];
  EXPECT_EQ(RecordOf("/f", "a1")->state, ReplicaState::kDeleting);
  EXPECT_EQ(RecordOf("/f", "b1")->state, ReplicaState::kComplete);
  r = catalog_->TransitionReplicas(
      {Move(f->inode, "b1", 1, ReplicaState::kComplete, ReplicaState::kDeleting)});
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(absl::IsFailedPrecondition((*r)[0])) << (*r)[0];
}

TEST_P(CatalogTest, AReverifiedReplicaKeepsItsStateAndGetsItsStampWithoutAnEvent) {
  MakeTopologyAndFile();
  absl::StatusOr<Attributes> f = catalog_->Stat("/f");
  ASSERT_TRUE(f.ok());
  absl::StatusOr<std::uint64_t> seq = catalog_->LastEventSeq();
  now_ += 5'000'000'000;
  ReplicaTransition t = Move(f->inode, "a1", 1, ReplicaState::kComplete, ReplicaState::kComplete);
  t.verified = true;
  t.mtime_ns = 123456789;
  absl::StatusOr<std::vector<absl::Status>> r = catalog_->TransitionReplicas({t});
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE((*r)[0].ok()) << (*r)[0];
  absl::StatusOr<Replica> rec = RecordOf("/f", "a1");
  ASSERT_TRUE(rec.ok());
  EXPECT_EQ(rec->state, ReplicaState::kComplete);
  EXPECT_EQ(rec->verified_ns, now_.load());
  EXPECT_EQ(rec->mtime_ns, 123456789);
  EXPECT_EQ(*catalog_->LastEventSeq(), *seq);
}

TEST_P(CatalogTest, AReplicaOfADeadNodeIsUnverifiedUntilItsNodeChecksItAgain) {
  MakeTopologyAndFile();
  absl::StatusOr<Attributes> f = catalog_->Stat("/f");
  ASSERT_TRUE(f.ok());
  ASSERT_TRUE(catalog_->PutReplica(Rep(f->inode, "b1", ReplicaState::kComplete, 1)).ok());
  absl::StatusOr<std::uint64_t> seq = catalog_->LastEventSeq();
  ASSERT_TRUE(seq.ok());
  // Declared dead: unverified, with an event; not a way back to complete without a check.
  absl::StatusOr<std::vector<absl::Status>> r = catalog_->TransitionReplicas(
      {Move(f->inode, "a1", 1, ReplicaState::kComplete, ReplicaState::kUnverified, "node a1 silent")});
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE((*r)[0].ok()) << (*r)[0];
  EXPECT_EQ(RecordOf("/f", "a1")->state, ReplicaState::kUnverified);
  EXPECT_EQ(RecordOf("/f", "a1")->note, "node a1 silent");
  // Only its note may change while it is unverified; it is not complete, so b1 is the last.
  r = catalog_->TransitionReplicas(
      {Move(f->inode, "a1", 1, ReplicaState::kUnverified, ReplicaState::kUnverified,
            std::string(kRemadeNote)),
       Move(f->inode, "b1", 1, ReplicaState::kComplete, ReplicaState::kDeleting)});
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE((*r)[0].ok()) << (*r)[0];
  EXPECT_TRUE(absl::IsFailedPrecondition((*r)[1])) << (*r)[1];
  EXPECT_EQ(RecordOf("/f", "a1")->note, kRemadeNote);
  r = catalog_->TransitionReplicas(
      {Move(f->inode, "a1", 1, ReplicaState::kUnverified, ReplicaState::kStale)});
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(absl::IsInvalidArgument((*r)[0])) << (*r)[0];
  // Its node checked it: complete again, stamped, with an event the repairer follows.
  now_ += 7'000'000'000;
  ReplicaTransition back = Move(f->inode, "a1", 1, ReplicaState::kUnverified,
                                ReplicaState::kComplete, std::string(kRecheckedNote));
  back.verified = true;
  back.mtime_ns = 42;
  r = catalog_->TransitionReplicas({back});
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE((*r)[0].ok()) << (*r)[0];
  absl::StatusOr<Replica> rec = RecordOf("/f", "a1");
  ASSERT_TRUE(rec.ok());
  EXPECT_EQ(rec->state, ReplicaState::kComplete);
  EXPECT_EQ(rec->verified_ns, now_.load());
  EXPECT_EQ(rec->mtime_ns, 42);
  EXPECT_EQ(rec->note, kRecheckedNote);
  absl::StatusOr<std::vector<Event>> events = catalog_->ReadEvents(*seq, 10, 0ms);
  ASSERT_TRUE(events.ok());
  ASSERT_EQ(events->size(), 3u);
  EXPECT_EQ((*events)[0].state, "unverified");
  EXPECT_EQ((*events)[1].detail, kRemadeNote);
  EXPECT_EQ((*events)[2].state, "complete");
  EXPECT_EQ((*events)[2].detail, kRecheckedNote);
  // A new generation makes an unverified copy of the old one stale, as a complete one; the
  // state survives a restart.
  ASSERT_TRUE(catalog_->TransitionReplicas(
                          {Move(f->inode, "a1", 1, ReplicaState::kComplete, ReplicaState::kUnverified)})
                  .ok());
  ASSERT_NO_FATAL_FAILURE(Open());
  EXPECT_EQ(RecordOf("/f", "a1")->state, ReplicaState::kUnverified);
  FileContent v2;
  v2.size = 20;
  v2.checksum = "c2";
  ASSERT_TRUE(catalog_->CommitFile("/f", v2, "b1", 1).ok());
  EXPECT_EQ(RecordOf("/f", "a1")->state, ReplicaState::kStale);
}

TEST_P(CatalogTest, ACommittedCopyRecordsTheMtimeItsNodeSaw) {
  MakeTopologyAndFile();
  absl::StatusOr<Task> t = OneTask();
  ASSERT_TRUE(t.ok());
  absl::StatusOr<std::vector<Task>> claimed = catalog_->ClaimTasks("b1", {"w"}, 10s, 0ms);
  ASSERT_TRUE(claimed.ok() && claimed->size() == 1);
  absl::StatusOr<std::vector<absl::StatusOr<Task>>> done =
      catalog_->CompleteTasks({{t->id, "w", 987654321}});
  ASSERT_TRUE(done.ok());
  ASSERT_TRUE((*done)[0].ok()) << (*done)[0].status();
  absl::StatusOr<Replica> rec = RecordOf("/f", "b1");
  ASSERT_TRUE(rec.ok());
  EXPECT_EQ(rec->state, ReplicaState::kComplete);
  EXPECT_EQ(rec->mtime_ns, 987654321);
}

TEST_P(CatalogTest, AClaimReplacesACorruptRecordOfItsNode) {
  MakeTopologyAndFile();
  absl::StatusOr<Attributes> f = catalog_->Stat("/f");
  ASSERT_TRUE(f.ok());
  ASSERT_TRUE(catalog_->PutReplica(Rep(f->inode, "b1", ReplicaState::kComplete, 1)).ok());
  ASSERT_TRUE(catalog_
                  ->TransitionReplicas({Move(f->inode, "b1", 1, ReplicaState::kComplete,
                                             ReplicaState::kCorrupt, "bad")})
                  .ok());
  absl::StatusOr<Task> t = OneTask();
  ASSERT_TRUE(t.ok());
  absl::StatusOr<std::vector<Task>> claimed = catalog_->ClaimTasks("b1", {"w"}, 10s, 0ms);
  ASSERT_TRUE(claimed.ok() && claimed->size() == 1);
  absl::StatusOr<Replica> rec = RecordOf("/f", "b1");
  ASSERT_TRUE(rec.ok());
  EXPECT_EQ(rec->state, ReplicaState::kPending);
  EXPECT_EQ(rec->note, "");
  ASSERT_TRUE(catalog_->CompleteTask(t->id, "w").ok());
  EXPECT_EQ(RecordOf("/f", "b1")->state, ReplicaState::kComplete);
}

// Finished requests are forgotten after their retention, with their tasks; open ones, recent
// ones stay, and a restart gives no purged id out again.
TEST_P(CatalogTest, PurgeForgetsOldFinishedRequestsWithTheirTasksAndNeverReusesAnId) {
  MakeTopologyAndFile();
  auto request_with_task = [&](RequestState end) {
    absl::StatusOr<Request> req = catalog_->CreateRequest(Req("/f"));
    EXPECT_TRUE(req.ok()) << req.status();
    TaskSpec spec;
    spec.request_id = req->id;
    spec.path = "/f";
    spec.src_node = "a1";
    spec.dst_node = "b1";
    spec.max_attempts = 3;
    absl::StatusOr<std::vector<Task>> tasks = catalog_->CreateTasks({spec});
    EXPECT_TRUE(tasks.ok()) << tasks.status();
    if (end != RequestState::kRunning) {
      EXPECT_TRUE(catalog_->AbandonTask(tasks->front().id, "test").ok());
      RequestUpdate u;
      u.id = req->id;
      u.set_state = true;
      u.state = end;
      EXPECT_TRUE(catalog_->UpdateRequest(u).ok());
    }
    return std::make_pair(req->id, tasks->front().id);
  };
  const std::int64_t t0 = now_.load();
  auto [done_req, done_task] = request_with_task(RequestState::kDone);
  auto [failed_req, failed_task] = request_with_task(RequestState::kFailed);
  auto [open_req, open_task] = request_with_task(RequestState::kRunning);  // still running
  now_ += 3600'000'000'000LL;  // an hour later
  auto [recent_req, recent_task] = request_with_task(RequestState::kDone);
  auto [newest_req, newest_task] = request_with_task(RequestState::kCancelled);
  now_ += 1'000'000'000LL;
  absl::StatusOr<std::uint64_t> seq = catalog_->LastEventSeq();
  ASSERT_TRUE(seq.ok());

  // Older than half an hour: the done and the failed request go, with their tasks.
  absl::StatusOr<std::size_t> purged = catalog_->PurgeFinishedRequests(t0 + 1800'000'000'000LL, 100);
  ASSERT_TRUE(purged.ok()) << purged.status();
  EXPECT_EQ(*purged, 2u);
  EXPECT_TRUE(absl::IsNotFound(catalog_->GetRequest(done_req).status()));
  EXPECT_TRUE(absl::IsNotFound(catalog_->GetTask(done_task).status()));
  EXPECT_TRUE(absl::IsNotFound(catalog_->GetRequest(failed_req).status()));
  EXPECT_TRUE(absl::IsNotFound(catalog_->GetTask(failed_task).status()));
  EXPECT_TRUE(catalog_->ListTasks(ByRequest(done_req))->empty());
  EXPECT_TRUE(catalog_->GetRequest(open_req).ok());
  EXPECT_TRUE(catalog_->GetTask(open_task).ok());
  EXPECT_TRUE(catalog_->GetRequest(recent_req).ok());
  absl::StatusOr<std::vector<Event>> events = catalog_->ReadEvents(*seq, 100, 0ms);
  ASSERT_TRUE(events.ok());
  int purge_events = 0;
  for (const Event& e : *events) purge_events += e.kind == EventKind::kRequest && e.state == "purged" ? 1 : 0;
  EXPECT_EQ(purge_events, 2);

  // Everything finished and old: all but the running one, the newest included.
  now_ += 3600'000'000'000LL;
  purged = catalog_->PurgeFinishedRequests(now_.load(), 100);
  ASSERT_TRUE(purged.ok()) << purged.status();
  EXPECT_EQ(*purged, 2u);  // recent_req and newest_req; open_req still runs
  EXPECT_TRUE(absl::IsNotFound(catalog_->GetRequest(newest_req).status()));
  EXPECT_TRUE(absl::IsNotFound(catalog_->GetTask(newest_task).status()));
  // After a restart, new ids are above every id given out before, also the purged newest.
  ASSERT_NO_FATAL_FAILURE(Open());
  absl::StatusOr<Request> next = catalog_->CreateRequest(Req("/f"));
  ASSERT_TRUE(next.ok()) << next.status();
  EXPECT_GT(next->id, newest_req);
  absl::StatusOr<Task> task = OneTask();
  ASSERT_TRUE(task.ok()) << task.status();
  EXPECT_GT(task->id, newest_task);
  EXPECT_EQ(catalog_->PurgeFinishedRequests(now_.load(), 0).value_or(99), 0u) << "max 0 purges none";
}

// postgresql_shared: the same database opened as one of several front ends (every mutation
// under the database's write lock: the write gate of internal/kv_catalog.h).
INSTANTIATE_TEST_SUITE_P(Backends, CatalogTest,
                         ::testing::Values("rocksdb", "postgresql", "postgresql_shared"),
                         [](const ::testing::TestParamInfo<const char*>& info) {
                           return std::string(info.param);
                         });

}  // namespace
}  // namespace gfrep::catalog
