// One in-process round trip per RPC: a real RocksDB catalog served by CatalogServer on
// 127.0.0.1:0, called through CatalogClient. Mainly checks proto and status mapping.
#include "catalog/client.h"

#include <gtest/gtest.h>

#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>

#include <atomic>
#include <thread>

#include "catalog/catalog_service.h"
#include "tests/support/temp_dir.h"

namespace gfrep::catalog {
namespace {

using namespace std::chrono_literals;

class CatalogClientTest : public ::testing::Test {
 protected:
  void SetUp() override {
    CatalogOptions options;
    options.path = dir_.Sub("db");
    options.clock = [this] { return SystemNowNs() + clock_offset_ns_.load(); };
    absl::StatusOr<std::unique_ptr<Catalog>> c = OpenRocksCatalog(options);
    ASSERT_TRUE(c.ok()) << c.status();
    local_ = std::move(*c);
    ServerOptions so;
    so.worker_threads = 4;
    so.node_timeout = 30s;
    so.node_dead_after = 600s;
    absl::StatusOr<std::unique_ptr<CatalogServer>> s = CatalogServer::Start(*local_, so);
    ASSERT_TRUE(s.ok()) << s.status();
    server_ = std::move(*s);
    ClientOptions co;
    co.address = server_->address();
    co.timeout = 10s;
    absl::StatusOr<std::unique_ptr<CatalogClient>> cl = CatalogClient::Create(co);
    ASSERT_TRUE(cl.ok()) << cl.status();
    client_ = std::move(*cl);
  }
  void TearDown() override {
    client_.reset();
    if (server_) server_->Shutdown();
  }

  void Topology() {
    ASSERT_TRUE(client_->PutSite({"a", {{"region", "jp"}}}).ok());
    ASSERT_TRUE(client_->PutSite({"b", {}}).ok());
    Node n;
    n.name = "a1";
    n.site = "a";
    n.address = "127.0.0.1:7001";
    n.spool = "/spool/a1";
    n.capacity_bytes = 1000;
    n.workers = 12;
    ASSERT_TRUE(client_->RegisterNode(n).ok());
    n.name = "b1";
    n.site = "b";
    ASSERT_TRUE(client_->RegisterNode(n).ok());
    FileContent content;
    content.size = 42;
    content.checksum_algo = "xxh3-128";
    content.checksum = "00ff";
    absl::StatusOr<Attributes> f = client_->CommitFile("/f", content, "a1", std::nullopt);
    ASSERT_TRUE(f.ok()) << f.status();
  }

