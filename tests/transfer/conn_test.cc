// Conn (transfer/internal/engine.h) over a real loopback TCP connection.
#include <gtest/gtest.h>
#include <signal.h>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <optional>

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

}  // namespace
}  // namespace gfrep::transfer::internal
