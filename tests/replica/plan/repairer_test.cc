#include "replica/plan/repairer.h"

#include <gtest/gtest.h>
#include <spdlog/sinks/null_sink.h>
#include <spdlog/spdlog.h>

#include "tests/support/scratch_catalog.h"
#include "tests/support/temp_dir.h"

namespace gfrep::replica::plan {
namespace {

using catalog::ReplicaState;
using catalog::RequestState;

// The repairer over a real catalog, without agents: what it asks the planner for, and what
// it does with the bad records once the request has ended.
class RepairerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto c = gfrep::testing::OpenScratchCatalog(
        dir_.Sub("db"), [this] { return now_ns_ != 0 ? now_ns_ : catalog::SystemNowNs(); });
    ASSERT_TRUE(c.ok()) << c.status();
    cat_ = std::move(*c);
    for (const auto& [node, site] : std::vector<std::pair<std::string, std::string>>{
             {"a1", "a"}, {"b1", "b"}, {"b2", "b"}, {"c1", "c"}}) {
      ASSERT_TRUE(cat_->PutSite({site, {}}).ok());
      catalog::Node n;
      n.name = node;
      n.site = site;
      n.address = "127.0.0.1:1";
      ASSERT_TRUE(cat_->RegisterNode(n).ok());
    }
  }

  // /f at generation 1, complete on every node of `holders`.
  catalog::Attributes File(const std::string& path, const std::vector<std::string>& holders) {
    catalog::FileContent c;
    c.size = 100;
    c.checksum_algo = "xxh3-128";
    c.checksum = "ab";
    auto a = cat_->CommitFile(path, c, holders.front(), std::nullopt);
    EXPECT_TRUE(a.ok()) << a.status();
    for (std::size_t i = 1; i < holders.size(); ++i) {
      catalog::Replica r;
      r.inode = a->inode;
      r.node = holders[i];
      r.state = ReplicaState::kComplete;
      r.generation = a->generation;
      r.size = 100;
      EXPECT_TRUE(cat_->PutReplica(r).ok());
    }
    return *a;
  }

  void Mark(const catalog::Attributes& a, const std::string& node, ReplicaState to) {
    catalog::ReplicaTransition t;
    t.inode = a.inode;
    t.node = node;
    t.generation = a.generation;
    t.from = ReplicaState::kComplete;
    t.to = to;
    t.note = "test";
    auto r = cat_->TransitionReplicas({t});
    ASSERT_TRUE(r.ok());
    ASSERT_TRUE((*r)[0].ok()) << (*r)[0];
  }

  std::vector<catalog::Request> RepairRequests() {
    auto all = cat_->ListRequests(true, RequestState::kQueued, 1000);
    EXPECT_TRUE(all.ok());
    std::vector<catalog::Request> out;
    for (const catalog::Request& r : *all) {
      if (r.spec.origin == catalog::RequestOrigin::kRepair) out.push_back(r);
    }
    return out;
  }

  // Node `name` last heard of `ago` ago (an hour: dead for the repairer; a minute: down for
  // the planner, suspect for the repairer; zero: live).
  void Silence(const std::string& name,
               std::chrono::nanoseconds ago = std::chrono::hours(1)) {
    auto n = cat_->GetNode(name);
    ASSERT_TRUE(n.ok());
    now_ns_ = catalog::SystemNowNs() - ago.count();
    ASSERT_TRUE(cat_->RegisterNode(*n).ok());
    now_ns_ = 0;
  }

  // What the node's agent reports after it came back and read its replica of `a`: good
  // (complete again) or not.
  void Recheck(const catalog::Attributes& a, const std::string& node, ReplicaState to) {
    catalog::ReplicaTransition t;
    t.inode = a.inode;
    t.node = node;
    t.generation = a.generation;
    t.from = ReplicaState::kUnverified;
    t.to = to;
    t.verified = to == ReplicaState::kComplete;
    t.note = to == ReplicaState::kComplete ? std::string(catalog::kRecheckedNote) : "checksum";
    auto r = cat_->TransitionReplicas({t});
    ASSERT_TRUE(r.ok());
    ASSERT_TRUE((*r)[0].ok()) << (*r)[0];
  }

