#include "tests/support/federation.h"

#include <algorithm>
#include <csignal>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "transfer/auth.h"

namespace gfrep::testing {

namespace fs = std::filesystem;

void FederationTest::StartFederation(const std::map<std::string, std::string>& site_of,
                                     const FederationOptions& options) {
  site_of_ = site_of;
  options_ = options;
  ASSERT_TRUE(transfer::LoadOrCreateSharedKey(key_).ok());
  if (options_.mutual_tls) {
    RunResult r = RunCommand({BinPath("gfca"), "init", "--dir", Ca("")});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    IssueCert("catalog", "catalog", {"--host", "127.0.0.1"});
    IssueCert("admin", "root");
    // Agents pull from each other over mutual TLS: their certificates name their address.
    for (const auto& [node, site] : site_of_) IssueCert("node", node, {"--host", "127.0.0.1"});
    if (::testing::Test::HasFatalFailure()) return;
    for (const std::string& f : std::vector<std::string>{"--tls-cert", Ca("catalog.pem"), "--tls-key",
                                                         Ca("catalog.key"), "--tls-client-ca", Ca("ca.pem"),
                                                         "--token-key", Ca("token.key")}) {
      options_.catalogd_flags.push_back(f);
    }
  }
  StartCatalog();
  if (::testing::Test::HasFatalFailure()) return;
  catalog::ClientOptions co = options_.mutual_tls ? ClientAs("root") : catalog::ClientOptions{};
  co.address = catalog_;
  co.timeout = std::chrono::seconds(10);
  auto client = catalog::CatalogClient::Create(co);
  ASSERT_TRUE(client.ok());
  client_ = std::move(*client);
  if (options_.mutual_tls) {  // nodes may not add their sites: the admin does
    for (const auto& [node, site] : site_of_) ASSERT_TRUE(client_->PutSite({site, {}}).ok());
  }
  for (const auto& [node, site] : site_of_) {
    StartAgent(node);
    if (::testing::Test::HasFatalFailure()) return;
  }
  WaitForNodes(site_of_.size());
}

void FederationTest::StartCatalog() {
  const int n = std::max(1, options_.front_ends);
  front_end_addresses_.resize(n);
  more_catalogds_.resize(n - 1);
  for (int i = 0; i < n; ++i) {
    std::vector<std::string> argv = {
        BinPath("gfcatalogd"), "--db", options_.db.empty() ? dir_.Sub("db") : options_.db,
        "--listen", front_end_addresses_[i].empty() ? "127.0.0.1:0" : front_end_addresses_[i],
        "--log-level", "info"};
    if (n > 1) argv.push_back("--shared");
    argv.insert(argv.end(), options_.catalogd_flags.begin(), options_.catalogd_flags.end());
    auto cat = Subprocess::Start(argv);
    ASSERT_TRUE(cat.ok()) << cat.status();
    FrontEnd(i) = std::move(*cat);
    auto addr = FrontEnd(i).WaitForListen(std::chrono::seconds(30));
    ASSERT_TRUE(addr.ok()) << addr.status() << "; stderr: " << FrontEnd(i).Stderr();
    front_end_addresses_[i] = *addr;
  }
  catalog_ = fmt::format("{}", fmt::join(front_end_addresses_, ","));
}

void FederationTest::StopCatalog() {
  for (int i = 0; i < static_cast<int>(front_end_addresses_.size()); ++i) {
    if (!FrontEnd(i).running()) continue;
    FrontEnd(i).Signal(SIGTERM);
    RunResult r = FrontEnd(i).Wait(std::chrono::seconds(20));
    EXPECT_EQ(r.exit_code, 0) << r.err;
  }
}

void FederationTest::StartAgent(const std::string& node) {
  std::vector<std::string> argv = {
      BinPath("gfsited"), "--listen",        "127.0.0.1:0", "--spool",     Spool(node).string(),
      "--site",           site_of_.at(node), "--node",      node,          "--catalog",
      catalog_,           "--key-file",      key_,          "--log-level", "info"};
  argv.insert(argv.end(), options_.agent_flags.begin(), options_.agent_flags.end());
  if (options_.mutual_tls) {
    for (const std::string& f : std::vector<std::string>{"--catalog-ca", Ca("ca.pem"), "--tls-cert",
                                                         Ca(node + ".pem"), "--tls-key", Ca(node + ".key"),
                                                         "--tls-ca", Ca("ca.pem")}) {
      argv.push_back(f);
    }
  }
  auto p = Subprocess::Start(argv);
  ASSERT_TRUE(p.ok()) << p.status();
  auto addr = p->WaitForListen(std::chrono::seconds(30));
  ASSERT_TRUE(addr.ok()) << addr.status();
  agents_[node] = std::move(*p);
}

void FederationTest::WaitForNodes(std::size_t n) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  std::uint64_t seq = 0;
  while (std::chrono::steady_clock::now() < deadline) {
    auto nodes = client_->ListNodes("");
    if (nodes.ok() && nodes->size() >= n) return;
    auto ev = client_->ReadEvents(seq, 100, std::chrono::milliseconds(500));
    if (ev.ok() && !ev->empty()) seq = ev->back().seq;
  }
  FAIL() << "nodes did not register";
}

