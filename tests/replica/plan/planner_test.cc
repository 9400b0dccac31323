#include "replica/plan/planner.h"

#include <gtest/gtest.h>

#include <atomic>
#include <functional>
#include <set>
#include <thread>
#include <utility>

#include "tests/replica/faulty_roles.h"
#include "tests/support/scratch_catalog.h"
#include "tests/support/temp_dir.h"

namespace gfrep::replica::plan {
namespace {

using catalog::RequestState;
using catalog::Task;
using catalog::TaskState;

constexpr std::int64_t kSecond = 1'000'000'000;

class PlannerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto c = gfrep::testing::OpenScratchCatalog(dir_.Sub("db"), [this] { return now_.load(); });
    ASSERT_TRUE(c.ok()) << c.status();
    cat_ = std::move(*c);
    for (const char* s : {"A", "B", "C"}) {
      catalog::Site site;
      site.name = s;
      ASSERT_TRUE(cat_->PutSite(site).ok());
    }
    AddNode("a1", "A");
    AddNode("a2", "A");
    AddNode("b1", "B");
    AddNode("b2", "B");
    AddNode("c1", "C");
    catalog::MkdirOptions m;
    m.parents = true;
    ASSERT_TRUE(cat_->Mkdir("/d/sub", m).ok());
  }

  void AddNode(const std::string& name, const std::string& site) {
    catalog::Node n;
    n.name = name;
    n.site = site;
    n.address = "127.0.0.1:9";
    n.spool = "/nonexistent";
    n.free_bytes = 1ull << 40;
    n.capacity_bytes = 1ull << 40;
    ASSERT_TRUE(cat_->RegisterNode(n).ok());
  }

  void Heartbeat(const std::vector<std::string>& nodes) {
    for (const auto& n : nodes) {
      catalog::Heartbeat hb;
      hb.node = n;
      hb.free_bytes = 1ull << 40;
      ASSERT_TRUE(cat_->SendHeartbeat(hb).ok());
    }
  }

  void Commit(const std::string& path, std::uint64_t size, const std::string& node,
              const std::string& sum = "00aa") {
    catalog::FileContent c;
    c.size = size;
    c.checksum_algo = "xxh3-128";
    c.checksum = sum;
    ASSERT_TRUE(cat_->CommitFile(path, c, node, std::nullopt).ok());
  }

  std::unique_ptr<Planner> MakePlanner(int window = 8) {
    PlannerOptions o;
    o.catalog = cat_.get();
    o.clock = [this] { return now_.load(); };
    o.heartbeat_timeout = std::chrono::seconds(30);
    o.max_open_tasks_per_node = window;
    o.max_attempts = 3;
    auto p = Planner::Create(o);
    EXPECT_TRUE(p.ok()) << p.status();
    return std::move(*p);
  }

  std::uint64_t Request(catalog::RequestSpec spec) {
    auto r = cat_->CreateRequest(spec);
    EXPECT_TRUE(r.ok()) << r.status();
    return r->id;
  }

  std::vector<Task> Tasks(std::uint64_t request, bool open_only = true) {
    catalog::TaskFilter f;
    f.request_id = request;
    auto t = cat_->ListTasks(f);
    EXPECT_TRUE(t.ok());
    std::vector<Task> out;
    for (const Task& x : *t) {
      if (!open_only || x.state == TaskState::kQueued || x.state == TaskState::kLeased) {
        out.push_back(x);
      }
    }
    return out;
  }

  // Plays the agents: every claimable task completes.
  int CompleteAll() {
    int n = 0;
    for (const char* node : {"a1", "a2", "b1", "b2", "c1"}) {
      while (true) {
        auto t = cat_->ClaimTask(node, "test", std::chrono::seconds(10));
        if (!t.ok()) break;
        EXPECT_TRUE(cat_->CompleteTask(t->id, "test").ok());
        ++n;
      }
    }
    return n;
  }

  catalog::Request Get(std::uint64_t id) {
    auto r = cat_->GetRequest(id);
    EXPECT_TRUE(r.ok());
    return *r;
  }

  gfrep::testing::TempDir dir_{"planner"};
  std::atomic<std::int64_t> now_{1000 * kSecond};
  std::unique_ptr<catalog::Catalog> cat_;
};

TEST_F(PlannerTest, ReplicatesADirectoryRecursivelyToThreeCopiesOnThreeSites) {
  Commit("/d/f1", 100, "a1");
  Commit("/d/sub/f2", 200, "a1");
  auto planner = MakePlanner();
  catalog::RequestSpec spec;
  spec.paths = {"/d"};
  spec.copies = 3;
  spec.recursive = true;
  std::uint64_t id = Request(spec);
  ASSERT_TRUE(planner->Step().ok());
  std::vector<Task> tasks = Tasks(id);
  ASSERT_EQ(tasks.size(), 4u);  // two new copies per file
  for (const Task& t : tasks) {
    EXPECT_EQ(t.spec.src_node, "a1");
    EXPECT_NE(t.spec.dst_node.substr(0, 1), "a") << "third copy must spread over sites";
  }
  catalog::Request r = Get(id);
  EXPECT_EQ(r.state, RequestState::kRunning);
  EXPECT_EQ(r.files_total, 2u);
  EXPECT_EQ(r.bytes_total, 300u);

  EXPECT_EQ(CompleteAll(), 4);
  ASSERT_TRUE(planner->Step().ok());
  r = Get(id);
  EXPECT_EQ(r.state, RequestState::kDone) << r.error;
  EXPECT_EQ(r.files_done, 2u);
  EXPECT_EQ(r.bytes_done, 300u);
  auto loc = cat_->Locate("/d/sub/f2");
  ASSERT_TRUE(loc.ok());
  EXPECT_EQ(CurrentReplicas(*loc).size(), 3u);
}

TEST_F(PlannerTest, MissingPathsAndDirectoriesWithoutRecursionFailClearly) {
  Commit("/d/f1", 10, "a1");
  auto planner = MakePlanner();
  catalog::RequestSpec spec;
  spec.paths = {"/nope", "/d"};
  spec.copies = 2;
  std::uint64_t id = Request(spec);
  ASSERT_TRUE(planner->Step().ok());
  catalog::Request r = Get(id);
  EXPECT_EQ(r.state, RequestState::kFailed);
  EXPECT_EQ(r.files_failed, 2u);
  EXPECT_NE(r.error.find("/nope: no such file or directory"), std::string::npos) << r.error;
  EXPECT_NE(r.error.find("/d: is a directory (use -r)"), std::string::npos) << r.error;
  EXPECT_TRUE(Tasks(id, false).empty());
}

