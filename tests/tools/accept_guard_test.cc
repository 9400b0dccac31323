#include "tools/internal/accept_guard.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <filesystem>
#include <future>
#include <thread>
#include <vector>

#include "tools/internal/listener_watchdog.h"

namespace gfrep::tools {
namespace {

using namespace std::chrono_literals;

struct Listener {
  int fd = -1;
  int port = 0;
  ~Listener() {
    if (fd >= 0) ::close(fd);
  }
};

// A loopback listener (non-blocking unless asked), as gRPC's.
void Listen(Listener& l, bool nonblocking = true) {
  l.fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | (nonblocking ? SOCK_NONBLOCK : 0), 0);
  ASSERT_GE(l.fd, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::bind(l.fd, reinterpret_cast<const sockaddr*>(&addr), sizeof(addr)), 0);
  ASSERT_EQ(::listen(l.fd, 64), 0);
  socklen_t len = sizeof(addr);
  ASSERT_EQ(::getsockname(l.fd, reinterpret_cast<sockaddr*>(&addr), &len), 0);
  l.port = ntohs(addr.sin_port);
}

// A client connected to `port` (the kernel completes the handshake; nobody accepted yet),
// with a 5 s receive timeout so that a test waiting for the server to close it is bounded.
int Connect(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<std::uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  EXPECT_EQ(::connect(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof(addr)), 0);
  timeval tv{5, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  return fd;
}

// True if the server closed client `fd`'s connection (EOF or reset; not the 5 s timeout).
bool ClosedByServer(int fd) {
  char byte = 0;
  const ssize_t n = ::recv(fd, &byte, 1, 0);
  return n == 0 || (n < 0 && errno == ECONNRESET);
}

int AcceptOnce(int listen_fd) {
  sockaddr_storage addr{};
  socklen_t len = sizeof(addr);
  return ::accept4(listen_fd, reinterpret_cast<sockaddr*>(&addr), &len, SOCK_NONBLOCK | SOCK_CLOEXEC);
}

int HighestOpenDescriptor() {
  int highest = 0;
  std::error_code ec;
  for (std::filesystem::directory_iterator it("/proc/self/fd", ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    int fd = 0;
    if (std::from_chars(name.data(), name.data() + name.size(), fd).ec == std::errc{}) highest = std::max(highest, fd);
  }
  return highest;
}

int SoftLimit() {
  rlimit rl{};
  ::getrlimit(RLIMIT_NOFILE, &rl);
  return static_cast<int>(std::min<rlim_t>(rl.rlim_cur, 1 << 30));
}

TEST(AcceptGuardTest, CallsReachTheExecutablesDefinition) { EXPECT_TRUE(AcceptGuardInterposed()); }

TEST(AcceptGuardTest, ConnectionsWithinTheReserveAreClosedAndTheCallerIsToldEagain) {
  InstallAcceptGuard(SoftLimit());  // every descriptor is within this reserve
  Listener l;
  Listen(l);
  const int a = Connect(l.port);
  const int b = Connect(l.port);
  const AcceptGuardCounters before = GetAcceptGuardCounters();
  errno = 0;
  EXPECT_EQ(AcceptOnce(l.fd), -1);
  EXPECT_EQ(errno, EAGAIN) << "the one answer on which gRPC re-arms its listener";
  EXPECT_EQ(GetAcceptGuardCounters().shed - before.shed, 2u);
  EXPECT_TRUE(ClosedByServer(a));
  EXPECT_TRUE(ClosedByServer(b));
  EXPECT_EQ(*AcceptQueueLength(l.fd), 0u);
  EXPECT_GE(AcceptCallsOn(l.fd), 1u);
  ::close(a);
  ::close(b);
}

TEST(AcceptGuardTest, AFullTableIsDrainedThroughTheSpareDescriptorNotLeftQueued) {
  InstallAcceptGuard(0);  // opens the spare
  Listener l;
  Listen(l);
  std::vector<int> clients{Connect(l.port), Connect(l.port), Connect(l.port)};
  // Fill the descriptor table: a soft limit just above what is open, every slot left taken.
  rlimit saved{};
  ASSERT_EQ(::getrlimit(RLIMIT_NOFILE, &saved), 0);
  rlimit low = saved;
  low.rlim_cur = static_cast<rlim_t>(HighestOpenDescriptor() + 16);
  ASSERT_EQ(::setrlimit(RLIMIT_NOFILE, &low), 0);
  std::vector<int> fillers;
  for (int f; (f = ::open("/dev/null", O_RDONLY | O_CLOEXEC)) >= 0;) fillers.push_back(f);
  const int open_error = errno;
  const AcceptGuardCounters before = GetAcceptGuardCounters();
  errno = 0;
  const int got = AcceptOnce(l.fd);
  const int accept_error = errno;
  const std::uint32_t queued = AcceptQueueLength(l.fd).value_or(99);
  for (int f : fillers) ::close(f);
  ASSERT_EQ(::setrlimit(RLIMIT_NOFILE, &saved), 0);
  EXPECT_EQ(open_error, EMFILE);
  EXPECT_EQ(got, -1);
  EXPECT_EQ(accept_error, EAGAIN) << "not EMFILE, on which gRPC 1.51 abandons its listener";
  EXPECT_EQ(GetAcceptGuardCounters().shed - before.shed, 3u);
  EXPECT_EQ(queued, 0u);
  for (int c : clients) {
    EXPECT_TRUE(ClosedByServer(c));
    ::close(c);
  }
  // The spare was taken again: a second full table is drained too.
  const int late = Connect(l.port);
  ASSERT_EQ(::setrlimit(RLIMIT_NOFILE, &low), 0);
  fillers.clear();
  for (int f; (f = ::open("/dev/null", O_RDONLY | O_CLOEXEC)) >= 0;) fillers.push_back(f);
  errno = 0;
  EXPECT_EQ(AcceptOnce(l.fd), -1);
  EXPECT_EQ(errno, EAGAIN);
  for (int f : fillers) ::close(f);
  ASSERT_EQ(::setrlimit(RLIMIT_NOFILE, &saved), 0);
  EXPECT_TRUE(ClosedByServer(late));
  ::close(late);
}

TEST(AcceptGuardTest, ConnectionsOutsideTheReservePassAndBlockingSocketsAreLeftAlone) {
  InstallAcceptGuard(0);
  Listener l;
  Listen(l);
  const int a = Connect(l.port);
  const AcceptGuardCounters before = GetAcceptGuardCounters();
  const int got = AcceptOnce(l.fd);
  EXPECT_GE(got, 0);
  EXPECT_EQ(GetAcceptGuardCounters().accepted - before.accepted, 1u);
  ::close(got);
  ::close(a);
  // A blocking listener keeps the C library's behaviour even with the whole table reserved.
  InstallAcceptGuard(SoftLimit());
  Listener blocking;
  Listen(blocking, /*nonblocking=*/false);
  const int b = Connect(blocking.port);
  const int served = AcceptOnce(blocking.fd);
  EXPECT_GE(served, 0);
  ::close(served);
  ::close(b);
  InstallAcceptGuard(0);
}

TEST(StallDetectorTest, DeadOnlyAfterAQueueWaitedTheWholeStallWithoutACall) {
  StallDetector d(5000ms);
  const auto t0 = std::chrono::steady_clock::time_point{} + 1h;
  EXPECT_FALSE(d.Observe(t0, 0, 10));
  EXPECT_FALSE(d.Observe(t0 + 1s, 3, 10));  // first sight of a queue
  EXPECT_FALSE(d.Observe(t0 + 5s, 3, 10));
  EXPECT_TRUE(d.Observe(t0 + 6s, 1, 10));
  EXPECT_EQ(d.stalled_for(), 5000ms);
}

TEST(StallDetectorTest, AcceptCallsOrAnEmptyQueueStartItOver) {
  StallDetector d(5000ms);
  const auto t0 = std::chrono::steady_clock::time_point{} + 1h;
  EXPECT_FALSE(d.Observe(t0, 3, 10));
  EXPECT_FALSE(d.Observe(t0 + 4s, 3, 11));  // a busy but live listener
  EXPECT_FALSE(d.Observe(t0 + 8s, 3, 11));
  EXPECT_FALSE(d.Observe(t0 + 9s, 0, 11));
  EXPECT_FALSE(d.Observe(t0 + 13s, 2, 11));
  EXPECT_TRUE(d.Observe(t0 + 18s, 2, 11));
}

TEST(ListenerWatchdogTest, FindsTheListenerAndItsQueue) {
  Listener l;
  Listen(l);
  EXPECT_EQ(ListeningSocketsOnPort(l.port), std::vector<int>{l.fd});
  const int a = Connect(l.port);
  const int b = Connect(l.port);
  EXPECT_EQ(*AcceptQueueLength(l.fd), 2u);
  EXPECT_FALSE(AcceptQueueLength(a).ok()) << "a connected socket is not a listener";
  ::close(a);
  ::close(b);
}

TEST(ListenerWatchdogTest, CallsOnDeadForAQueueNobodyAccepts) {
  Listener l;
  Listen(l);
  const int a = Connect(l.port);
  std::promise<std::string> dead;
  ListenerWatchdogOptions o;
  o.port = l.port;
  o.interval = 20ms;
  o.stall = 200ms;
  o.accept_calls = [](int) { return std::uint64_t{0}; };
  o.on_dead = [&dead](const std::string& what) { dead.set_value(what); };
  absl::StatusOr<std::unique_ptr<ListenerWatchdog>> w = ListenerWatchdog::Start(o);
  ASSERT_TRUE(w.ok()) << w.status();
  std::future<std::string> f = dead.get_future();
  ASSERT_EQ(f.wait_for(10s), std::future_status::ready);
  EXPECT_NE(f.get().find("1 connections have waited"), std::string::npos);
  w->reset();
  ::close(a);
}

TEST(ListenerWatchdogTest, ALiveListenerIsLeftAlone) {
  Listener l;
  Listen(l);
  const int a = Connect(l.port);
  std::atomic<std::uint64_t> calls{0};
  std::atomic<int> ticks{0};
  std::atomic<bool> dead{false};
  std::promise<void> enough;
  ListenerWatchdogOptions o;
  o.port = l.port;
  o.interval = 20ms;
  o.stall = 100ms;
  o.accept_calls = [&calls](int) { return ++calls; };  // accept called between every look
  o.on_dead = [&dead](const std::string&) { dead = true; };
  o.on_tick = [&] {
    if (++ticks == 30) enough.set_value();  // 600 ms: six stalls' worth
  };
  absl::StatusOr<std::unique_ptr<ListenerWatchdog>> w = ListenerWatchdog::Start(o);
  ASSERT_TRUE(w.ok()) << w.status();
  ASSERT_EQ(enough.get_future().wait_for(10s), std::future_status::ready);
  w->reset();
  EXPECT_FALSE(dead);
  o.port = 1;
  EXPECT_TRUE(absl::IsNotFound(ListenerWatchdog::Start(o).status())) << "nothing of ours listens on port 1";
  ::close(a);
}

}  // namespace
}  // namespace gfrep::tools
