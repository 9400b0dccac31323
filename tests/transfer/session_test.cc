// Warm sessions (SessionCache in transfer/client.h): many files pulled from one agent over
// one set of connections, and what happens when a warm session goes stale. An in-process
// AgentServer over real loopback TCP; the agent's own count of accepted connections is the
// measure.
#include <gtest/gtest.h>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <thread>

#include "tests/support/temp_dir.h"
#include "transfer/agent.h"
#include "transfer/client.h"
#include "transfer/internal/sender.h"

namespace gfrep::transfer {
namespace {

namespace asio = boost::asio;
namespace fs = std::filesystem;
using namespace std::chrono_literals;

class SessionTest : public ::testing::Test {
 protected:
  SessionTest() : dir_("session") {
    options_.shared_key = std::string(32, 'k');
    options_.route.streams = 4;
    options_.route.stripe_unit = 1 << 20;
    options_.io_timeout = 5000ms;
  }
  ~SessionTest() override { StopAgent(); }

  void StartAgent(std::chrono::milliseconds session_idle = 60s) {
    AgentOptions o;
    o.spool = dir_.path() / "spool";
    o.shared_key = std::string(32, 'k');
    o.defaults.io_timeout = 5000ms;
    o.session_idle = session_idle;
    if (port_ != 0) o.listen = fmt::format("127.0.0.1:{}", port_);
    absl::StatusOr<std::unique_ptr<AgentServer>> server = AgentServer::Create(std::move(o));
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = std::move(*server);
    absl::StatusOr<Endpoint> e = server_->Start();
    ASSERT_TRUE(e.ok()) << e.status();
    endpoint_ = *e;
    port_ = e->port;
    thread_ = std::thread([this] { server_->Run(); });
  }
  void StopAgent() {
    if (server_ == nullptr) return;
    server_->Stop();
    thread_.join();
    server_.reset();
  }

  // Pulls spool file `name` to `dir_/out/name` over `cache` on `io` (one pull at a time).
  absl::StatusOr<TransferStats> PullOne(asio::io_context& io, SessionCache& cache,
                                        const std::string& name) {
    std::optional<absl::StatusOr<TransferStats>> result;
    asio::co_spawn(io,
                   AsyncPull(endpoint_, name, dir_.path() / "out" / name, dir_.path() / "tmp",
                             options_, &cache),
                   [&](std::exception_ptr e, absl::StatusOr<TransferStats> r) {
                     result = e ? absl::InternalError("exception") : std::move(r);
                   });
    io.restart();
    io.run();
    return std::move(*result);
  }

