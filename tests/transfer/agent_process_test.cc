// The transfer agent as a real gfsited process: resource exhaustion (file descriptors) and a
// source file that shrinks while it is sent. These faults kill or stall a whole process, so
// they are tested on one; the client side runs in this process (transfer/client.h).
#include <arpa/inet.h>
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "tests/support/subprocess.h"
#include "tests/support/temp_dir.h"
#include "transfer/agent.h"
#include "transfer/auth.h"
#include "transfer/client.h"

namespace gfrep::transfer {
namespace {

namespace fs = std::filesystem;
using testing::BinPath;
using testing::Subprocess;
using testing::TempDir;
using namespace std::chrono_literals;

int Connect(const Endpoint& to) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in dst{};
  dst.sin_family = AF_INET;
  dst.sin_port = htons(to.port);
  ::inet_pton(AF_INET, to.host.c_str(), &dst.sin_addr);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&dst), sizeof(dst)) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

class AgentProcessTest : public ::testing::Test {
 protected:
  AgentProcessTest() : dir_("agent-proc") {
    key_path_ = dir_.path() / "shared_key";
    options_.shared_key = *LoadOrCreateSharedKey(key_path_);
    options_.route.streams = 2;
    options_.route.stripe_unit = 256 << 10;
    options_.io_timeout = 10s;
  }

  // Starts gfsited on dir/spool, under `prefix` (e.g. prlimit) when given.
  Endpoint StartAgent(std::vector<std::string> prefix = {}) {
    std::vector<std::string> argv = std::move(prefix);
    for (std::string a : {BinPath("gfsited"), std::string("--listen"), std::string("127.0.0.1:0"),
                          std::string("--spool"), dir_.Sub("spool"), std::string("--key-file"),
                          key_path_.string(), std::string("--log-level"), std::string("info")}) {
      argv.push_back(a);
    }
    absl::StatusOr<Subprocess> p = Subprocess::Start(argv);
    EXPECT_TRUE(p.ok()) << p.status();
    agent_ = std::move(*p);
    absl::StatusOr<std::string> addr = agent_.WaitForListen(10s);
    EXPECT_TRUE(addr.ok()) << addr.status();
    absl::StatusOr<Endpoint> ep = ParseEndpoint(addr.ok() ? *addr : "");
    EXPECT_TRUE(ep.ok()) << ep.status();
    return ep.ok() ? *ep : Endpoint{};
  }

  TempDir dir_;
  fs::path key_path_;
  TransferOptions options_;
  Subprocess agent_;
};

// More connections than the agent has file descriptors: accept() fails with EMFILE. The agent
// must back off instead of retrying at once (a busy loop), and serve again when they close.
TEST_F(AgentProcessTest, RunningOutOfFileDescriptorsDoesNotSpinAndRecovers) {
  Endpoint agent = StartAgent({"/usr/bin/prlimit", "--nofile=64:64"});
  testing::WriteRandomFile(dir_.path() / "spool" / "f.dat", 1 << 20, 3);
  std::vector<int> fds;
  for (int i = 0; i < 120; ++i) {
    int fd = Connect(agent);
    ASSERT_GE(fd, 0) << std::strerror(errno);
    fds.push_back(fd);
  }
  // Wait (bounded) for the agent to run into the limit.
  auto deadline = std::chrono::steady_clock::now() + 10s;
  while (agent_.Stderr().find("Too many open files") == std::string::npos &&
         std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(20ms);  // waiting on another process's log
  }
  ASSERT_NE(agent_.Stderr().find("Too many open files"), std::string::npos)
      << agent_.Stderr().substr(0, 2000);
  double cpu0 = testing::ProcessCpuSeconds(agent_.pid());
  std::this_thread::sleep_for(2s);  // the measurement window
  double cpu1 = testing::ProcessCpuSeconds(agent_.pid());
  EXPECT_LT(cpu1 - cpu0, 0.5) << "the agent spins while out of file descriptors";
  EXPECT_TRUE(agent_.running());
  for (int fd : fds) ::close(fd);
  // It serves again once the connections are gone (its back-off is at most about a second).
  absl::StatusOr<TransferStats> s = absl::UnknownError("not run");
  deadline = std::chrono::steady_clock::now() + 20s;
  do {
    s = Pull(agent, "f.dat", dir_.path() / "copy.dat", options_);
  } while (!s.ok() && absl::IsUnavailable(s.status()) &&
           std::chrono::steady_clock::now() < deadline);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_TRUE(testing::ReadFile(dir_.path() / "copy.dat") ==
              testing::ReadFile(dir_.path() / "spool" / "f.dat"));
  EXPECT_LT(agent_.Stderr().size(), std::size_t{1} << 20) << "the agent flooded its log";
}

// A spool file truncated while the agent sends it: the copy fails clearly, the agent lives.
TEST_F(AgentProcessTest, SourceTruncatedWhileSentFailsTheCopyAndTheAgentLives) {
  Endpoint agent = StartAgent();
  const fs::path big = dir_.path() / "spool" / "big";
  testing::WriteRandomFile(big, 32 << 20, 4);
  TransferOptions o = options_;
  o.route.route_rate_bps = 32'000'000;  // ~8 s for the whole file: the truncation lands mid-send
  std::atomic<bool> truncated{false};
  o.progress = [&](const Progress& p) {
    if (p.bytes_done >= (2u << 20) && !truncated.exchange(true)) fs::resize_file(big, 1 << 20);
  };
  absl::StatusOr<TransferStats> s = Pull(agent, "big", dir_.path() / "big.copy", o);
  ASSERT_TRUE(truncated.load());
  EXPECT_FALSE(s.ok());
  EXPECT_TRUE(absl::IsAborted(s.status())) << s.status();
  EXPECT_NE(s.status().message().find("source changed size"), absl::string_view::npos)
      << s.status();
  EXPECT_FALSE(fs::exists(dir_.path() / "big.copy"));
  ASSERT_TRUE(agent_.running()) << agent_.Wait(1s).signal;
  testing::WriteRandomFile(dir_.path() / "spool" / "small", 1 << 20, 5);
  absl::StatusOr<TransferStats> again = Pull(agent, "small", dir_.path() / "small.copy", options_);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_TRUE(testing::ReadFile(dir_.path() / "small.copy") ==
              testing::ReadFile(dir_.path() / "spool" / "small"));
}

}  // namespace
}  // namespace gfrep::transfer