  void Put(const catalog::Attributes& a, const std::string& node) {
    catalog::Replica made;
    made.inode = a.inode;
    made.node = node;
    made.state = ReplicaState::kComplete;
    made.generation = a.generation;
    made.size = 100;
    ASSERT_TRUE(cat_->PutReplica(made).ok());
  }

  std::uint64_t UserRequest(const std::string& path, std::uint32_t copies) {
    catalog::RequestSpec user;
    user.paths = {path};
    user.copies = copies;
    user.owner = "alice";
    auto made = cat_->CreateRequest(user);
    EXPECT_TRUE(made.ok());
    EndRequest(made->id, RequestState::kDone);
    return made->id;
  }

  std::string NoteOn(const catalog::Attributes& a, const std::string& node) {
    auto all = cat_->GetReplicas(a.inode);
    EXPECT_TRUE(all.ok());
    for (const catalog::Replica& r : *all) {
      if (r.node == node) return r.note;
    }
    return "";
  }

  std::int64_t now_ns_ = 0;  // 0: the real clock

  std::unique_ptr<Repairer> Make() {
    RepairerOptions o;
    o.catalog = cat_.get();
    o.scan_interval = std::chrono::hours(1);
    o.logger = std::make_shared<spdlog::logger>("test", std::make_shared<spdlog::sinks::null_sink_mt>());
    return std::make_unique<Repairer>(o);
  }

  ReplicaState StateOn(const catalog::Attributes& a, const std::string& node) {
    auto all = cat_->GetReplicas(a.inode);
    EXPECT_TRUE(all.ok());
    for (const catalog::Replica& r : *all) {
      if (r.node == node) return r.state;
    }
    return ReplicaState::kPending;
  }

  void EndRequest(std::uint64_t id, RequestState state) {
    catalog::RequestUpdate u;
    u.id = id;
    u.set_state = true;
    u.state = state;
    ASSERT_TRUE(cat_->UpdateRequest(u).ok());
  }

  gfrep::testing::TempDir dir_{"repairer"};
  std::unique_ptr<catalog::Catalog> cat_;
};

TEST_F(RepairerTest, ABadReplicaGetsOneRequestForItsSiteAndIsDroppedOnceRepaired) {
  catalog::Attributes a = File("/f", {"a1", "b1", "c1"});
  auto repairer = Make();
  auto s = repairer->Step();
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->requests_created, 0u) << "nothing is bad yet";

  Mark(a, "b1", ReplicaState::kCorrupt);
  s = repairer->Step();
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->requests_created, 1u);
  std::vector<catalog::Request> reqs = RepairRequests();
  ASSERT_EQ(reqs.size(), 1u);
  EXPECT_EQ(reqs[0].spec.paths, std::vector<std::string>{"/f"});
  EXPECT_EQ(reqs[0].spec.dst_sites, std::vector<std::string>{"b"});
  EXPECT_EQ(reqs[0].spec.copies, 1u) << "site b held one complete copy before";
  EXPECT_EQ(reqs[0].spec.priority, kRepairPriority) << "two good copies are left";

  // Nothing new while it runs, however often the repairer looks.
  s = repairer->Step();
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->requests_created, 0u);
  EXPECT_EQ(RepairRequests().size(), 1u);

  // The planner made the copy on b2 (say b1 was busy) and ended the request: b1's bad
  // record is dropped so that b1 unlinks what is left.
  catalog::Replica made;
  made.inode = a.inode;
  made.node = "b2";
  made.state = ReplicaState::kComplete;
  made.generation = a.generation;
  made.size = 100;
  ASSERT_TRUE(cat_->PutReplica(made).ok());
  EndRequest(reqs[0].id, RequestState::kDone);
  s = repairer->Step();
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->records_dropped, 1u);
  EXPECT_EQ(StateOn(a, "b1"), ReplicaState::kDeleting);
}

