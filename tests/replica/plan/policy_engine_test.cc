#include "replica/plan/policy_engine.h"

#include "replica/plan/holds.h"

#include <gtest/gtest.h>
#include <spdlog/sinks/null_sink.h>
#include <spdlog/spdlog.h>

#include "tests/support/scratch_catalog.h"
#include "tests/support/temp_dir.h"

namespace gfrep::replica::plan {
namespace {

using catalog::RequestState;

class PolicyEngineTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto c = gfrep::testing::OpenScratchCatalog(dir_.Sub("db"), [this] { return now_ns_; });
    ASSERT_TRUE(c.ok()) << c.status();
    cat_ = std::move(*c);
    ASSERT_TRUE(gfrep::testing::AddJapanUsSites(*cat_).ok());
  }

  void Commit(const std::string& path, const std::string& node = "kek-n1") {
    catalog::MkdirOptions m;
    m.parents = true;
    ASSERT_TRUE(cat_->Mkdir(path.substr(0, path.rfind('/')), m).ok());
    catalog::FileContent c;
    c.size = 10;
    c.checksum_algo = "xxh3-128";
    c.checksum = "ab";
    ASSERT_TRUE(cat_->CommitFile(path, c, node, std::nullopt).ok());
  }

  std::vector<PolicyRule> Rules(const std::string& yaml) {
    auto r = ParsePolicies(yaml, "test.yaml");
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? *r : std::vector<PolicyRule>{};
  }

  std::unique_ptr<PolicyEngine> Make(std::chrono::milliseconds removed_grace = std::chrono::hours(1)) {
    PolicyEngineOptions o;
    o.catalog = cat_.get();
    o.release_interval = std::chrono::milliseconds(0);
    o.removed_rule_grace = removed_grace;
    o.state_file = dir_.path() / "policy-state.json";
    o.clock = [this] { return now_ns_; };
    o.logger = std::getenv("TEST_LOG") ? spdlog::default_logger() : std::make_shared<spdlog::logger>("test", std::make_shared<spdlog::sinks::null_sink_mt>());
    return std::make_unique<PolicyEngine>(o);
  }

  // Requests made by policies, oldest first.
  std::vector<catalog::Request> PolicyRequests() {
    auto all = cat_->ListRequests(true, RequestState::kQueued, 1000);
    EXPECT_TRUE(all.ok());
    std::vector<catalog::Request> out;
    for (auto it = all->rbegin(); it != all->rend(); ++it) {
      if (it->spec.origin == catalog::RequestOrigin::kPolicy) out.push_back(*it);
    }
    return out;
  }

  // What the planner and a site agent would do for request `id`: a copy of `path` to `dst`,
  // committed complete.
  void Copy(std::uint64_t id, const std::string& path, const std::string& dst) {
    catalog::TaskSpec t;
    t.request_id = id;
    t.path = path;
    t.src_node = "kek-n1";
    t.dst_node = dst;
    auto made = cat_->CreateTasks({t});
    ASSERT_TRUE(made.ok()) << made.status();
    auto claimed = cat_->ClaimTask(dst, "w", std::chrono::seconds(60));
    ASSERT_TRUE(claimed.ok()) << claimed.status();
    auto done = cat_->CompleteTask(claimed->id, "w");
    ASSERT_TRUE(done.ok()) << done.status();
  }

  // Replica state per node of `path`.
  std::map<std::string, catalog::ReplicaState> States(const std::string& path) {
    std::map<std::string, catalog::ReplicaState> out;
    auto loc = cat_->Locate(path);
    EXPECT_TRUE(loc.ok()) << loc.status();
    if (!loc.ok()) return out;
    for (const catalog::Replica& r : loc->replicas) out[r.node] = r.state;
    return out;
  }

  void Advance(absl::Duration d) { now_ns_ += absl::ToInt64Nanoseconds(d); }

  gfrep::testing::TempDir dir_{"policy-engine"};
  std::unique_ptr<catalog::Catalog> cat_;
  std::int64_t now_ns_ = absl::ToUnixNanos(absl::FromCivil(absl::CivilMinute(2026, 11, 24, 12, 0),
                                                           absl::UTCTimeZone()));
};

constexpr const char* kContinuous = R"(
rules:
  - name: exp-in-japan
    paths: ["/exp/**"]
    copies: 2
    sites: region=jp
    priority: 5
)";