TEST_F(PlannerTest, AFileWithEnoughCopiesIsDoneWithoutTasks) {
  Commit("/d/f1", 10, "a1");
  auto planner = MakePlanner();
  catalog::RequestSpec spec;
  spec.paths = {"/d/f1"};
  spec.copies = 1;
  std::uint64_t id = Request(spec);
  ASSERT_TRUE(planner->Step().ok());
  EXPECT_EQ(Get(id).state, RequestState::kDone);
  EXPECT_TRUE(Tasks(id, false).empty());
}

TEST_F(PlannerTest, DestinationSitesConstrainWhereCopiesGoAndHowTheyAreCounted) {
  Commit("/d/f1", 10, "a1");
  auto planner = MakePlanner();
  catalog::RequestSpec spec;
  spec.paths = {"/d/f1"};
  spec.copies = 2;
  spec.dst_sites = {"B"};
  std::uint64_t id = Request(spec);
  ASSERT_TRUE(planner->Step().ok());
  std::vector<Task> tasks = Tasks(id);
  ASSERT_EQ(tasks.size(), 2u);  // the replica at A does not count towards B's two
  std::set<std::string> dsts{tasks[0].spec.dst_node, tasks[1].spec.dst_node};
  EXPECT_EQ(dsts, (std::set<std::string>{"b1", "b2"}));
}

TEST_F(PlannerTest, ReadOnlyAndDrainingNodesTakeNoCopyAndADrainingNodesCopyDoesNotCount) {
  // /d/f1 on b1 (draining) and a1; b2 read-only: B's copy can only go to... nowhere in B.
  Commit("/d/f1", 10, "b1");
  catalog::Replica at_a;
  at_a.inode = cat_->Stat("/d/f1")->inode;
  at_a.node = "a1";
  at_a.state = catalog::ReplicaState::kComplete;
  at_a.generation = 1;
  at_a.size = 10;
  ASSERT_TRUE(cat_->PutReplica(at_a).ok());
  ASSERT_TRUE(cat_->SetNodeMode("b1", catalog::NodeMode::kDraining).ok());
  ASSERT_TRUE(cat_->SetNodeMode("b2", catalog::NodeMode::kReadOnly).ok());
  auto planner = MakePlanner();
  catalog::RequestSpec in_b;
  in_b.paths = {"/d/f1"};
  in_b.copies = 1;
  in_b.dst_sites = {"B"};
  std::uint64_t id = Request(in_b);
  ASSERT_TRUE(planner->Step().ok());
  EXPECT_TRUE(Tasks(id, false).empty()) << "no node of B takes a new replica";
  EXPECT_EQ(Get(id).state, RequestState::kFailed) << "b1's copy is on its way out: not counted";
  EXPECT_NE(Get(id).error.find("not enough live destination nodes"), std::string::npos)
      << Get(id).error;
  // b2 back to normal: the copy goes there (b1 is still a source).
  ASSERT_TRUE(cat_->SetNodeMode("b2", catalog::NodeMode::kNormal).ok());
  id = Request(in_b);
  ASSERT_TRUE(planner->Step().ok());
  std::vector<Task> tasks = Tasks(id);
  ASSERT_EQ(tasks.size(), 1u);
  EXPECT_EQ(tasks[0].spec.dst_node, "b2");
  EXPECT_EQ(CompleteAll(), 1);
  ASSERT_TRUE(planner->Step().ok());
  EXPECT_EQ(Get(id).state, RequestState::kDone);
}

TEST_F(PlannerTest, MoreCopiesThanEligibleNodesFailsTheFile) {
  Commit("/d/f1", 10, "a1");
  auto planner = MakePlanner();
  catalog::RequestSpec spec;
  spec.paths = {"/d/f1"};
  spec.copies = 3;
  spec.dst_sites = {"C"};
  std::uint64_t id = Request(spec);
  ASSERT_TRUE(planner->Step().ok());
  catalog::Request r = Get(id);
  EXPECT_EQ(r.state, RequestState::kFailed);
  EXPECT_NE(r.error.find("not enough live destination nodes"), std::string::npos) << r.error;
}