TEST_F(RepairerTest, ACopyFoundBadWhileARepairRunsGetsTheNextRequest) {
  catalog::Attributes a = File("/f", {"a1", "b1", "c1"});
  auto repairer = Make();
  Mark(a, "b1", ReplicaState::kCorrupt);
  ASSERT_TRUE(repairer->Step().ok());
  ASSERT_EQ(RepairRequests().size(), 1u);
  Mark(a, "c1", ReplicaState::kLost);  // while b's repair runs
  auto s = repairer->Step();
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->requests_created, 0u) << "one repair request per file at a time";
  // b1 was copied again (a claim replaced its record), and the request ended.
  catalog::Replica again;
  again.inode = a.inode;
  again.node = "b1";
  again.state = ReplicaState::kComplete;
  again.generation = a.generation;
  again.size = 100;
  ASSERT_TRUE(cat_->PutReplica(again).ok());
  EndRequest(RepairRequests()[0].id, RequestState::kDone);
  s = repairer->Step();
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->requests_created, 1u);
  std::vector<catalog::Request> reqs = RepairRequests();
  ASSERT_EQ(reqs.size(), 2u);
  EXPECT_EQ(reqs[0].spec.dst_sites, std::vector<std::string>{"c"});  // newest first
  EXPECT_EQ(StateOn(a, "c1"), ReplicaState::kLost) << "kept until its own repair is done";
}

TEST_F(RepairerTest, AFileDownToOneCopyIsRepairedFirst) {
  catalog::Attributes a = File("/f", {"a1", "b1", "c1"});
  Mark(a, "b1", ReplicaState::kLost);
  Mark(a, "c1", ReplicaState::kCorrupt);
  auto s = Make()->Step();
  ASSERT_TRUE(s.ok()) << s.status();
  std::vector<catalog::Request> reqs = RepairRequests();
  ASSERT_EQ(reqs.size(), 1u);
  EXPECT_EQ(reqs[0].spec.priority, kLastCopyPriority);
  EXPECT_EQ(reqs[0].spec.dst_sites, (std::vector<std::string>{"b", "c"}));
  EXPECT_EQ(reqs[0].spec.copies, 2u);
}

TEST_F(RepairerTest, AFileWithNoGoodCopyLeftIsReportedNotRequested) {
  catalog::Attributes a = File("/f", {"a1"});
  Mark(a, "a1", ReplicaState::kCorrupt);
  auto s = Make()->Step();
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->unrepairable, 1u);
  EXPECT_TRUE(RepairRequests().empty());
  EXPECT_EQ(StateOn(a, "a1"), ReplicaState::kCorrupt) << "the only trace of the bytes stays";
}

TEST_F(RepairerTest, ARestartedRepairerFindsItsOpenRequestAndMakesNoSecond) {
  catalog::Attributes a = File("/f", {"a1", "b1"});
  Mark(a, "b1", ReplicaState::kLost);
  ASSERT_TRUE(Make()->Step().ok());
  ASSERT_EQ(RepairRequests().size(), 1u);
  // A new repairer (gfcatalogd restarted) scans everything at its first step.
  auto again = Make();
  auto s = again->Step();
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->requests_created, 0u);
  EXPECT_EQ(RepairRequests().size(), 1u);
  // A failed repair is tried again (at the next scan; a new repairer scans at once).
  EndRequest(RepairRequests()[0].id, RequestState::kFailed);
  ASSERT_TRUE(again->Step().ok());
  EXPECT_EQ(StateOn(a, "b1"), ReplicaState::kLost) << "not repaired: kept";
  s = Make()->Step();
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->requests_created, 1u);
}

