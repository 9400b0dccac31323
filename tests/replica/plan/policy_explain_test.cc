#include "replica/plan/policy_explain.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "replica/plan/policy_engine.h"
#include "tests/replica/faulty_roles.h"
#include "tests/support/scratch_catalog.h"
#include "tests/support/temp_dir.h"

namespace gfrep::replica::plan {
namespace {

using catalog::ReplicaState;

// gfpolicy explain's reasons over a real catalog, with "now" injected.
class PolicyExplainTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto c = gfrep::testing::OpenScratchCatalog(
        dir_.Sub("db"), [this] { return now_.now_ns; });  // the catalog and explain share "now"
    ASSERT_TRUE(c.ok()) << c.status();
    cat_ = std::move(*c);
    ASSERT_TRUE(gfrep::testing::AddJapanUsSites(*cat_).ok());
    ASSERT_TRUE(cat_->Mkdir("/exp", {}).ok());
    catalog::FileContent content;
    content.size = 10;
    content.checksum_algo = "xxh3-128";
    content.checksum = "ab";
    ASSERT_TRUE(cat_->CommitFile("/exp/f", content, "tsukuba-n1", std::nullopt).ok());
  }

  PolicyRule Rule(const std::string& sites, std::uint32_t copies = 1) {
    auto r = ParsePolicies(fmt::format("rules:\n  - name: r\n    paths: [/exp/**]\n    copies: {}\n"
                                       "    sites: \"{}\"\n",
                                       copies, sites),
                           "t.yaml");
    EXPECT_TRUE(r.ok()) << r.status();
    return r->front();
  }

  std::uint64_t RuleRequest() {
    catalog::RequestSpec spec;
    spec.paths = {"/exp/f"};
    spec.dst_sites = {"sdsc"};
    spec.origin = catalog::RequestOrigin::kPolicy;
    spec.owner = "r";
    auto req = cat_->CreateRequest(spec);
    EXPECT_TRUE(req.ok());
    return req->id;
  }

  RuleFileVerdict Explain(const PolicyRule& rule) {
    auto v = ExplainPath(*cat_, {rule}, "/exp/f", now_);
    EXPECT_TRUE(v.ok()) << v.status();
    EXPECT_EQ(v->size(), 1u);
    return v->empty() ? RuleFileVerdict{} : v->front();
  }

  gfrep::testing::TempDir dir_{"policy-explain"};
  std::unique_ptr<catalog::Catalog> cat_;
  ExplainOptions now_{catalog::SystemNowNs()};
};

TEST_F(PolicyExplainTest, SatisfiedAndNoRuleAtAll) {
  RuleFileVerdict v = Explain(Rule("region=jp"));
  EXPECT_EQ(v.state, RuleFileState::kSatisfied);
  EXPECT_EQ(v.have, 1u);
  auto none = ExplainPath(*cat_, {Rule("*")}, "/exp/f", now_);
  ASSERT_TRUE(none.ok());
  auto other = ParsePolicies("rules:\n  - name: o\n    paths: [/other/**]\n    sites: kek\n", "t");
  auto nothing = ExplainPath(*cat_, *other, "/exp/f", now_);
  ASSERT_TRUE(nothing.ok());
  EXPECT_TRUE(nothing->empty());
}

TEST_F(PolicyExplainTest, NoEligibleSite) {
  RuleFileVerdict v = Explain(Rule("region=mars"));
  EXPECT_EQ(v.state, RuleFileState::kWaiting);
  EXPECT_NE(v.reason.find("no eligible site: 'region=mars' selects no site"), std::string::npos)
      << v.reason;
}

TEST_F(PolicyExplainTest, LifetimeEnded) {
  PolicyRule rule = Rule("sdsc");
  rule.lifetime = std::chrono::hours(1);
  const std::uint64_t id = RuleRequest();
  EXPECT_EQ(Explain(rule).state, RuleFileState::kWaiting) << "within its lifetime";
  now_.now_ns += std::chrono::nanoseconds(std::chrono::hours(1)).count();
  RuleFileVerdict v = Explain(rule);
  EXPECT_EQ(v.state, RuleFileState::kEnded);
  EXPECT_EQ(v.request_id, id);
  EXPECT_NE(v.reason.find("lifetime ended at"), std::string::npos) << v.reason;
  auto s = StatusOfRule(*cat_, rule, 100, now_);
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->ended, 1u);
  EXPECT_TRUE(s->unsatisfied.empty());
}

TEST_F(PolicyExplainTest, NoRequestYet) {
  RuleFileVerdict v = Explain(Rule("sdsc"));
  EXPECT_EQ(v.state, RuleFileState::kWaiting);
  EXPECT_NE(v.reason.find("no request yet"), std::string::npos) << v.reason;
}

TEST_F(PolicyExplainTest, ACopyOnADeadOrDrainingNodeIsBeingMadeAgain) {
  // /exp/f on tsukuba-n1 and kek-n1; the rule wants two in Japan.
  const catalog::InodeId inode = cat_->Stat("/exp/f")->inode;
  catalog::Replica at_kek;
  at_kek.inode = inode;
  at_kek.node = "kek-n1";
  at_kek.state = ReplicaState::kComplete;
  at_kek.generation = 1;
  at_kek.size = 10;
  ASSERT_TRUE(cat_->PutReplica(at_kek).ok());
  EXPECT_EQ(Explain(Rule("region=jp", 2)).state, RuleFileState::kSatisfied);
  // kek-n1 declared dead by the repairer: its copy is unverified, with the repairer's note.
  catalog::ReplicaTransition t;
  t.inode = inode;
  t.node = "kek-n1";
  t.generation = 1;
  t.from = ReplicaState::kComplete;
  t.to = ReplicaState::kUnverified;
  t.note = "node kek-n1 dead since 2026-12-01 10:42:00 UTC (silent for 600 s)";
  ASSERT_TRUE((*cat_->TransitionReplicas({t}))[0].ok());
  RuleFileVerdict v = Explain(Rule("region=jp", 2));
  EXPECT_EQ(v.state, RuleFileState::kWaiting);
  EXPECT_EQ(v.have, 1u);
  EXPECT_NE(v.reason.find("re-making: node kek-n1 dead since 2026-12-01 10:42:00 UTC"), std::string::npos)
      << v.reason;
  // tsukuba-n1 draining: its copy does not count either.
  ASSERT_TRUE(cat_->SetNodeMode("tsukuba-n1", catalog::NodeMode::kDraining).ok());
  v = Explain(Rule("region=jp", 2));
  EXPECT_EQ(v.have, 0u);
  EXPECT_NE(v.reason.find("node tsukuba-n1 draining"), std::string::npos) << v.reason;
}

