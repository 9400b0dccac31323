#include "replica/core/site_expr.h"

#include <gtest/gtest.h>

namespace gfrep::replica {
namespace {

std::vector<catalog::Site> Sites() {
  return {
      {"kek", {{"region", "jp"}, {"tier", "1"}}},
      {"tsukuba", {{"region", "jp"}, {"tier", "2"}, {"tape", "true"}}},
      {"sdsc", {{"region", "us"}, {"tier", "1"}, {"tape", "yes"}}},
      {"cern", {{"region", "eu"}, {"tier", "0"}, {"tape", "false"}}},
      {"desy", {{"region", "eu"}, {"tier", "2"}}},
  };
}

struct Case {
  const char* expr;
  std::set<std::string> want;
};

TEST(SiteExprTest, SelectsSitesByNameLabelAndSetOperations) {
  const Case cases[] = {
      {"kek", {"kek"}},
      {"*", {"kek", "tsukuba", "sdsc", "cern", "desy"}},
      {"region=jp", {"kek", "tsukuba"}},
      {"region!=jp", {"sdsc", "cern", "desy"}},
      {"kek|sdsc", {"kek", "sdsc"}},
      {"tier=1&!tape", {"kek"}},          // tape=yes/true count, tape=false does not
      {"tape", {"tsukuba", "sdsc"}},
      {"!tape", {"kek", "cern", "desy"}},
      {"region=eu|region=us", {"sdsc", "cern", "desy"}},
      {"*\\region=jp", {"sdsc", "cern", "desy"}},
      {"region=jp\\tape", {"kek"}},
      {"tier<2", {"kek", "sdsc", "cern"}},
      {"tier>0 & region=eu", {"desy"}},
      {"(kek|cern)&tier=1", {"kek"}},
      {"kek|cern&tier=1", {"kek"}},       // & binds tighter than |
      {"!(region=jp|region=us)", {"cern", "desy"}},
      {"!!kek", {"kek"}},
      {"nosuchsite", {}},
      {"nolabel=x", {}},
      {"  region = jp  &  tier = 2 ", {"tsukuba"}},
  };
  for (const Case& c : cases) {
    absl::StatusOr<SiteExpr> e = SiteExpr::Parse(c.expr);
    ASSERT_TRUE(e.ok()) << c.expr << ": " << e.status();
    EXPECT_EQ(e->Evaluate(Sites()), c.want) << c.expr;
    EXPECT_EQ(e->text(), c.expr);
  }
}

TEST(SiteExprTest, MistakesAreNamedWithTheirColumn) {
  const std::pair<const char*, const char*> cases[] = {
      {"", "column 1: expected a site or label"},
      {"kek|", "column 5: expected a site or label"},
      {"(kek|sdsc", "column 10: expected ')'"},
      {"kek)", "column 4: unexpected ')'"},
      {"region=", "column 8: expected a value for label 'region'"},
      {"tier<x", "'x' is not a number"},
      {"kek sdsc", "column 5: unexpected 's'"},
      {"&kek", "column 1: expected a site or label"},
  };
  for (const auto& [text, want] : cases) {
    absl::StatusOr<SiteExpr> e = SiteExpr::Parse(text);
    ASSERT_FALSE(e.ok()) << text;
    EXPECT_EQ(e.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(std::string(e.status().message()).find(want), std::string::npos)
        << text << ": " << e.status();
  }
  EXPECT_FALSE(SiteExpr::Parse(std::string(100, '(') + "kek" + std::string(100, ')')).ok())
      << "nesting is bounded";
  EXPECT_TRUE(SiteExpr::Parse(std::string(20, '(') + "kek" + std::string(20, ')')).ok());
}

}  // namespace
}  // namespace gfrep::replica
