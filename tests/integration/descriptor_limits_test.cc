// The daemons under a small descriptor limit (prlimit --nofile=256:256), flooded with idle
// TCP connections or half-sent HTTP requests, must go on serving (issue 37, findings 1 and
// 4): gfcatalogd's gRPC listener must never stop accepting (gRPC 1.51 abandons it after one
// EMFILE: tools/internal/accept_guard.h), and a flood of the --http port must not take the
// descriptors the catalog's and the transfer agent's real clients need.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "tests/support/http_get.h"
#include "tests/support/subprocess.h"
#include "tests/support/temp_dir.h"

namespace gfrep {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;
using testing::BinPath;
using testing::RunCommand;
using testing::RunResult;
using testing::Subprocess;

constexpr int kLimit = 256;   // the daemons' descriptor limit (soft and hard)
constexpr int kFlood = 300;   // more connections than that
const std::string kPrlimit = "/usr/bin/prlimit";

int PortOf(const std::string& host_port) { return std::stoi(host_port.substr(host_port.rfind(':') + 1)); }

// Polls `done` every 20 ms until it holds or `limit` passes (what is awaited is another
// process's state: there is no event to wait on).
bool WaitUntil(const std::function<bool()>& done, std::chrono::milliseconds limit) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (!done()) {
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(20ms);
  }
  return true;
}

// Descriptors process `pid` has open.
int OpenDescriptors(pid_t pid) {
  std::error_code ec;
  int n = 0;
  for (fs::directory_iterator it("/proc/" + std::to_string(pid) + "/fd", ec), end; !ec && it != end;
       it.increment(ec)) {
    ++n;
  }
  return n;
}

// Connections waiting in the accept queue of the loopback socket listening on `port`
// (/proc/net/tcp reports the accept queue as rx_queue for a listening socket); -1 if none.
int AcceptQueue(int port) {
  for (const char* table : {"/proc/net/tcp", "/proc/net/tcp6"}) {
    std::ifstream in(table);
    std::string line;
    std::getline(in, line);  // header
    while (std::getline(in, line)) {
      std::istringstream f(line);
      std::string slot, local, remote, state, queues;
      f >> slot >> local >> remote >> state >> queues;
      if (state != "0A") continue;  // TCP_LISTEN
      if (std::stoi(local.substr(local.rfind(':') + 1), nullptr, 16) != port) continue;
      return std::stoi(queues.substr(queues.find(':') + 1), nullptr, 16);
    }
  }
  return -1;
}

// `n` TCP connections to 127.0.0.1:`port`, each having sent `first_bytes` (maybe nothing).
std::vector<int> Flood(int port, int n, const std::string& first_bytes) {
  std::vector<int> fds;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<std::uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  for (int i = 0; i < n; ++i) {
    const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) break;
    if (::connect(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof(addr)) != 0) {
      ::close(fd);
      continue;
    }
    if (!first_bytes.empty()) {
      (void)::send(fd, first_bytes.data(), first_bytes.size(), MSG_NOSIGNAL);  // ignored: may be shed already
    }
    fds.push_back(fd);
  }
  return fds;
}

void CloseAll(std::vector<int>& fds) {
  for (int fd : fds) ::close(fd);
  fds.clear();
}

// A request's head cut short: the server waits for the rest.
const std::string kHalfRequest = "GET /healthz HTTP/1.1\r\nHost: flood\r\n";

class DescriptorLimitsTest : public ::testing::Test {
 protected:
  ~DescriptorLimitsTest() override { CloseAll(flood_); }

