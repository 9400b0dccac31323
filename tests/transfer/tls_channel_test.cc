// TLS on the socket itself (transfer/internal/tls_channel.h) under Conn, over real loopback
// TCP: frames both ways, which path encrypts (OpenSSL in user space, or the kernel where it
// has TLS), a peer that closes mid-frame or goes away while we write (no SIGPIPE), a
// connection closed under a waiting read, a certificate from an unknown CA, and the kernel-TLS
// probe against the kernel itself.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <unistd.h>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <random>

#include "tests/support/temp_dir.h"
#include "transfer/internal/engine.h"
#include "transfer/internal/tls_channel.h"

namespace gfrep::transfer::internal {
namespace {

// A CA, an agent certificate for 127.0.0.1 signed by it, and a second CA that signed nothing.
class TlsChannelTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string d = dir_.path().string();
    const std::string cmd =
        "cd '" + d + "' && openssl req -x509 -newkey rsa:2048 -nodes -days 1 -subj /CN=ca "
        "-keyout ca.key -out ca.pem 2>/dev/null && openssl req -x509 -newkey rsa:2048 -nodes "
        "-days 1 -subj /CN=other -keyout other.key -out other.pem 2>/dev/null && "
        "openssl req -newkey rsa:2048 -nodes -subj /CN=127.0.0.1 -keyout agent.key "
        "-out agent.csr 2>/dev/null && printf 'subjectAltName=IP:127.0.0.1\\n' > san.ext && "
        "openssl x509 -req -in agent.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 1 "
        "-extfile san.ext -out agent.pem 2>/dev/null";
    ASSERT_EQ(std::system(cmd.c_str()), 0);
    TlsOptions server;
    server.cert = dir_.path() / "agent.pem";
    server.key = dir_.path() / "agent.key";
    absl::StatusOr<std::unique_ptr<asio::ssl::context>> s = MakeTlsContext(server, true);
    ASSERT_TRUE(s.ok()) << s.status();
    server_ctx_ = std::move(*s);
    client_ctx_ = ClientContext("ca.pem");
  }

  std::unique_ptr<asio::ssl::context> ClientContext(const char* ca) {
    TlsOptions client;
    client.ca = dir_.path() / ca;
    absl::StatusOr<std::unique_ptr<asio::ssl::context>> c = MakeTlsContext(client, false);
    EXPECT_TRUE(c.ok()) << c.status();
    return c.ok() ? std::move(*c) : nullptr;
  }

  // A loopback connection: `a_` the client, `b_` the server, both through the handshake
  // (whose results land in `client_hs` / `server_hs`).
  void Connect(asio::ssl::context& client_ctx, absl::Status& client_hs, absl::Status& server_hs) {
    tcp::acceptor acceptor(io_, tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0));
    tcp::socket client(io_);
    client.connect(acceptor.local_endpoint());
    a_ = std::make_shared<Conn>(std::move(client));
    b_ = std::make_shared<Conn>(acceptor.accept());
    asio::co_spawn(io_, [&]() -> asio::awaitable<void> {
      client_hs = co_await a_->Handshake(client_ctx, std::string_view("127.0.0.1"));  // not the bool overload
      if (!client_hs.ok()) a_->Close();
    }, asio::detached);
    asio::co_spawn(io_, [&]() -> asio::awaitable<void> {
      server_hs = co_await b_->Handshake(*server_ctx_, true);
      if (!server_hs.ok()) b_->Close();
    }, asio::detached);
    Run();
  }
  void Connect() {
    absl::Status c, s;
    Connect(*client_ctx_, c, s);
    ASSERT_TRUE(c.ok()) << c;
    ASSERT_TRUE(s.ok()) << s;
  }
  void Run() {
    io_.restart();
    io_.run();
  }

  testing::TempDir dir_{"tls-channel"};
  asio::io_context io_;
  std::unique_ptr<asio::ssl::context> server_ctx_, client_ctx_;
  ConnPtr a_, b_;
};

std::vector<unsigned char> RandomBytes(std::size_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::vector<unsigned char> v(n);
  for (auto& c : v) c = static_cast<unsigned char>(rng());
  return v;
}