TEST_F(RepairerTest, ABadReplicaOfAnOlderGenerationIsOnlyDropped) {
  catalog::Attributes a = File("/f", {"a1", "b1"});
  Mark(a, "b1", ReplicaState::kCorrupt);
  // The file is written again: the bad copy of generation 1 is not worth repairing.
  catalog::FileContent c;
  c.size = 5;
  c.checksum_algo = "xxh3-128";
  c.checksum = "cd";
  ASSERT_TRUE(cat_->CommitFile("/f", c, "a1", std::nullopt).ok());
  auto s = Make()->Step();
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->requests_created, 0u);
  EXPECT_EQ(s->records_dropped, 1u);
  EXPECT_EQ(StateOn(a, "b1"), ReplicaState::kDeleting);
}

TEST_F(RepairerTest, ALostCopyOnASiteThatIsDownIsMadeAgainWhereItsHoldersWantIt) {
  // gfrep -N 3 /g (any site) made copies on a1, b1, c1; c's only node then lost its copy
  // and went silent.
  catalog::Attributes g = File("/g", {"a1", "b1", "c1"});
  catalog::RequestSpec user;
  user.paths = {"/g"};
  user.copies = 3;
  user.owner = "alice";
  auto made = cat_->CreateRequest(user);
  ASSERT_TRUE(made.ok());
  Mark(g, "c1", ReplicaState::kLost);
  Silence("c1");
  auto repairer = Make();
  auto s = repairer->Step();
  ASSERT_TRUE(s.ok()) << s.status();
  std::vector<catalog::Request> reqs = RepairRequests();
  ASSERT_EQ(reqs.size(), 1u);
  EXPECT_EQ(reqs[0].spec.copies, 3u) << "alice's count";
  EXPECT_TRUE(reqs[0].spec.dst_sites.empty()) << "anywhere alive: the planner picks";

  // A file nobody asked for gets the copies it had back, anywhere.
  catalog::Attributes h = File("/h", {"a1", "c1"});
  Mark(h, "c1", ReplicaState::kCorrupt);
  s = repairer->Step();
  ASSERT_TRUE(s.ok()) << s.status();
  reqs = RepairRequests();
  ASSERT_EQ(reqs.size(), 2u);
  EXPECT_EQ(reqs[0].spec.paths, std::vector<std::string>{"/h"});
  EXPECT_EQ(reqs[0].spec.copies, 2u);
  EXPECT_TRUE(reqs[0].spec.dst_sites.empty());
}

TEST_F(RepairerTest, ARulesCountIsRestoredInItsSitesWhenTheBadCopysSiteIsDown) {
  ASSERT_TRUE(cat_->PutPolicies("rules:\n  - name: two-in-bc\n    paths: [/exp/**]\n    copies: 2\n"
                                "    sites: \"b|c\"\n",
                                "test", std::nullopt)
                  .ok());
  ASSERT_TRUE(cat_->Mkdir("/exp", {}).ok());
  catalog::Attributes f = File("/exp/f", {"a1", "b1", "c1"});
  Mark(f, "c1", ReplicaState::kLost);
  Silence("c1");
  auto repairer = Make();
  auto s = repairer->Step();
  ASSERT_TRUE(s.ok()) << s.status();
  std::vector<catalog::Request> reqs = RepairRequests();
  ASSERT_EQ(reqs.size(), 1u);
  EXPECT_EQ(reqs[0].spec.copies, 2u);
  EXPECT_EQ(reqs[0].spec.dst_sites, (std::vector<std::string>{"b"}))
      << "the rule's sites that can take a copy now (b2 is its other live node)";
}