TEST_F(PlannerTest, SpreadsFilesOverNodePairsWithinThePerNodeWindow) {
  for (int i = 0; i < 8; ++i) {
    Commit("/d/f" + std::to_string(i), 10, i % 2 ? "a1" : "a2");
  }
  auto planner = MakePlanner(/*window=*/2);
  catalog::RequestSpec spec;
  spec.paths = {"/d"};
  spec.recursive = true;
  spec.dst_sites = {"B"};
  spec.copies = 1;
  std::uint64_t id = Request(spec);
  ASSERT_TRUE(planner->Step().ok());
  std::vector<Task> tasks = Tasks(id);
  ASSERT_EQ(tasks.size(), 4u);  // 2 open per destination node, b1 and b2
  std::map<std::string, int> per_src, per_dst;
  for (const Task& t : tasks) {
    per_src[t.spec.src_node] += 1;
    per_dst[t.spec.dst_node] += 1;
  }
  // Both sources send and both destinations receive at once: several host pairs run.
  EXPECT_EQ(per_dst["b1"], 2);
  EXPECT_EQ(per_dst["b2"], 2);
  EXPECT_EQ(per_src["a1"], 2);
  EXPECT_EQ(per_src["a2"], 2);
  // Each destination node has half of the route's open tasks, and its tasks say so: its agent
  // starts a burst at half the route's bytes in flight (route_budget.h).
  for (const Task& t : tasks) EXPECT_EQ(t.spec.dst_share_ppm, 500'000u) << t.spec.dst_node;

  // As tasks finish, the window lets the rest through, until all are done.
  for (int round = 0; round < 5 && Get(id).state != RequestState::kDone; ++round) {
    CompleteAll();
    ASSERT_TRUE(planner->Step().ok());
  }
  EXPECT_EQ(Get(id).state, RequestState::kDone);
  EXPECT_EQ(Get(id).files_done, 8u);
}

TEST_F(PlannerTest, RespectsPerRouteConcurrencyLimits) {
  for (int i = 0; i < 4; ++i) Commit("/d/f" + std::to_string(i), 10, "a1");
  catalog::Route route;
  route.src_site = "A";
  route.dst_site = "B";
  route.max_concurrent_tasks = 1;
  ASSERT_TRUE(cat_->PutRoute(route).ok());
  auto planner = MakePlanner();
  catalog::RequestSpec spec;
  spec.paths = {"/d"};
  spec.recursive = true;
  spec.copies = 1;
  spec.dst_sites = {"B"};
  std::uint64_t id = Request(spec);
  ASSERT_TRUE(planner->Step().ok());
  EXPECT_EQ(Tasks(id).size(), 1u);
  ASSERT_TRUE(planner->Step().ok());
  EXPECT_EQ(Tasks(id).size(), 1u);
}

// Sums of the shares the open tasks of route A -> B carry; rates of the tasks not in `seen`
// (made by the latest step) per source node.
struct RouteSums {
  std::uint64_t streams = 0;
  std::map<std::string, std::set<std::uint64_t>> new_rates_by_src;
  std::size_t tasks = 0;
};
RouteSums SumsOf(const std::vector<Task>& tasks, std::set<std::uint64_t>& seen) {
  RouteSums s;
  for (const Task& t : tasks) {
    s.streams += t.spec.streams;
    if (seen.insert(t.id).second) s.new_rates_by_src[t.spec.src_node].insert(t.spec.route_rate_bps);
    ++s.tasks;
  }
  return s;
}

TEST_F(PlannerTest, TheRouteStreamBudgetHoldsAcrossNodesAndRequests) {
  // Two source nodes, two destination nodes, two requests: 24 files of 8 MiB (each would
  // take 4 streams) and 16 of 64 KiB (one stream each). The route's budget is 20 streams.
  for (int i = 0; i < 24; ++i) Commit("/d/big" + std::to_string(i), 8 << 20, i % 2 ? "a1" : "a2");
  for (int i = 0; i < 16; ++i) Commit("/d/sub/small" + std::to_string(i), 64 << 10, i % 2 ? "a1" : "a2");
  catalog::Route route;
  route.src_site = "A";
  route.dst_site = "B";
  route.streams = 4;
  route.total_streams = 20;
  route.route_rate_bps = 900'000'000;
  ASSERT_TRUE(cat_->PutRoute(route).ok());
  auto planner = MakePlanner(/*window=*/64);
  catalog::RequestSpec big;
  for (int i = 0; i < 24; ++i) big.paths.push_back("/d/big" + std::to_string(i));
  big.dst_sites = {"B"};
  catalog::RequestSpec small = big;
  small.paths = {"/d/sub"};
  small.recursive = true;
  const std::uint64_t id_big = Request(big);
  const std::uint64_t id_small = Request(small);

  std::size_t max_tasks = 0;
  std::set<std::uint64_t> seen;
  for (int round = 0; round < 40; ++round) {
    ASSERT_TRUE(planner->Step().ok());
    std::vector<Task> open = Tasks(id_big);
    std::vector<Task> small_open = Tasks(id_small);
    open.insert(open.end(), small_open.begin(), small_open.end());
    const RouteSums sums = SumsOf(open, seen);
    max_tasks = std::max(max_tasks, sums.tasks);
    EXPECT_LE(sums.streams, 20u) << "round " << round;
    for (const Task& t : open) {
      EXPECT_GE(t.spec.streams, 1u);
      EXPECT_LE(t.spec.streams, t.size > (1u << 20) ? 4u : 1u) << t.spec.path;
      EXPECT_GT(t.spec.route_rate_bps, 0u);
      EXPECT_LE(t.spec.route_rate_bps, route.route_rate_bps);
    }
    // One step gives all its tasks from one source node the same rate, and the rates it
    // gives the source nodes add up to at most the route's rate.
    std::uint64_t rate = 0;
    for (const auto& [src, rates] : sums.new_rates_by_src) {
      EXPECT_EQ(rates.size(), 1u) << src << " round " << round;
      rate += *rates.begin();
    }
    EXPECT_LE(rate, route.route_rate_bps) << "round " << round;
    if (Get(id_big).state == RequestState::kDone && Get(id_small).state == RequestState::kDone) break;
    // Finish a few tasks per round, as agents would, so that new ones take their place.
    int finished = 0;
    for (const char* node : {"b1", "b2"}) {
      for (int k = 0; k < 3; ++k) {
        auto t = cat_->ClaimTask(node, "test", std::chrono::seconds(10));
        if (!t.ok()) break;
        ASSERT_TRUE(cat_->CompleteTask(t->id, "test").ok());
        ++finished;
      }
    }
  }
  EXPECT_EQ(Get(id_big).state, RequestState::kDone);
  EXPECT_EQ(Get(id_small).state, RequestState::kDone);
  EXPECT_GE(max_tasks, 5u);  // the budget let several copies run at once
}

TEST_F(PlannerTest, ARouteWithoutABudgetLeavesStreamsToTheRouteAndPacesOneSourceAtTheFullRate) {
  for (int i = 0; i < 3; ++i) Commit("/d/f" + std::to_string(i), 8 << 20, "a1");
  catalog::Route route;
  route.src_site = "A";
  route.dst_site = "B";
  route.route_rate_bps = 500'000'000;
  ASSERT_TRUE(cat_->PutRoute(route).ok());
  auto planner = MakePlanner();
  catalog::RequestSpec spec;
  spec.paths = {"/d"};
  spec.recursive = true;
  spec.dst_sites = {"B"};
  std::uint64_t id = Request(spec);
  ASSERT_TRUE(planner->Step().ok());
  std::vector<Task> open = Tasks(id);
  ASSERT_EQ(open.size(), 3u);
  for (const Task& t : open) {
    EXPECT_EQ(t.spec.streams, 0u);  // the route's own per-copy streams
    EXPECT_EQ(t.spec.route_rate_bps, route.route_rate_bps);  // one source node: all of it
  }
}

TEST_F(PlannerTest, AStepLooksUpOnlyWantedFilesItCanPlanAndNeverWalksAgain) {
  // 600 files, 8 open tasks per destination node (b1, b2): a step used to look up all 600.
  for (int i = 0; i < 600; ++i) Commit("/d/f" + std::to_string(i), 10, "a1");
  testing::FaultyView counting(cat_.get());
  PlannerOptions o;
  o.catalog = cat_.get();
  o.catalog.view = &counting;
  o.clock = [this] { return now_.load(); };
  o.max_open_tasks_per_node = 8;
  auto planner = Planner::Create(o);
  ASSERT_TRUE(planner.ok());
  catalog::RequestSpec spec;
  spec.paths = {"/d"};
  spec.recursive = true;
  spec.dst_sites = {"B"};
  const std::uint64_t id = Request(spec);
  ASSERT_TRUE((*planner)->Step().ok());  // the first step looks at every file once
  EXPECT_EQ(Tasks(id).size(), 16u);
  EXPECT_EQ(Get(id).files_total, 600u);
  EXPECT_EQ(Get(id).bytes_total, 6000u);
  int steps = 0;
  std::uint64_t most = 0;
  std::uint64_t most_tasks = 0;
  const std::uint64_t walks = counting.walks;
  EXPECT_GT(walks, 0u);  // the expansion
  while (Get(id).state != RequestState::kDone && steps < 200) {
    CompleteAll();
    now_ += kSecond / 10;
    const std::uint64_t before = counting.locates;
    const std::uint64_t tasks_before = counting.tasks_read;
    ASSERT_TRUE((*planner)->Step().ok());
    ++steps;
    most = std::max(most, counting.locates - before);
    most_tasks = std::max(most_tasks, counting.tasks_read - tasks_before);
  }
  EXPECT_EQ(Get(id).state, RequestState::kDone);
  EXPECT_EQ(Get(id).files_done, 600u);
  EXPECT_EQ(Get(id).bytes_done, 6000u);
  // A step looks at the wanted files it plans and the run of 64 that found the windows
  // full: far fewer than 600 (the catalog settled the finished ones).
  EXPECT_LE(most, 16u + 64u);
  // Nor does it read the request's tasks: only the open ones (16).
  EXPECT_LE(most_tasks, 16u);
  EXPECT_EQ(counting.walks, walks) << "the request's paths were walked again";
  EXPECT_GE(steps, 37);  // 600 / 16 per step
}

TEST_F(PlannerTest, ANodeWithManyWorkersGetsFiveOpenTasksPerWorker) {
  // b1's agent reports 16 workers: the window of 8 open tasks would starve it, so it gets 80
  // (running, claimed ahead, waiting for the commit);
  // b2 reports none and keeps the planner's 8.
  catalog::Node b1 = *cat_->GetNode("b1");
  b1.workers = 16;
  ASSERT_TRUE(cat_->RegisterNode(b1).ok());
  EXPECT_EQ(cat_->GetNode("b1")->workers, 16u);  // stored
  for (int i = 0; i < 200; ++i) Commit("/d/f" + std::to_string(i), 10, "a1");
  auto planner = MakePlanner(8);
  catalog::RequestSpec spec;
  spec.paths = {"/d"};
  spec.recursive = true;
  spec.dst_sites = {"B"};
  const std::uint64_t id = Request(spec);
  ASSERT_TRUE(planner->Step().ok());
  std::map<std::string, int> open;
  for (const Task& t : Tasks(id)) open[t.spec.dst_node] += 1;
  EXPECT_EQ(open["b1"], 80);
  EXPECT_EQ(open["b2"], 8);
}

// The catalog ends a request in the write that settles its last file: once its tasks are
// made, no planner pass is needed (issue 39).
TEST_F(PlannerTest, ARequestEndsInTheWriteOfItsLastTaskWithNoPlannerPass) {
  for (int i = 0; i < 3; ++i) Commit("/d/f" + std::to_string(i), 10, "a1");
  catalog::RequestSpec spec;
  spec.paths = {"/d", "/nowhere"};
  spec.recursive = true;
  spec.dst_sites = {"B"};
  const std::uint64_t id = Request(spec);
  {
    auto planner = MakePlanner();
    ASSERT_TRUE(planner->Step().ok());
  }  // the planner is gone after its first step
  catalog::Request r = Get(id);
  EXPECT_TRUE(r.expanded);
  EXPECT_EQ(r.state, RequestState::kRunning);
  EXPECT_EQ(r.files_total, 4u);
  EXPECT_EQ(r.files_failed, 1u);  // /nowhere, at expansion
  EXPECT_EQ(r.bytes_total, 30u);
  absl::StatusOr<std::vector<catalog::RequestFile>> files = cat_->ListRequestFiles(id, {});
  ASSERT_TRUE(files.ok()) << files.status();
  ASSERT_EQ(files->size(), 4u);
  int copying = 0;
  for (const catalog::RequestFile& f : *files) {
    if (f.path == "/nowhere") {
      EXPECT_EQ(f.state, catalog::RequestFileState::kFailed);
      EXPECT_EQ(f.reason, "no such file or directory");
      continue;
    }
    EXPECT_EQ(f.state, catalog::RequestFileState::kCopying) << f.path;
    EXPECT_EQ(f.open_tasks, 1u) << f.path;
    ++copying;
  }
  EXPECT_EQ(copying, 3);
  const std::vector<Task> open = Tasks(id);
  ASSERT_EQ(open.size(), 3u);
  for (std::size_t i = 0; i < open.size(); ++i) {
    auto t = cat_->ClaimTask(open[i].spec.dst_node, "agent", std::chrono::seconds(10));
    ASSERT_TRUE(t.ok()) << t.status();
    ASSERT_TRUE(cat_->CompleteTask(t->id, "agent").ok());
    r = Get(id);
    EXPECT_EQ(r.files_done, i + 1);
    EXPECT_EQ(r.bytes_done, 10 * (i + 1));
    EXPECT_EQ(r.state, i + 1 < open.size() ? RequestState::kRunning : RequestState::kFailed);
  }
  EXPECT_NE(r.error.find("1 of 4 files failed: /nowhere: no such file or directory"),
            std::string::npos)
      << r.error;
  catalog::RequestFileFilter done;
  done.any_state = false;
  done.state = catalog::RequestFileState::kDone;
  EXPECT_EQ(cat_->ListRequestFiles(id, done)->size(), 3u);
}

TEST_F(PlannerTest, ParallelismLimitsOpenTasksOfOneRequest) {
  for (int i = 0; i < 6; ++i) Commit("/d/f" + std::to_string(i), 10, "a1");
  auto planner = MakePlanner();
  catalog::RequestSpec spec;
  spec.paths = {"/d"};
  spec.recursive = true;
  spec.copies = 2;
  spec.owner = "alice";
  spec.parallel = 3;
  std::uint64_t id = Request(spec);
  ASSERT_TRUE(planner->Step().ok());
  EXPECT_EQ(Tasks(id).size(), 3u);
}

TEST_F(PlannerTest, HigherPriorityRequestsGetTheWindowFirst) {
  for (int i = 0; i < 4; ++i) Commit("/d/f" + std::to_string(i), 10, "a1");
  Commit("/d/sub/urgent", 10, "a1");
  auto planner = MakePlanner(/*window=*/1);
  catalog::RequestSpec low;
  low.paths = {"/d"};
  low.recursive = true;
  low.copies = 1;
  low.dst_sites = {"C"};
  std::uint64_t low_id = Request(low);
  catalog::RequestSpec high;
  high.paths = {"/d/sub/urgent"};
  high.dst_sites = {"C"};
  high.priority = 10;
  std::uint64_t high_id = Request(high);
  ASSERT_TRUE(planner->Step().ok());
  EXPECT_EQ(Tasks(high_id).size(), 1u);
  EXPECT_EQ(Tasks(low_id).size(), 0u);
}

TEST_F(PlannerTest, PermanentTaskFailureFailsTheFileWithTheRecordedReason) {
  Commit("/d/f1", 10, "a1");
  auto planner = MakePlanner();
  catalog::RequestSpec spec;
  spec.paths = {"/d/f1"};
  spec.dst_sites = {"C"};
  spec.copies = 1;
  std::uint64_t id = Request(spec);
  ASSERT_TRUE(planner->Step().ok());
  for (int attempt = 1; attempt <= 3; ++attempt) {
    auto t = cat_->ClaimTask("c1", "agent", std::chrono::seconds(10));
    ASSERT_TRUE(t.ok()) << "attempt " << attempt << ": " << t.status();
    ASSERT_TRUE(cat_->FailTask(t->id, "agent", "UNAVAILABLE: connect a1: refused", true,
                               std::chrono::milliseconds(0))
                    .ok());
    if (attempt < 3) {
      ASSERT_TRUE(planner->Step().ok());
    }
  }
  catalog::Request r = Get(id);  // failed in the catalog's write of the last attempt
  absl::StatusOr<std::vector<catalog::RequestFile>> files = cat_->ListRequestFiles(id, {});
  ASSERT_TRUE(files.ok() && files->size() == 1u);
  EXPECT_EQ((*files)[0].state, catalog::RequestFileState::kFailed);
  EXPECT_EQ((*files)[0].attempts, 3u);
  EXPECT_EQ(r.state, RequestState::kFailed);
  EXPECT_NE(r.error.find("after 3 attempts: UNAVAILABLE: connect a1: refused"), std::string::npos)
      << r.error;
  EXPECT_TRUE(Tasks(id).empty());
}

TEST_F(PlannerTest, ACopyThatFailedBecauseItsSourceWasBadIsPlannedAgainFromAGoodOne) {
  Commit("/d/f1", 10, "a1");
  auto f = cat_->Stat("/d/f1");
  ASSERT_TRUE(f.ok());
  catalog::Replica second;
  second.inode = f->inode;
  second.node = "b1";
  second.state = catalog::ReplicaState::kComplete;
  second.generation = f->generation;
  second.size = 10;
  ASSERT_TRUE(cat_->PutReplica(second).ok());
  auto planner = MakePlanner();
  catalog::RequestSpec spec;
  spec.paths = {"/d/f1"};
  spec.dst_sites = {"C"};
  spec.copies = 1;
  std::uint64_t id = Request(spec);
  ASSERT_TRUE(planner->Step().ok());
  auto t = cat_->ClaimTask("c1", "agent", std::chrono::seconds(10));
  ASSERT_TRUE(t.ok()) << t.status();
  const std::string bad_source = t->spec.src_node;
  // The destination found the source's bytes wrong: it reports the source replica corrupt
  // and fails the task for good (as the site agent does).
  catalog::ReplicaTransition report;
  report.inode = f->inode;
  report.node = bad_source;
  report.generation = f->generation;
  report.from = catalog::ReplicaState::kComplete;
  report.to = catalog::ReplicaState::kCorrupt;
  report.note = "checksum mismatch";
  ASSERT_TRUE(cat_->TransitionReplicas({report}).ok());
  ASSERT_TRUE(cat_->FailTask(t->id, "agent", "FAILED_PRECONDITION: source replica is bad", false,
                             std::chrono::milliseconds(0))
                  .ok());
  ASSERT_TRUE(planner->Step().ok());
  catalog::Request r = Get(id);
  EXPECT_EQ(r.state, RequestState::kRunning) << r.error;
  std::vector<Task> open = Tasks(id);
  ASSERT_EQ(open.size(), 1u);
  EXPECT_NE(open[0].spec.src_node, bad_source);
  EXPECT_EQ(open[0].spec.dst_node, "c1");
}

TEST_F(PlannerTest, DownNodesAreNotDestinationsAndADownOnlySourceIsStillTried) {
  Commit("/d/f1", 10, "a1");
  auto planner = MakePlanner();
  now_ += 60 * kSecond;  // everyone silent for a minute...
  Heartbeat({"b1", "b2"});  // ...except site B
  catalog::RequestSpec spec;
  spec.paths = {"/d/f1"};
  spec.copies = 2;
  std::uint64_t id = Request(spec);
  ASSERT_TRUE(planner->Step().ok());
  std::vector<Task> tasks = Tasks(id);
  ASSERT_EQ(tasks.size(), 1u);
  EXPECT_EQ(tasks[0].spec.src_node, "a1");  // the only holder, though down
  EXPECT_EQ(tasks[0].spec.dst_node.substr(0, 1), "b");
}

// Review 3.4: a destination that dies while it holds a lease never claims again, so only
// the planner can release its task. After the heartbeat timeout the task is abandoned (not
// a failed attempt of the file) and the copy goes to another live node of the site asked for.
TEST_F(PlannerTest, ATaskOfADeadDestinationIsAbandonedAndTheCopyGoesToAnotherLiveNode) {
  Commit("/d/f1", 100, "a1");
  auto planner = MakePlanner();
  catalog::RequestSpec spec;
  spec.paths = {"/d/f1"};
  spec.dst_sites = {"B"};
  std::uint64_t id = Request(spec);
  ASSERT_TRUE(planner->Step().ok());
  std::vector<Task> tasks = Tasks(id);
  ASSERT_EQ(tasks.size(), 1u);
  const std::string dead = tasks[0].spec.dst_node;
  const std::string other = dead == "b1" ? "b2" : "b1";
  // The agent claims (a lease longer than the heartbeat timeout) and then dies.
  auto leased = cat_->ClaimTask(dead, "agent-of-" + dead, std::chrono::seconds(120));
  ASSERT_TRUE(leased.ok()) << leased.status();

  // The planner steps every few seconds (a gap longer than half the heartbeat timeout
  // would read as a stalled catalog and restart the judging).
  for (int i = 0; i < 4; ++i) {
    now_ += 5 * kSecond;
    Heartbeat({"a1", "a2", other, "c1"});
    ASSERT_TRUE(planner->Step().ok());
  }
  tasks = Tasks(id);
  ASSERT_EQ(tasks.size(), 1u) << "not down yet: the copy is still in flight";
  EXPECT_EQ(tasks[0].spec.dst_node, dead);

  for (int i = 0; i < 3; ++i) {  // 35 s without a heartbeat from `dead`
    now_ += 5 * kSecond;
    Heartbeat({"a1", "a2", other, "c1"});
    ASSERT_TRUE(planner->Step().ok());
  }
  auto abandoned = cat_->GetTask(leased->id);
  ASSERT_TRUE(abandoned.ok());
  EXPECT_EQ(abandoned->state, TaskState::kCancelled);
  EXPECT_EQ(abandoned->last_error, "destination node " + dead + " is down");
  tasks = Tasks(id);
  ASSERT_EQ(tasks.size(), 1u);
  EXPECT_EQ(tasks[0].spec.dst_node, other);
  EXPECT_EQ(Get(id).state, RequestState::kRunning);
  auto loc = cat_->Locate("/d/f1");
  ASSERT_TRUE(loc.ok());
  for (const catalog::Replica& r : loc->replicas) {
    EXPECT_NE(r.node, dead) << "the dead node's pending record is dropped";
  }

  auto claimed = cat_->ClaimTask(other, "agent-of-" + other, std::chrono::seconds(10));
  ASSERT_TRUE(claimed.ok()) << claimed.status();
  ASSERT_TRUE(cat_->CompleteTask(claimed->id, "agent-of-" + other).ok());
  ASSERT_TRUE(planner->Step().ok());
  catalog::Request r = Get(id);
  EXPECT_EQ(r.state, RequestState::kDone) << r.error;
  EXPECT_EQ(r.files_failed, 0u);
  EXPECT_TRUE(Tasks(id).empty());
}

// A restarted gfcatalogd finds every node's last heartbeat old: it waits a full heartbeat
// timeout before it takes anyone for dead, or it would abandon every copy in flight.
TEST_F(PlannerTest, ARestartedPlannerGivesNodesATimeoutToReportBeforeAbandoningTheirTasks) {
  Commit("/d/f1", 100, "a1");
  catalog::RequestSpec spec;
  spec.paths = {"/d/f1"};
  spec.dst_sites = {"B"};
  std::uint64_t id = Request(spec);
  {
    auto before_restart = MakePlanner();
    ASSERT_TRUE(before_restart->Step().ok());
  }
  std::vector<Task> tasks = Tasks(id);
  ASSERT_EQ(tasks.size(), 1u);
  const std::string dst = tasks[0].spec.dst_node;
  auto leased = cat_->ClaimTask(dst, "agent-of-" + dst, std::chrono::seconds(600));
  ASSERT_TRUE(leased.ok()) << leased.status();

  now_ += 60 * kSecond;  // the catalog was down for a minute: nobody's heartbeat is fresh
  auto restarted = MakePlanner();
  ASSERT_TRUE(restarted->Step().ok());
  auto t = cat_->GetTask(leased->id);
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->state, TaskState::kLeased) << t->last_error;

  now_ += 5 * kSecond;
  Heartbeat({"a1", "a2", "b1", "b2", "c1"});
  now_ += 30 * kSecond;
  Heartbeat({"a1", "a2", "b1", "b2", "c1"});
  ASSERT_TRUE(restarted->Step().ok());
  t = cat_->GetTask(leased->id);
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->state, TaskState::kLeased) << "the node reported: its copy goes on";
}