TEST_F(TlsChannelTest, LargeDataFramesAndControlMessagesPassBothWays) {
  Connect();
  ASSERT_TRUE(a_->tls());
  const std::vector<unsigned char> block = RandomBytes((8 << 20) + 4321, 7);  // many records
  std::vector<unsigned char> got(block.size());
  absl::Status wrote = absl::UnknownError("not run");
  absl::Status read = absl::UnknownError("not run");
  absl::StatusOr<Json> reply = absl::UnknownError("not run");
  asio::co_spawn(io_, [&]() -> asio::awaitable<void> {
    wrote = co_await a_->WriteData(FrameHeader{FrameType::kData, static_cast<std::uint32_t>(block.size()), 4096, 99},
                                   block.data());
    if (wrote.ok()) reply = co_await a_->ReadControl();
  }, asio::detached);
  asio::co_spawn(io_, [&]() -> asio::awaitable<void> {
    absl::StatusOr<FrameHeader> h = co_await b_->ReadHeader(16 << 20);
    if (!h.ok()) {
      read = h.status();
      co_return;
    }
    EXPECT_EQ(h->length, block.size());
    EXPECT_EQ(h->offset, 4096u);
    EXPECT_EQ(h->checksum, 99u);
    read = co_await b_->ReadExact(got.data(), h->length);
    Json ok = {{"op", "ok"}, {"n", got.size()}};  // named: GCC 12 and temporaries in co_await
    if (read.ok()) read = co_await b_->SendControl(ok);
  }, asio::detached);
  Run();
  ASSERT_TRUE(wrote.ok()) << wrote;
  ASSERT_TRUE(read.ok()) << read;
  EXPECT_TRUE(got == block);
  ASSERT_TRUE(reply.ok()) << reply.status();
  EXPECT_EQ((*reply)["n"], block.size());
  // Both sides count what moved (the watchdog's measure of progress).
  EXPECT_GE(a_->activity(), block.size());
  EXPECT_GE(b_->activity(), block.size());
}

TEST_F(TlsChannelTest, ThePathSaysWhoEncryptsAndFilesAreSentFromMemoryWithoutKernelTls) {
  std::string why;
  const bool kernel = KernelTlsAvailable(&why);
  Connect();
  if (!kernel) {
    // This kernel has no TLS (CONFIG_TLS off here): OpenSSL encrypts in user space, and a
    // sender must not sendfile clear pages onto a TLS connection.
    EXPECT_FALSE(why.empty());
    EXPECT_EQ(a_->TlsPath(), "openssl");
    EXPECT_EQ(b_->TlsPath(), "openssl");
    EXPECT_FALSE(a_->CanSendFile());
    GTEST_SKIP() << "kernel TLS not available here (" << why << "): the sendfile-under-TLS half is not run";
  }
  // Kernel TLS: TLS 1.3 with AES-GCM goes to the kernel for sending (OpenSSL 3).
  EXPECT_TRUE(a_->TlsPath().starts_with("ktls")) << a_->TlsPath();
  ASSERT_TRUE(a_->CanSendFile());
  const std::vector<unsigned char> data = RandomBytes(3 << 20, 11);
  const std::filesystem::path file = dir_.path() / "f";
  {
    std::FILE* f = std::fopen(file.c_str(), "wb");
    ASSERT_NE(f, nullptr);
    ASSERT_EQ(std::fwrite(data.data(), 1, data.size(), f), data.size());
    std::fclose(f);
  }
  const int fd = ::open(file.c_str(), O_RDONLY);
  ASSERT_GE(fd, 0);
  std::vector<unsigned char> got(2 << 20);
  absl::Status wrote, read;
  asio::co_spawn(io_, [&]() -> asio::awaitable<void> {
    wrote = co_await a_->WriteDataFromFile(FrameHeader{FrameType::kData, 2 << 20, 1 << 20, 0}, fd);
  }, asio::detached);
  asio::co_spawn(io_, [&]() -> asio::awaitable<void> {
    absl::StatusOr<FrameHeader> h = co_await b_->ReadHeader(4 << 20);
    read = h.ok() ? co_await b_->ReadExact(got.data(), got.size()) : h.status();
  }, asio::detached);
  Run();
  ::close(fd);
  ASSERT_TRUE(wrote.ok()) << wrote;
  ASSERT_TRUE(read.ok()) << read;
  EXPECT_TRUE(std::equal(got.begin(), got.end(), data.begin() + (1 << 20)));
}

TEST_F(TlsChannelTest, APeerClosingMidFrameIsATruncatedFrame) {
  Connect();
  const std::vector<unsigned char> part = RandomBytes(100 << 10, 3);
  std::vector<unsigned char> got(1 << 20);
  absl::Status read = absl::UnknownError("not run");
  asio::co_spawn(io_, [&]() -> asio::awaitable<void> {
    // 100 KiB (and a frame header) of the 1 MiB the peer reads, then the connection closes
    // without TLS's close_notify.
    absl::Status w = co_await a_->SendFrame(FrameType::kControl,
                                            std::string_view(reinterpret_cast<const char*>(part.data()), part.size()));
    EXPECT_TRUE(w.ok()) << w;
    a_->Close();
  }, asio::detached);
  asio::co_spawn(io_, [&]() -> asio::awaitable<void> {
    read = co_await b_->ReadExact(got.data(), got.size());
  }, asio::detached);
  Run();
  EXPECT_TRUE(absl::IsUnavailable(read)) << read;
  EXPECT_NE(read.message().find("truncated frame"), std::string::npos) << read;
}

