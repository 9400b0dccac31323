#include "transfer/congestion.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sched.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <string>
#include <thread>
#include <vector>

#include "tests/support/subprocess.h"
#include "tests/support/temp_dir.h"
#include "transfer/bpf/hstcp_table.h"
#include "transfer/internal/bpf_congestion.h"

namespace gfrep::transfer {
namespace {

using ::testing::HasSubstr;

// RFC 3649, section 5: b(w) falls linearly in log w from 0.5 at Low_Window (38) to
// High_Decrease (0.1) at High_Window (83,000); p(w) = 0.078 / w^1.2 is the response
// function's loss rate; a(w) = w^2 * p(w) * 2 * b(w) / (2 - b(w)).
double RfcB(double w) {
  return (0.1 - 0.5) * (std::log(w) - std::log(38.0)) / (std::log(83000.0) - std::log(38.0)) + 0.5;
}
double RfcA(double w) { return w * w * (0.078 / std::pow(w, 1.2)) * 2 * RfcB(w) / (2 - RfcB(w)); }

TEST(HighSpeedTableTest, EveryRowIsTheRfcResponseFunction) {
  ASSERT_EQ(gfrep_hstcp_rows[0].cwnd, 38u);  // Low_Window: Standard TCP below it
  EXPECT_EQ(gfrep_hstcp_rows[0].md, 128u);   // b = 0.5
  for (int i = 1; i < GFREP_HSTCP_ROWS; ++i) {
    const double w = gfrep_hstcp_rows[i].cwnd;
    EXPECT_GT(gfrep_hstcp_rows[i].cwnd, gfrep_hstcp_rows[i - 1].cwnd) << "row " << i;
    // Row i's window is where a(w) reaches i + 1 (the RFC's table rounds w; 0.05 covers it).
    EXPECT_NEAR(RfcA(w), i + 1, 0.05) << "row " << i << " w " << w;
    // b(w), in 1/256 (rounded down), at that window.
    EXPECT_EQ(gfrep_hstcp_rows[i].md, static_cast<unsigned>(256 * RfcB(w))) << "row " << i << " w " << w;
  }
}

TEST(HighSpeedTableTest, RowsMatchTheRfcsPrintedValues) {
  // Appendix B of RFC 3649, w / a(w) / b(w): a few rows as printed.
  struct Printed {
    unsigned w;
    unsigned a;
    double b;
  };
  for (Printed p : {Printed{38, 1, 0.50}, Printed{118, 2, 0.44}, Printed{221, 3, 0.41}, Printed{1058, 8, 0.33},
                    Printed{10661, 30, 0.21}, Printed{84035, 71, 0.10}}) {
    const unsigned row = gfrep_hstcp_row_of(p.w);
    EXPECT_EQ(gfrep_hstcp_rows[row].cwnd, p.w);
    EXPECT_EQ(row + 1, p.a) << "w " << p.w;
    // md is b rounded down to 1/256; the RFC prints b rounded to 0.01.
    EXPECT_NEAR(gfrep_hstcp_rows[row].md / 256.0, p.b, 0.005 + 1 / 256.0) << "w " << p.w;
  }
}

TEST(HighSpeedTableTest, TheRowOfAWindowIsTheFirstThatHoldsIt) {
  for (unsigned cwnd : {0u, 1u, 38u, 39u, 118u, 119u, 5000u, 89053u, 89054u, 4000000000u}) {
    unsigned linear = GFREP_HSTCP_ROWS - 1;
    for (unsigned i = 0; i < GFREP_HSTCP_ROWS; ++i) {
      if (cwnd <= gfrep_hstcp_rows[i].cwnd) {
        linear = i;
        break;
      }
    }
    EXPECT_EQ(gfrep_hstcp_row_of(cwnd), linear) << cwnd;
  }
  for (unsigned i = 0; i < GFREP_HSTCP_ROWS; ++i) {
    EXPECT_EQ(gfrep_hstcp_row_of(gfrep_hstcp_rows[i].cwnd), i);
    EXPECT_EQ(gfrep_hstcp_row_of(gfrep_hstcp_rows[i].cwnd + 1), std::min<unsigned>(i + 1, GFREP_HSTCP_ROWS - 1));
  }
}

TEST(HighSpeedTableTest, ALossCutsLessThanRenoAboveLowWindow) {
  EXPECT_EQ(gfrep_hstcp_reduced(38), 19u);  // Standard TCP halves
  EXPECT_EQ(gfrep_hstcp_reduced(20), 10u);
  EXPECT_EQ(gfrep_hstcp_reduced(3), 2u);    // never below 2 segments
  EXPECT_EQ(gfrep_hstcp_reduced(1), 2u);
  EXPECT_EQ(gfrep_hstcp_reduced(39), 39u - (39u * 112 >> 8));  // b(39) = 0.44
  // At 10,000 segments b = 0.21: keep 79 %, where Reno keeps 50 %.
  EXPECT_EQ(gfrep_hstcp_reduced(10000), 10000u - (10000u * 52 >> 8));
  EXPECT_GT(gfrep_hstcp_reduced(10000), 7800u);
  // Past the table the last row holds (b = 0.094), and a huge window does not overflow.
  EXPECT_EQ(gfrep_hstcp_reduced(4000000000u), 4000000000u - static_cast<unsigned>(4000000000ull * 24 >> 8));
}

TEST(CongestionTest, NamesAreCheckedAndAlgorithmsWithoutAnImplementationAreNotFound) {
  EXPECT_EQ(EnsureCongestionControl("bad name").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(EnsureCongestionControl("").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(EnsureCongestionControl("a_very_long_algorithm").status().code(), absl::StatusCode::kInvalidArgument);
  absl::StatusOr<CongestionControl> none = EnsureCongestionControl("nosuchcc");
  ASSERT_EQ(none.status().code(), absl::StatusCode::kNotFound) << none.status();
  EXPECT_THAT(std::string(none.status().message()), HasSubstr("available:"));
  // Asked again within a minute: the same answer, remembered (no second modprobe).
  EXPECT_EQ(EnsureCongestionControl("nosuchcc").status(), none.status());
  // What the kernel has is the kernel's.
  const std::vector<std::string> available = AvailableCongestionControls();
  ASSERT_FALSE(available.empty());
  absl::StatusOr<CongestionControl> first = EnsureCongestionControl(available[0]);
  ASSERT_TRUE(first.ok()) << first.status();
  if (available[0] != "highspeed") {
    EXPECT_EQ(first->source, CongestionSource::kKernel);
  }
}

// The rest load BPF: root only (CI runs them). They share the kernel's one "highspeed" name,
// so ctest runs them under one RESOURCE_LOCK with every other test that registers it.
class HighSpeedBpfTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (::geteuid() != 0) GTEST_SKIP() << "needs root: loads a BPF congestion control";
    const std::vector<std::string> before = AvailableCongestionControls();
    if (std::find(before.begin(), before.end(), "highspeed") != before.end()) {
      GTEST_SKIP() << "this kernel already has highspeed (module or another process): nothing to provide";
    }
  }
  void TearDown() override { ReleaseCongestionControls(); }

  static bool Offered(const std::string& name) {
    const std::vector<std::string> a = AvailableCongestionControls();
    return std::find(a.begin(), a.end(), name) != a.end();
  }
  // Polls up to 5 s: a registration bound to a dead process's descriptor goes when the kernel
  // has released it (after an RCU grace period). Connections that use the algorithm keep
  // its program (and map) alive, not its name.
  static bool NotOfferedWithin5s() {
    for (int i = 0; i < 100; ++i) {
      if (!Offered("highspeed")) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    return false;
  }
  // ...and once no connection uses it, nothing of that registration is left in the kernel:
  // none of the struct_ops maps `ids` (from GfrepHighSpeedMaps) is alive any more. (Maps of
  // other registrations may be: a connection of an earlier test still closing holds one.)
  static bool GoneWithin5s(const std::vector<std::uint32_t>& ids) {
    for (int i = 0; i < 100; ++i) {
      const std::vector<std::uint32_t> live = internal::GfrepHighSpeedMaps();
      bool any = false;
      for (std::uint32_t id : ids) any = any || std::find(live.begin(), live.end(), id) != live.end();
      if (!Offered("highspeed") && !any) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    return false;
  }
  // The maps that appeared since `before`.
  static std::vector<std::uint32_t> NewMaps(const std::vector<std::uint32_t>& before) {
    std::vector<std::uint32_t> fresh;
    for (std::uint32_t id : internal::GfrepHighSpeedMaps()) {
      if (std::find(before.begin(), before.end(), id) == before.end()) fresh.push_back(id);
    }
    return fresh;
  }
};

// A connected pair of TCP sockets on 127.0.0.1 (in this thread's network namespace), the
// client's congestion control set to `cc` before connecting.
struct SocketPair {
  int client = -1;
  int server = -1;
  ~SocketPair() { Close(); }
  // Abortive close (RST, linger 0): a connection in FIN_WAIT would hold the program for as
  // long as its peer takes to answer, or for minutes when the peer's namespace is gone.
  void Close() {
    for (int* fd : {&client, &server}) {
      if (*fd < 0) continue;
      linger l{1, 0};
      ::setsockopt(*fd, SOL_SOCKET, SO_LINGER, &l, sizeof(l));
      ::close(*fd);
      *fd = -1;
    }
  }
};
void Connect(const std::string& cc, SocketPair& pair) {
  int listener = ::socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(listener, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  ASSERT_EQ(::bind(listener, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  ASSERT_EQ(::listen(listener, 1), 0);
  ASSERT_EQ(::getsockname(listener, reinterpret_cast<sockaddr*>(&addr), &len), 0);
  pair.client = ::socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_EQ(::setsockopt(pair.client, IPPROTO_TCP, TCP_CONGESTION, cc.data(), cc.size()), 0)
      << std::strerror(errno);
  ASSERT_EQ(::connect(pair.client, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0) << std::strerror(errno);
  pair.server = ::accept(listener, nullptr, nullptr);
  ::close(listener);
  ASSERT_GE(pair.server, 0);
}

std::string CongestionOf(int fd) {
  char name[16] = {};
  socklen_t len = sizeof(name);
  if (::getsockopt(fd, IPPROTO_TCP, TCP_CONGESTION, name, &len) != 0) return "";
  return std::string(name, strnlen(name, sizeof(name)));
}

// Sends `bytes` from the client while a thread reads them at the server; true when all came.
bool Pump(const SocketPair& pair, std::size_t bytes) {
  std::size_t received = 0;
  std::thread reader([&] {
    std::vector<char> buf(1 << 20);
    while (received < bytes) {
      ssize_t n = ::recv(pair.server, buf.data(), buf.size(), 0);
      if (n <= 0) return;
      received += static_cast<std::size_t>(n);
    }
  });
  std::vector<char> chunk(1 << 20, 'x');
  std::size_t sent = 0;
  while (sent < bytes) {
    ssize_t n = ::send(pair.client, chunk.data(), std::min(chunk.size(), bytes - sent), MSG_NOSIGNAL);
    if (n <= 0) break;
    sent += static_cast<std::size_t>(n);
  }
  reader.join();
  return received == bytes;
}

TEST_F(HighSpeedBpfTest, IsProvidedSelectedByASocketAndGoneWhenReleased) {
  const std::vector<std::uint32_t> before = internal::GfrepHighSpeedMaps();
  absl::StatusOr<CongestionControl> cc = EnsureCongestionControl("highspeed");
  ASSERT_TRUE(cc.ok()) << cc.status();
  EXPECT_EQ(cc->source, CongestionSource::kBpf) << cc->detail;
  EXPECT_THAT(cc->detail, HasSubstr("gfrep BPF"));
  const std::vector<std::uint32_t> ours = NewMaps(before);
  EXPECT_EQ(ours.size(), 1u);
  EXPECT_TRUE(Offered("highspeed"));
  EXPECT_TRUE(internal::GfrepHighSpeedRegistered());
  absl::StatusOr<CongestionControl> described = DescribeCongestionControl("highspeed");
  ASSERT_TRUE(described.ok()) << described.status();
  EXPECT_EQ(described->source, CongestionSource::kBpf);
  // Asked again: the same registration, not a second one.
  absl::StatusOr<CongestionControl> again = EnsureCongestionControl("highspeed");
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->source, CongestionSource::kBpf);

  SocketPair pair;
  ASSERT_NO_FATAL_FAILURE(Connect("highspeed", pair));
  EXPECT_EQ(CongestionOf(pair.client), "highspeed");
  ASSERT_TRUE(Pump(pair, 64 << 20));
  absl::StatusOr<HighSpeedCounters> counters = ReadHighSpeedCounters();
  ASSERT_TRUE(counters.ok()) << counters.status();
  EXPECT_GE(counters->sockets, 1u);   // init ran for the connection
  EXPECT_GT(counters->max_cwnd, 10u); // cong_avoid ran: the window grew past the initial 10

  // Released: no new socket can select it...
  ReleaseCongestionControls();
  EXPECT_TRUE(NotOfferedWithin5s());
  int fresh = ::socket(AF_INET, SOCK_STREAM, 0);
  EXPECT_NE(::setsockopt(fresh, IPPROTO_TCP, TCP_CONGESTION, "highspeed", 9), 0);
  ::close(fresh);
  EXPECT_EQ(ReadHighSpeedCounters().status().code(), absl::StatusCode::kNotFound);
  // ...but the connection that uses it keeps it and still moves data...
  EXPECT_EQ(CongestionOf(pair.client), "highspeed");
  EXPECT_TRUE(Pump(pair, 8 << 20));
  // ...and once it is closed nothing of ours is left in the kernel.
  pair.Close();
  EXPECT_TRUE(GoneWithin5s(ours));
}

TEST_F(HighSpeedBpfTest, TheLegacyRegistrationWorksAndIsRemovedOnRelease) {
  EnsureOptions legacy;
  legacy.legacy_registration = true;
  const std::vector<std::uint32_t> before = internal::GfrepHighSpeedMaps();
  absl::StatusOr<CongestionControl> cc = EnsureCongestionControl("highspeed", legacy);
  ASSERT_TRUE(cc.ok()) << cc.status();
  EXPECT_EQ(cc->source, CongestionSource::kBpf);
  EXPECT_THAT(cc->detail, HasSubstr("without a link"));
  SocketPair pair;
  ASSERT_NO_FATAL_FAILURE(Connect("highspeed", pair));
  EXPECT_EQ(CongestionOf(pair.client), "highspeed");
  const std::vector<std::uint32_t> ours = NewMaps(before);
  EXPECT_EQ(ours.size(), 1u);
  ReleaseCongestionControls();
  EXPECT_TRUE(NotOfferedWithin5s());
  pair.Close();
  EXPECT_TRUE(GoneWithin5s(ours));
}

TEST_F(HighSpeedBpfTest, AProcessKilledWithSigkillLeavesNothingBehind) {
  const std::vector<std::uint32_t> before = internal::GfrepHighSpeedMaps();
  absl::StatusOr<gfrep::testing::Subprocess> holder = gfrep::testing::Subprocess::Start(
      {gfrep::testing::BinPath("gfprobe"), "cc", "--provide", "highspeed", "--hold"});
  ASSERT_TRUE(holder.ok()) << holder.status();
  absl::StatusOr<std::string> held = holder->WaitForOutput("holding", std::chrono::seconds(20));
  ASSERT_TRUE(held.ok()) << held.status() << holder->Stderr();
  EXPECT_THAT(holder->Stdout(), HasSubstr("highspeed    bpf"));
  // Seen from here: provided by another process.
  absl::StatusOr<CongestionControl> seen = EnsureCongestionControl("highspeed");
  ASSERT_TRUE(seen.ok()) << seen.status();
  EXPECT_EQ(seen->source, CongestionSource::kBpfShared);
  const std::vector<std::uint32_t> theirs = NewMaps(before);
  EXPECT_EQ(theirs.size(), 1u);
  SocketPair pair;
  ASSERT_NO_FATAL_FAILURE(Connect("highspeed", pair));
  holder->Kill();
  EXPECT_TRUE(NotOfferedWithin5s());
  EXPECT_EQ(CongestionOf(pair.client), "highspeed");  // the open connection keeps it
  EXPECT_TRUE(Pump(pair, 8 << 20));
  pair.Close();
  EXPECT_TRUE(GoneWithin5s(theirs));
}

// gfsited and gfcp as processes: an agent started with --provide-cc highspeed registers it
// (and says so); gfcp's pushes and a third-party copy send with it and report it in --json;
// once that agent is gone, the next gfcp registers it again for itself. An algorithm nobody
// can provide falls back to the kernel's default, with a warning, and --json says which ran.
TEST_F(HighSpeedBpfTest, GfcpAndThirdPartyCopiesReallyUseItAndReportIt) {
  gfrep::testing::TempDir dir("cc-gfcp");
  const std::string key = dir.Sub("key");
  gfrep::testing::WriteRandomFile(dir.path() / "src", 32 << 20, 7);
  const std::vector<std::uint32_t> before = internal::GfrepHighSpeedMaps();
  auto agent = [&](const std::string& name, std::vector<std::string> extra) {
    std::vector<std::string> argv{gfrep::testing::BinPath("gfsited"), "--listen", "127.0.0.1:0", "--spool",
                                  dir.Sub(name), "--key-file", key, "--log-level", "info"};
    argv.insert(argv.end(), extra.begin(), extra.end());
    return gfrep::testing::Subprocess::Start(argv);
  };
  absl::StatusOr<gfrep::testing::Subprocess> a = agent("a", {"--provide-cc", "highspeed"});
  ASSERT_TRUE(a.ok()) << a.status();
  absl::StatusOr<std::string> a_addr = a->WaitForListen(std::chrono::seconds(20));
  ASSERT_TRUE(a_addr.ok()) << a_addr.status() << a->Stderr();
  EXPECT_THAT(a->Stderr() + a->Stdout(), HasSubstr("congestion control highspeed: gfrep BPF"));
  absl::StatusOr<gfrep::testing::Subprocess> b = agent("b", {});
  ASSERT_TRUE(b.ok()) << b.status();
  absl::StatusOr<std::string> b_addr = b->WaitForListen(std::chrono::seconds(20));
  ASSERT_TRUE(b_addr.ok()) << b_addr.status();

  auto gfcp = [&](std::vector<std::string> args) {
    std::vector<std::string> argv{gfrep::testing::BinPath("gfcp"), "--key-file", key, "--json", "-p", "2"};
    argv.insert(argv.end(), args.begin(), args.end());
    return gfrep::testing::RunCommand(argv, {}, std::chrono::seconds(60));
  };
  auto congestion = [](const gfrep::testing::RunResult& r) {
    nlohmann::json j = nlohmann::json::parse(r.out, nullptr, false);
    return j.is_object() ? j.value("congestion", std::string("?")) : std::string("?");
  };
  gfrep::testing::RunResult push = gfcp({"--cc", "highspeed", dir.Sub("src"), "gf://" + *a_addr + "/f1"});
  ASSERT_EQ(push.exit_code, 0) << push.err;
  EXPECT_EQ(congestion(push), "highspeed") << push.out;
  gfrep::testing::RunResult third = gfcp({"--cc", "highspeed", "gf://" + *a_addr + "/f1", "gf://" + *b_addr + "/f2"});
  ASSERT_EQ(third.exit_code, 0) << third.err;
  EXPECT_EQ(congestion(third), "highspeed") << third.out;  // agent a sent

  const std::vector<std::uint32_t> as = NewMaps(before);
  EXPECT_EQ(as.size(), 1u);
  a->Signal(SIGTERM);
  a->Wait(std::chrono::seconds(20));
  ASSERT_TRUE(NotOfferedWithin5s());  // a's registration ended with it
  gfrep::testing::RunResult again =
      gfcp({"--log-level", "info", "--cc", "highspeed", dir.Sub("src"), "gf://" + *b_addr + "/f3"});
  ASSERT_EQ(again.exit_code, 0) << again.err;
  EXPECT_EQ(congestion(again), "highspeed") << again.out << again.err;
  // gfcp (the sender) or agent b (whose receiving sockets ask for it too) registered it anew.
  EXPECT_THAT(again.err, HasSubstr("congestion control highspeed: gfrep BPF (RFC 3649), registered by"));

  gfrep::testing::RunResult fallback = gfcp({"--cc", "nosuchcc", dir.Sub("src"), "gf://" + *b_addr + "/f4"});
  ASSERT_EQ(fallback.exit_code, 0) << fallback.err;
  EXPECT_THAT(fallback.err, HasSubstr("'nosuchcc' is not available here"));
  EXPECT_NE(congestion(fallback), "nosuchcc");
  EXPECT_NE(congestion(fallback), "?");
}

// Over an emulated route (gftopo: two namespaces joined by gfwanem, 20 ms RTT, 500 Mbit/s,
// a drop-tail queue of one BDP, random loss 1e-4) one connection loses packets at windows of
// hundreds of segments: the kernel asks the program for the new threshold, which must be the
// RFC's (b(w) from the table, not Reno's half), and the window must have grown in congestion
// avoidance past Low_Window (a table row above the first). A loopback bottleneck would not do:
// TCP small queues keep a local qdisc from ever dropping at such windows.
constexpr char kLossyTopology[] = R"(topology gfrep-cc
buffer 32M
site cca nodes=1
site ccb nodes=1
route wan cca ccb rtt=20ms rate=500M loss=1e-4
)";

TEST_F(HighSpeedBpfTest, ALossAtALargeWindowCutsItAsTheRfcSays) {
  if (!std::filesystem::exists("/dev/net/tun")) GTEST_SKIP() << "/dev/net/tun is missing";
  using gfrep::testing::BinPath;
  using gfrep::testing::RunCommand;
  gfrep::testing::TempDir dir("cc-loss");
  const std::string topo = dir.Sub("cc.topo");
  std::ofstream(topo) << kLossyTopology;
  RunCommand({BinPath("gftopo"), "down", topo});  // leftovers of an interrupted run
  gfrep::testing::RunResult up = RunCommand({BinPath("gftopo"), "up", topo}, {}, std::chrono::seconds(60));
  struct Down {
    std::string topo;
    ~Down() { RunCommand({gfrep::testing::BinPath("gftopo"), "down", topo}, {}, std::chrono::seconds(60)); }
  } down{topo};
  ASSERT_EQ(up.exit_code, 0) << up.err;
  gfrep::testing::RunResult addr = RunCommand({BinPath("gftopo"), "addr", topo, "ccb-n1"});
  ASSERT_EQ(addr.exit_code, 0) << addr.err;
  const std::string receiver = addr.out.substr(0, addr.out.find_first_of(" \n"));
  absl::StatusOr<CongestionControl> cc = EnsureCongestionControl("highspeed");
  ASSERT_TRUE(cc.ok()) << cc.status();

  // Sockets belong to the namespace of the thread that makes them: make each in a thread
  // that entered its node's namespace, use them from here.
  auto in_ns = [](const std::string& node, const std::function<void()>& fn) {
    std::thread t([&] {
      int fd = ::open(("/run/netns/gfrep-" + node).c_str(), O_RDONLY | O_CLOEXEC);
      ASSERT_GE(fd, 0) << node;
      ASSERT_EQ(::setns(fd, CLONE_NEWNET), 0) << std::strerror(errno);
      ::close(fd);
      fn();
    });
    t.join();
  };
  int listener = -1;
  sockaddr_in at{};
  at.sin_family = AF_INET;
  ASSERT_EQ(::inet_pton(AF_INET, receiver.c_str(), &at.sin_addr), 1) << receiver;
  in_ns("ccb-n1", [&] {
    listener = ::socket(AF_INET, SOCK_STREAM, 0);
    socklen_t len = sizeof(at);
    if (::bind(listener, reinterpret_cast<sockaddr*>(&at), sizeof(at)) != 0 || ::listen(listener, 1) != 0 ||
        ::getsockname(listener, reinterpret_cast<sockaddr*>(&at), &len) != 0) {
      ::close(listener);
      listener = -1;
    }
  });
  ASSERT_GE(listener, 0) << std::strerror(errno);
  SocketPair pair;
  in_ns("cca-n1", [&] {
    pair.client = ::socket(AF_INET, SOCK_STREAM, 0);
    ::setsockopt(pair.client, IPPROTO_TCP, TCP_CONGESTION, "highspeed", 9);
    if (::connect(pair.client, reinterpret_cast<sockaddr*>(&at), sizeof(at)) != 0) {
      ::close(pair.client);
      pair.client = -1;
    }
  });
  ASSERT_GE(pair.client, 0) << std::strerror(errno);
  pair.server = ::accept(listener, nullptr, nullptr);
  ::close(listener);
  ASSERT_GE(pair.server, 0);
  EXPECT_EQ(CongestionOf(pair.client), "highspeed");
  ASSERT_TRUE(Pump(pair, 128 << 20));
  absl::StatusOr<HighSpeedCounters> c = ReadHighSpeedCounters();
  ASSERT_TRUE(c.ok()) << c.status();
  ASSERT_GE(c->reductions, 1u) << "no loss on a route with 1e-4 loss";
  EXPECT_EQ(c->last_ssthresh, gfrep_hstcp_reduced(c->last_cwnd)) << "cwnd " << c->last_cwnd;
  EXPECT_GT(c->max_row, 0u) << "the window never grew past Low_Window in congestion avoidance";
  EXPECT_GT(c->max_cwnd, static_cast<unsigned>(GFREP_HSTCP_LOW_WINDOW));
  std::cout << "highspeed over the lossy route: " << c->reductions << " reductions, last " << c->last_cwnd
            << " -> " << c->last_ssthresh << " segments, largest window " << c->max_cwnd << ", highest row "
            << c->max_row << "\n";
}

// gfrep_cubic (transfer/bpf/gfrep_cubic.bpf.c): root only, like the rest. The name is global
// in the kernel and other tests' daemons (every gfcp or agent on an emulated long route)
// register it too, so this test takes whichever registration is there.
class GfrepCubicBpfTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (::geteuid() != 0) GTEST_SKIP() << "needs root: loads a BPF congestion control";
  }
  void TearDown() override { ReleaseCongestionControls(); }
};

std::uint32_t CwndOf(int fd) {
  tcp_info info{};
  socklen_t len = sizeof(info);
  if (::getsockopt(fd, IPPROTO_TCP, TCP_INFO, &info, &len) != 0) return 0;
  return info.tcpi_snd_cwnd;
}

// A window grown by a bulk send on loopback, then an idle of 1.5 s (several times the
// retransmission timeout, at least 200 ms) and one small send: the kernel's CUBIC restarts
// from its initial window (10 segments), gfrep_cubic sends with the window it had.
struct AfterIdle {
  std::uint32_t before = 0;
  std::uint32_t after = 0;
};
void GrowIdleAndSend(const std::string& cc, AfterIdle& seen) {
  SocketPair pair;
  ASSERT_NO_FATAL_FAILURE(Connect(cc, pair));
  EXPECT_EQ(CongestionOf(pair.client), cc);
  ASSERT_TRUE(Pump(pair, 256 << 20));
  seen.before = CwndOf(pair.client);
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));
  char byte = 'y';
  ASSERT_EQ(::send(pair.client, &byte, 1, MSG_NOSIGNAL), 1);
  seen.after = CwndOf(pair.client);
  char got = 0;
  ASSERT_EQ(::recv(pair.server, &got, 1, 0), 1);
}

TEST_F(GfrepCubicBpfTest, KeepsTheWindowOverAnIdleAfterWhichTheKernelsCubicRestarts) {
  std::ifstream sysctl("/proc/sys/net/ipv4/tcp_slow_start_after_idle");
  int restart_after_idle = 1;
  sysctl >> restart_after_idle;
  if (restart_after_idle == 0) GTEST_SKIP() << "net.ipv4.tcp_slow_start_after_idle is off here: no restart to keep";
  absl::StatusOr<CongestionControl> cc = EnsureCongestionControl(kGfrepCubic);
  ASSERT_TRUE(cc.ok()) << cc.status();
  EXPECT_THAT(cc->detail, HasSubstr("CUBIC keeping its window over idle"));
  EXPECT_TRUE(cc->source == CongestionSource::kBpf || cc->source == CongestionSource::kBpfShared) << cc->detail;

  AfterIdle kernel, ours;
  ASSERT_NO_FATAL_FAILURE(GrowIdleAndSend("cubic", kernel));
  ASSERT_NO_FATAL_FAILURE(GrowIdleAndSend(std::string(kGfrepCubic), ours));
  std::cout << "window before -> after 1.5 s idle: cubic " << kernel.before << " -> " << kernel.after
            << ", gfrep_cubic " << ours.before << " -> " << ours.after << " segments\n";
  ASSERT_GT(kernel.before, 20u) << "the bulk send did not grow the window: nothing to restart";
  EXPECT_LE(kernel.after, 12u) << "the kernel's CUBIC did not restart after idle";
  ASSERT_GT(ours.before, 20u);
  EXPECT_GE(ours.after, ours.before) << "gfrep_cubic restarted after idle";
  if (cc->source == CongestionSource::kBpf) {
    absl::StatusOr<GfrepCubicCounters> c = ReadGfrepCubicCounters();
    ASSERT_TRUE(c.ok()) << c.status();
    EXPECT_GE(c->sockets, 1u);
    EXPECT_GE(c->kept, 1u);
    EXPECT_EQ(c->let_go, 0u);
  }
}

}  // namespace
}  // namespace gfrep::transfer