// Issue 37: after the whole machine was frozen longer than the heartbeat timeout, the
// planner's next step found every node silent: it failed the request's files for good ("not
// enough live destination nodes") and would have abandoned every copy in flight. A catalog
// that was itself stalled now waits a heartbeat round before judging nodes, and files with
// no live destination now wait for one instead of failing.
TEST_F(PlannerTest, AFrozenCatalogNeitherFailsFilesNorAbandonsCopiesWhenItWakes) {
  Commit("/d/f1", 100, "a1");
  Commit("/d/sub/f2", 100, "a1");
  auto planner = MakePlanner();
  catalog::RequestSpec busy;
  busy.paths = {"/d/f1"};
  busy.dst_sites = {"B"};
  std::uint64_t in_flight = Request(busy);
  ASSERT_TRUE(planner->Step().ok());
  std::vector<Task> tasks = Tasks(in_flight);
  ASSERT_EQ(tasks.size(), 1u);
  const std::string dst = tasks[0].spec.dst_node;
  auto leased = cat_->ClaimTask(dst, "agent-of-" + dst, std::chrono::seconds(600));
  ASSERT_TRUE(leased.ok()) << leased.status();
  for (int i = 0; i < 40; ++i) {  // steps every second for longer than the heartbeat timeout
    now_ += kSecond;
    Heartbeat({"a1", "a2", "b1", "b2", "c1"});
    ASSERT_TRUE(planner->Step().ok());
  }
  catalog::RequestSpec fresh;
  fresh.paths = {"/d/sub/f2"};
  fresh.copies = 3;
  std::uint64_t waiting = Request(fresh);

  now_ += 120 * kSecond;  // frozen: no step, no heartbeat
  ASSERT_TRUE(planner->Step().ok());
  auto t = cat_->GetTask(leased->id);
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->state, TaskState::kLeased) << t->last_error;
  catalog::Request r = Get(waiting);
  EXPECT_EQ(r.files_failed, 0u) << r.error;
  EXPECT_NE(r.state, RequestState::kFailed) << r.error;
  EXPECT_TRUE(Tasks(waiting).empty()) << "no live destination yet";

  // The nodes report again: the waiting file is planned, the copy in flight goes on.
  now_ += kSecond;
  Heartbeat({"a1", "a2", "b1", "b2", "c1"});
  ASSERT_TRUE(planner->Step().ok());
  EXPECT_EQ(Tasks(waiting).size(), 2u);
  t = cat_->GetTask(leased->id);
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->state, TaskState::kLeased);
}

