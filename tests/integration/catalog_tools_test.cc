// Integration: a real gfcatalogd on 127.0.0.1:0 and the catalog tools as child processes.
#include <unistd.h>

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdlib>
#include <sstream>

#include "catalog/client.h"
#include "tests/support/subprocess.h"
#include "tests/support/temp_dir.h"

namespace gfrep {
namespace {

using namespace std::chrono_literals;
using testing::BinPath;
using testing::RunCommand;
using testing::RunResult;
using testing::Subprocess;

int Lines(const std::string& s) { return static_cast<int>(std::count(s.begin(), s.end(), '\n')); }

class CatalogToolsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<Subprocess> d = Subprocess::Start(
        {BinPath("gfcatalogd"), "--db", dir_.Sub("db"), "--listen", "127.0.0.1:0"});
    ASSERT_TRUE(d.ok()) << d.status();
    daemon_ = std::move(*d);
    absl::StatusOr<std::string> addr = daemon_.WaitForListen(30s);
    ASSERT_TRUE(addr.ok()) << addr.status();
    address_ = *addr;
    env_.env["GFREP_CATALOG"] = address_;
  }

  RunResult Run(const std::string& tool, std::vector<std::string> args) {
    args.insert(args.begin(), BinPath(tool));
    return RunCommand(args, env_, 60s);
  }

  std::unique_ptr<catalog::CatalogClient> Client() {
    catalog::ClientOptions o;
    o.address = address_;
    absl::StatusOr<std::unique_ptr<catalog::CatalogClient>> c = catalog::CatalogClient::Create(o);
    EXPECT_TRUE(c.ok());
    return std::move(*c);
  }


  testing::TempDir dir_{"catalog-tools"};
  Subprocess daemon_;
  std::string address_;
  testing::SubprocessOptions env_;
};

