// Replication policies with real processes on loopback: gfcatalogd --policies FILE enforces a
// continuous rule (a file stored under its pattern gets its copies with no gfrep), and
// SIGHUP reloads the file (a file with mistakes is refused; the rules in force stay).
#include <gtest/gtest.h>

#include <chrono>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <thread>

#include "tests/support/federation.h"

namespace gfrep {
namespace {

using testing::RunResult;

class PolicyTest : public testing::FederationTest {
 protected:
  PolicyTest() : FederationTest("policy") {}

  void SetUp() override {
    policy_file_ = dir_.Sub("policies.yaml");
    Write(R"(rules:
  - name: exp-in-japan
    paths: ["/exp/**"]
    copies: 2
    sites: region=jp
)");
    testing::FederationOptions o;
    o.catalogd_flags = {"--policies", policy_file_, "--release-interval", "0.3"};
    StartFederation({{"kek1", "kek"}, {"tsukuba1", "tsukuba"}, {"sdsc1", "sdsc"}}, o);
    // Site labels (gfsite label), as an operator sets them.
    for (const auto& [site, region] : std::vector<std::pair<std::string, std::string>>{
             {"kek", "jp"}, {"tsukuba", "jp"}, {"sdsc", "us"}}) {
      RunResult r = Tool({"gfsite", "label", site, "region=" + region});
      ASSERT_EQ(r.exit_code, 0) << r.err;
    }
  }

  void Write(const std::string& text) { std::ofstream(policy_file_) << text; }

  // Waits (bounded) until `path` has complete replicas exactly on `nodes`.
  bool WaitReplicas(const std::string& path, const std::set<std::string>& nodes) {
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (std::chrono::steady_clock::now() < deadline) {
      std::set<std::string> complete;
      for (const auto& [node, state] : States(path)) {
        if (state == "complete") complete.insert(node);
      }
      if (complete == nodes) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }
    ADD_FAILURE() << path << ": " << Where(path).dump();
    return false;
  }