// Leases run out in the planner's step even when the node never claims again (the
// catalog used to expire them only in that node's own ClaimTask).
TEST_F(PlannerTest, EveryStepExpiresRunOutLeases) {
  Commit("/d/f1", 100, "a1");
  auto planner = MakePlanner();
  catalog::RequestSpec spec;
  spec.paths = {"/d/f1"};
  spec.dst_sites = {"C"};
  std::uint64_t id = Request(spec);
  ASSERT_TRUE(planner->Step().ok());
  auto leased = cat_->ClaimTask("c1", "agent", std::chrono::seconds(15));
  ASSERT_TRUE(leased.ok()) << leased.status();
  now_ += 16 * kSecond;
  Heartbeat({"a1", "a2", "b1", "b2", "c1"});
  ASSERT_TRUE(planner->Step().ok());
  auto t = cat_->GetTask(leased->id);
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->state, TaskState::kQueued);
  EXPECT_EQ(t->last_error, "lease of agent expired");
  EXPECT_EQ(Tasks(id).size(), 1u);
}

TEST_F(PlannerTest, RewrittenFileMakesReplicasStaleAndANewRequestRefreshesThem) {
  Commit("/d/f1", 10, "a1");
  auto planner = MakePlanner();
  catalog::RequestSpec spec;
  spec.paths = {"/d/f1"};
  spec.copies = 3;
  std::uint64_t first = Request(spec);
  ASSERT_TRUE(planner->Step().ok());
  CompleteAll();
  ASSERT_TRUE(planner->Step().ok());
  ASSERT_EQ(Get(first).state, RequestState::kDone);

  Commit("/d/f1", 20, "a1", "00bb");  // rewritten at A
  auto loc = cat_->Locate("/d/f1");
  ASSERT_TRUE(loc.ok());
  int stale = 0;
  for (const auto& r : loc->replicas) stale += r.state == catalog::ReplicaState::kStale;
  EXPECT_EQ(stale, 2);
  EXPECT_EQ(CurrentReplicas(*loc).size(), 1u);

  std::uint64_t second = Request(spec);
  ASSERT_TRUE(planner->Step().ok());
  EXPECT_EQ(Tasks(second).size(), 2u);
  CompleteAll();
  ASSERT_TRUE(planner->Step().ok());
  EXPECT_EQ(Get(second).state, RequestState::kDone);
  loc = cat_->Locate("/d/f1");
  EXPECT_EQ(CurrentReplicas(*loc).size(), 3u);
}

