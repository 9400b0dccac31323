// A whole federation in one process through replica/daemon/: a Catalogd (RocksDB, gRPC on
// loopback, planner and repairer) and three Sited, one node of each site, each serving on its
// own loopback port and joining the catalog over gRPC as gfsited does. Driven by the library
// calls a program would make: Store on a1, Replicate to three copies, Open and read on b1 and
// c1, and the daemons' /metrics.
#include <gtest/gtest.h>
#include <spdlog/logger.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "catalog/client.h"
#include "replica/client/reader.h"
#include "replica/client/replicate.h"
#include "replica/client/writer.h"
#include "replica/daemon/catalogd.h"
#include "replica/daemon/sited.h"
#include "tests/support/http_get.h"
#include "tests/support/temp_dir.h"

namespace gfrep::replica::daemon {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

constexpr const char* kKey = "in-process federation shared key";

class InProcessFederationTest : public ::testing::Test {
 protected:
  void SetUp() override {
    log_ = std::make_shared<spdlog::logger>("federation");  // no sinks: quiet
    CatalogdOptions co;
    co.store.path = dir_.Sub("db");
    co.server.listen = "127.0.0.1:0";
    co.policies = false;
    co.node_timeout = 10s;
    co.http.listen = "127.0.0.1:0";
    co.logger = log_;
    absl::StatusOr<std::unique_ptr<Catalogd>> catalogd = Catalogd::Start(std::move(co));
    ASSERT_TRUE(catalogd.ok()) << catalogd.status();
    catalogd_ = std::move(*catalogd);
    catalog::ClientOptions cl;
    cl.address = catalogd_->address();
    absl::StatusOr<std::unique_ptr<catalog::CatalogClient>> client =
        catalog::CatalogClient::Create(cl);
    ASSERT_TRUE(client.ok()) << client.status();
    client_ = std::move(*client);
    for (const char* site : {"A", "B", "C"}) ASSERT_TRUE(client_->PutSite({site, {}}).ok());
    for (auto [site, node] : {std::pair{"A", "a1"}, std::pair{"B", "b1"}, std::pair{"C", "c1"}}) {
      SitedOptions so;
      so.agent.listen = "127.0.0.1:0";
      so.agent.spool = dir_.path() / ("spool-" + std::string(node));
      fs::create_directories(so.agent.spool);
      so.agent.shared_key = kKey;
      so.site = site;
      so.node = node;
      so.catalog.address = catalogd_->address();
      so.site_agent.lease = 5s;
      so.http.listen = node == std::string("a1") ? "127.0.0.1:0" : "";
      so.logger = log_;
      absl::StatusOr<std::unique_ptr<Sited>> sited = Sited::Create(std::move(so));
      ASSERT_TRUE(sited.ok()) << sited.status();
      ASSERT_TRUE((*sited)->Start().ok());
      Sited* s = sited->get();
      sites_.push_back(std::move(*sited));
      runs_.emplace_back([s] { s->Run(); });
    }
  }

  void TearDown() override {
    for (auto& s : sites_) s->Stop();
    for (std::thread& t : runs_) t.join();
    sites_.clear();
    client_.reset();
    if (catalogd_) catalogd_->Stop();
  }

  std::string ReadAs(const std::string& site, const std::string& node, const std::string& path) {
    client::ReaderOptions o;
    o.identity = {site, node};
    o.transfer.shared_key = kKey;
    o.tmp_dir = dir_.path();
    absl::StatusOr<std::unique_ptr<client::FileReader>> r = client::Open(*client_, path, o);
    EXPECT_TRUE(r.ok()) << r.status();
    if (!r.ok()) return "";
    std::string out;
    char buf[65536];
    while (true) {
      absl::StatusOr<std::size_t> n = (*r)->Read(buf, sizeof buf);
      EXPECT_TRUE(n.ok()) << n.status();
      if (!n.ok() || *n == 0) break;
      out.append(buf, *n);
    }
    return out;
  }