TEST_F(RepairerTest, ADeadNodesCopiesAreMadeAgainAndNothingIsMarkedWhileItIsOnlySuspect) {
  // gfrep -N 2 made /f on a1 and b1.
  catalog::Attributes f = File("/f", {"a1", "b1"});
  UserRequest("/f", 2);
  auto repairer = Make();
  ASSERT_TRUE(repairer->Step().ok());
  // b1 silent for five minutes: down for the planner, not dead (--node-dead-after 600).
  Silence("b1", std::chrono::minutes(5));
  auto s = repairer->Step();
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->replicas_unverified, 0u);
  EXPECT_EQ(StateOn(f, "b1"), ReplicaState::kComplete) << "a suspect node's copies still count";
  EXPECT_TRUE(RepairRequests().empty());
  // Silent for an hour: dead. Its copy stops counting and is made again in its site (b2 lives).
  Silence("b1");
  s = repairer->Step();
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->replicas_unverified, 1u);
  EXPECT_EQ(StateOn(f, "b1"), ReplicaState::kUnverified);
  std::vector<catalog::Request> reqs = RepairRequests();
  ASSERT_EQ(reqs.size(), 1u);
  EXPECT_EQ(reqs[0].spec.dst_sites, std::vector<std::string>{"b"});
  EXPECT_EQ(reqs[0].spec.copies, 1u);
  EXPECT_EQ(reqs[0].spec.priority, kLastCopyPriority) << "one live copy left";
  // Steps while it runs and after walk the dead node once and ask for nothing more.
  s = repairer->Step();
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->replicas_unverified, 0u);
  EXPECT_EQ(s->requests_created, 0u);
  Put(f, "b2");
  EndRequest(reqs[0].id, RequestState::kDone);
  ASSERT_TRUE(repairer->Step().ok());
  EXPECT_EQ(StateOn(f, "b1"), ReplicaState::kUnverified) << "kept: its node may come back";
  EXPECT_EQ(NoteOn(f, "b1"), catalog::kRemadeNote);
  s = Make()->Step();  // a restarted repairer scans everything
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->requests_created, 0u);
  EXPECT_EQ(RepairRequests().size(), 1u);
}

TEST_F(RepairerTest, ACopyBackFromTheDeadCountsAgainAndIsTrimmedOnlyBeyondTheHoldersCounts) {
  // /f (gfrep -N 2) on a1 and b1; /g (gfrep -N 2) on a1 and b1; /h (nobody's) on a1 and b1.
  catalog::Attributes f = File("/f", {"a1", "b1"});
  catalog::Attributes g = File("/g", {"a1", "b1"});
  catalog::Attributes h = File("/h", {"a1", "b1"});
  UserRequest("/f", 2);
  UserRequest("/g", 2);
  Silence("b1");
  auto repairer = Make();
  auto s = repairer->Step();
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->replicas_unverified, 3u);
  ASSERT_EQ(RepairRequests().size(), 3u);
  // /f and /h were copied again to b2; /g's copy is still on its way when b1 comes back.
  for (const catalog::Request& r : RepairRequests()) {
    if (r.spec.paths.front() == "/g") continue;
    Put(r.spec.paths.front() == "/f" ? f : h, "b2");
    EndRequest(r.id, RequestState::kDone);
  }
  ASSERT_TRUE(repairer->Step().ok());
  Silence("b1", std::chrono::seconds(0));
  Recheck(f, "b1", ReplicaState::kComplete);
  Recheck(g, "b1", ReplicaState::kComplete);
  Recheck(h, "b1", ReplicaState::kComplete);
  s = repairer->Step();
  ASSERT_TRUE(s.ok()) << s.status();
  // /f: three copies for a count of two: the one back from the dead goes, never below 2.
  EXPECT_EQ(s->trimmed, 1u);
  EXPECT_EQ(StateOn(f, "b1"), ReplicaState::kDeleting);
  EXPECT_EQ(StateOn(f, "a1"), ReplicaState::kComplete);
  EXPECT_EQ(StateOn(f, "b2"), ReplicaState::kComplete);
  // /h: nobody says how many it needs: kept. /g: counts again while its repair runs...
  EXPECT_EQ(StateOn(h, "b1"), ReplicaState::kComplete);
  EXPECT_EQ(StateOn(g, "b1"), ReplicaState::kComplete);
  // ...and is trimmed once the repair made the third copy.
  for (const catalog::Request& r : RepairRequests()) {
    if (r.spec.paths.front() != "/g") continue;
    Put(g, "b2");
    EndRequest(r.id, RequestState::kDone);
  }
  s = repairer->Step();
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->trimmed, 1u);
  EXPECT_EQ(StateOn(g, "b1"), ReplicaState::kDeleting);
  // Nothing more at the next full scan.
  s = Make()->Step();
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->trimmed, 0u);
  EXPECT_EQ(s->requests_created, 0u);
  EXPECT_EQ(StateOn(h, "b1"), ReplicaState::kComplete);
}

