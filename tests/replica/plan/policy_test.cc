#include "replica/plan/policy.h"

#include <gtest/gtest.h>

#include <fstream>

#include "tests/support/temp_dir.h"

namespace gfrep::replica::plan {
namespace {

TEST(PolicyTest, PathPatterns) {
  const std::tuple<const char*, const char*, bool> cases[] = {
      {"/exp/**", "/exp", true},
      {"/exp/**", "/exp/a/b/c.root", true},
      {"/exp/**", "/expx/a", false},
      {"/sim/2026/*.root", "/sim/2026/run1.root", true},
      {"/sim/2026/*.root", "/sim/2026/sub/run1.root", false},
      {"/sim/2026/*.root", "/sim/2026/run1.rootx", false},
      {"/sim/**/*.root", "/sim/a/b/x.root", true},
      {"/sim/**/*.root", "/sim/x.root", true},
      {"/sim/**/calib/*", "/sim/2026/calib/c1", true},
      {"/sim/**/calib/*", "/sim/2026/calib", false},
      {"/d/run-??", "/d/run-07", true},
      {"/d/run-??", "/d/run-7", false},
      {"/d/*a*b*", "/d/xxaxxbxx", true},
      {"/d/*a*b*", "/d/xxbxxaxx", false},
      {"/**", "/anything/at/all", true},
      {"/exact/name", "/exact/name", true},
  };
  for (const auto& [pattern, path, want] : cases) {
    EXPECT_EQ(MatchPath(pattern, path), want) << pattern << " vs " << path;
  }
}

// Many "**" against a deep path (found by tests/fuzz/policy_fuzz.cc: backtracking took over a
// minute for 8 "**" and 48 components; this test ran into ctest's timeout before the fix).
TEST(PolicyTest, ManyDoubleStarsAgainstADeepPath) {
  std::string deep;
  for (int i = 0; i < 400; ++i) deep += "/a";
  EXPECT_FALSE(MatchPath("/**/**/**/**/**/**/**/**/x", deep));
  EXPECT_TRUE(MatchPath("/**/**/**/**/**/**/**/**/x", deep + "/x"));
  EXPECT_FALSE(MatchPath("/**/a/**/a/**/a/**/z", deep));
  EXPECT_TRUE(MatchPath("/**/a/**/a/**/a/**/z", deep + "/z"));
  EXPECT_FALSE(MatchPath("/a/**/b", "/a"));
  EXPECT_TRUE(MatchPath("/a/**/b", "/a/b"));
}

TEST(PolicyTest, AGoodFileGivesItsRules) {
  const char* text = R"(# replication policies of the experiment
rules:
  - name: exp-two-in-japan
    paths: ["/exp/**", "/sim/2026/*.root"]
    copies: 2
    sites: "region=jp & !tape"
    source_sites: tsukuba
    priority: 10
    lifetime: 30d
  - name: nightly-mirror
    path: /sim/**
    copies: 1
    sites: sdsc
    schedule: "0 2 * * *"
    timezone: Asia/Tokyo
)";
  absl::StatusOr<std::vector<PolicyRule>> rules = ParsePolicies(text, "p.yaml");
  ASSERT_TRUE(rules.ok()) << rules.status();
  ASSERT_EQ(rules->size(), 2u);
  const PolicyRule& a = (*rules)[0];
  EXPECT_EQ(a.name, "exp-two-in-japan");
  EXPECT_EQ(a.paths, (std::vector<std::string>{"/exp/**", "/sim/2026/*.root"}));
  EXPECT_EQ(a.copies, 2u);
  EXPECT_EQ(a.sites.text(), "region=jp & !tape");
  ASSERT_TRUE(a.source_sites.has_value());
  EXPECT_EQ(a.source_sites->text(), "tsukuba");
  EXPECT_EQ(a.priority, 10);
  ASSERT_TRUE(a.lifetime.has_value());
  EXPECT_EQ(a.lifetime->count(), 30 * 86400);
  EXPECT_TRUE(a.continuous);
  EXPECT_FALSE(a.schedule.has_value());
  EXPECT_EQ(a.line, 3);
  EXPECT_TRUE(Matches(a, "/exp/run1/f"));
  EXPECT_FALSE(Matches(a, "/sim/2027/x.root"));
  const PolicyRule& b = (*rules)[1];
  EXPECT_EQ(b.paths, std::vector<std::string>{"/sim/**"});
  ASSERT_TRUE(b.schedule.has_value());
  EXPECT_EQ(b.schedule->spec(), "0 2 * * *");
  EXPECT_EQ(b.schedule->time_zone(), "Asia/Tokyo");
  EXPECT_FALSE(b.continuous) << "a scheduled rule is not continuous unless it says so";
  EXPECT_EQ(b.line, 10);

  EXPECT_TRUE(ParsePolicies("", "empty.yaml")->empty());
  EXPECT_TRUE(ParsePolicies("rules:\n", "none.yaml")->empty());
}

TEST(PolicyTest, EachKindOfMistakeIsNamedWithItsLine) {
  const std::pair<const char*, const char*> cases[] = {
      {"rules:\n  - name: a\n    paths: [/x]\n    copies: two\n    sites: kek\n",
       "f.yaml:4:13: copies: must be a whole number 1..100, not 'two'"},
      {"rules:\n  - name: a\n    paths: [/x]\n    copies: 0\n    sites: kek\n",
       "f.yaml:4:13: copies: must be a whole number 1..100"},
      {"rules:\n  - name: a\n    paths: [/x]\n    sites: kek\n    copeis: 2\n",
       "f.yaml:5:5: unknown key 'copeis'"},
      {"rules:\n  - name: a\n    paths: [x/y]\n    sites: kek\n",
       "f.yaml:3:13: paths: 'x/y' is not an absolute path pattern"},
      {"rules:\n  - name: a\n    paths: [/x]\n    sites: \"kek|\"\n",
       "f.yaml:4:12: sites: site expression 'kek|': column 5: expected a site or label"},
      {"rules:\n  - name: a\n    paths: [/x]\n",
       "f.yaml:2:5: rule a: needs sites"},
      {"rules:\n  - paths: [/x]\n    sites: kek\n",
       "f.yaml:2:5: a rule needs a name"},
      {"rules:\n  - name: a\n    paths: [/x]\n    sites: kek\n  - name: a\n    paths: [/y]\n    sites: kek\n",
       "f.yaml:5:11: rule name 'a' is used twice"},
      {"rules:\n  - name: a\n    paths: [/x]\n    sites: kek\n    schedule: \"0 25 * * *\"\n",
       "f.yaml:5:15: schedule: hour field '25'"},
      {"rules:\n  - name: a\n    paths: [/x]\n    sites: kek\n    schedule: \"0 2 * * *\"\n    timezone: Asia/Nowhere\n",
       "f.yaml:6:15: schedule: unknown time zone 'Asia/Nowhere'"},
      {"rules:\n  - name: a\n    paths: [/x]\n    sites: kek\n    timezone: UTC\n",
       "f.yaml:5:15: timezone: only with a schedule"},
      {"rules:\n  - name: a\n    paths: [/x]\n    sites: kek\n    lifetime: forever\n",
       "f.yaml:5:15: lifetime: 'forever' is not a duration"},
      {"rules:\n  - name: a\n    paths: [/x]\n    sites: kek\n    continuous: maybe\n",
       "f.yaml:5:17: continuous: must be true or false"},
      {"rulez:\n  - name: a\n", "f.yaml:1:1: unknown key 'rulez'"},
      {"rules:\n  - name: a\n    paths: [/x\n", "f.yaml:"},  // YAML syntax error, with its place
      {"rules: 5\n", "f.yaml:1:8: rules: expected a list of rules"},
      {"rules:\n  - name: \"a b\"\n    paths: [/x]\n    sites: kek\n",
       "f.yaml:2:11: name: 'a b' is not"},
  };
  for (const auto& [text, want] : cases) {
    absl::StatusOr<std::vector<PolicyRule>> r = ParsePolicies(text, "f.yaml");
    ASSERT_FALSE(r.ok()) << text;
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << text;
    EXPECT_NE(std::string(r.status().message()).find(want), std::string::npos)
        << "want '" << want << "' in: " << r.status();
  }
}

TEST(PolicyTest, LoadsAFileAndSaysWhenItCannot) {
  gfrep::testing::TempDir dir("policy");
  std::string path = dir.Sub("p.yaml");
  std::ofstream(path) << "rules:\n  - name: r\n    paths: [/a/**]\n    sites: '*'\n";
  absl::StatusOr<std::vector<PolicyRule>> r = LoadPolicyFile(path);
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->size(), 1u);
  EXPECT_EQ((*r)[0].sites.text(), "*");
  EXPECT_EQ(LoadPolicyFile(dir.Sub("missing.yaml")).status().code(), absl::StatusCode::kNotFound);
}

TEST(PolicyTest, Durations) {
  EXPECT_EQ(ParseDuration("90m")->count(), 5400);
  EXPECT_EQ(ParseDuration("2w")->count(), 14 * 86400);
  EXPECT_EQ(ParseDuration("3600s")->count(), 3600);
  EXPECT_FALSE(ParseDuration("5").ok());
  EXPECT_FALSE(ParseDuration("-5d").ok());
  EXPECT_FALSE(ParseDuration("5y").ok());
}

}  // namespace
}  // namespace gfrep::replica::plan