TEST_F(PlannerTest, AFileRewrittenDuringACopyIsPlannedAgain) {
  Commit("/d/f1", 10, "a1");
  auto planner = MakePlanner();
  catalog::RequestSpec spec;
  spec.paths = {"/d/f1"};
  spec.copies = 1;
  spec.dst_sites = {"C"};
  std::uint64_t id = Request(spec);
  ASSERT_TRUE(planner->Step().ok());
  auto t = cat_->ClaimTask("c1", "agent", std::chrono::seconds(10));
  ASSERT_TRUE(t.ok());
  Commit("/d/f1", 30, "a1", "00cc");
  EXPECT_TRUE(absl::IsAborted(cat_->CompleteTask(t->id, "agent").status()));
  ASSERT_TRUE(planner->Step().ok());
  std::vector<Task> open = Tasks(id);
  ASSERT_EQ(open.size(), 1u);
  EXPECT_EQ(open[0].generation, 2u);
  EXPECT_EQ(Get(id).state, RequestState::kRunning);
}

TEST_F(PlannerTest, SourceSiteRestrictsWhereCopiesComeFrom) {
  Commit("/d/f1", 10, "a1");
  auto planner = MakePlanner();
  catalog::RequestSpec first;
  first.paths = {"/d/f1"};
  first.dst_sites = {"B"};
  std::uint64_t id = Request(first);
  ASSERT_TRUE(planner->Step().ok());
  CompleteAll();
  ASSERT_TRUE(planner->Step().ok());
  ASSERT_EQ(Get(id).state, RequestState::kDone);

  catalog::RequestSpec spec;
  spec.paths = {"/d/f1"};
  spec.src_site = "B";
  spec.dst_sites = {"C"};
  id = Request(spec);
  ASSERT_TRUE(planner->Step().ok());
  std::vector<Task> tasks = Tasks(id);
  ASSERT_EQ(tasks.size(), 1u);
  EXPECT_EQ(tasks[0].spec.src_node.substr(0, 1), "b");

  spec.src_site = "C";  // holds nothing
  spec.dst_sites = {"B"};
  spec.copies = 2;
  id = Request(spec);
  ASSERT_TRUE(planner->Step().ok());
  EXPECT_NE(Get(id).error.find("at source site C"), std::string::npos) << Get(id).error << " state " << catalog::ToString(Get(id).state);
}

