// Protocol-level tests against an in-process AgentServer over real loopback TCP:
// authentication, session tokens (wrong, replayed), garbage and oversized frames.
#include "transfer/agent.h"

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <spdlog/spdlog.h>

#include <condition_variable>
#include <mutex>
#include <thread>

#include "tests/support/temp_dir.h"
#include "transfer/client.h"
#include "transfer/internal/engine.h"

namespace gfrep::transfer {
namespace {

namespace asio = boost::asio;
using internal::Json;

class AgentTest : public ::testing::Test {
 protected:
  AgentTest() : dir_("agent") {
    AgentOptions o;
    o.spool = dir_.path() / "spool";
    o.shared_key = std::string(32, 'k');
    o.defaults.io_timeout = std::chrono::milliseconds(3000);
    o.on_file_committed = [this](const std::filesystem::path& p, const TransferStats&) {
      std::lock_guard<std::mutex> lock(mu_);
      committed_.push_back(p);
      committed_cv_.notify_all();
    };
    server_ = *AgentServer::Create(std::move(o));
    endpoint_ = *server_->Start();
    thread_ = std::thread([this] { server_->Run(); });
    testing::WriteRandomFile(dir_.path() / "spool" / "f.dat", 3 << 20, 5);
    options_.shared_key = std::string(32, 'k');
    options_.route.streams = 3;
    options_.route.stripe_unit = 64 << 10;
    options_.io_timeout = std::chrono::milliseconds(3000);
  }
  ~AgentTest() override {
    server_->Stop();
    thread_.join();
  }

  // Runs `body` as a coroutine on a fresh io_context and returns its status.
  absl::Status RunClient(std::function<asio::awaitable<absl::Status>()> body) {
    asio::io_context io;
    absl::Status result = absl::UnknownError("not run");
    asio::co_spawn(io, body(), [&](std::exception_ptr e, absl::Status s) {
      result = e ? absl::InternalError("exception") : s;
    });
    io.run();
    return result;
  }

  gfrep::testing::TempDir dir_;
  std::unique_ptr<AgentServer> server_;
  Endpoint endpoint_;
  std::thread thread_;
  TransferOptions options_;
  // The agent runs the hook after it answered "done", so the client may return first.
  std::vector<std::filesystem::path> WaitCommitted(std::size_t n) {
    std::unique_lock<std::mutex> lock(mu_);
    committed_cv_.wait_for(lock, std::chrono::seconds(10), [&] { return committed_.size() >= n; });
    return committed_;
  }