TEST_F(PolicyEngineTest, AContinuousRuleCoversOldFilesAtOnceAndNewFilesAsTheyAppear) {
  Commit("/exp/old/a");
  Commit("/other/x");
  auto engine = Make();
  engine->Reload(Rules(kContinuous));
  auto s = engine->Step();
  ASSERT_TRUE(s.ok()) << s.status();
  std::vector<catalog::Request> reqs = PolicyRequests();
  ASSERT_EQ(reqs.size(), 1u);
  EXPECT_EQ(reqs[0].spec.paths, std::vector<std::string>{"/exp/old/a"});
  EXPECT_EQ(reqs[0].spec.copies, 2u);
  EXPECT_EQ(reqs[0].spec.dst_sites, (std::vector<std::string>{"kek", "tsukuba"}));
  EXPECT_EQ(reqs[0].spec.priority, 5);
  EXPECT_EQ(reqs[0].spec.owner, "exp-in-japan");
  EXPECT_EQ(catalog::DescribeOwner(reqs[0].spec), "policy:exp-in-japan");

  // New files: only those under the pattern, one request for all of a step's.
  Commit("/exp/new/b");
  Commit("/exp/new/c");
  Commit("/other/y");
  s = engine->Step();
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->requests_created, 1u);
  reqs = PolicyRequests();
  ASSERT_EQ(reqs.size(), 2u);
  EXPECT_EQ(reqs[1].spec.paths, (std::vector<std::string>{"/exp/new/b", "/exp/new/c"}));

  // A copy of a generation already seen (another replica becoming complete) asks nothing.
  auto a = cat_->Stat("/exp/new/b");
  ASSERT_TRUE(a.ok());
  catalog::Replica copy;
  copy.inode = a->inode;
  copy.node = "tsukuba-n1";
  copy.state = catalog::ReplicaState::kComplete;
  copy.generation = a->generation;
  copy.size = 10;
  ASSERT_TRUE(cat_->PutReplica(copy).ok());
  s = engine->Step();
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->requests_created, 0u);
  // A new version is a new file to the rule.
  Commit("/exp/new/b", "sdsc-n1");
  s = engine->Step();
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->requests_created, 1u);
}

TEST_F(PolicyEngineTest, ARuleWhoseSitesSelectNothingWaits) {
  Commit("/exp/a");
  auto engine = Make();
  engine->Reload(Rules(R"(
rules:
  - name: nowhere
    paths: ["/exp/**"]
    sites: region=eu
)"));
  auto s = engine->Step();
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->requests_created, 0u);
  EXPECT_TRUE(PolicyRequests().empty());
  // Once a site carries the label, the waiting files are asked for (no reload needed).
  ASSERT_TRUE(cat_->PutSite({"cern", {{"region", "eu"}}}).ok());
  s = engine->Step();
  ASSERT_TRUE(s.ok());
  ASSERT_EQ(PolicyRequests().size(), 1u);
  EXPECT_EQ(PolicyRequests()[0].spec.dst_sites, std::vector<std::string>{"cern"});
}

constexpr const char* kNightly = R"(
rules:
  - name: nightly-mirror
    paths: ["/sim/**"]
    copies: 1
    sites: sdsc
    source_sites: tsukuba
    schedule: "0 2 * * *"
    timezone: Asia/Tokyo
)";

TEST_F(PolicyEngineTest, AScheduledRuleRunsAtItsTimeAndAMissedRunIsMadeUpOnce) {
  Commit("/sim/s1", "tsukuba-n1");
  auto engine = Make();
  engine->Reload(Rules(kNightly));
  auto s = engine->Step();  // 2026-11-24 12:00 UTC: a new schedule starts now
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->scheduled_runs, 0u);
  EXPECT_TRUE(PolicyRequests().empty()) << "a scheduled-only rule is not applied at load";
  now_ns_ += absl::ToInt64Nanoseconds(absl::Hours(4));  // 16:00 UTC: before 02:00 JST (17:00)
  s = engine->Step();
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->scheduled_runs, 0u);
  now_ns_ += absl::ToInt64Nanoseconds(absl::Hours(1) + absl::Minutes(1));  // 17:01 UTC
  s = engine->Step();
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->scheduled_runs, 1u);
  std::vector<catalog::Request> reqs = PolicyRequests();
  ASSERT_EQ(reqs.size(), 1u);
  EXPECT_EQ(reqs[0].spec.paths, std::vector<std::string>{"/sim/s1"});
  EXPECT_EQ(reqs[0].spec.src_site, "tsukuba");
  EXPECT_EQ(reqs[0].spec.dst_sites, std::vector<std::string>{"sdsc"});
  s = engine->Step();
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->scheduled_runs, 0u) << "once per night";

  // gfcatalogd is down for three nights; the new one makes the run up once.
  engine->Stop();
  engine.reset();
  now_ns_ += absl::ToInt64Nanoseconds(absl::Hours(24 * 3 + 5));
  auto again = Make();
  again->Reload(Rules(kNightly));
  s = again->Step();
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->scheduled_runs, 1u);
  s = again->Step();
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->scheduled_runs, 0u);
  EXPECT_EQ(PolicyRequests().size(), 2u);
}