TEST_F(CatalogToolsTest, MkdirLsStatTakeManyPaths) {
  RunResult r = Run("gfmkdir", {"-p", "/exp/2026/run1", "/exp/2026/run2", "/sim"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  r = Run("gfls", {"/exp/2026", "/"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("/exp/2026:\nrun1\nrun2\n"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("/:\nexp\nsim\n"), std::string::npos) << r.out;
  r = Run("gfls", {"-R", "--json", "/exp"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::istringstream lines(r.out);
  std::vector<std::string> paths;
  for (std::string line; std::getline(lines, line);) {
    paths.push_back(nlohmann::json::parse(line).at("path").get<std::string>());
  }
  EXPECT_EQ(paths, (std::vector<std::string>{"/exp/2026", "/exp/2026/run1", "/exp/2026/run2"}));
  r = Run("gfls", {"-l", "/exp"});
  EXPECT_EQ(r.out.substr(0, 10), "drwxr-xr-x") << r.out;
  r = Run("gfstat", {"--json", "/exp", "/sim"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(Lines(r.out), 2);
  EXPECT_EQ(nlohmann::json::parse(r.out.substr(0, r.out.find('\n'))).at("type"), "directory");
}

TEST_F(CatalogToolsTest, BadNamesAndMissingPathsFailWithOneLineEach) {
  struct Case {
    std::vector<std::string> args;
    std::string code;
  };
  std::string long_name = "/" + std::string(256, 'n');
  std::string long_path;
  while (long_path.size() <= 4096) long_path += "/" + std::string(200, 'p');
  for (const Case& c : std::vector<Case>{{{""}, "INVALID_ARGUMENT"},
                                         {{"/a/."}, "INVALID_ARGUMENT"},
                                         {{"/a/.."}, "INVALID_ARGUMENT"},
                                         {{"relative"}, "INVALID_ARGUMENT"},
                                         {{long_name}, "INVALID_ARGUMENT"},
                                         {{long_path}, "INVALID_ARGUMENT"},
                                         {{"/no/such"}, "NOT_FOUND"}}) {
    RunResult r = Run("gfmkdir", c.args);
    EXPECT_NE(r.exit_code, 0);
    EXPECT_EQ(Lines(r.err), 1) << r.err;
    EXPECT_NE(r.err.find("gfmkdir: "), std::string::npos) << r.err;
    EXPECT_NE(r.err.find(c.code), std::string::npos) << r.err;
  }
  ASSERT_EQ(Run("gfmkdir", {"/d"}).exit_code, 0);
  RunResult r = Run("gfmkdir", {"/d", "/e"});  // one failure does not stop the others
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("ALREADY_EXISTS"), std::string::npos);
  EXPECT_EQ(Run("gfstat", {"/e"}).exit_code, 0);
  r = Run("gfls", {"/nope"});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("NOT_FOUND"), std::string::npos);
}

TEST_F(CatalogToolsTest, NamesThatAreNotUtf8FailClearlyAndDoNotHideOthers) {
  // Protobuf strings must be UTF-8: a Latin-1 name used to reach the server as an
  // unparsable request and come back as " (UNIMPLEMENTED)".
  const std::string latin1 = "/caf\xe9";
  RunResult r = Run("gfmkdir", {latin1, "/ok"});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_EQ(Lines(r.err), 1) << r.err;
  EXPECT_NE(r.err.find("UTF-8"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("INVALID_ARGUMENT"), std::string::npos) << r.err;
  r = Run("gfstat", {"/ok", latin1});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.out.find("File: /ok"), std::string::npos) << r.out;  // still shown
  EXPECT_NE(r.err.find("INVALID_ARGUMENT"), std::string::npos) << r.err;
}

TEST_F(CatalogToolsTest, RmAndMvKeepTheTreeSane) {
  ASSERT_EQ(Run("gfmkdir", {"-p", "/a/b/c", "/x"}).exit_code, 0);
  RunResult r = Run("gfmv", {"/a", "/a/b/c/a"});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("own subtree"), std::string::npos) << r.err;
  r = Run("gfmv", {"/a/b", "/x"});  // into a directory
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(Run("gfstat", {"/x/b/c"}).exit_code, 0);
  r = Run("gfrm", {"/x"});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("not empty"), std::string::npos) << r.err;
  ASSERT_EQ(Run("gfrm", {"-r", "/x", "/a"}).exit_code, 0);
  EXPECT_EQ(Run("gfls", {"/"}).out, "");
  EXPECT_EQ(Run("gfrm", {"-f", "/gone"}).exit_code, 0);
  EXPECT_NE(Run("gfrm", {"/gone"}).exit_code, 0);
}

TEST_F(CatalogToolsTest, TopologyAdminAndGfwhere) {
  ASSERT_EQ(Run("gfsite", {"add", "kek", "--label", "region=jp"}).exit_code, 0);
  ASSERT_EQ(Run("gfsite", {"add", "sdsc"}).exit_code, 0);
  RunResult r = Run("gfnode", {"add", "kek1", "--site", "kek", "--address", "127.0.0.1:7001",
                               "--capacity", "1T"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  ASSERT_EQ(Run("gfnode", {"add", "sdsc1", "--site", "sdsc", "--address", "127.0.0.1:7002"})
                .exit_code,
            0);
  r = Run("gfnode", {"add", "x", "--site", "nosuch", "--address", "h:1"});
  EXPECT_NE(r.err.find("NOT_FOUND"), std::string::npos) << r.err;
  r = Run("gfroute", {"set", "kek", "sdsc", "--streams", "16", "--socket-buffer", "16M",
                      "--route-rate", "900M", "--cc", "bbr", "--rtt-ms", "200"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  r = Run("gfroute", {"get", "--json", "kek", "sdsc"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  nlohmann::json route = nlohmann::json::parse(r.out);
  EXPECT_EQ(route.at("streams"), 16);
  EXPECT_EQ(route.at("socket_buffer_bytes"), 16 << 20);
  EXPECT_EQ(route.at("route_rate_bps"), 900'000'000);
  r = Run("gfsite", {"list", "--json"});
  EXPECT_EQ(nlohmann::json::parse(r.out).at(0).at("labels").at("region"), "jp");
  EXPECT_NE(Run("gfsite", {"rm", "kek"}).exit_code, 0);  // still has a node

  // A file written at kek, replicated to sdsc, then rewritten: gfwhere shows the states.
  std::unique_ptr<catalog::CatalogClient> client = Client();
  catalog::FileContent content;
  content.size = 3;
  absl::StatusOr<catalog::Attributes> f = client->CommitFile("/f", content, "kek1", std::nullopt);
  ASSERT_TRUE(f.ok()) << f.status();
  catalog::Replica copy;
  copy.inode = f->inode;
  copy.node = "sdsc1";
  copy.state = catalog::ReplicaState::kComplete;
  copy.generation = 1;
  ASSERT_TRUE(client->PutReplica(copy).ok());
  ASSERT_TRUE(client->CommitFile("/f", content, "kek1", 1).ok());
  r = Run("gfwhere", {"--json", "/f"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  nlohmann::json where = nlohmann::json::parse(r.out);
  EXPECT_EQ(where.at("generation"), 2);
  std::map<std::string, std::string> states;
  for (const auto& rep : where.at("replicas")) states[rep.at("node")] = rep.at("state");
  EXPECT_EQ(states["kek1"], "complete");
  EXPECT_EQ(states["sdsc1"], "stale");
  r = Run("gfwhere", {"/f"});
  EXPECT_NE(r.out.find("stale"), std::string::npos) << r.out;
}

TEST_F(CatalogToolsTest, GfprobeDiskStoresTheDiskProfileOnTheNodeAndReRegistrationKeepsIt) {
  ASSERT_EQ(Run("gfsite", {"add", "kek"}).exit_code, 0);
  ASSERT_EQ(Run("gfnode", {"add", "kek1", "--site", "kek", "--address", "127.0.0.1:7001"}).exit_code, 0);
  testing::TempDir spool("disk-probe-spool");
  const std::vector<std::string> small = {"--bytes", "2M", "--sizes", "4K,64K", "--parallel", "1,2"};
  std::vector<std::string> args = {"disk", spool.path().string(), "--json", "--store", "kek1"};
  args.insert(args.end(), small.begin(), small.end());
  RunResult r = Run("gfprobe", args);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  nlohmann::json probe = nlohmann::json::parse(r.out);
  EXPECT_EQ(probe.at("stored"), "kek1");
  const nlohmann::json& advice = probe.at("recommendation");
  EXPECT_GE(probe.at("rows").size(), 6u);  // 2 sizes + 2 streams (one shared), write + read
  r = Run("gfnode", {"add", "kek1", "--site", "kek", "--address", "127.0.0.1:7009"});  // re-register
  ASSERT_EQ(r.exit_code, 0) << r.err;
  r = Run("gfnode", {"list", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  nlohmann::json node = nlohmann::json::parse(r.out).at(0);
  EXPECT_EQ(node.at("address"), "127.0.0.1:7009");
  const nlohmann::json& disk = node.at("disk");
  EXPECT_EQ(disk.at("dir"), spool.path().string());
  EXPECT_EQ(disk.at("write_io_size_bytes"), advice.at("write_io_size_bytes"));
  EXPECT_EQ(disk.at("direct"), advice.at("direct"));
  EXPECT_EQ(disk.at("flush_interval_bytes"), advice.at("flush_interval_bytes"));
  EXPECT_GT(disk.at("write_mbps").get<double>(), 0);
  EXPECT_GT(disk.at("read_mbps").get<double>(), 0);
  // An unknown node is refused before anything is measured.
  args = {"disk", spool.path().string(), "--store", "nosuch"};
  args.insert(args.end(), small.begin(), small.end());
  r = Run("gfprobe", args);
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("NOT_FOUND"), std::string::npos) << r.err;
  // A missing directory fails before anything else, with one line.
  r = Run("gfprobe", {"disk", spool.Sub("nope")});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("no such directory"), std::string::npos) << r.err;
  EXPECT_EQ(Lines(r.err), 1) << r.err;
}

TEST_F(CatalogToolsTest, MissingOrUnreachableCatalogIsAClearError) {
  testing::SubprocessOptions none;
  RunResult r = RunCommand({BinPath("gfls"), "/"}, none, 30s);
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("GFREP_CATALOG"), std::string::npos) << r.err;
  r = RunCommand({BinPath("gfls"), "--catalog", "127.0.0.1:1", "--timeout", "3", "/"}, none, 30s);
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("UNAVAILABLE"), std::string::npos) << r.err;
  EXPECT_EQ(Lines(r.err), 1) << r.err;
}

// Subprocess execs a path, so look openssl up in $PATH here.
std::string FindInPath(const std::string& name) {
  const char* path = std::getenv("PATH");
  std::istringstream dirs(path != nullptr ? path : "/usr/bin:/bin");
  for (std::string d; std::getline(dirs, d, ':');) {
    std::string candidate = d + "/" + name;
    if (::access(candidate.c_str(), X_OK) == 0) return candidate;
  }
  return name;
}

TEST(CatalogTlsTest, ToolsReachATlsCatalogWithTheRightCaOnly) {
  testing::TempDir dir("catalog-tls");
  testing::SubprocessOptions none;
  RunResult gen = RunCommand(
      {FindInPath("openssl"), "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj",
       "/CN=localhost", "-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost", "-keyout",
       dir.Sub("key.pem"), "-out", dir.Sub("cert.pem")},
      none, 60s);
  if (gen.exit_code != 0) GTEST_SKIP() << "openssl cannot make a test certificate: " << gen.err;
  absl::StatusOr<Subprocess> d = Subprocess::Start(
      {BinPath("gfcatalogd"), "--db", dir.Sub("db"), "--listen", "127.0.0.1:0", "--tls-cert",
       dir.Sub("cert.pem"), "--tls-key", dir.Sub("key.pem")});
  ASSERT_TRUE(d.ok()) << d.status();
  absl::StatusOr<std::string> addr = d->WaitForListen(30s);
  ASSERT_TRUE(addr.ok()) << addr.status();
  RunResult r = RunCommand({BinPath("gfmkdir"), "--catalog", *addr, "--tls-ca",
                            dir.Sub("cert.pem"), "/secure"},
                           none, 60s);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  r = RunCommand({BinPath("gfls"), "--catalog", *addr, "--tls-ca", dir.Sub("cert.pem"), "/"},
                 none, 60s);
  EXPECT_EQ(r.out, "secure\n") << r.err;
  // Plaintext against the TLS port fails with one line and a non-zero exit.
  r = RunCommand({BinPath("gfls"), "--catalog", *addr, "--timeout", "3", "/"}, none, 60s);
  EXPECT_NE(r.exit_code, 0);
  EXPECT_EQ(Lines(r.err), 1) << r.err;
}

}  // namespace
}  // namespace gfrep