  // gfcatalogd under the limit, with --http; sets catalog_ and http_.
  void StartCatalog(std::vector<std::string> extra = {}) {
    std::vector<std::string> argv{kPrlimit, "--nofile=" + std::to_string(kLimit) + ":" + std::to_string(kLimit),
                                  BinPath("gfcatalogd"), "--db", dir_.Sub("db"), "--listen", "127.0.0.1:0",
                                  "--http", "127.0.0.1:0", "--no-planner", "--log-level", "info"};
    argv.insert(argv.end(), extra.begin(), extra.end());
    absl::StatusOr<Subprocess> d = Subprocess::Start(argv);
    ASSERT_TRUE(d.ok()) << d.status();
    daemon_ = std::move(*d);
    absl::StatusOr<std::string> addr = daemon_.WaitForListen(30s);
    ASSERT_TRUE(addr.ok()) << addr.status();
    catalog_ = *addr;
    absl::StatusOr<std::string> line = daemon_.WaitForOutput("dashboard on http://", 30s);
    ASSERT_TRUE(line.ok()) << line.status();
    http_ = line->substr(line->find("http://") + 7);
    http_ = http_.substr(0, http_.find('/'));
  }

  // gfls / with a 5 s deadline per call; how long it took.
  RunResult Gfls(std::chrono::duration<double>* took = nullptr) {
    const auto start = std::chrono::steady_clock::now();
    RunResult r = RunCommand({BinPath("gfls"), "--catalog", catalog_, "--timeout", "5", "/"}, {}, 30s);
    if (took != nullptr) *took = std::chrono::steady_clock::now() - start;
    return r;
  }

  // Waits until the daemon has taken every flooding connection off `port`'s accept queue, or
  // cannot (out of descriptors, or its listener gave up); then until it holds at most
  // `settled` descriptors, if asked.
  void AwaitFloodHandled(int port) {
    EXPECT_TRUE(WaitUntil(
        [&] {
          return AcceptQueue(port) == 0 || OpenDescriptors(daemon_.pid()) >= kLimit - 4 ||
                 daemon_.Stderr().find("Failed accept4") != std::string::npos;
        },
        30s))
        << "queue " << AcceptQueue(port) << ", descriptors " << OpenDescriptors(daemon_.pid());
  }
  void AwaitDescriptorsBelow(int most) {
    EXPECT_TRUE(WaitUntil([&] { return OpenDescriptors(daemon_.pid()) <= most; }, 30s))
        << OpenDescriptors(daemon_.pid()) << " descriptors open";
  }

  testing::TempDir dir_{"fd-limits"};
  Subprocess daemon_;
  std::string catalog_;
  std::string http_;
  std::vector<int> flood_;
};

TEST_F(DescriptorLimitsTest, CatalogAcceptsAgainAfterAFloodOfIdleConnections) {
  ASSERT_NO_FATAL_FAILURE(StartCatalog());
  ASSERT_EQ(Gfls().exit_code, 0) << daemon_.Stderr();
  const int baseline = OpenDescriptors(daemon_.pid());
  flood_ = Flood(PortOf(catalog_), kFlood, "");
  ASSERT_EQ(static_cast<int>(flood_.size()), kFlood);
  AwaitFloodHandled(PortOf(catalog_));
  CloseAll(flood_);
  AwaitDescriptorsBelow(baseline + 8);
  std::chrono::duration<double> took{};
  RunResult r = Gfls(&took);
  EXPECT_EQ(r.exit_code, 0) << r.err << "\n" << daemon_.Stderr();
  EXPECT_LT(took.count(), 5.0);
  EXPECT_EQ(daemon_.Stderr().find("Failed accept4"), std::string::npos) << daemon_.Stderr();
  // What was shed is counted and said.
  absl::StatusOr<testing::HttpReply> metrics = testing::HttpGet(http_, "/metrics");
  ASSERT_TRUE(metrics.ok()) << metrics.status();
  EXPECT_GT(testing::MetricValue(metrics->body, "gfrep_catalog_connections_shed_total"), 0) << metrics->body;
  EXPECT_TRUE(daemon_.running());
}