constexpr const char* kLifetime = R"(
rules:
  - name: scratch
    paths: ["/exp/**"]
    copies: 2
    sites: "tsukuba|sdsc"
    lifetime: 1d
)";

TEST_F(PolicyEngineTest, ALifetimeEndRemovesTheRulesCopiesAndNeverTheLast) {
  Commit("/exp/a");  // on kek-n1: the file's own replica
  Commit("/exp/b");
  auto engine = Make();
  engine->Reload(Rules(kLifetime));
  ASSERT_TRUE(engine->Step().ok());
  std::vector<catalog::Request> reqs = PolicyRequests();
  ASSERT_EQ(reqs.size(), 1u);
  Copy(reqs[0].id, "/exp/a", "tsukuba-n1");
  Copy(reqs[0].id, "/exp/a", "sdsc-n1");
  Copy(reqs[0].id, "/exp/b", "tsukuba-n1");
  Copy(reqs[0].id, "/exp/b", "sdsc-n1");
  // /exp/b's own replica is gone: the rule's copies are all it has.
  auto b = cat_->Stat("/exp/b");
  ASSERT_TRUE(b.ok());
  ASSERT_TRUE(cat_->RemoveReplica(b->inode, "kek-n1").ok());

  Advance(absl::Hours(23));
  auto s = engine->Step();
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->replicas_released, 0u) << "not before its lifetime";

  Advance(absl::Hours(2));
  s = engine->Step();
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->holds_ended, 2u);
  using catalog::ReplicaState;
  EXPECT_EQ(States("/exp/a"), (std::map<std::string, ReplicaState>{{"kek-n1", ReplicaState::kComplete},
                                                                    {"tsukuba-n1", ReplicaState::kDeleting},
                                                                    {"sdsc-n1", ReplicaState::kDeleting}}));
  std::map<std::string, ReplicaState> left = States("/exp/b");
  EXPECT_EQ(std::count_if(left.begin(), left.end(), [](const auto& kv) { return kv.second == ReplicaState::kComplete; }),
            1)
      << "the last complete replica stays";
  EXPECT_EQ(s->replicas_released, 3u);

  // While the request still runs, its ended holds stay (copies it finishes later go too);
  // once it is over they are released, and each hold ends once.
  s = engine->Step();
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->holds_ended, 2u);
  EXPECT_EQ(s->replicas_released, 0u);
  catalog::RequestUpdate u;
  u.id = reqs[0].id;
  u.set_state = true;
  u.state = RequestState::kDone;
  ASSERT_TRUE(cat_->UpdateRequest(u).ok());
  ASSERT_TRUE(engine->Step().ok());

  // A reload does not ask again for files whose lifetime ended; a new file gets its copies.
  Commit("/exp/c");
  engine->Reload(Rules(kLifetime));
  ASSERT_TRUE(engine->Step().ok());
  reqs = PolicyRequests();
  ASSERT_EQ(reqs.size(), 2u);
  EXPECT_EQ(reqs[1].spec.paths, std::vector<std::string>{"/exp/c"});
  s = engine->Step();
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->holds_ended, 0u) << "each hold ends once";
}