  std::string policy_file_;
};

TEST_F(PolicyTest, AFileStoredUnderAContinuousRuleGetsItsCopiesWithoutGfrep) {
  const std::string bytes = Store("/exp/run7/f", 200000, 31, "sdsc1");
  EXPECT_TRUE(WaitReplicas("/exp/run7/f", {"kek1", "tsukuba1", "sdsc1"}));
  EXPECT_EQ(Replica("kek1", "/exp/run7/f"), bytes);
  EXPECT_EQ(Replica("tsukuba1", "/exp/run7/f"), bytes);
  // A file outside the pattern is left alone.
  Store("/tmp/scratch", 1000, 32, "sdsc1");
  std::this_thread::sleep_for(std::chrono::seconds(2));
  EXPECT_EQ(States("/tmp/scratch").size(), 1u);
}

TEST_F(PolicyTest, SighupReloadsTheFileAndRefusesOneWithMistakes) {
  Write("rules:\n  - name: broken\n    paths: [/exp/**]\n    copies: many\n    sites: kek\n");
  catalogd_.Signal(SIGHUP);
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  EXPECT_TRUE(catalogd_.running());
  // The rule in force still works.
  Store("/exp/a", 1000, 33, "sdsc1");
  EXPECT_TRUE(WaitReplicas("/exp/a", {"kek1", "tsukuba1", "sdsc1"}));
  // A good file replaces the rules; existing files are covered at once.
  Store("/sim/b", 1000, 34, "kek1");
  Write("rules:\n  - name: sim-to-us\n    paths: [/sim/**]\n    copies: 1\n    sites: region=us\n");
  catalogd_.Signal(SIGHUP);
  EXPECT_TRUE(WaitReplicas("/sim/b", {"kek1", "sdsc1"}));
  EXPECT_NE(catalogd_.Stderr().find("refused, the rules in force stay"), std::string::npos)
      << catalogd_.Stderr();
  EXPECT_NE(catalogd_.Stderr().find("4:13: copies: must be a whole number"), std::string::npos);
}

TEST_F(PolicyTest, GfpolicyChangesTheRulesInForceAndExplainsEachFile) {
  RunResult r = Tool({"gfpolicy", "list"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("exp-in-japan: 2 copies of /exp/** in 'region=jp'"), std::string::npos) << r.out;

  // A rule whose sites select nothing: explained, not silently ignored.
  const std::string mars = dir_.Sub("mars.yaml");
  std::ofstream(mars) << "rules:\n  - name: to-mars\n    paths: [/mars/**]\n    sites: region=mars\n";
  r = Tool({"gfpolicy", "add", mars});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("2 rule(s) in force"), std::string::npos) << r.out;
  Store("/mars/f", 1000, 35, "kek1");
  r = Tool({"gfpolicy", "explain", "/mars/f"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.out.find("rule to-mars: waiting"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("no eligible site: 'region=mars' selects no site"), std::string::npos) << r.out;

  // A satisfied file, and the rule's status.
  Store("/exp/s", 1000, 36, "sdsc1");
  EXPECT_TRUE(WaitReplicas("/exp/s", {"kek1", "tsukuba1", "sdsc1"}));
  r = Tool({"gfpolicy", "explain", "/exp/s", "--json"});
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  nlohmann::json j = nlohmann::json::parse(r.out);
  ASSERT_EQ(j.size(), 1u);
  EXPECT_EQ(j[0]["state"], "satisfied");
  EXPECT_EQ(j[0]["have"], 2);
  r = Tool({"gfpolicy", "status", "exp-in-japan"});
  EXPECT_EQ(r.exit_code, 0) << r.out;
  EXPECT_NE(r.out.find("1 files: 1 satisfied"), std::string::npos) << r.out;
  r = Tool({"gfpolicy", "explain", "/tmp-nothing"});
  EXPECT_EQ(r.exit_code, 2) << "no such file";

  // rm, and a file with mistakes is refused by apply and check alike.
  r = Tool({"gfpolicy", "rm", "to-mars"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  r = Tool({"gfpolicy", "show", "to-mars"});
  EXPECT_EQ(r.exit_code, 2);
  const std::string bad = dir_.Sub("bad.yaml");
  std::ofstream(bad) << "rules:\n  - name: x\n    paths: [/x]\n    sites: kek\n    copies: 0\n";
  r = Tool({"gfpolicy", "apply", bad});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("bad.yaml:5:13: copies"), std::string::npos) << r.err;
  r = Tool({"gfpolicy", "check", bad});
  EXPECT_EQ(r.exit_code, 1);
  r = Tool({"gfpolicy", "list", "--json"});
  j = nlohmann::json::parse(r.out);
  ASSERT_EQ(j.size(), 1u);
  EXPECT_EQ(j[0]["name"], "exp-in-japan");
}

TEST_F(PolicyTest, ARulesCopiesGoWhenItsLifetimeEndsAndTheFileKeepsItsOwn) {
  Write(R"(rules:
  - name: scratch-in-us
    paths: ["/scratch/**"]
    copies: 1
    sites: sdsc
    lifetime: 4s
)");
  catalogd_.Signal(SIGHUP);
  const std::string bytes = Store("/scratch/f", 100000, 37, "kek1");
  ASSERT_TRUE(WaitReplicas("/scratch/f", {"kek1", "sdsc1"}));
  EXPECT_EQ(Replica("sdsc1", "/scratch/f"), bytes);
  // After the lifetime the sdsc copy goes (deleting, unlinked by its node, forgotten).
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (States("/scratch/f").size() > 1 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  EXPECT_EQ(States("/scratch/f"), (std::map<std::string, std::string>{{"kek1", "complete"}}))
      << Where("/scratch/f").dump();
  EXPECT_NE(catalogd_.Stderr().find("lifetime of rule scratch-in-us (4 s) ended; the copy goes"),
            std::string::npos)
      << catalogd_.Stderr();
  RunResult r = Tool({"gfpolicy", "explain", "/scratch/f"});
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("rule scratch-in-us: ended"), std::string::npos) << r.out;
  // The file itself is still readable from its own replica.
  r = Tool({"gfexport", "--site", "kek", "--node", "kek1", "/scratch/f"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, bytes);
}

}  // namespace
}  // namespace gfrep
