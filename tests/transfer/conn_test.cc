// Conn (transfer/internal/engine.h) over a real loopback TCP connection.
#include <gtest/gtest.h>
#include <signal.h>

#include <atomic>
#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <functional>
#include <future>
#include <optional>
#include <thread>

#include "tests/support/temp_dir.h"
#include "transfer/internal/engine.h"

namespace gfrep::transfer::internal {
namespace {

TEST(ConnTest, SendingAFileToAPeerThatClosedFailsWithoutSigpipe) {
  // The default SIGPIPE disposition kills the process: a library must not rely on its
  // program ignoring it. sendfile has no MSG_NOSIGNAL, so the engine blocks the signal.
  struct sigaction dfl {};
  struct sigaction old {};
  dfl.sa_handler = SIG_DFL;
  ASSERT_EQ(::sigaction(SIGPIPE, &dfl, &old), 0);
  testing::TempDir dir("conn");
  testing::WriteRandomFile(dir.path() / "f", 8 << 20, 3);
  const int fd = ::open((dir.path() / "f").c_str(), O_RDONLY);
  ASSERT_GE(fd, 0);
  asio::io_context io;
  tcp::acceptor acceptor(io, tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0));
  tcp::socket client(io);
  client.connect(acceptor.local_endpoint());
  tcp::socket server = acceptor.accept();
  server.close();  // the peer goes away
  Conn conn(std::move(client));
  std::optional<absl::Status> result;
  asio::co_spawn(io, [&]() -> asio::awaitable<void> {
    // The first frames may still be accepted by the kernel; the peer's reset comes soon.
    absl::Status s;
    for (int i = 0; i < 64 && s.ok(); ++i) {
      s = co_await conn.WriteDataFromFile(FrameHeader{FrameType::kData, 1 << 20, 0, 0}, fd);
    }
    result = s;
  }, asio::detached);
  io.run();
  ::close(fd);
  ::sigaction(SIGPIPE, &old, nullptr);
  ASSERT_TRUE(result.has_value());
  EXPECT_FALSE(result->ok());  // an error, and we are still alive to see it
  sigset_t pending;
  sigemptyset(&pending);
  ::sigpending(&pending);
  EXPECT_EQ(sigismember(&pending, SIGPIPE), 0);  // none left pending either
}

// Two Conns over one loopback connection; `a` is the client side.
struct ConnPair {
  asio::io_context io;
  std::unique_ptr<Conn> a, b;
  ConnPair() {
    tcp::acceptor acceptor(io, tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0));
    tcp::socket client(io);
    client.connect(acceptor.local_endpoint());
    a = std::make_unique<Conn>(std::move(client));
    b = std::make_unique<Conn>(acceptor.accept());
  }
  // Sends `m` from `from` and reads one message on `to`.
  absl::StatusOr<Json> Relay(Conn& from, Conn& to, const Json& m) {
    absl::StatusOr<Json> got = absl::UnknownError("not run");
    asio::co_spawn(io, [&]() -> asio::awaitable<void> {
      if (absl::Status s = co_await from.SendControl(m); !s.ok()) {
        got = s;
        co_return;
      }
      got = co_await to.ReadControl();
    }, asio::detached);
    io.restart();
    io.run();
    return got;
  }
};

TEST(ConnTest, BoundControlMessagesPassBothWaysAndForgeriesFail) {
  const std::string key = ControlSessionKey(std::string(32, 'k'), "client-nonce-0001", "server-nonce-0001");
  ConnPair p;
  p.a->BindControlMessages(key, true);
  p.b->BindControlMessages(key, false);
  for (int i = 0; i < 3; ++i) {  // several in each direction: the sequence numbers advance
    absl::StatusOr<Json> ab = p.Relay(*p.a, *p.b, Json{{"op", "ping"}, {"i", i}});
    ASSERT_TRUE(ab.ok()) << ab.status();
    EXPECT_EQ((*ab)["i"], i);
    absl::StatusOr<Json> ba = p.Relay(*p.b, *p.a, Json{{"op", "pong"}, {"i", i}});
    ASSERT_TRUE(ba.ok()) << ba.status();
  }
  // A message MAC'd with another session's key (a replay from another connection) fails.
  ConnPair q;
  q.a->BindControlMessages(ControlSessionKey(std::string(32, 'k'), "client-nonce-0002", "server-nonce-0001"), true);
  q.b->BindControlMessages(key, false);
  absl::StatusOr<Json> other = q.Relay(*q.a, *q.b, Json{{"op", "ping"}});
  EXPECT_TRUE(absl::IsPermissionDenied(other.status())) << other.status();
  // An unsigned message to a bound reader fails too.
  ConnPair r;
  r.b->BindControlMessages(key, false);
  absl::StatusOr<Json> bare = r.Relay(*r.a, *r.b, Json{{"op", "ping"}});
  EXPECT_TRUE(absl::IsPermissionDenied(bare.status())) << bare.status();
  // A message sent with the reader's own direction label (reflected back at its sender) fails.
  ConnPair t;
  t.a->BindControlMessages(key, false);
  t.b->BindControlMessages(key, false);
  absl::StatusOr<Json> reflected = t.Relay(*t.a, *t.b, Json{{"op", "ping"}});
  EXPECT_TRUE(absl::IsPermissionDenied(reflected.status())) << reflected.status();
}

// A copy cancelled while a blocking step of it ran on the pool (OffThread) ended the whole
// process: the pool's coroutine threw "co_await: Operation canceled" on its way back to the
// caller's executor, outside every handler (std::terminate).
TEST(OffThreadTest, ACancellationWhileTheJobRunsLeavesItsResultAndTheProcess) {
  asio::io_context io;
  asio::cancellation_signal cancel;
  std::promise<void> emitted;
  std::shared_future<void> emitted_f = emitted.get_future().share();
  std::atomic<bool> job_started{false};
  int result = 0;
  bool threw = false;
  bool ended = false;
  std::function<int()> job = [&] {
    job_started = true;
    emitted_f.wait();  // returns only after the caller's cancellation
    return 7;
  };
  asio::co_spawn(
      io,
      [&]() -> asio::awaitable<void> {
        co_await asio::this_coro::throw_if_cancelled(false);
        result = co_await OffThread(job);
      },
      asio::bind_cancellation_slot(cancel.slot(), [&](std::exception_ptr e) {
        threw = e != nullptr;
        ended = true;
      }));
  std::thread canceller([&] {
    while (!job_started) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    asio::post(io, [&] {
      cancel.emit(asio::cancellation_type::terminal);
      emitted.set_value();
    });
  });
  io.run();
  canceller.join();
  EXPECT_TRUE(ended);
  EXPECT_FALSE(threw);
  EXPECT_EQ(result, 7);
}

}  // namespace
}  // namespace gfrep::transfer::internal