TEST_F(PlannerTest, TwoRequestsForOneFileDoNotCopyItTwice) {
  Commit("/d/f1", 10, "a1");
  auto planner = MakePlanner();
  catalog::RequestSpec spec;
  spec.paths = {"/d/f1"};
  spec.copies = 2;
  std::uint64_t one = Request(spec);
  std::uint64_t two = Request(spec);
  ASSERT_TRUE(planner->Step().ok());
  ASSERT_TRUE(planner->Step().ok());
  EXPECT_EQ(Tasks(one).size() + Tasks(two).size(), 1u);
  CompleteAll();
  ASSERT_TRUE(planner->Step().ok());
  EXPECT_EQ(Get(one).state, RequestState::kDone);
  EXPECT_EQ(Get(two).state, RequestState::kDone);
}

TEST_F(PlannerTest, PreviewPlansWithoutWriting) {
  Commit("/d/f1", 10, "a1");
  Commit("/d/f2", 10, "a1");
  auto planner = MakePlanner();
  catalog::RequestSpec spec;
  spec.paths = {"/d/f1", "/d/f2", "/missing"};
  spec.copies = 2;
  auto preview = planner->Preview(spec);
  ASSERT_TRUE(preview.ok()) << preview.status();
  EXPECT_EQ(preview->copies.size(), 2u);
  ASSERT_EQ(preview->failures.size(), 1u);
  EXPECT_EQ(preview->failures[0].path, "/missing");
  catalog::TaskFilter f;
  EXPECT_TRUE(cat_->ListTasks(f)->empty());
}

