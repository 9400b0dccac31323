#include "replica/policy_engine.h"

#include <gtest/gtest.h>
#include <spdlog/sinks/null_sink.h>
#include <spdlog/spdlog.h>

#include "tests/support/temp_dir.h"

namespace gfrep::replica {
namespace {

using catalog::RequestState;

class PolicyEngineTest : public ::testing::Test {
 protected:
  void SetUp() override {
    catalog::CatalogOptions o;
    o.path = dir_.Sub("db");
    o.sync = false;
    auto c = catalog::OpenRocksCatalog(o);
    ASSERT_TRUE(c.ok()) << c.status();
    cat_ = std::move(*c);
    for (const auto& [name, region] : std::vector<std::pair<std::string, std::string>>{
             {"kek", "jp"}, {"tsukuba", "jp"}, {"sdsc", "us"}}) {
      ASSERT_TRUE(cat_->PutSite({name, {{"region", region}}}).ok());
      catalog::Node n;
      n.name = name + "-n1";
      n.site = name;
      n.address = "127.0.0.1:1";
      ASSERT_TRUE(cat_->RegisterNode(n).ok());
    }
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

  std::unique_ptr<PolicyEngine> Make() {
    PolicyEngineOptions o;
    o.catalog = cat_.get();
    o.state_file = dir_.path() / "policy-state.json";
    o.clock = [this] { return now_ns_; };
    o.logger = std::make_shared<spdlog::logger>("test", std::make_shared<spdlog::sinks::null_sink_mt>());
    return std::make_unique<PolicyEngine>(o);
  }

  // Requests made by policies, oldest first.
  std::vector<catalog::Request> PolicyRequests() {
    auto all = cat_->ListRequests(true, RequestState::kQueued, 1000);
    EXPECT_TRUE(all.ok());
    std::vector<catalog::Request> out;
    for (auto it = all->rbegin(); it != all->rend(); ++it) {
      if (it->spec.owner.rfind(kPolicyOwnerPrefix, 0) == 0) out.push_back(*it);
    }
    return out;
  }

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
  EXPECT_EQ(reqs[0].spec.owner, "policy:exp-in-japan");

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
  // Once a site carries the label, a reload applies the rule.
  ASSERT_TRUE(cat_->PutSite({"cern", {{"region", "eu"}}}).ok());
  engine->Reload(Rules(R"(
rules:
  - name: nowhere
    paths: ["/exp/**"]
    sites: region=eu
)"));
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

}  // namespace
}  // namespace gfrep::replica