TEST(LifetimeEndedTest, EndsAfterItsLifetimeAndNeverEarlyForVeryLongOnes) {
  const std::int64_t now = 1'795'500'000'000'000'000;  // 2026
  EXPECT_FALSE(LifetimeEnded(now - 3599'000'000'000, std::chrono::hours(1), now));
  EXPECT_TRUE(LifetimeEnded(now - 3600'000'000'000, std::chrono::hours(1), now));
  // 99999 days and 50000 weeks overflowed int64 nanoseconds and ended at once.
  EXPECT_FALSE(LifetimeEnded(now - 1'000'000'000, std::chrono::hours(24 * 99999), now));
  EXPECT_FALSE(LifetimeEnded(now - 1'000'000'000, std::chrono::hours(24 * 7 * 50000), now));
  EXPECT_FALSE(LifetimeEnded(now, std::chrono::seconds(0), now - 1)) << "not before it began";
}

TEST_F(PolicyEngineTest, CopiesAnotherRuleOrAGfrepRequestNeedsStayAfterALifetime) {
  Commit("/exp/a");
  Commit("/exp/b");
  auto engine = Make();
  engine->Reload(Rules(std::string(kLifetime) + R"(
  - name: keep-one-in-us
    paths: ["/exp/b"]
    sites: sdsc
)"));
  ASSERT_TRUE(engine->Step().ok());
  std::vector<catalog::Request> reqs = PolicyRequests();
  ASSERT_EQ(reqs.size(), 2u);
  const std::uint64_t scratch = reqs[0].spec.owner == "scratch" ? reqs[0].id : reqs[1].id;
  Copy(scratch, "/exp/a", "tsukuba-n1");
  Copy(scratch, "/exp/a", "sdsc-n1");
  Copy(scratch, "/exp/b", "tsukuba-n1");
  Copy(scratch, "/exp/b", "sdsc-n1");
  // `gfrep -N 3 /exp/a`: a rule of its own, without end.
  catalog::RequestSpec user;
  user.paths = {"/exp/a"};
  user.copies = 3;
  user.owner = "alice";
  ASSERT_TRUE(cat_->CreateRequest(user).ok());

  Advance(absl::Hours(25));
  auto s = engine->Step();
  ASSERT_TRUE(s.ok()) << s.status();
  using catalog::ReplicaState;
  EXPECT_EQ(States("/exp/a"), (std::map<std::string, ReplicaState>{{"kek-n1", ReplicaState::kComplete},
                                                                    {"tsukuba-n1", ReplicaState::kComplete},
                                                                    {"sdsc-n1", ReplicaState::kComplete}}))
      << "alice's request wants three copies";
  EXPECT_EQ(States("/exp/b"), (std::map<std::string, ReplicaState>{{"kek-n1", ReplicaState::kComplete},
                                                                    {"tsukuba-n1", ReplicaState::kDeleting},
                                                                    {"sdsc-n1", ReplicaState::kComplete}}))
      << "keep-one-in-us wants the sdsc copy";
}

TEST_F(PolicyEngineTest, ARemovedRulesCopiesGoAfterTheGraceUnlessItComesBack) {
  Commit("/exp/a");
  constexpr const char* kTwo = R"(
rules:
  - name: two
    paths: ["/exp/**"]
    copies: 1
    sites: sdsc
)";
  auto engine = Make(std::chrono::hours(1));
  engine->Reload(Rules(kTwo));
  ASSERT_TRUE(engine->Step().ok());
  std::vector<catalog::Request> reqs = PolicyRequests();
  ASSERT_EQ(reqs.size(), 1u);
  Copy(reqs[0].id, "/exp/a", "sdsc-n1");
  using catalog::ReplicaState;

  // Removed by mistake and put back within the grace: nothing is lost.
  engine->Reload({});
  ASSERT_TRUE(engine->Step().ok());
  Advance(absl::Minutes(30));
  engine->Reload(Rules(kTwo));
  ASSERT_TRUE(engine->Step().ok());
  Advance(absl::Hours(2));
  ASSERT_TRUE(engine->Step().ok());
  EXPECT_EQ(States("/exp/a")["sdsc-n1"], ReplicaState::kComplete);

  // Removed for good: after the grace the copy goes, the file's own replica stays.
  engine->Reload({});
  ASSERT_TRUE(engine->Step().ok());
  Advance(absl::Minutes(59));
  ASSERT_TRUE(engine->Step().ok());
  EXPECT_EQ(States("/exp/a")["sdsc-n1"], ReplicaState::kComplete);
  Advance(absl::Minutes(2));
  auto s = engine->Step();
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(States("/exp/a"), (std::map<std::string, ReplicaState>{{"kek-n1", ReplicaState::kComplete},
                                                                    {"sdsc-n1", ReplicaState::kDeleting}}));
}

TEST_F(PolicyEngineTest, AnEngineThatHasNotReadTheRulesReleasesNothing) {
  Commit("/exp/a");
  auto engine = Make(std::chrono::hours(0));
  engine->Reload(Rules(kContinuous));
  ASSERT_TRUE(engine->Step().ok());
  std::vector<catalog::Request> reqs = PolicyRequests();
  ASSERT_EQ(reqs.size(), 1u);
  Copy(reqs[0].id, "/exp/a", "tsukuba-n1");
  engine->Stop();
  engine.reset();
  // A restarted engine with no rules loaded yet (no policy document, no Reload).
  auto fresh = Make(std::chrono::hours(0));
  Advance(absl::Hours(2));
  ASSERT_TRUE(fresh->Step().ok());
  EXPECT_EQ(States("/exp/a")["tsukuba-n1"], catalog::ReplicaState::kComplete);
}

}  // namespace
}  // namespace gfrep::replica::plan
