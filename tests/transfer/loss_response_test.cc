// transfer/internal/loss_response.h: when a stream's loss is the path's (no queue before it)
// and when it is a full queue's. The switch itself over an emulated lossy route is
// tests/integration/loss_response_test.cc.

#include "transfer/internal/loss_response.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <vector>

namespace gfrep::transfer::internal {
namespace {

TcpSample Look(std::uint64_t retrans, std::uint32_t srtt_ms, std::uint32_t min_ms) {
  TcpSample s;
  s.bytes_sent = 1 << 30;
  s.bytes_retrans = retrans;
  s.srtt_us = srtt_ms * 1000;
  s.min_rtt_us = min_ms * 1000;
  return s;
}

TEST(LossResponseTest, LossWithNoQueueAtEitherLookIsRandom) {
  // 200 ms route, loss between two looks at 205 and 210 ms: the path's.
  EXPECT_TRUE(ShowsRandomLoss(Look(0, 205, 200), Look(9000, 210, 200)));
  // Exactly a quarter above the least still counts as no queue.
  EXPECT_TRUE(ShowsRandomLoss(Look(0, 250, 200), Look(9000, 250, 200)));
}

TEST(LossResponseTest, NoNewLossIsNothing) {
  EXPECT_FALSE(ShowsRandomLoss(Look(9000, 200, 200), Look(9000, 200, 200)));
  EXPECT_FALSE(ShowsRandomLoss(Look(0, 200, 200), Look(0, 200, 200)));
}

TEST(LossResponseTest, LossBehindAQueueIsCongestion) {
  // The queue was there at the look before the loss (a full queue's drop)...
  EXPECT_FALSE(ShowsRandomLoss(Look(0, 390, 200), Look(9000, 210, 200)));
  // ...or is there now.
  EXPECT_FALSE(ShowsRandomLoss(Look(0, 205, 200), Look(9000, 300, 200)));
  EXPECT_FALSE(ShowsRandomLoss(Look(0, 251, 200), Look(9000, 251, 200)));
}

TEST(LossResponseTest, ShortRoutesAreLeftAlone) {
  // 2 ms: a window cut regrows in milliseconds.
  EXPECT_FALSE(ShowsRandomLoss(Look(0, 2, 2), Look(9000, 2, 2)));
  // 10 ms is long enough.
  EXPECT_TRUE(ShowsRandomLoss(Look(0, 10, 10), Look(9000, 10, 10)));
}

TEST(LossResponseTest, NoRttSampleIsNotJudged) {
  EXPECT_FALSE(ShowsRandomLoss(Look(0, 0, 200), Look(9000, 200, 200)));
  EXPECT_FALSE(ShowsRandomLoss(Look(0, 200, 200), Look(9000, 0, 200)));
}

TEST(LossResponseTest, OnlyRenoAndTheCubicsAreLossBased) {
  EXPECT_TRUE(IsLossBased("cubic"));
  EXPECT_TRUE(IsLossBased("gfrep_cubic"));  // the kernel's CUBIC keeping its window over idle
  EXPECT_TRUE(IsLossBased("reno"));
  EXPECT_FALSE(IsLossBased("bbr"));
  EXPECT_FALSE(IsLossBased("highspeed"));  // only ever chosen, never a default here
  EXPECT_FALSE(IsLossBased(""));
}

// A connected loopback pair whose client runs `cc`.
struct Pair {
  int client = -1, server = -1;
  ~Pair() {
    if (client >= 0) ::close(client);
    if (server >= 0) ::close(server);
  }
};
void Connect(const char* cc, Pair& p) {
  int listener = ::socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(listener, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(a);
  ASSERT_EQ(::bind(listener, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
  ASSERT_EQ(::listen(listener, 1), 0);
  ASSERT_EQ(::getsockname(listener, reinterpret_cast<sockaddr*>(&a), &len), 0);
  p.client = ::socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_EQ(::setsockopt(p.client, IPPROTO_TCP, TCP_CONGESTION, cc, std::strlen(cc)), 0)
      << std::strerror(errno);
  ASSERT_EQ(::connect(p.client, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
  p.server = ::accept(listener, nullptr, nullptr);
  ::close(listener);
  ASSERT_GE(p.server, 0);
}

TEST(LossResponseTest, AChosenControlIsNotWatched) {
  Pair p;
  ASSERT_NO_FATAL_FAILURE(Connect("reno", p));
  LossResponse chosen(p.client, "reno", /*first_stream=*/true);
  EXPECT_EQ(chosen.Check(), LossResponse::Verdict::kUnchanged);
  EXPECT_EQ(chosen.from(), "");  // never looked at
  EXPECT_EQ(ControlOf(p.client), "reno");
}

TEST(LossResponseTest, AnUnchosenControlIsWatchedAndLeftOnALoopbackRoute) {
  Pair p;
  ASSERT_NO_FATAL_FAILURE(Connect("reno", p));  // every host lets anyone select reno
  LossResponse watch(p.client, "", /*first_stream=*/true);
  EXPECT_EQ(watch.from(), "reno");
  std::vector<char> buf(1 << 20, 'x');
  for (int i = 0; i < 8; ++i) {
    ASSERT_EQ(::send(p.client, buf.data(), buf.size(), MSG_NOSIGNAL), static_cast<ssize_t>(buf.size()));
    std::size_t got = 0;
    while (got < buf.size()) {
      ssize_t n = ::recv(p.server, buf.data(), buf.size() - got, 0);
      ASSERT_GT(n, 0);
      got += static_cast<std::size_t>(n);
    }
    EXPECT_EQ(watch.Check(), LossResponse::Verdict::kUnchanged);
  }
  EXPECT_EQ(ControlOf(p.client), "reno");
}

// On loopback (least RTT far below 10 ms) a BBR default does not start on CUBIC either: the
// long-route start is tests/integration/loss_response_test.cc.
TEST(LossResponseTest, ANonLossBasedDefaultOnALoopbackRouteIsNeitherStartedOnCubicNorWatched) {
  const int probe = ::socket(AF_INET, SOCK_STREAM, 0);
  const bool allowed = ::setsockopt(probe, IPPROTO_TCP, TCP_CONGESTION, "bbr", 3) == 0;
  ::close(probe);
  if (!allowed) GTEST_SKIP() << "this user may not select bbr";
  Pair p;
  ASSERT_NO_FATAL_FAILURE(Connect("bbr", p));
  LossResponse watch(p.client, "", /*first_stream=*/true);
  EXPECT_EQ(watch.from(), "bbr");
  EXPECT_EQ(watch.started_from(), "");
  EXPECT_EQ(ControlOf(p.client), "bbr");
  EXPECT_EQ(watch.Check(), LossResponse::Verdict::kUnchanged);
}

TEST(LossyPeersTest, APeerStaysMarkedForTheMemoryAndOnlyThatPeer) {
  LossyPeers peers(std::chrono::seconds(60));
  const LossyPeers::Clock::time_point t0{};
  EXPECT_EQ(peers.marks(), 0u);
  EXPECT_FALSE(peers.IsLossy("10.0.0.1", t0));
  peers.Mark("10.0.0.1", t0);
  EXPECT_EQ(peers.marks(), 1u);
  EXPECT_TRUE(peers.IsLossy("10.0.0.1", t0 + std::chrono::seconds(59)));
  EXPECT_FALSE(peers.IsLossy("10.0.0.2", t0 + std::chrono::seconds(1)));
  EXPECT_FALSE(peers.IsLossy("10.0.0.1", t0 + std::chrono::seconds(60)));
  // A later verdict renews the memory.
  peers.Mark("10.0.0.1", t0 + std::chrono::seconds(50));
  EXPECT_TRUE(peers.IsLossy("10.0.0.1", t0 + std::chrono::seconds(100)));
}

bool MaySelect(const char* cc) {
  const int probe = ::socket(AF_INET, SOCK_STREAM, 0);
  const bool allowed = ::setsockopt(probe, IPPROTO_TCP, TCP_CONGESTION, cc, std::strlen(cc)) == 0;
  ::close(probe);
  return allowed;
}

// The verdict is the route's: a stream still on CUBIC turns to BBR at its next look once
// another stream marked its peer, without seeing loss itself (loopback never shows any).
TEST(LossResponseTest, AStreamTurnsToBbrOnceAnotherStreamMarkedItsPeer) {
  if (!MaySelect("cubic") || !MaySelect("bbr")) GTEST_SKIP() << "this user may not select cubic and bbr";
  LossyPeers peers;
  Pair p;
  ASSERT_NO_FATAL_FAILURE(Connect("cubic", p));
  LossResponse watch(p.client, "", /*first_stream=*/false, peers);
  EXPECT_EQ(watch.Check(), LossResponse::Verdict::kUnchanged);
  peers.Mark("10.9.9.9", LossyPeers::Clock::now());  // another peer: nothing
  EXPECT_EQ(watch.Check(), LossResponse::Verdict::kUnchanged);
  EXPECT_EQ(ControlOf(p.client), "cubic");
  ASSERT_EQ(PeerAddressOf(p.client), "127.0.0.1");
  peers.Mark("127.0.0.1", LossyPeers::Clock::now());
  EXPECT_EQ(watch.Check(), LossResponse::Verdict::kTurned);
  EXPECT_TRUE(watch.followed_peer());
  EXPECT_EQ(watch.from(), "cubic");
  EXPECT_EQ(ControlOf(p.client), "bbr");
  EXPECT_EQ(watch.Check(), LossResponse::Verdict::kUnchanged);  // once per stream
}

// A stream that starts while its peer is marked turns at its first look; a chosen control is
// left alone all the same.
TEST(LossResponseTest, AStreamToAPeerMarkedBeforeItStartedTurnsAtItsFirstLook) {
  if (!MaySelect("cubic") || !MaySelect("bbr")) GTEST_SKIP() << "this user may not select cubic and bbr";
  LossyPeers peers;
  peers.Mark("127.0.0.1", LossyPeers::Clock::now());
  Pair p;
  ASSERT_NO_FATAL_FAILURE(Connect("cubic", p));
  LossResponse watch(p.client, "", /*first_stream=*/true, peers);
  EXPECT_EQ(watch.Check(), LossResponse::Verdict::kTurned);
  EXPECT_EQ(ControlOf(p.client), "bbr");

  Pair q;
  ASSERT_NO_FATAL_FAILURE(Connect("cubic", q));
  LossResponse chosen(q.client, "cubic", /*first_stream=*/true, peers);
  EXPECT_EQ(chosen.Check(), LossResponse::Verdict::kUnchanged);
  EXPECT_EQ(ControlOf(q.client), "cubic");
}

}  // namespace
}  // namespace gfrep::transfer::internal