SubprocessOptions FederationTest::ToolOptions() const {
  SubprocessOptions o;
  o.env = {{"GFREP_CATALOG", catalog_}};
  if (options_.mutual_tls) {
    o.env["GFREP_CATALOG_CA"] = Ca("ca.pem");
    o.env["GFREP_CERT"] = Ca("root.pem");
    o.env["GFREP_KEY"] = Ca("root.key");
  }
  return o;
}

void FederationTest::IssueCert(const std::string& role, const std::string& name, std::vector<std::string> extra) {
  std::vector<std::string> argv = {BinPath("gfca"), "issue", role, name, "--dir", Ca("")};
  argv.insert(argv.end(), extra.begin(), extra.end());
  RunResult r = RunCommand(argv);
  ASSERT_EQ(r.exit_code, 0) << r.err;
}

catalog::ClientOptions FederationTest::ClientAs(const std::string& name) const {
  catalog::ClientOptions co;
  co.address = catalog_;
  co.timeout = std::chrono::seconds(10);
  co.tls_root_pem = ReadFile(Ca("ca.pem"));
  co.tls_cert_pem = ReadFile(Ca(name + ".pem"));
  co.tls_key_pem = ReadFile(Ca(name + ".key"));
  return co;
}

RunResult FederationTest::Tool(std::vector<std::string> argv, std::chrono::seconds timeout) {
  argv[0] = BinPath(argv[0]);
  std::string name = fs::path(argv[0]).filename();
  // Only the tools that talk to site agents take the shared key; the others (gfrep, gfwhere,
  // gfmv, ...) talk to the catalog only and refuse the flag.
  if (name == "gfreg" || name == "gfexport" || name == "gfcp" || name == "gfprobe") {
    argv.push_back("--key-file");
    argv.push_back(key_);
  }
  return RunCommand(argv, ToolOptions(), timeout);
}

std::string FederationTest::Store(const std::string& path, std::uint64_t size, std::uint64_t seed,
                                  const std::string& node) {
  fs::path local = dir_.path() / ("local-" + std::to_string(seed));
  WriteRandomFile(local, size, seed);
  RunResult r = Tool({"gfreg", local.string(), path, "--node", node});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  return ReadFile(local);
}

std::string FederationTest::Replica(const std::string& node, const std::string& path) {
  auto a = client_->Stat(path);
  if (!a.ok()) return "";
  return ReadFile(Spool(node) / ".gfrep-data" / std::to_string(a->inode) /
                  std::to_string(a->generation));
}

nlohmann::json FederationTest::Where(const std::string& path) {
  RunResult r = Tool({"gfwhere", "--json", path});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  return nlohmann::json::parse(r.out, nullptr, false);
}

std::map<std::string, std::string> FederationTest::States(const std::string& path) {
  std::map<std::string, std::string> out;
  nlohmann::json j = Where(path);
  if (!j.is_object()) return out;
  for (const auto& r : j["replicas"]) {
    out[r.value("node", "")] = r.value("state", "");
  }
  return out;
}

catalog::Request FederationTest::WaitRequest(std::uint64_t id, std::chrono::seconds timeout) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  std::uint64_t seq = 0;
  while (std::chrono::steady_clock::now() < deadline) {
    auto r = client_->GetRequest(id);
    if (r.ok() &&
        (r->state == catalog::RequestState::kDone || r->state == catalog::RequestState::kFailed)) {
      return *r;
    }
    auto ev = client_->ReadEvents(seq, 1000, std::chrono::milliseconds(500));
    if (ev.ok() && !ev->empty()) seq = ev->back().seq;
  }
  ADD_FAILURE() << "request " << id << " did not finish";
  return {};
}

}  // namespace gfrep::testing