TEST_F(TlsChannelTest, WritingToAPeerThatWentAwayFailsWithoutSigpipe) {
  // OpenSSL writes the socket with write(2), which raises SIGPIPE; the default disposition
  // kills the process, and a library must not rely on its program ignoring it.
  struct sigaction dfl {};
  struct sigaction old {};
  dfl.sa_handler = SIG_DFL;
  ASSERT_EQ(::sigaction(SIGPIPE, &dfl, &old), 0);
  Connect();
  b_->Close();  // the peer goes away
  const std::vector<unsigned char> block = RandomBytes(1 << 20, 5);
  absl::Status s;
  asio::co_spawn(io_, [&]() -> asio::awaitable<void> {
    // The first frames may still be accepted by the kernel; the peer's reset comes soon.
    for (int i = 0; i < 64 && s.ok(); ++i) {
      s = co_await a_->WriteData(FrameHeader{FrameType::kData, 1 << 20, 0, 0}, block.data());
    }
  }, asio::detached);
  Run();
  ::sigaction(SIGPIPE, &old, nullptr);
  EXPECT_TRUE(absl::IsUnavailable(s)) << s;  // an error, and we are alive to see it
  sigset_t pending;
  sigemptyset(&pending);
  ::sigpending(&pending);
  EXPECT_EQ(sigismember(&pending, SIGPIPE), 0);
}

TEST_F(TlsChannelTest, ClosingUnderAWaitingReadEndsItAndLaterReadsNeverTouchTheOldDescriptor) {
  Connect();
  std::vector<unsigned char> got(1 << 20);
  absl::Status first = absl::UnknownError("not run");
  asio::co_spawn(io_, [&]() -> asio::awaitable<void> {
    first = co_await b_->ReadExact(got.data(), got.size());  // nothing comes
  }, asio::detached);
  asio::steady_timer t(io_, std::chrono::milliseconds(100));
  t.async_wait([&](const boost::system::error_code&) { b_->Close(); });  // a watchdog's close
  Run();
  EXPECT_TRUE(absl::IsCancelled(first) || absl::IsUnavailable(first)) << first;
  // The descriptor's number is free now: give it to the read end of an empty pipe. A read
  // that went to it would block this thread for good (the test would time out).
  int fds[2];
  ASSERT_EQ(::pipe(fds), 0);
  const std::uint64_t activity = b_->activity();
  absl::Status again = absl::UnknownError("not run");
  asio::co_spawn(io_, [&]() -> asio::awaitable<void> {
    again = co_await b_->ReadExact(got.data(), got.size());
  }, asio::detached);
  Run();
  ::close(fds[0]);
  ::close(fds[1]);
  EXPECT_TRUE(absl::IsUnavailable(again)) << again;
  EXPECT_EQ(b_->activity(), activity);
}

TEST_F(TlsChannelTest, ACertificateFromAnUnknownCaFailsTheHandshakeWithItsReason) {
  std::unique_ptr<asio::ssl::context> wrong = ClientContext("other.pem");
  ASSERT_NE(wrong, nullptr);
  absl::Status c, s;
  Connect(*wrong, c, s);
  EXPECT_TRUE(absl::IsUnavailable(c)) << c;
  EXPECT_NE(c.message().find("TLS handshake failed: certificate verify failed"), std::string::npos) << c;
  EXPECT_FALSE(s.ok());  // the server sees the client's alert or close
}

TEST(KernelTlsTest, TheProbeAgreesWithAttachingTlsToARealConnection) {
  // Independently of the probe's own reading: attach the "tls" upper-layer protocol to an
  // established loopback connection here (the kernel loads the module where there is one).
  asio::io_context io;
  tcp::acceptor acceptor(io, tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0));
  tcp::socket client(io);
  client.connect(acceptor.local_endpoint());
  tcp::socket server = acceptor.accept();
  const bool attached = ::setsockopt(client.native_handle(), SOL_TCP, TCP_ULP, "tls", 3) == 0;
  std::string why;
  const bool probe = KernelTlsAvailable(&why);
  EXPECT_EQ(probe, attached) << why;
  EXPECT_EQ(why.empty(), probe) << why;  // a reason exactly when it says no
}

}  // namespace
}  // namespace gfrep::transfer::internal