  gfrep::testing::TempDir dir_{"inprocess"};
  std::shared_ptr<spdlog::logger> log_;
  std::unique_ptr<Catalogd> catalogd_;
  std::unique_ptr<catalog::CatalogClient> client_;
  std::vector<std::unique_ptr<Sited>> sites_;
  std::vector<std::thread> runs_;
};

TEST_F(InProcessFederationTest, AFileStoredAtOneSiteIsReplicatedToAllThreeAndReadAtEach) {
  ASSERT_EQ(client_->ListNodes("")->size(), 3u) << "every Sited registered in Start()";
  const fs::path local = dir_.path() / "f.dat";
  gfrep::testing::WriteRandomFile(local, (3 << 20) + 11, 7);
  ASSERT_TRUE(client_->Mkdir("/exp", {}).ok());
  client::StoreOptions so;
  so.node = "a1";
  so.transfer.shared_key = kKey;
  absl::StatusOr<client::StoreResult> stored = client::Store(*client_, local, "/exp/f.dat", so);
  ASSERT_TRUE(stored.ok()) << stored.status();

  client::ReplicateOptions ro;
  ro.copies = 3;
  ro.timeout = 120s;
  absl::StatusOr<catalog::Request> r = client::Replicate(*client_, "/exp/f.dat", ro);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->state, catalog::RequestState::kDone);
  EXPECT_EQ(r->files_done, 1u);

  const std::string want = gfrep::testing::ReadFile(local);
  EXPECT_EQ(ReadAs("B", "b1", "/exp/f.dat"), want);
  EXPECT_EQ(ReadAs("C", "c1", "/exp/f.dat"), want);
  // Three complete replicas, one on each node.
  absl::StatusOr<catalog::Location> loc = client_->Locate("/exp/f.dat");
  ASSERT_TRUE(loc.ok()) << loc.status();
  std::vector<std::string> complete;
  for (const catalog::Replica& rep : loc->replicas) {
    if (rep.state == catalog::ReplicaState::kComplete) complete.push_back(rep.node);
  }
  std::sort(complete.begin(), complete.end());
  EXPECT_EQ(complete, (std::vector<std::string>{"a1", "b1", "c1"}));
}

TEST_F(InProcessFederationTest, BothDaemonsServeTheirMetricsAndHealth) {
  const std::string catalog_http = catalogd_->http_address();
  const std::string agent_http = sites_[0]->http_address();
  ASSERT_FALSE(catalog_http.empty());
  ASSERT_FALSE(agent_http.empty());
  EXPECT_TRUE(sites_[1]->http_address().empty()) << "b1 was given no --http";
  absl::StatusOr<gfrep::testing::HttpReply> c = gfrep::testing::HttpGet(catalog_http, "/metrics");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->status, 200);
  EXPECT_NE(c->body.find("gfrep_catalog_rpc_duration_seconds_count"), std::string::npos);
  absl::StatusOr<gfrep::testing::HttpReply> a = gfrep::testing::HttpGet(agent_http, "/metrics");
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->status, 200);
  EXPECT_NE(a->body.find("gfrep_agent_connections_accepted_total"), std::string::npos);
  absl::StatusOr<gfrep::testing::HttpReply> ready = gfrep::testing::HttpGet(agent_http, "/readyz");
  ASSERT_TRUE(ready.ok()) << ready.status();
  EXPECT_EQ(ready->status, 200) << ready->body;
}

TEST_F(InProcessFederationTest, OptionsThatDoNotGoTogetherAreRefusedBeforeAnythingOpens) {
  CatalogdOptions co;
  co.store.path = dir_.Sub("db2");
  co.server.listen = "0.0.0.0:0";
  co.logger = log_;
  absl::Status s = CheckCatalogdOptions(co);
  EXPECT_TRUE(absl::IsInvalidArgument(s)) << s;
  EXPECT_FALSE(fs::exists(dir_.path() / "db2"));
  SitedOptions so;
  so.agent.listen = "127.0.0.1:0";
  so.agent.spool = dir_.path();
  so.site = "A";  // without --node and --catalog
  so.logger = log_;
  absl::StatusOr<std::unique_ptr<Sited>> sited = Sited::Create(std::move(so));
  EXPECT_TRUE(absl::IsInvalidArgument(sited.status())) << sited.status();
}

}  // namespace
}  // namespace gfrep::replica::daemon