  std::atomic<std::int64_t> clock_offset_ns_{0};  // moves the server's clock forward
  testing::TempDir dir_{"catalog-rpc"};
  std::unique_ptr<Catalog> local_;
  std::unique_ptr<CatalogServer> server_;
  std::unique_ptr<CatalogClient> client_;
};

TEST_F(CatalogClientTest, NamespaceCallsMapAttributesAndCodes) {
  MkdirOptions p;
  p.parents = true;
  p.owner = "alice";
  absl::StatusOr<Attributes> d = client_->Mkdir("/a/b", p);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->type, FileType::kDirectory);
  EXPECT_EQ(d->owner, "alice");
  EXPECT_EQ(client_->Mkdir("/a/b", {}).status().code(), absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(client_->Mkdir("/zz/b", {}).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(client_->Mkdir("/a/..", {}).status().code(), absl::StatusCode::kInvalidArgument);
  FileContent c;
  c.size = 7;
  absl::StatusOr<Attributes> f = client_->CreateFile("/a/b/f", c);
  ASSERT_TRUE(f.ok());
  EXPECT_EQ(f->mode, 0644u);
  absl::StatusOr<Attributes> st = client_->Stat("/a/b/f");
  ASSERT_TRUE(st.ok());
  EXPECT_EQ(st->size, 7u);
  EXPECT_EQ(st->inode, f->inode);
  EXPECT_EQ(client_->StatInode(f->inode)->name, "f");
  EXPECT_EQ(*client_->PathOf(f->inode), "/a/b/f");
  absl::StatusOr<std::vector<DirEntry>> l = client_->List("/a/b", {});
  ASSERT_TRUE(l.ok());
  ASSERT_EQ(l->size(), 1u);
  EXPECT_EQ((*l)[0].name, "f");
  EXPECT_EQ((*l)[0].attributes.size, 7u);
  EXPECT_TRUE(client_->Rename("/a/b/f", "/a/g").ok());
  EXPECT_EQ(client_->Rename("/a", "/a/b/a").code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(client_->Remove("/a", false).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(client_->Remove("/a", true).ok());
  EXPECT_EQ(client_->Stat("/a").status().code(), absl::StatusCode::kNotFound);
}

TEST_F(CatalogClientTest, BatchedCreateAndStat) {
  ASSERT_TRUE(client_->Mkdir("/d", {}).ok());
  std::vector<NewFile> files;
  for (int i = 0; i < 3; ++i) {
    NewFile f;
    f.path = "/d/f" + std::to_string(i);
    f.content.size = static_cast<std::uint64_t>(i);
    f.content.checksum = "c" + std::to_string(i);
    files.push_back(f);
  }
  absl::StatusOr<std::vector<Attributes>> made = client_->CreateFiles(files);
  ASSERT_TRUE(made.ok()) << made.status();
  ASSERT_EQ(made->size(), 3u);
  EXPECT_EQ((*made)[2].checksum, "c2");
  EXPECT_EQ((*made)[2].mode, 0644u);
  EXPECT_EQ(client_->CreateFiles(files).status().code(), absl::StatusCode::kAlreadyExists);
  absl::StatusOr<std::vector<absl::StatusOr<Attributes>>> st =
      client_->StatMany({"/d/f1", "/d/none", "/d"});
  ASSERT_TRUE(st.ok()) << st.status();
  ASSERT_EQ(st->size(), 3u);
  EXPECT_EQ((*st)[0]->size, 1u);
  EXPECT_EQ((*st)[1].status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ((*st)[2]->type, FileType::kDirectory);
}

TEST_F(CatalogClientTest, CommitFileAndReplicaCalls) {
  Topology();
  absl::StatusOr<Location> loc = client_->Locate("/f");
  ASSERT_TRUE(loc.ok()) << loc.status();
  EXPECT_EQ(loc->attributes.checksum, "00ff");
  EXPECT_EQ(loc->attributes.generation, 1u);
  ASSERT_EQ(loc->replicas.size(), 1u);
  EXPECT_EQ(loc->replicas[0].state, ReplicaState::kComplete);
  InodeId inode = loc->attributes.inode;
  Replica r;
  r.inode = inode;
  r.node = "b1";
  r.state = ReplicaState::kCorrupt;
  r.generation = 1;
  ASSERT_TRUE(client_->PutReplica(r).ok());
  EXPECT_EQ(client_->GetReplicas(inode)->size(), 2u);
  EXPECT_EQ(client_->ListNodeReplicas("b1", 0, 10)->at(0).state, ReplicaState::kCorrupt);
  ASSERT_TRUE(client_->RemoveReplica(inode, "b1").ok());
  EXPECT_TRUE(client_->ListNodeReplicas("b1", 0, 10)->empty());
  FileContent c2;
  c2.size = 1;
  EXPECT_EQ(client_->CommitFile("/f", c2, "a1", 5).status().code(), absl::StatusCode::kAborted);
  EXPECT_EQ(client_->CommitFile("/f", c2, "a1", 1)->generation, 2u);
}

TEST_F(CatalogClientTest, TopologyCalls) {
  Topology();
  absl::StatusOr<std::vector<Site>> sites = client_->ListSites();
  ASSERT_TRUE(sites.ok());
  ASSERT_EQ(sites->size(), 2u);
  EXPECT_EQ((*sites)[0].labels.at("region"), "jp");
  absl::StatusOr<Node> n = client_->GetNode("a1");
  ASSERT_TRUE(n.ok());
  EXPECT_EQ(n->spool, "/spool/a1");
  EXPECT_EQ(n->capacity_bytes, 1000u);
  EXPECT_EQ(n->workers, 12u);
  Heartbeat hb;
  hb.node = "a1";
  hb.free_bytes = 500;
  hb.load = 1.25;
  hb.active_transfers = 3;
  hb.routes = {{"b", 123, 150.5, 170.25, 0.002, 5'000'000, "bbr"}};
  ASSERT_TRUE(client_->SendHeartbeat(hb).ok());
  n = client_->GetNode("a1");
  EXPECT_EQ(n->free_bytes, 500u);
  EXPECT_DOUBLE_EQ(n->load, 1.25);
  EXPECT_EQ(n->active_transfers, 3u);
  // The observation crossed the wire whole and taught the route b -> a.
  absl::StatusOr<Route> learnt = client_->GetRoute("b", "a");
  ASSERT_TRUE(learnt.ok()) << learnt.status();
  EXPECT_EQ(learnt->observed.bytes, 123u);
  EXPECT_DOUBLE_EQ(learnt->observed.rtt_ms, 150.5);
  EXPECT_DOUBLE_EQ(learnt->observed.srtt_ms, 170.25);
  EXPECT_DOUBLE_EQ(learnt->observed.loss, 0.002);
  EXPECT_EQ(learnt->observed.peak_bps, 5'000'000u);
  EXPECT_GT(learnt->observed.at_ns, 0);
  EXPECT_EQ(learnt->observed.congestion, "bbr");
  hb.routes = {{"b", 1, -5, 0, 0, 0, ""}};
  EXPECT_EQ(client_->SendHeartbeat(hb).code(), absl::StatusCode::kInvalidArgument);
  ASSERT_TRUE(client_->RemoveRoute("b", "a").ok());
  hb.routes.clear();
  EXPECT_EQ(client_->ListNodes("b")->size(), 1u);
  Route route;
  route.src_site = "a";
  route.dst_site = "b";
  route.streams = 8;
  route.socket_buffer_bytes = 4 << 20;
  route.route_rate_bps = 900'000'000;
  route.congestion_control = "bbr";
  route.rtt_ms = 200.5;
  ASSERT_TRUE(client_->PutRoute(route).ok());
  absl::StatusOr<Route> got = client_->GetRoute("a", "b");
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(got->congestion_control, "bbr");
  EXPECT_DOUBLE_EQ(got->rtt_ms, 200.5);
  EXPECT_EQ(client_->ListRoutes()->size(), 1u);
  ASSERT_TRUE(client_->RemoveRoute("a", "b").ok());
  EXPECT_EQ(client_->GetRoute("a", "b").status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(client_->RemoveSite("a").code(), absl::StatusCode::kFailedPrecondition);
  // The disk profile travels both ways and survives a re-registration.
  DiskProfile disk;
  disk.dir = "/spool/b1";
  disk.write_io_size_bytes = 256 << 10;
  disk.direct = true;
  disk.flush_interval_bytes = 128 << 20;
  disk.write_mbps = 321.5;
  disk.read_mbps = 654.25;
  disk.measured_ns = 99;
  ASSERT_TRUE(client_->PutNodeDisk("b1", disk).ok());
  Node b1 = *client_->GetNode("b1");
  b1.disk = {};
  ASSERT_TRUE(client_->RegisterNode(b1).ok());
  absl::StatusOr<std::vector<Node>> bs = client_->ListNodes("b");
  ASSERT_TRUE(bs.ok() && bs->size() == 1u);
  EXPECT_EQ((*bs)[0].disk.dir, "/spool/b1");
  EXPECT_EQ((*bs)[0].disk.write_io_size_bytes, 256u << 10);
  EXPECT_TRUE((*bs)[0].disk.direct);
  EXPECT_EQ((*bs)[0].disk.flush_interval_bytes, 128u << 20);
  EXPECT_DOUBLE_EQ((*bs)[0].disk.write_mbps, 321.5);
  EXPECT_DOUBLE_EQ((*bs)[0].disk.read_mbps, 654.25);
  EXPECT_EQ((*bs)[0].disk.measured_ns, 99);
  EXPECT_EQ(client_->PutNodeDisk("nobody", disk).code(), absl::StatusCode::kNotFound);
  ASSERT_TRUE(client_->RemoveNode("b1").ok());
  ASSERT_TRUE(client_->RemoveSite("b").ok());
  EXPECT_EQ(client_->ListSites()->size(), 1u);
}

TEST_F(CatalogClientTest, ACopyGivenBackAsTooSlowOverGrpcNamesItsSourceInTheFilesRow) {
  Topology();
  RequestSpec spec;
  spec.paths = {"/f"};
  spec.dst_sites = {"b"};
  absl::StatusOr<Request> req = client_->CreateRequest(spec);
  ASSERT_TRUE(req.ok()) << req.status();
  ASSERT_TRUE(local_->AddRequestFiles(req->id, {{"/f", ""}}, true).ok());
  Node a2;
  a2.name = "a2";
  a2.site = "a";
  a2.address = "127.0.0.1:7002";
  ASSERT_TRUE(local_->RegisterNode(a2).ok());
  Replica other;
  other.inode = local_->Stat("/f")->inode;
  other.node = "a2";
  other.state = ReplicaState::kComplete;
  other.generation = local_->Stat("/f")->generation;
  other.size = 42;
  ASSERT_TRUE(local_->PutReplica(other).ok());
  TaskSpec ts;
  ts.request_id = req->id;
  ts.path = "/f";
  ts.src_node = "a1";
  ts.dst_node = "b1";
  ASSERT_TRUE(client_->CreateTasks({ts}).ok());
  absl::StatusOr<Task> claimed = client_->ClaimTask("b1", "agent", 30s);
  ASSERT_TRUE(claimed.ok()) << claimed.status();
  absl::StatusOr<Task> yielded = client_->YieldTask(claimed->id, "agent", "straggler: slow");
  ASSERT_TRUE(yielded.ok()) << yielded.status();
  EXPECT_EQ(yielded->state, TaskState::kCancelled) << "not YieldTask (a FailTask fallback?)";
  EXPECT_EQ(yielded->last_error, "straggler: slow");
  absl::StatusOr<std::vector<RequestFile>> files = client_->ListRequestFiles(req->id, {});
  ASSERT_TRUE(files.ok()) << files.status();
  ASSERT_EQ(files->size(), 1u);
  EXPECT_EQ(files->front().state, RequestFileState::kWanted);
  EXPECT_EQ(files->front().slow_sources, std::vector<std::string>{"a1"});
}

TEST_F(CatalogClientTest, RequestAndTaskCalls) {
  Topology();
  RequestSpec spec;
  spec.paths = {"/f"};
  spec.copies = 2;
  spec.dst_sites = {"b"};
  spec.priority = 3;
  spec.parallel = 7;
  absl::StatusOr<Request> req = client_->CreateRequest(spec);
  ASSERT_TRUE(req.ok()) << req.status();
  EXPECT_EQ(req->spec.dst_sites, std::vector<std::string>{"b"});
  EXPECT_EQ(client_->GetRequest(req->id)->spec.copies, 2u);
  EXPECT_EQ(client_->GetRequest(req->id)->spec.parallel, 7u);
  RequestSpec too_parallel = spec;
  too_parallel.parallel = 1000000;
  EXPECT_EQ(client_->CreateRequest(too_parallel).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(client_->ListRequests(false, RequestState::kQueued, 10)->size(), 1u);
  RequestUpdate u;
  u.id = req->id;
  u.set_state = true;
  u.state = RequestState::kRunning;
  EXPECT_EQ(client_->UpdateRequest(u)->state, RequestState::kRunning);
  // A request's files: read over gRPC; listed and settled only by gfcatalogd's own planner.
  EXPECT_TRUE(client_->ListRequestFiles(req->id, {})->empty());
  EXPECT_EQ(client_->ListRequestFiles(req->id + 100, {}).status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(client_->AddRequestFiles(req->id, {{"/f", ""}}, true).status().code(),
            absl::StatusCode::kUnimplemented);
  ASSERT_TRUE(local_->AddRequestFiles(req->id, {{"/f", ""}}, true).ok());
  absl::StatusOr<std::vector<RequestFile>> files = client_->ListRequestFiles(req->id, {});
  ASSERT_TRUE(files.ok()) << files.status();
  ASSERT_EQ(files->size(), 1u);
  EXPECT_EQ((*files)[0].path, "/f");
  EXPECT_EQ((*files)[0].size, 42u);
  EXPECT_EQ((*files)[0].state, RequestFileState::kWanted);
  EXPECT_TRUE(client_->GetRequest(req->id)->expanded);
  TaskSpec ts;
  ts.request_id = req->id;
  ts.path = "/f";
  ts.src_node = "a1";
  ts.dst_node = "b1";
  absl::StatusOr<std::vector<Task>> tasks = client_->CreateTasks({ts, ts});
  ASSERT_TRUE(tasks.ok()) << tasks.status();
  ASSERT_EQ(tasks->size(), 2u);
  EXPECT_EQ((*tasks)[0].size, 42u);
  EXPECT_EQ(client_->GetTask((*tasks)[0].id)->spec.path, "/f");
  TaskFilter all;
  all.request_id = req->id;
  EXPECT_EQ(client_->ListTasks(all)->size(), 2u);
  absl::StatusOr<Task> claimed = client_->ClaimTask("b1", "agent", 30s);
  ASSERT_TRUE(claimed.ok()) << claimed.status();
  EXPECT_EQ(claimed->state, TaskState::kLeased);
  EXPECT_TRUE(client_->RenewLease(claimed->id, "agent", 30s).ok());
  EXPECT_EQ(client_->RenewLease(claimed->id, "other", 30s).status().code(),
            absl::StatusCode::kFailedPrecondition);
  absl::StatusOr<std::vector<absl::Status>> renewed =
      client_->RenewLeases({{claimed->id, "agent"}, {claimed->id, "other"}}, 30s);
  ASSERT_TRUE(renewed.ok()) << renewed.status();
  ASSERT_EQ(renewed->size(), 2u);
  EXPECT_TRUE((*renewed)[0].ok()) << (*renewed)[0];
  EXPECT_EQ((*renewed)[1].code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(client_->YieldTask(claimed->id, "other", "straggler").status().code(),
            absl::StatusCode::kFailedPrecondition);
  absl::StatusOr<Task> failed = client_->FailTask(claimed->id, "agent", "no route", true, 0ms);
  ASSERT_TRUE(failed.ok());
  EXPECT_EQ(failed->state, TaskState::kQueued);
  EXPECT_EQ(failed->last_error, "no route");
  claimed = client_->ClaimTask("b1", "agent", 30s);
  ASSERT_TRUE(claimed.ok());
  absl::StatusOr<Task> done = client_->CompleteTask(claimed->id, "agent");
  ASSERT_TRUE(done.ok()) << done.status();
  EXPECT_EQ(done->state, TaskState::kDone);
  ASSERT_TRUE(client_->CancelRequest(req->id).ok());
  EXPECT_EQ(client_->GetRequest(req->id)->state, RequestState::kCancelled);
  EXPECT_EQ(client_->ClaimTask("b1", "agent", 30s).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(client_->ClaimTask("b1", "agent", 0ms).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_F(CatalogClientTest, AClaimThatWaitsIsAnsweredByTheServerWhenATaskIsQueuedForItsNode) {
  // The long poll on the server (EventWaiters, no thread held): a task for another node does
  // not answer it, one for its node does, long before the wait; a poll with nothing queued
  // comes back empty after its wait; a poll is still open when the server stops.
  Topology();
  Node b2;
  b2.name = "b2";
  b2.site = "b";
  b2.address = "127.0.0.1:7002";
  ASSERT_TRUE(client_->RegisterNode(b2).ok());
  TaskSpec ts;
  ts.src_node = "a1";
  ts.path = "/f";
  std::atomic<bool> answered{false};
  absl::StatusOr<std::vector<Task>> got;
  std::chrono::steady_clock::duration took{};
  const auto start = std::chrono::steady_clock::now();
  std::thread claimer([&] {
    got = client_->ClaimTasks("b1", {"w#1", "w#2"}, 30s, 20s);
    took = std::chrono::steady_clock::now() - start;
    answered = true;
  });
  std::this_thread::sleep_for(300ms);
  ts.dst_node = "b2";
  EXPECT_TRUE(client_->CreateTasks({ts}).ok());
  std::this_thread::sleep_for(500ms);
  EXPECT_FALSE(answered.load()) << "the claim ended without a task for its node";
  ts.dst_node = "b1";
  EXPECT_TRUE(client_->CreateTasks({ts}).ok());
  claimer.join();
  ASSERT_TRUE(got.ok()) << got.status();
  ASSERT_EQ(got->size(), 1u);
  EXPECT_EQ(got->front().spec.dst_node, "b1");
  EXPECT_EQ(got->front().lease_owner, "w#1");
  EXPECT_EQ(got->front().checksum, "00ff");
  EXPECT_LT(took, 10s) << "answered at the end of its wait, not as the task came";
  const auto again = std::chrono::steady_clock::now();
  absl::StatusOr<std::vector<Task>> none = client_->ClaimTasks("b1", {"w#3"}, 30s, 300ms);
  ASSERT_TRUE(none.ok()) << none.status();
  EXPECT_TRUE(none->empty());
  EXPECT_GE(std::chrono::steady_clock::now() - again, 300ms);
  // Stopping the server ends a poll that waits (empty or refused, not after its wait).
  absl::StatusOr<std::vector<Task>> at_stop;
  std::thread last([&] { at_stop = client_->ClaimTasks("b1", {"w#4"}, 30s, 20s); });
  std::this_thread::sleep_for(300ms);
  const auto stopping = std::chrono::steady_clock::now();
  server_.reset();
  last.join();
  EXPECT_TRUE(!at_stop.ok() || at_stop->empty());
  EXPECT_LT(std::chrono::steady_clock::now() - stopping, 10s);
}

TEST_F(CatalogClientTest, BatchedClaimsAndCompletionsCarryChecksumsAndPerItemResults) {
  Topology();
  FileContent content;
  content.size = 9;
  content.checksum_algo = "xxh3-128";
  content.checksum = "0abc";
  ASSERT_TRUE(client_->CommitFile("/g", content, "a1", std::nullopt).ok());
  TaskSpec ts;
  ts.src_node = "a1";
  ts.dst_node = "b1";
  ts.path = "/f";
  TaskSpec tg = ts;
  tg.path = "/g";
  ASSERT_TRUE(client_->CreateTasks({ts, tg}).ok());
  TaskFilter open;
  open.open_only = true;
  EXPECT_EQ(client_->ListTasks(open)->size(), 2u);
  absl::StatusOr<std::vector<Task>> claimed = client_->ClaimTasks("b1", {"w#1", "w#2", "w#3"}, 30s, 0ms);
  ASSERT_TRUE(claimed.ok()) << claimed.status();
  ASSERT_EQ(claimed->size(), 2u);
  EXPECT_EQ((*claimed)[0].lease_owner, "w#1");
  EXPECT_EQ((*claimed)[0].checksum, "00ff");  // /f, from Topology()
  EXPECT_EQ((*claimed)[1].lease_owner, "w#2");
  EXPECT_EQ((*claimed)[1].checksum, "0abc");
  EXPECT_EQ((*claimed)[1].checksum_algo, "xxh3-128");
  EXPECT_EQ(client_->ClaimTasks("b1", {"x", "x"}, 30s, 0ms).status().code(),
            absl::StatusCode::kInvalidArgument);
  absl::StatusOr<std::vector<absl::StatusOr<Task>>> done =
      client_->CompleteTasks({{(*claimed)[0].id, "w#1", 4242}, {(*claimed)[1].id, "nobody"}});
  ASSERT_TRUE(done.ok()) << done.status();
  ASSERT_EQ(done->size(), 2u);
  ASSERT_TRUE((*done)[0].ok()) << (*done)[0].status();
  EXPECT_EQ((*done)[0]->state, TaskState::kDone);
  EXPECT_EQ((*done)[1].status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE((*done)[1].status().message().find("nobody"), std::string::npos);
  EXPECT_EQ(client_->ListTasks(open)->size(), 1u);
  // The mtime stamp travelled with the completion.
  absl::StatusOr<Location> loc = client_->Locate("/f");
  ASSERT_TRUE(loc.ok());
  bool seen = false;
  for (const Replica& r : loc->replicas) {
    if (r.node != "b1") continue;
    seen = true;
    EXPECT_EQ(r.mtime_ns, 4242);
  }
  EXPECT_TRUE(seen);
}

TEST_F(CatalogClientTest, ReplicaTransitionsTravelWithTheirResultsAndNotes) {
  Topology();
  absl::StatusOr<Attributes> f = client_->Stat("/f");
  ASSERT_TRUE(f.ok());
  ReplicaTransition bad;
  bad.inode = f->inode;
  bad.node = "a1";
  bad.generation = f->generation;
  bad.from = ReplicaState::kComplete;
  bad.to = ReplicaState::kCorrupt;
  bad.note = "checksum a != b";
  ReplicaTransition wrong = bad;
  wrong.node = "b1";  // no record there
  ReplicaTransition refused = bad;
  refused.node = "nope/x";  // not a valid name
  absl::StatusOr<std::vector<absl::Status>> r = client_->TransitionReplicas({bad, wrong, refused});
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->size(), 3u);
  EXPECT_TRUE((*r)[0].ok()) << (*r)[0];
  EXPECT_TRUE(absl::IsNotFound((*r)[1])) << (*r)[1];
  EXPECT_TRUE(absl::IsInvalidArgument((*r)[2])) << (*r)[2];
  absl::StatusOr<Location> loc = client_->Locate("/f");
  ASSERT_TRUE(loc.ok());
  ASSERT_EQ(loc->replicas.size(), 1u);
  EXPECT_EQ(loc->replicas[0].state, ReplicaState::kCorrupt);
  EXPECT_EQ(loc->replicas[0].note, "checksum a != b");
  // A lost one reads back as lost (the proto enum carries the new state).
  ReplicaTransition drop = bad;
  drop.from = ReplicaState::kCorrupt;
  drop.to = ReplicaState::kDeleting;
  r = client_->TransitionReplicas({drop});
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE((*r)[0].ok()) << (*r)[0];
  EXPECT_EQ(client_->Locate("/f")->replicas[0].state, ReplicaState::kDeleting);
}

TEST_F(CatalogClientTest, AnUnverifiedReplicaTravelsAndListNodesSaysWhoIsLiveSuspectOrDead) {
  Topology();
  absl::StatusOr<Attributes> f = client_->Stat("/f");
  ASSERT_TRUE(f.ok());
  ReplicaTransition dead;
  dead.inode = f->inode;
  dead.node = "a1";
  dead.generation = f->generation;
  dead.from = ReplicaState::kComplete;
  dead.to = ReplicaState::kUnverified;
  dead.note = "node a1 silent";
  absl::StatusOr<std::vector<absl::Status>> r = client_->TransitionReplicas({dead});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE((*r)[0].ok()) << (*r)[0];
  absl::StatusOr<Location> loc = client_->Locate("/f");
  ASSERT_TRUE(loc.ok()) << loc.status();
  EXPECT_EQ(loc->replicas[0].state, ReplicaState::kUnverified);
  ReplicaTransition back = dead;
  back.from = ReplicaState::kUnverified;
  back.to = ReplicaState::kComplete;
  back.verified = true;
  back.note = std::string(kRecheckedNote);
  r = client_->TransitionReplicas({back});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE((*r)[0].ok()) << (*r)[0];
  EXPECT_EQ(client_->Locate("/f")->replicas[0].note, kRecheckedNote);
  // b1 last heard of five minutes ago, c1 an hour ago (the server: 30 s and 600 s).
  Node n;
  n.site = "b";
  n.address = "127.0.0.1:7003";
  for (const auto& [name, ago] : std::vector<std::pair<std::string, std::chrono::seconds>>{
           {"b1", 300s}, {"c1", 3600s}}) {
    n.name = name;
    clock_offset_ns_ = -std::chrono::nanoseconds(ago).count();
    ASSERT_TRUE(client_->RegisterNode(n).ok());
  }
  clock_offset_ns_ = 0;
  absl::StatusOr<std::vector<Node>> nodes = client_->ListNodes("");
  ASSERT_TRUE(nodes.ok()) << nodes.status();
  std::map<std::string, std::string> liveness;
  for (const Node& x : *nodes) liveness[x.name] = x.liveness;
  EXPECT_EQ(liveness["a1"], "live");
  EXPECT_EQ(liveness["b1"], "suspect");
  EXPECT_EQ(liveness["c1"], "dead");
}

TEST_F(CatalogClientTest, ThePolicyDocumentIsVersionedAndChangedOnlyFromTheVersionSeen) {
  absl::StatusOr<PolicyDocument> none = client_->GetPolicies();
  ASSERT_TRUE(none.ok()) << none.status();
  EXPECT_EQ(none->version, 0u);
  EXPECT_EQ(none->text, "");
  absl::StatusOr<PolicyDocument> v1 = client_->PutPolicies("rules: []\n", "a.yaml", 0);
  ASSERT_TRUE(v1.ok()) << v1.status();
  EXPECT_EQ(v1->version, 1u);
  EXPECT_EQ(v1->source, "a.yaml");
  EXPECT_GT(v1->updated_ns, 0);
  // A writer that read version 0 lost the race: nothing changes.
  absl::StatusOr<PolicyDocument> late = client_->PutPolicies("rules:\n", "b.yaml", 0);
  EXPECT_EQ(late.status().code(), absl::StatusCode::kAborted) << late.status();
  absl::StatusOr<PolicyDocument> any = client_->PutPolicies("rules:\n", "c.yaml", std::nullopt);
  ASSERT_TRUE(any.ok());
  EXPECT_EQ(any->version, 2u);
  EXPECT_EQ(client_->GetPolicies()->text, "rules:\n");
  EXPECT_EQ(client_->PutPolicies(std::string(kMaxPolicyBytes + 1, 'x'), "big", std::nullopt)
                .status()
                .code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(client_->PutPolicies("\xff\xfe", "bad", std::nullopt).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(client_->GetPolicies()->version, 2u);
}

TEST_F(CatalogClientTest, BeginWriteAndCommitOfTheReservedGeneration) {
  Topology();
  FileContent c;
  c.mode = 0600;
  c.owner = "bob";
  absl::StatusOr<WriteReservation> fresh = client_->BeginWrite("/new", c);
  ASSERT_TRUE(fresh.ok()) << fresh.status();
  EXPECT_EQ(fresh->generation, 1u);
  EXPECT_EQ(fresh->attributes.generation, 0u);
  EXPECT_EQ(fresh->attributes.mode, 0600u);
  EXPECT_EQ(fresh->attributes.owner, "bob");
  absl::StatusOr<WriteReservation> w = client_->BeginWrite("/f", {});
  ASSERT_TRUE(w.ok()) << w.status();
  EXPECT_EQ(w->generation, 2u);
  EXPECT_EQ(w->attributes.checksum, "00ff");
  EXPECT_EQ(client_->BeginWrite("/", {}).status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(client_->BeginWrite("/no/such", {}).status().code(), absl::StatusCode::kNotFound);
  FileContent v2;
  v2.size = 5;
  v2.checksum = "v2";
  v2.generation = w->generation;
  absl::StatusOr<Attributes> committed = client_->CommitFile("/f", v2, "b1", std::nullopt);
  ASSERT_TRUE(committed.ok()) << committed.status();
  EXPECT_EQ(committed->generation, 2u);
  EXPECT_EQ(client_->CommitFile("/f", v2, "b1", std::nullopt).status().code(),
            absl::StatusCode::kAborted);
}

// Found by tests/fuzz/convert_fuzz.cc: ToProto(FileContent) did not send `inode`, so a
// remote CommitFile could not tell that the file it began writing was replaced meanwhile.
TEST_F(CatalogClientTest, AWriteWhoseFileWasReplacedMeanwhileCannotCommitOntoTheNewFile) {
  Topology();
  absl::StatusOr<WriteReservation> old_write = client_->BeginWrite("/f", {});
  ASSERT_TRUE(old_write.ok()) << old_write.status();
  ASSERT_TRUE(client_->Remove("/f", false).ok());
  // Re-created and written often enough that the old reserved number exists for the new
  // inode too.
  for (int i = 0; i < 3; ++i) {
    absl::StatusOr<WriteReservation> w = client_->BeginWrite("/f", {});
    ASSERT_TRUE(w.ok()) << w.status();
    ASSERT_NE(w->attributes.inode, old_write->attributes.inode);
  }
  FileContent c;
  c.size = 2;
  c.checksum = "old";
  c.generation = old_write->generation;
  c.inode = old_write->attributes.inode;
  absl::StatusOr<Attributes> late = client_->CommitFile("/f", c, "a1", std::nullopt);
  EXPECT_EQ(late.status().code(), absl::StatusCode::kAborted) << late.status();
  absl::StatusOr<Attributes> now = client_->Stat("/f");
  ASSERT_TRUE(now.ok()) << now.status();
  EXPECT_EQ(now->checksum, "");
}

TEST_F(CatalogClientTest, ExpireLeasesAndAbandonTask) {
  Topology();
  TaskSpec ts;
  ts.path = "/f";
  ts.src_node = "a1";
  ts.dst_node = "b1";
  absl::StatusOr<std::vector<Task>> tasks = client_->CreateTasks({ts, ts});
  ASSERT_TRUE(tasks.ok()) << tasks.status();
  ASSERT_TRUE(client_->ClaimTask("b1", "agent", 30s).ok());
  EXPECT_EQ(*client_->ExpireLeases(), 0u);
  clock_offset_ns_ += 31'000'000'000;
  absl::StatusOr<std::size_t> expired = client_->ExpireLeases();
  ASSERT_TRUE(expired.ok()) << expired.status();
  EXPECT_EQ(*expired, 1u);
  EXPECT_EQ(client_->GetTask((*tasks)[0].id)->state, TaskState::kQueued);
  absl::StatusOr<Task> abandoned =
      client_->AbandonTask((*tasks)[1].id, "destination node b1 is down");
  ASSERT_TRUE(abandoned.ok()) << abandoned.status();
  EXPECT_EQ(abandoned->state, TaskState::kCancelled);
  EXPECT_EQ(abandoned->last_error, "destination node b1 is down");
  EXPECT_EQ(client_->AbandonTask(12345, "x").status().code(), absl::StatusCode::kNotFound);
}

TEST_F(CatalogClientTest, ReadEventsAndWatchFollowTheLog) {
  Topology();
  absl::StatusOr<std::uint64_t> last = client_->LastEventSeq();
  ASSERT_TRUE(last.ok());
  EXPECT_GT(*last, 0u);
  absl::StatusOr<std::vector<Event>> events = client_->ReadEvents(0, 100, 0ms);
  ASSERT_TRUE(events.ok());
  EXPECT_EQ(events->back().seq, *last);
  // Watch from "now": the next request shows up on the stream.
  std::vector<Event> seen;
  WatchHandle handle;
  std::thread watcher([&] {
    absl::Status s = client_->Watch(*last, [&](const Event& e) {
      seen.push_back(e);
      return e.kind != EventKind::kRequest;  // stop at the first request event
    }, &handle);
    EXPECT_TRUE(s.ok()) << s;
  });
  RequestSpec spec;
  spec.paths = {"/f"};
  ASSERT_TRUE(client_->CreateRequest(spec).ok());
  watcher.join();
  ASSERT_FALSE(seen.empty());
  EXPECT_EQ(seen.back().kind, EventKind::kRequest);
  EXPECT_GT(seen.front().seq, *last);
  // Cancelling from another thread ends a Watch that has nothing to read.
  WatchHandle idle;
  std::thread canceller([&] {
    std::this_thread::sleep_for(100ms);  // not synchronisation: Watch handles either order
    idle.Cancel();
  });
  absl::Status s = client_->Watch(*client_->LastEventSeq(), [](const Event&) { return true; }, &idle);
  canceller.join();
  EXPECT_EQ(s.code(), absl::StatusCode::kCancelled);
}

TEST_F(CatalogClientTest, NonUtf8PathsAndLongErrorsStayReadable) {
  Topology();
  // A Latin-1 name cannot travel in a protobuf string: a clear INVALID_ARGUMENT, not the
  // opaque error of a request the server cannot parse.
  const std::string latin1 = "/caf\xe9";
  absl::StatusOr<Attributes> m = client_->Mkdir(latin1, MkdirOptions());
  EXPECT_EQ(m.status().code(), absl::StatusCode::kInvalidArgument) << m.status();
  EXPECT_NE(std::string(m.status().message()).find("UTF-8"), std::string::npos) << m.status();
  EXPECT_EQ(local_->Mkdir(latin1, MkdirOptions()).status().code(),
            absl::StatusCode::kInvalidArgument);
  absl::StatusOr<std::vector<absl::StatusOr<Attributes>>> many =
      client_->StatMany({"/f", latin1, "/nope"});
  ASSERT_TRUE(many.ok()) << many.status();
  ASSERT_EQ(many->size(), 3u);
  EXPECT_TRUE((*many)[0].ok());
  EXPECT_EQ((*many)[1].status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ((*many)[2].status().code(), absl::StatusCode::kNotFound);
  // An error text cut at its byte limit inside a multi-byte character used to leave
  // invalid UTF-8 in the task, and then every read of that task failed.
  TaskSpec ts;
  ts.path = "/f";
  ts.src_node = "a1";
  ts.dst_node = "b1";
  ASSERT_TRUE(client_->CreateTasks({ts}).ok());
  absl::StatusOr<Task> claimed = client_->ClaimTask("b1", "agent", 30s);
  ASSERT_TRUE(claimed.ok()) << claimed.status();
  std::string error = std::string(kMaxLabelBytes - 1, 'x') + "\xc3\xa9";  // ends in é
  absl::StatusOr<Task> failed = client_->FailTask(claimed->id, "agent", error, true, 0ms);
  ASSERT_TRUE(failed.ok()) << failed.status();
  EXPECT_EQ(failed->last_error, std::string(kMaxLabelBytes - 1, 'x'));
  absl::StatusOr<Task> read = client_->GetTask(claimed->id);
  ASSERT_TRUE(read.ok()) << read.status();
  absl::StatusOr<std::vector<Event>> events = client_->ReadEvents(0, 1000, 0ms);
  EXPECT_TRUE(events.ok()) << events.status();
}

TEST_F(CatalogClientTest, LongPollsDoNotStallMutations) {
  // As many long polls as the server has workers (4), as site agents make: mutations
  // must still be served while they wait.
  absl::StatusOr<std::uint64_t> last = client_->LastEventSeq();
  ASSERT_TRUE(last.ok());
  std::vector<std::thread> pollers;
  std::atomic<int> woken{0};
  for (int i = 0; i < 4; ++i) {
    pollers.emplace_back([&] {
      absl::StatusOr<std::vector<Event>> e = client_->ReadEvents(*last, 10, 20s);
      if (e.ok() && !e->empty()) ++woken;
    });
  }
  // Give the polls time to reach the server; either order is correct after the fix, and
  // before it a queued mutation simply waits out its deadline.
  std::this_thread::sleep_for(500ms);
  ClientOptions co;
  co.address = server_->address();
  co.timeout = 3s;
  absl::StatusOr<std::unique_ptr<CatalogClient>> quick = CatalogClient::Create(co);
  ASSERT_TRUE(quick.ok());
  absl::Status put = (*quick)->PutSite({"a", {}});
  Node n;
  n.name = "a1";
  n.site = "a";
  n.address = "127.0.0.1:7001";
  absl::Status reg = (*quick)->RegisterNode(n);  // an event: wakes the polls
  for (std::thread& t : pollers) t.join();
  EXPECT_TRUE(put.ok()) << put;
  EXPECT_TRUE(reg.ok()) << reg;
  EXPECT_EQ(woken.load(), 4);
}

// Issue 37: long polls that wait for an event that will not come (after_seq far ahead, as a
// hostile or broken caller may send) once held a thread each for their whole wait; with as
// many as the server has workers, everyone else's polls queued behind them. Now they hold
// none: another caller's poll wakes on its event at once, and each caller may hold only
// max_long_polls_per_identity of them.
TEST_F(CatalogClientTest, LongPollsHoldNoThreadAndEachCallerHoldsOnlySoMany) {
  constexpr int kHeld = 12;  // three times the fixture server's 4 workers
  std::vector<std::thread> held;
  std::atomic<int> held_answered{0};
  for (int i = 0; i < kHeld; ++i) {
    held.emplace_back([&] {
      absl::StatusOr<std::vector<Event>> e = client_->ReadEvents(std::uint64_t{1} << 60, 10, 25s);
      if (e.ok()) ++held_answered;
    });
  }
  for (int i = 0; i < 1000 && server_->long_polls_waiting() < kHeld; ++i) {
    std::this_thread::sleep_for(10ms);  // until the server has registered them all
  }
  ASSERT_EQ(server_->long_polls_waiting(), static_cast<std::size_t>(kHeld));

  ASSERT_TRUE(client_->PutSite({"a", {}}).ok());
  absl::StatusOr<std::uint64_t> last = client_->LastEventSeq();
  ASSERT_TRUE(last.ok()) << last.status();
  absl::StatusOr<std::vector<Event>> woken;
  std::thread waiter([&] { woken = client_->ReadEvents(*last, 10, 20s); });
  for (int i = 0; i < 1000 && server_->long_polls_waiting() < kHeld + 1; ++i) {
    std::this_thread::sleep_for(10ms);
  }
  Node n;
  n.name = "a1";
  n.site = "a";
  n.address = "127.0.0.1:7001";
  ASSERT_TRUE(client_->RegisterNode(n).ok());  // an event
  waiter.join();
  ASSERT_TRUE(woken.ok()) << woken.status();
  EXPECT_FALSE(woken->empty());
  // The held polls still wait (no event after 2^60), holding nothing but their entries.
  EXPECT_EQ(server_->long_polls_waiting(), static_cast<std::size_t>(kHeld));
  // A server shutting down answers them at once.
  server_->Shutdown();
  for (std::thread& t : held) t.join();
  EXPECT_EQ(held_answered.load(), kHeld);
  EXPECT_EQ(server_->long_polls_waiting(), 0u);
}

TEST(CatalogServerLongPollTest, ACallerOverItsLongPollCapIsRefusedAndOthersAreNot) {
  gfrep::testing::TempDir dir("longpoll");
  CatalogOptions options;
  options.path = dir.Sub("db");
  absl::StatusOr<std::unique_ptr<Catalog>> local = OpenRocksCatalog(options);
  ASSERT_TRUE(local.ok()) << local.status();
  ServerOptions so;
  so.worker_threads = 2;
  so.max_long_polls_per_identity = 3;
  absl::StatusOr<std::unique_ptr<CatalogServer>> server = CatalogServer::Start(**local, so);
  ASSERT_TRUE(server.ok()) << server.status();
  ClientOptions co;
  co.address = (*server)->address();
  co.timeout = 10s;
  absl::StatusOr<std::unique_ptr<CatalogClient>> client = CatalogClient::Create(co);
  ASSERT_TRUE(client.ok()) << client.status();
  std::vector<std::thread> held;
  for (int i = 0; i < 3; ++i) {
    held.emplace_back([&] { (void)(*client)->ReadEvents(std::uint64_t{1} << 60, 1, 25s); });
  }
  for (int i = 0; i < 1000 && (*server)->long_polls_waiting() < 3; ++i) {
    std::this_thread::sleep_for(10ms);
  }
  ASSERT_EQ((*server)->long_polls_waiting(), 3u);
  absl::StatusOr<std::vector<Event>> fourth = (*client)->ReadEvents(std::uint64_t{1} << 60, 1, 25s);
  EXPECT_TRUE(absl::IsResourceExhausted(fourth.status())) << fourth.status();
  EXPECT_NE(std::string(fourth.status().message()).find("long polls"), std::string::npos);
  // A read that does not wait is not a long poll: always served.
  EXPECT_TRUE((*client)->ReadEvents(0, 1, 0ms).ok());
  (*server)->Shutdown();
  for (std::thread& t : held) t.join();
}

TEST_F(CatalogClientTest, UnreachableCatalogIsUnavailable) {
  ClientOptions co;
  co.address = "127.0.0.1:1";
  co.timeout = 2s;
  absl::StatusOr<std::unique_ptr<CatalogClient>> c = CatalogClient::Create(co);
  ASSERT_TRUE(c.ok());
  EXPECT_EQ((*c)->Stat("/").status().code(), absl::StatusCode::kUnavailable);
  co.address = "nocolon";
  EXPECT_EQ(CatalogClient::Create(co).status().code(), absl::StatusCode::kInvalidArgument);
}

// Several front ends (gfcatalogd --shared) are given as IP:PORT,IP:PORT: calls reach one that
// answers, also when the first in the list is down; a list gRPC could not resolve is refused
// up front with what is wrong.
TEST_F(CatalogClientTest, AListOfFrontEndsReachesOneThatAnswersAndABadListIsRefused) {
  ClientOptions co;
  co.timeout = 5s;
  co.address = "127.0.0.1:1," + server_->address();
  absl::StatusOr<std::unique_ptr<CatalogClient>> c = CatalogClient::Create(co);
  ASSERT_TRUE(c.ok()) << c.status();
  for (int i = 0; i < 5; ++i) {
    absl::StatusOr<Attributes> root = (*c)->Stat("/");
    ASSERT_TRUE(root.ok()) << "call " << i << ": " << root.status();
  }
  for (const char* bad : {"127.0.0.1:1,localhost:2", "127.0.0.1:1,", "127.0.0.1:1,127.0.0.1",
                          "127.0.0.1:1,127.0.0.1:99999", "127.0.0.1:1,[::1]:2"}) {
    co.address = bad;
    absl::Status s = CatalogClient::Create(co).status();
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << bad << ": " << s;
    EXPECT_NE(std::string(s.message()).find(std::string(bad).substr(0, 11)), std::string::npos)
        << bad << ": " << s;
  }
  co.address = "[::1]:1,[::1]:2";
  EXPECT_TRUE(CatalogClient::Create(co).ok()) << "IPv6 front ends";
}

TEST_F(CatalogClientTest, CorruptAndTruncatedRequestsAreRejected) {
  // Raw bytes on the wire, bypassing the generated stub.
  std::shared_ptr<grpc::Channel> channel =
      grpc::CreateChannel(server_->address(), grpc::InsecureChannelCredentials());
  grpc::GenericStub stub(channel);
  auto call = [&](std::string method, std::string bytes) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + 10s);
    grpc::Slice slice(bytes);
    grpc::ByteBuffer in(&slice, 1), out;
    grpc::Status status;
    std::mutex mu;
    std::condition_variable cv;
    bool done = false;
    stub.UnaryCall(&ctx, "/gfrep.catalog.v1.Catalog/" + method, grpc::StubOptions(), &in, &out,
                   [&](grpc::Status s) {
                     std::lock_guard<std::mutex> l(mu);
                     status = s;
                     done = true;
                     cv.notify_one();
                   });
    std::unique_lock<std::mutex> l(mu);
    cv.wait(l, [&] { return done; });
    return status;
  };
  // Field 1 (path) announces 100 bytes but only 3 follow: a truncated MkdirRequest.
  grpc::Status truncated = call("Mkdir", std::string("\x0a\x64/ab", 5));
  EXPECT_FALSE(truncated.ok());
  // Garbage that is not a protobuf at all.
  grpc::Status garbage = call("Mkdir", std::string("\xff\xff\xff\xff\xff\xff", 6));
  EXPECT_FALSE(garbage.ok());
  // A well-formed message with a NUL inside the name is refused by validation.
  grpc::Status nul = call("Mkdir", std::string("\x0a\x04/a\0b", 6));
  EXPECT_EQ(nul.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  // Nothing was created, and the server still serves.
  absl::StatusOr<std::vector<DirEntry>> root = client_->List("/", {});
  ASSERT_TRUE(root.ok());
  EXPECT_TRUE(root->empty());
  std::string long_path = "/" + std::string(5000, 'x');
  EXPECT_EQ(client_->Mkdir(long_path, {}).status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace gfrep::catalog