  std::mutex mu_;
  std::condition_variable committed_cv_;
  std::vector<std::filesystem::path> committed_;
};

TEST_F(AgentTest, PushPullRoundTripAndCommitHook) {
  absl::StatusOr<TransferStats> pulled = Pull(endpoint_, "f.dat", dir_.path() / "copy.dat", options_);
  ASSERT_TRUE(pulled.ok()) << pulled.status();
  EXPECT_EQ(pulled->bytes, 3u << 20);
  EXPECT_EQ(pulled->streams, 3);
  EXPECT_EQ(testing::ReadFile(dir_.path() / "copy.dat"), testing::ReadFile(dir_.path() / "spool" / "f.dat"));
  absl::StatusOr<TransferStats> pushed = Push(dir_.path() / "copy.dat", endpoint_, "d/back.dat", options_);
  ASSERT_TRUE(pushed.ok()) << pushed.status();
  EXPECT_EQ(pushed->checksum, pulled->checksum);
  std::vector<std::filesystem::path> committed = WaitCommitted(1);
  ASSERT_EQ(committed.size(), 1u);
  EXPECT_EQ(committed[0].filename(), "back.dat");
  EXPECT_FALSE(std::filesystem::exists(dir_.path() / ".gfrep-tmp"));
}

TEST_F(AgentTest, EmptyFileCopies) {
  testing::WriteRandomFile(dir_.path() / "empty", 0, 1);
  absl::StatusOr<TransferStats> s = Push(dir_.path() / "empty", endpoint_, "empty", options_);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_TRUE(std::filesystem::exists(dir_.path() / "spool" / "empty"));
}

TEST_F(AgentTest, WrongKeyIsRefusedWithPermissionDenied) {
  options_.shared_key = std::string(32, 'x');
  absl::StatusOr<TransferStats> s = Pull(endpoint_, "f.dat", dir_.path() / "copy.dat", options_);
  EXPECT_TRUE(absl::IsPermissionDenied(s.status())) << s.status();
  EXPECT_NE(s.status().message().find("authentication failed"), absl::string_view::npos);
  EXPECT_FALSE(std::filesystem::exists(dir_.path() / "copy.dat"));
}

TEST_F(AgentTest, UnknownTokenIsRefused) {
  absl::Status s = RunClient([&]() -> asio::awaitable<absl::Status> {
    auto log = spdlog::default_logger();
    absl::StatusOr<internal::ConnPtr> c =
        co_await internal::JoinSession(endpoint_, std::string(32, 'a'), options_, nullptr, *log);
    co_return c.status();
  });
  EXPECT_TRUE(absl::IsPermissionDenied(s)) << s;
  EXPECT_NE(s.message().find("session token"), absl::string_view::npos);
}

TEST_F(AgentTest, ReplayedTokenIsRefused) {
  absl::Status s = RunClient([&]() -> asio::awaitable<absl::Status> {
    auto log = spdlog::default_logger();
    absl::StatusOr<internal::ClientConnection> ctrl =
        co_await internal::ConnectTo(endpoint_, "control", options_, nullptr, *log);
    if (!ctrl.ok()) co_return ctrl.status();
    options_.route.streams = 1;
    Json get{{"op", "get"}, {"path", "f.dat"}, {"options", internal::RouteToJson(options_)}};
    if (absl::Status w = co_await ctrl->conn->SendControl(get); !w.ok()) co_return w;
    absl::StatusOr<Json> offer = co_await ctrl->conn->ReadControl();
    if (!offer.ok()) co_return offer.status();
    std::string token = (*offer)["token"].get<std::string>();
    Json ranges{{"op", "ranges"}, {"ranges", Json::array()}, {"resumed_bytes", 0}};
    if (absl::Status w = co_await ctrl->conn->SendControl(ranges); !w.ok()) co_return w;
    absl::StatusOr<internal::ConnPtr> first =
        co_await internal::JoinSession(endpoint_, token, options_, nullptr, *log);
    if (!first.ok()) co_return absl::InternalError(fmt::format("first join failed: {}", first.status().ToString()));
    // The session had one stream: the same token again must be refused.
    absl::StatusOr<internal::ConnPtr> again =
        co_await internal::JoinSession(endpoint_, token, options_, nullptr, *log);
    co_return again.status();
  });
  EXPECT_TRUE(absl::IsPermissionDenied(s)) << s;
}

TEST_F(AgentTest, GarbageAndOversizedFramesAreRefusedAndServerKeepsServing) {
  absl::Status s = RunClient([&]() -> asio::awaitable<absl::Status> {
    auto ex = co_await asio::this_coro::executor;
    for (int variant = 0; variant < 3; ++variant) {
      asio::ip::tcp::socket sock(ex);
      auto [ec] = co_await sock.async_connect(
          {asio::ip::make_address(endpoint_.host), endpoint_.port}, internal::kNoThrow);
      if (ec) co_return absl::InternalError("connect");
      std::string bytes;
      if (variant == 0) bytes = std::string(200, '\x42');  // garbage
      if (variant == 1) {
        // A control frame header announcing more than the limit.
        internal::FrameHeader h{internal::FrameType::kControl, internal::kMaxControlPayload + 1, 0, 0};
        internal::HeaderBytes b = internal::EncodeHeader(h);
        bytes.assign(reinterpret_cast<const char*>(b.data()), b.size());
      }
      if (variant == 2) bytes = internal::EncodeFrame(internal::FrameType::kControl, "{\"op\":\"hel").substr(0, 40);
      auto [wec, n] = co_await asio::async_write(sock, asio::buffer(bytes), internal::kNoThrow);
      (void)n;
      if (variant == 2) sock.shutdown(asio::ip::tcp::socket::shutdown_send);  // truncated
      char buf[256];
      // The server answers with an error frame or just closes; either way the
      // connection ends (never hangs past its setup timeout).
      for (;;) {
        auto [rec, m] = co_await sock.async_read_some(asio::buffer(buf), internal::kNoThrow);
        if (rec) break;
      }
    }
    co_return absl::OkStatus();
  });
  EXPECT_TRUE(s.ok()) << s;
  absl::StatusOr<TransferStats> ok = Pull(endpoint_, "f.dat", dir_.path() / "after.dat", options_);
  EXPECT_TRUE(ok.ok()) << ok.status();
}

TEST_F(AgentTest, MissingSourceIsNotFound) {
  absl::StatusOr<TransferStats> s = Pull(endpoint_, "nope.dat", dir_.path() / "x", options_);
  EXPECT_TRUE(absl::IsNotFound(s.status())) << s.status();
  EXPECT_FALSE(std::filesystem::exists(dir_.path() / "x"));
  absl::StatusOr<TransferStats> p = Push(dir_.path() / "nope-local", endpoint_, "x", options_);
  EXPECT_TRUE(absl::IsNotFound(p.status())) << p.status();
}

TEST_F(AgentTest, PathEscapesAreRefused) {
  testing::WriteRandomFile(dir_.path() / "src", 1000, 1);
  for (const char* bad : {"../evil", "a/../../evil", "/tmp/evil"}) {
    absl::StatusOr<TransferStats> s = Push(dir_.path() / "src", endpoint_, bad, options_);
    EXPECT_TRUE(absl::IsInvalidArgument(s.status())) << bad << " " << s.status();
  }
  std::filesystem::create_directory_symlink(dir_.path(), dir_.path() / "spool" / "out");
  absl::StatusOr<TransferStats> s = Push(dir_.path() / "src", endpoint_, "out/evil", options_);
  EXPECT_TRUE(absl::IsPermissionDenied(s.status())) << s.status();
  EXPECT_FALSE(std::filesystem::exists(dir_.path() / "evil"));
  absl::StatusOr<TransferStats> g = Pull(endpoint_, "out/src", dir_.path() / "stolen", options_);
  EXPECT_TRUE(absl::IsPermissionDenied(g.status())) << g.status();
}

TEST_F(AgentTest, FlippedByteIsResentOnce) {
  testing::WriteRandomFile(dir_.path() / "src", 1 << 20, 9);
  options_.test_corrupt_offset = 300000;
  options_.test_corrupt_times = 1;
  absl::StatusOr<TransferStats> s = Push(dir_.path() / "src", endpoint_, "flip", options_);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->resend_rounds, 1);
  EXPECT_EQ(testing::ReadFile(dir_.path() / "spool" / "flip"), testing::ReadFile(dir_.path() / "src"));
}

TEST_F(AgentTest, PersistentCorruptionFailsWithDataLossAndNothingInPlace) {
  testing::WriteRandomFile(dir_.path() / "src", 1 << 20, 9);
  options_.test_corrupt_offset = 300000;
  options_.test_corrupt_times = 1000;
  absl::StatusOr<TransferStats> s = Push(dir_.path() / "src", endpoint_, "flip", options_);
  EXPECT_TRUE(absl::IsDataLoss(s.status())) << s.status();
  EXPECT_FALSE(std::filesystem::exists(dir_.path() / "spool" / "flip"));
}

TEST_F(AgentTest, CrcBlockChecksumAndOtherFileChecksumsWork) {
  options_.block_checksum = "crc32c";
  for (const char* alg : {"adler32", "sha256"}) {
    options_.checksum = alg;
    absl::StatusOr<TransferStats> s = Pull(endpoint_, "f.dat", dir_.path() / alg, options_);
    ASSERT_TRUE(s.ok()) << s.status();
    EXPECT_EQ(s->checksum, *ComputeFileChecksum(dir_.path() / "spool" / "f.dat", *ParseChecksumAlgorithm(alg)));
  }
}

// Blocks that arrive ahead of the end-to-end checksum's frontier are kept in receive buffers
// and hashed from memory; a full pool falls back to reading them back from the partial file.
TEST_F(AgentTest, ReceivePoolAndItsFallbackGiveTheRightChecksum) {
  const std::filesystem::path src = dir_.path() / "spool" / "f.dat";
  const std::string want = *ComputeFileChecksum(src, ChecksumAlgorithm::kXxh3_128);
  options_.route.streams = 1;  // in order: nothing is ever read back
  absl::StatusOr<TransferStats> one = Pull(endpoint_, "f.dat", dir_.path() / "one", options_);
  ASSERT_TRUE(one.ok()) << one.status();
  EXPECT_EQ(one->checksum, want);
  EXPECT_EQ(one->checksum_read_back_bytes, 0u);
  options_.route.streams = 4;
  // Default pool (2 x streams blocks), one block, none: always the right checksum and file.
  for (std::uint64_t pool : {options_.receive_pool_bytes, std::uint64_t{64} << 10, std::uint64_t{0}}) {
    options_.receive_pool_bytes = pool;
    const std::filesystem::path out = dir_.path() / fmt::format("pool{}", pool);
    absl::StatusOr<TransferStats> s = Pull(endpoint_, "f.dat", out, options_);
    ASSERT_TRUE(s.ok()) << s.status();
    EXPECT_EQ(s->checksum, want) << "pool " << pool;
    EXPECT_EQ(*ComputeFileChecksum(out, ChecksumAlgorithm::kXxh3_128), want) << "pool " << pool;
    EXPECT_LE(s->checksum_read_back_bytes, s->bytes);
    // With a pool, the first block ahead of the frontier always fits it, so less than the
    // whole file is read back.
    if (pool != 0) {
      EXPECT_LT(s->checksum_read_back_bytes, s->bytes) << "pool " << pool;
    }
  }
}

// A damaged block is caught and re-sent whether it lands at the frontier, in the pool or past
// a full pool (the agent's receiver here has a pool of one block).
TEST_F(AgentTest, DamagedBlocksAreCaughtWithAPoolOfOneBlock) {
  server_->Stop();
  thread_.join();
  AgentOptions o;
  o.spool = dir_.path() / "spool";
  o.shared_key = std::string(32, 'k');
  o.defaults.io_timeout = std::chrono::milliseconds(3000);
  o.defaults.receive_pool_bytes = 64 << 10;
  server_ = *AgentServer::Create(std::move(o));
  endpoint_ = *server_->Start();
  thread_ = std::thread([this] { server_->Run(); });
  testing::WriteRandomFile(dir_.path() / "src", 2 << 20, 11);
  for (std::int64_t at : {std::int64_t{0}, std::int64_t{300000}, std::int64_t{1500000}}) {
    options_.test_corrupt_offset = at;
    options_.test_corrupt_times = 1;
    const std::string name = fmt::format("flip{}", at);
    absl::StatusOr<TransferStats> s = Push(dir_.path() / "src", endpoint_, name, options_);
    ASSERT_TRUE(s.ok()) << s.status();
    EXPECT_EQ(s->resend_rounds, 1) << at;
    EXPECT_EQ(testing::ReadFile(dir_.path() / "spool" / name), testing::ReadFile(dir_.path() / "src")) << at;
  }
  options_.test_corrupt_offset = 1500000;
  options_.test_corrupt_times = 1000;
  absl::StatusOr<TransferStats> bad = Push(dir_.path() / "src", endpoint_, "never", options_);
  EXPECT_TRUE(absl::IsDataLoss(bad.status())) << bad.status();
  EXPECT_FALSE(std::filesystem::exists(dir_.path() / "spool" / "never"));
}

}  // namespace
}  // namespace gfrep::transfer