TEST_F(DescriptorLimitsTest, CatalogServesWhileItsHttpPortIsFloodedAndAfter) {
  ASSERT_NO_FATAL_FAILURE(StartCatalog());
  const int baseline = OpenDescriptors(daemon_.pid());
  flood_ = Flood(PortOf(http_), kFlood, kHalfRequest);
  AwaitFloodHandled(PortOf(http_));
  std::chrono::duration<double> took{};
  RunResult during = Gfls(&took);
  EXPECT_EQ(during.exit_code, 0) << during.err << "\n" << daemon_.Stderr();
  EXPECT_LT(took.count(), 5.0);
  CloseAll(flood_);
  AwaitDescriptorsBelow(baseline + 8);
  RunResult after = Gfls(&took);
  EXPECT_EQ(after.exit_code, 0) << after.err << "\n" << daemon_.Stderr();
  EXPECT_LT(took.count(), 5.0);
  absl::StatusOr<testing::HttpReply> health = testing::HttpGet(http_, "/healthz");
  ASSERT_TRUE(health.ok()) << health.status();
  EXPECT_EQ(health->status, 200);
  EXPECT_NE(daemon_.Stderr().find("http: refused connection"), std::string::npos) << daemon_.Stderr();
}

TEST_F(DescriptorLimitsTest, AgentCopiesWhileItsHttpPortIsFlooded) {
  const std::string key = dir_.Sub("shared_key");
  absl::StatusOr<Subprocess> d = Subprocess::Start(
      {kPrlimit, "--nofile=" + std::to_string(kLimit) + ":" + std::to_string(kLimit), BinPath("gfsited"),
       "--listen", "127.0.0.1:0", "--spool", dir_.Sub("spool"), "--key-file", key, "--http", "127.0.0.1:0",
       "--log-level", "info"});
  ASSERT_TRUE(d.ok()) << d.status();
  daemon_ = std::move(*d);
  absl::StatusOr<std::string> agent = daemon_.WaitForListen(30s);
  ASSERT_TRUE(agent.ok()) << agent.status();
  absl::StatusOr<std::string> line = daemon_.WaitForOutput("metrics on http://", 30s);
  ASSERT_TRUE(line.ok()) << line.status();
  const std::string http = line->substr(line->find("http://") + 7, line->rfind("/metrics") - line->find("http://") - 7);
  testing::WriteRandomFile(dir_.path() / "src.dat", 4 << 20, 7);
  flood_ = Flood(PortOf(http), kFlood, kHalfRequest);
  AwaitFloodHandled(PortOf(http));
  RunResult copy = RunCommand({BinPath("gfcp"), "--key-file", key, "--timeout", "10", "-p", "4",
                               dir_.Sub("src.dat"), "gf://" + *agent + "/in/src.dat"},
                              {}, 60s);
  EXPECT_EQ(copy.exit_code, 0) << copy.err << "\n" << daemon_.Stderr();
  EXPECT_TRUE(testing::ReadFile(dir_.path() / "spool" / "in" / "src.dat") == testing::ReadFile(dir_.path() / "src.dat"))
      << "the copy differs from its source";
}

// The watchdog behind the guard: with the guard off (a test switch), the flood kills gRPC's
// listener as it did before the guard, and gfcatalogd must notice and exit with status 75
// for its supervisor to restart it, rather than stay up deaf.
TEST_F(DescriptorLimitsTest, CatalogExitsForARestartWhenItsListenerDiesAnyway) {
  ASSERT_NO_FATAL_FAILURE(StartCatalog({"--test-no-accept-guard", "--listener-watchdog", "2"}));
  flood_ = Flood(PortOf(catalog_), kFlood, "");
  ASSERT_TRUE(WaitUntil([&] { return daemon_.Stderr().find("Failed accept4") != std::string::npos; }, 30s))
      << "gRPC 1.51 unguarded: the listener gives up on EMFILE\n" << daemon_.Stderr();
  CloseAll(flood_);
  RunResult r = daemon_.Wait(30s);
  EXPECT_EQ(r.exit_code, 75) << r.err;
  EXPECT_NE(r.err.find("the gRPC listener stopped accepting"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace gfrep