TEST_F(PolicyExplainTest, SourceDown) {
  const std::uint64_t id = RuleRequest();
  now_.now_ns += 600'000'000'000;  // ten minutes without any heartbeat
  RuleFileVerdict v = Explain(Rule("sdsc"));
  EXPECT_EQ(v.state, RuleFileState::kWaiting);
  EXPECT_EQ(v.request_id, id);
  EXPECT_NE(v.reason.find("no source up: the replicas are on tsukuba-n1"), std::string::npos)
      << v.reason;
}

TEST_F(PolicyExplainTest, BackoffAfterAnErrorAndThenFailure) {
  const std::uint64_t id = RuleRequest();
  catalog::TaskSpec ts;
  ts.request_id = id;
  ts.path = "/exp/f";
  ts.src_node = "tsukuba-n1";
  ts.dst_node = "sdsc-n1";
  ts.max_attempts = 2;
  ASSERT_TRUE(cat_->CreateTasks({ts}).ok());
  auto t = cat_->ClaimTask("sdsc-n1", "w", std::chrono::seconds(10));
  ASSERT_TRUE(t.ok()) << t.status();
  ASSERT_TRUE(cat_->FailTask(t->id, "w", "UNAVAILABLE: connect tsukuba-n1: refused", true,
                             std::chrono::minutes(5))
                  .ok());
  RuleFileVerdict v = Explain(Rule("sdsc"));
  EXPECT_EQ(v.state, RuleFileState::kWaiting);
  EXPECT_NE(v.reason.find("backing off until"), std::string::npos) << v.reason;
  EXPECT_NE(v.reason.find("connect tsukuba-n1: refused"), std::string::npos) << v.reason;

  now_.now_ns += 400'000'000'000;  // past the backoff: the agent claims it again, and fails
  t = cat_->ClaimTask("sdsc-n1", "w", std::chrono::seconds(10));
  ASSERT_TRUE(t.ok()) << t.status();
  v = Explain(Rule("sdsc"));
  EXPECT_EQ(v.state, RuleFileState::kInFlight);
  EXPECT_NE(v.reason.find("copying now from tsukuba-n1"), std::string::npos) << v.reason;
  ASSERT_TRUE(cat_->FailTask(t->id, "w", "DATA_LOSS: checksum", true, std::chrono::seconds(0)).ok());
  v = Explain(Rule("sdsc"));
  EXPECT_EQ(v.state, RuleFileState::kFailed);
  EXPECT_NE(v.reason.find("failed after 2 attempts: DATA_LOSS: checksum"), std::string::npos)
      << v.reason;

  // gfpolicy status: the rule's files by state.
  auto s = StatusOfRule(*cat_, Rule("sdsc"), 10, now_);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->files, 1u);
  EXPECT_EQ(s->failed, 1u);
  ASSERT_EQ(s->unsatisfied.size(), 1u);
  EXPECT_EQ(s->unsatisfied[0].path, "/exp/f");
}

TEST_F(PolicyExplainTest, AFileWhoseCopyFailedIsExplainedFromItsRowWithoutTheRequestsTasks) {
  // The request's row of the file (request_files) says it failed and why: explain reads no
  // task (before, it listed every task of the request for each file it explained).
  const std::uint64_t id = RuleRequest();
  ASSERT_TRUE(cat_->AddRequestFiles(id, {{"/exp/f", ""}}, /*last=*/true).ok());
  catalog::TaskSpec ts;
  ts.request_id = id;
  ts.path = "/exp/f";
  ts.src_node = "tsukuba-n1";
  ts.dst_node = "sdsc-n1";
  ts.max_attempts = 1;
  ASSERT_TRUE(cat_->CreateTasks({ts}).ok());
  auto t = cat_->ClaimTask("sdsc-n1", "w", std::chrono::seconds(10));
  ASSERT_TRUE(t.ok()) << t.status();
  ASSERT_TRUE(
      cat_->FailTask(t->id, "w", "DATA_LOSS: checksum", false, std::chrono::seconds(0)).ok());
  testing::FaultyView counting(cat_.get());
  auto v = ExplainPath(counting, {Rule("sdsc")}, "/exp/f", now_);
  ASSERT_TRUE(v.ok()) << v.status();
  ASSERT_EQ(v->size(), 1u);
  EXPECT_EQ(v->front().state, RuleFileState::kFailed);
  EXPECT_EQ(v->front().request_id, id);
  EXPECT_NE(
      v->front().reason.find("tsukuba-n1 -> sdsc-n1 failed after 1 attempts: DATA_LOSS: checksum"),
      std::string::npos)
      << v->front().reason;
  EXPECT_EQ(counting.tasks_read.load(), 0u);
}

}  // namespace
}  // namespace gfrep::replica::plan