TEST_F(RepairerTest, ACopyBackFromTheDeadDamagedIsDroppedWhenTheHoldersHaveTheirCounts) {
  catalog::Attributes f = File("/f", {"a1", "b1", "c1"});
  UserRequest("/f", 2);
  Silence("b1");
  auto repairer = Make();
  auto s = repairer->Step();
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_TRUE(RepairRequests().empty()) << "a1 and c1 are alice's two copies";
  EXPECT_EQ(NoteOn(f, "b1"), catalog::kRemadeNote);
  // Back, and found damaged (the agent reports it corrupt): dropped, nothing copied.
  Silence("b1", std::chrono::seconds(0));
  Recheck(f, "b1", ReplicaState::kCorrupt);
  s = repairer->Step();
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->requests_created, 0u);
  EXPECT_EQ(StateOn(f, "b1"), ReplicaState::kDeleting);
}

TEST_F(RepairerTest, ADrainingNodesCopiesAreMadeAgainElsewhereAndThenDropped) {
  catalog::Attributes f = File("/f", {"a1", "b1"});        // nobody's
  catalog::Attributes g = File("/g", {"a1", "b1", "c1"});  // alice's two, and one more
  UserRequest("/g", 2);
  ASSERT_TRUE(cat_->SetNodeMode("b1", catalog::NodeMode::kDraining).ok());
  auto repairer = Make();
  auto s = repairer->Step();
  ASSERT_TRUE(s.ok()) << s.status();
  // /g: alice has her two without b1's: dropped at once. /f: made again in b (on b2).
  EXPECT_EQ(s->drained, 1u);
  EXPECT_EQ(StateOn(g, "b1"), ReplicaState::kDeleting);
  EXPECT_EQ(StateOn(f, "b1"), ReplicaState::kComplete) << "a source until its copy is made";
  std::vector<catalog::Request> reqs = RepairRequests();
  ASSERT_EQ(reqs.size(), 1u);
  EXPECT_EQ(reqs[0].spec.paths, std::vector<std::string>{"/f"});
  EXPECT_EQ(reqs[0].spec.dst_sites, std::vector<std::string>{"b"});
  EXPECT_EQ(reqs[0].spec.copies, 1u);
  EXPECT_EQ(reqs[0].spec.priority, kLastCopyPriority) << "one copy that counts is left";
  // Nothing more while it runs; once made, b1's copy goes.
  s = repairer->Step();
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->requests_created, 0u);
  Put(f, "b2");
  EndRequest(reqs[0].id, RequestState::kDone);
  s = repairer->Step();
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->drained, 1u);
  EXPECT_EQ(StateOn(f, "b1"), ReplicaState::kDeleting);
  EXPECT_EQ(StateOn(f, "b2"), ReplicaState::kComplete);
  // A file whose only copy is on the draining node is copied from it, not given up.
  catalog::Attributes h = File("/h", {"b1"});
  s = Make()->Step();
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->unrepairable, 0u);
  EXPECT_EQ(StateOn(h, "b1"), ReplicaState::kComplete);
  EXPECT_EQ(RepairRequests().front().spec.paths, std::vector<std::string>{"/h"});
}

}  // namespace
}  // namespace gfrep::replica::plan
