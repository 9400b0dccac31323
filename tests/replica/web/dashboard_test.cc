#include "replica/web/dashboard.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "tests/support/scratch_catalog.h"
#include "tests/support/temp_dir.h"

namespace gfrep::replica::web {
namespace {

// The dashboard's /api pages, called as the HTTP server calls them, over a real catalog.
class DashboardTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto c = gfrep::testing::OpenScratchCatalog(dir_.Sub("db"));
    ASSERT_TRUE(c.ok()) << c.status();
    cat_ = std::move(*c);
    ASSERT_TRUE(cat_->Mkdir("/exp", {}).ok());
    DashboardOptions d;
    d.catalog = cat_.get();
    d.hub = &hub_;
    d.library_dir = dir_.Sub("no-dygraphs");
    dashboard_ = std::make_unique<Dashboard>(d);
    dashboard_->AddRoutes(routes_);
  }

  HttpResponse Get(const std::string& path, std::map<std::string, std::string> query) {
    HttpRequest r;
    r.method = "GET";
    r.path = path;
    r.target = path;
    r.query = std::move(query);
    return routes_.pages.at(path)(r);
  }

  testing::TempDir dir_{"dashboard"};
  std::unique_ptr<catalog::Catalog> cat_;
  TelemetryHub hub_;
  std::unique_ptr<Dashboard> dashboard_;
  HttpRoutes routes_;
};

TEST_F(DashboardTest, ExplainAnswersWithTheCatalogsCodes) {
  EXPECT_EQ(Get("/api/explain", {}).status, 400);
  EXPECT_EQ(Get("/api/explain", {{"path", "relative"}}).status, 400);
  EXPECT_EQ(Get("/api/explain", {{"path", "/no/such"}}).status, 404);
  HttpResponse ok = Get("/api/explain", {{"path", "/exp"}});
  EXPECT_EQ(ok.status, 200);
  EXPECT_EQ(nlohmann::json::parse(ok.body)["path"], "/exp");
}

// Found by tests/fuzz/http_fuzz.cc: the catalog's refusal of a path that is not UTF-8 names
// the path, and the JSON answer threw on it (a 500 instead of the 400).
TEST_F(DashboardTest, ExplainOfAPathThatIsNotUtf8IsABadRequest) {
  HttpResponse r;
  ASSERT_NO_THROW(r = Get("/api/explain", {{"path", "/exp/\xff"}}));
  EXPECT_EQ(r.status, 400);
  EXPECT_FALSE(nlohmann::json::parse(r.body, nullptr, false).is_discarded()) << r.body;
}

}  // namespace
}  // namespace gfrep::replica::web