  testing::TempDir dir_;
  std::unique_ptr<AgentServer> server_;
  Endpoint endpoint_;
  std::uint16_t port_ = 0;
  std::thread thread_;
  TransferOptions options_;
};

TEST_F(SessionTest, ManyFilesFlowOverOneSetOfConnections) {
  StartAgent();
  constexpr int kFiles = 30;
  for (int i = 0; i < kFiles; ++i) {
    // Sizes from empty to a few blocks, so rounds end with streams that sent nothing.
    testing::WriteRandomFile(dir_.path() / "spool" / fmt::format("f{}", i),
                             static_cast<std::size_t>(i) * 150'000, i + 1);
  }
  asio::io_context io;
  {
    SessionCache cache;
    for (int i = 0; i < kFiles; ++i) {
      std::string name = fmt::format("f{}", i);
      absl::StatusOr<TransferStats> s = PullOne(io, cache, name);
      ASSERT_TRUE(s.ok()) << name << ": " << s.status();
      EXPECT_EQ(s->reused_session, i > 0) << name;
      EXPECT_EQ(testing::ReadFile(dir_.path() / "out" / name),
                testing::ReadFile(dir_.path() / "spool" / name))
          << name;
    }
    EXPECT_EQ(cache.stats().opened, 1u);
    EXPECT_EQ(cache.stats().reused, static_cast<std::uint64_t>(kFiles - 1));
    EXPECT_EQ(cache.idle(), 1u);
  }
  // One control connection and 4 data connections for 30 files (not 30 x 5).
  EXPECT_EQ(server_->stats().connections_accepted, 5u);
  EXPECT_EQ(server_->stats().files_on_warm_sessions, static_cast<std::uint64_t>(kFiles - 1));
}

TEST_F(SessionTest, ASessionTheAgentDroppedWhileIdleIsReplacedTransparently) {
  StartAgent(/*session_idle=*/200ms);
  testing::WriteRandomFile(dir_.path() / "spool" / "a", 3 << 20, 1);
  testing::WriteRandomFile(dir_.path() / "spool" / "b", 3 << 20, 2);
  asio::io_context io;
  SessionCache cache;
  ASSERT_TRUE(PullOne(io, cache, "a").ok());
  std::this_thread::sleep_for(600ms);  // the agent closes the idle session
  absl::StatusOr<TransferStats> b = PullOne(io, cache, "b");
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_FALSE(b->reused_session);
  EXPECT_EQ(cache.stats().stale, 1u);
  EXPECT_EQ(cache.stats().opened, 2u);
  EXPECT_EQ(testing::ReadFile(dir_.path() / "out" / "b"), testing::ReadFile(dir_.path() / "spool" / "b"));
}

TEST_F(SessionTest, ASessionToAnAgentThatRestartedIsReplacedTransparently) {
  StartAgent();
  testing::WriteRandomFile(dir_.path() / "spool" / "a", 1 << 20, 1);
  testing::WriteRandomFile(dir_.path() / "spool" / "b", 1 << 20, 2);
  asio::io_context io;
  SessionCache cache;
  ASSERT_TRUE(PullOne(io, cache, "a").ok());
  StopAgent();
  StartAgent();  // same port
  absl::StatusOr<TransferStats> b = PullOne(io, cache, "b");
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_FALSE(b->reused_session);
  EXPECT_EQ(cache.stats().stale, 1u);
  EXPECT_EQ(testing::ReadFile(dir_.path() / "out" / "b"), testing::ReadFile(dir_.path() / "spool" / "b"));
}

TEST_F(SessionTest, AFailedPullOnAWarmSessionEndsItAndTheNextPullOpensANewOne) {
  StartAgent();
  testing::WriteRandomFile(dir_.path() / "spool" / "a", 1 << 20, 1);
  testing::WriteRandomFile(dir_.path() / "spool" / "c", 1 << 20, 3);
  asio::io_context io;
  SessionCache cache;
  ASSERT_TRUE(PullOne(io, cache, "a").ok());
  absl::StatusOr<TransferStats> missing = PullOne(io, cache, "no-such-file");
  EXPECT_TRUE(absl::IsNotFound(missing.status())) << missing.status();
  EXPECT_EQ(cache.idle(), 0u);
  absl::StatusOr<TransferStats> c = PullOne(io, cache, "c");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_FALSE(c->reused_session);
  EXPECT_EQ(cache.stats().opened, 2u);
}

TEST_F(SessionTest, OtherRouteSettingsNeverShareASession) {
  StartAgent();
  testing::WriteRandomFile(dir_.path() / "spool" / "a", 1 << 20, 1);
  testing::WriteRandomFile(dir_.path() / "spool" / "b", 1 << 20, 2);
  asio::io_context io;
  SessionCache cache;
  ASSERT_TRUE(PullOne(io, cache, "a").ok());
  options_.route.streams = 2;
  absl::StatusOr<TransferStats> b = PullOne(io, cache, "b");
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_FALSE(b->reused_session);
  EXPECT_EQ(b->streams, 2);
  EXPECT_EQ(cache.idle(), 2u);
}

TEST(BlockSizeTest, SmallFilesAreSpreadOverEveryStream) {
  constexpr std::uint64_t kMiB = 1 << 20;
  // 4 MiB over 8 streams: 512 KiB blocks, not one 4 MiB block on one stream.
  EXPECT_EQ(internal::BlockSize(4 * kMiB, 8, 4 * kMiB), 512 * 1024u);
  // Large files keep the stripe unit.
  EXPECT_EQ(internal::BlockSize(1024 * kMiB, 8, 4 * kMiB), 4 * kMiB);
  // Never below 256 KiB, nor above the stripe unit.
  EXPECT_EQ(internal::BlockSize(100 * 1024, 8, 4 * kMiB), 256 * 1024u);
  EXPECT_EQ(internal::BlockSize(100 * 1024, 8, 64 * 1024), 64 * 1024u);
  // Rounded up to 64 KiB.
  EXPECT_EQ(internal::BlockSize(3 * kMiB + 1, 3, 4 * kMiB), kMiB + 64 * 1024);
}

}  // namespace
}  // namespace gfrep::transfer