TEST_F(PlannerTest, ARestartedPlannerContinuesFromTheCatalog) {
  for (int i = 0; i < 3; ++i) Commit("/d/f" + std::to_string(i), 10, "a1");
  catalog::RequestSpec spec;
  spec.paths = {"/d"};
  spec.recursive = true;
  spec.copies = 2;
  std::uint64_t id = Request(spec);
  {
    auto planner = MakePlanner();
    ASSERT_TRUE(planner->Step().ok());
  }
  EXPECT_EQ(Tasks(id).size(), 3u);
  testing::FaultyView counting(cat_.get());
  PlannerOptions o;
  o.catalog = cat_.get();
  o.catalog.view = &counting;
  o.clock = [this] { return now_.load(); };
  auto made = Planner::Create(o);
  ASSERT_TRUE(made.ok());
  auto& planner = *made;
  ASSERT_TRUE(planner->Step().ok());
  EXPECT_EQ(Tasks(id).size(), 3u) << "no duplicate tasks after a restart";
  EXPECT_EQ(counting.walks, 0u) << "a restarted planner walked the request's paths again";
  CompleteAll();
  ASSERT_TRUE(planner->Step().ok());
  EXPECT_EQ(Get(id).state, RequestState::kDone);
}

// A cancel that lands between the planner's listing and its CreateTasks must win: the catalog
// refuses the tasks and the state change (kFailedPrecondition) and the planner skips the
// request without an error, leaving it cancelled with no tasks.
TEST_F(PlannerTest, ACancelRacingAStepIsNotUndone) {
  Commit("/d/f1", 100, "a1");
  testing::FaultyWorkQueue racing(cat_.get());
  PlannerOptions o;
  o.catalog = cat_.get();
  o.catalog.work = &racing;
  o.clock = [this] { return now_.load(); };
  o.heartbeat_timeout = std::chrono::seconds(30);
  o.max_attempts = 3;
  auto planner = Planner::Create(o);
  ASSERT_TRUE(planner.ok()) << planner.status();
  catalog::RequestSpec spec;
  spec.paths = {"/d/f1"};
  spec.copies = 2;
  std::uint64_t id = Request(spec);
  bool cancelled = false;
  racing.before_create_tasks = [&] {
    cancelled = true;
    ASSERT_TRUE(cat_->CancelRequest(id).ok());
  };
  absl::Status step = (*planner)->Step();
  EXPECT_TRUE(step.ok()) << step;
  ASSERT_TRUE(cancelled);
  EXPECT_EQ(Get(id).state, RequestState::kCancelled);
  EXPECT_TRUE(Tasks(id, false).empty());
  // The next step no longer sees it and still makes nothing.
  EXPECT_TRUE((*planner)->Step().ok());
  EXPECT_EQ(Get(id).state, RequestState::kCancelled);
  EXPECT_TRUE(Tasks(id, false).empty());
}

// The running planner forgets finished requests after their retention (gfcatalogd
// --keep-finished-requests): the catalog does not grow with every request ever made.
TEST_F(PlannerTest, AFinishedRequestIsForgottenAfterItsRetention) {
  Commit("/d/old", 10, "a1");
  catalog::RequestSpec spec;
  spec.paths = {"/d/old"};
  spec.dst_sites = {"B"};
  const std::uint64_t old_id = Request(spec);
  auto planner = MakePlanner();
  ASSERT_TRUE(planner->Step().ok());
  CompleteAll();
  ASSERT_TRUE(planner->Step().ok());
  ASSERT_EQ(Get(old_id).state, RequestState::kDone);
  catalog::RequestSpec open_spec = spec;
  open_spec.dst_sites = {"C"};
  const std::uint64_t open_id = Request(open_spec);  // its task is never completed: it stays open
  PlannerOptions o;
  o.catalog = cat_.get();
  o.clock = [this] { return now_.load(); };
  o.finished_request_retention = std::chrono::hours(1);
  o.purge_interval = std::chrono::milliseconds(10);
  o.interval = std::chrono::milliseconds(20);
  auto running = Planner::Create(o);
  ASSERT_TRUE(running.ok()) << running.status();
  (*running)->Start();
  std::this_thread::sleep_for(std::chrono::milliseconds(100));  // several purge checks within the hour
  EXPECT_TRUE(cat_->GetRequest(old_id).ok()) << "kept within its retention";
  now_ += 2 * 3600 * kSecond;
  bool forgotten = false;
  for (int i = 0; i < 200 && !forgotten; ++i) {
    forgotten = absl::IsNotFound(cat_->GetRequest(old_id).status());
    if (!forgotten) std::this_thread::sleep_for(std::chrono::milliseconds(20));  // the planner's thread
  }
  (*running)->Stop();
  EXPECT_TRUE(forgotten);
  absl::StatusOr<catalog::Request> open = cat_->GetRequest(open_id);
  ASSERT_TRUE(open.ok()) << open.status();
  EXPECT_NE(open->state, RequestState::kDone);
}

}  // namespace
}  // namespace gfrep::replica::plan
