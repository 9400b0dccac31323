// Copy and StartCopy (transfer/copy.h) against two in-process agents over real loopback TCP:
// the three directions byte for byte, progress, argument and source errors, and cancellation
// of a slow (rate-capped) copy in each direction.
#include "transfer/copy.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <future>
#include <memory>
#include <string>
#include <thread>

#include "tests/support/temp_dir.h"
#include "transfer/agent.h"

namespace gfrep::transfer {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

const std::string kKey(32, 'k');

::testing::AssertionResult SameBytes(const std::string& got, const std::string& want) {
  if (got == want) return ::testing::AssertionSuccess();
  std::size_t i = 0;
  while (i < got.size() && i < want.size() && got[i] == want[i]) ++i;
  return ::testing::AssertionFailure() << "contents differ: " << got.size() << " vs " << want.size()
                                       << " bytes, first difference at byte " << i;
}

// One AgentServer on 127.0.0.1:0 serving `spool`, run on a thread of its own.
class TestAgent {
 public:
  explicit TestAgent(fs::path spool) : spool_(std::move(spool)) {
    AgentOptions o;
    o.spool = spool_;
    o.shared_key = kKey;
    o.defaults.io_timeout = 5s;
    absl::StatusOr<std::unique_ptr<AgentServer>> server = AgentServer::Create(std::move(o));
    if (!server.ok()) {
      ADD_FAILURE() << server.status();
      return;
    }
    server_ = std::move(*server);
    absl::StatusOr<Endpoint> e = server_->Start();
    if (!e.ok()) {
      ADD_FAILURE() << e.status();
      server_.reset();
      return;
    }
    endpoint_ = *e;
    thread_ = std::thread([this] { server_->Run(); });
  }
  ~TestAgent() {
    if (server_ == nullptr) return;
    server_->Stop();
    thread_.join();
  }
  bool running() const { return server_ != nullptr; }
  std::string Url(std::string_view path) const {
    return fmt::format("gf://{}/{}", endpoint_.ToString(), path);
  }
  const fs::path& spool() const { return spool_; }

 private:
  fs::path spool_;
  std::unique_ptr<AgentServer> server_;
  Endpoint endpoint_;
  std::thread thread_;
};

class CopyTest : public ::testing::Test {
 protected:
  CopyTest() : dir_("copy"), a_(dir_.path() / "a"), b_(dir_.path() / "b") {
    options_.shared_key = kKey;
    options_.route.streams = 4;
    options_.route.stripe_unit = 256 << 10;
    options_.io_timeout = 10s;
    fs::create_directories(dir_.path() / "local");
  }
  void SetUp() override {
    ASSERT_TRUE(a_.running());
    ASSERT_TRUE(b_.running());
  }
  fs::path Local(std::string_view name) const { return dir_.path() / "local" / name; }

  testing::TempDir dir_;
  TestAgent a_;
  TestAgent b_;
  TransferOptions options_;
};

TEST_F(CopyTest, LocalToAgentAgentToAgentAndAgentToLocalAreByteIdentical) {
  const std::uint64_t size = (3 << 20) + 12345;
  testing::WriteRandomFile(Local("src.dat"), size, 1);
  const std::string want = testing::ReadFile(Local("src.dat"));
  std::uint64_t last_done = 0, last_total = 0;
  TransferOptions o = options_;
  o.progress = [&](const Progress& p) {
    last_done = p.bytes_done;
    last_total = p.bytes_total;
  };

  absl::StatusOr<TransferStats> push = Copy(Local("src.dat").string(), a_.Url("run1/f.dat"), o);
  ASSERT_TRUE(push.ok()) << push.status();
  EXPECT_EQ(push->bytes, size);
  EXPECT_EQ(push->streams, 4);
  EXPECT_TRUE(SameBytes(testing::ReadFile(a_.spool() / "run1" / "f.dat"), want));
  EXPECT_EQ(last_total, size);
  EXPECT_EQ(last_done, size);

  last_done = last_total = 0;
  absl::StatusOr<TransferStats> third = Copy(a_.Url("run1/f.dat"), b_.Url("copy/g.dat"), o);
  ASSERT_TRUE(third.ok()) << third.status();
  EXPECT_EQ(third->bytes, size);
  EXPECT_EQ(third->checksum, push->checksum);
  EXPECT_TRUE(SameBytes(testing::ReadFile(b_.spool() / "copy" / "g.dat"), want));

  // A local directory as destination gets the source's file name.
  absl::StatusOr<TransferStats> pull =
      Copy(b_.Url("copy/g.dat"), (dir_.path() / "local").string(), o);
  ASSERT_TRUE(pull.ok()) << pull.status();
  EXPECT_EQ(pull->checksum, push->checksum);
  EXPECT_TRUE(SameBytes(testing::ReadFile(Local("g.dat")), want));
  EXPECT_EQ(last_done, size);
  EXPECT_FALSE(fs::exists(Local(".gfrep-tmp"))) << "an empty temporary directory was left";

  // The asynchronous form gives the same result.
  CopyHandle h = StartCopy(a_.Url("run1/f.dat"), Local("h.dat").string(), options_);
  absl::StatusOr<TransferStats> async = h.Wait();
  ASSERT_TRUE(async.ok()) << async.status();
  EXPECT_TRUE(h.Done());
  EXPECT_TRUE(SameBytes(testing::ReadFile(Local("h.dat")), want));
}

TEST_F(CopyTest, MissingSourceIsNotFound) {
  absl::StatusOr<TransferStats> push = Copy(Local("nope").string(), a_.Url("x"), options_);
  EXPECT_TRUE(absl::IsNotFound(push.status())) << push.status();
  EXPECT_FALSE(fs::exists(a_.spool() / "x"));
  absl::StatusOr<TransferStats> pull = Copy(a_.Url("nope"), Local("x").string(), options_);
  EXPECT_TRUE(absl::IsNotFound(pull.status())) << pull.status();
  EXPECT_FALSE(fs::exists(Local("x")));
  absl::StatusOr<TransferStats> third = Copy(a_.Url("nope"), b_.Url("x"), options_);
  EXPECT_TRUE(absl::IsNotFound(third.status())) << third.status();
  EXPECT_FALSE(fs::exists(b_.spool() / "x"));
}

TEST_F(CopyTest, BadArgumentsAreInvalidArgument) {
  testing::WriteRandomFile(Local("src.dat"), 1000, 2);
  const std::string src = Local("src.dat").string();
  for (const std::string& dst :
       {std::string("gf://127.0.0.1/no-port"), std::string("gf://127.0.0.1:99999/x"),
        std::string("gf://127.0.0.1:1/"), std::string("gf://"),
        Local("plain-local-copy").string()}) {
    absl::StatusOr<TransferStats> s = Copy(src, dst, options_);
    EXPECT_TRUE(absl::IsInvalidArgument(s.status())) << dst << ": " << s.status();
  }
  TransferOptions bad = options_;
  bad.route.streams = 0;
  EXPECT_TRUE(absl::IsInvalidArgument(Copy(src, a_.Url("x"), bad).status()));
  // StartCopy reports argument errors through Wait().
  CopyHandle h = StartCopy("gf://nonsense", src, options_);
  EXPECT_TRUE(absl::IsInvalidArgument(h.Wait().status()));
  EXPECT_TRUE(h.Done());
  EXPECT_FALSE(fs::exists(a_.spool() / "x"));
}

// A handle destroyed inside its own progress callback (on the copy's thread) cancels the copy
// and lets its thread go instead of joining itself (std::system_error in a noexcept
// destructor: the process used to terminate).
TEST_F(CopyTest, AHandleDestroyedFromItsOwnProgressCallbackCancelsWithoutTerminating) {
  testing::WriteRandomFile(a_.spool() / "own", 16 << 20, 5);
  struct Shared {
    std::mutex mu;
    std::optional<CopyHandle> handle;
    std::promise<void> destroyed;
    bool done = false;
  };
  auto shared = std::make_shared<Shared>();
  TransferOptions slow = options_;
  slow.route.route_rate_bps = 16'000'000;
  slow.route.route_name = "own-thread";
  slow.progress = [shared](const Progress& p) {  // holds `shared`: outlives this test's frame
    if (p.bytes_done < (1u << 20)) return;
    std::lock_guard<std::mutex> lock(shared->mu);
    if (shared->done || !shared->handle) return;
    shared->handle.reset();  // ~CopyHandle on the copy's own thread
    shared->done = true;
    shared->destroyed.set_value();
  };
  std::future<void> destroyed = shared->destroyed.get_future();
  {
    std::lock_guard<std::mutex> lock(shared->mu);
    shared->handle.emplace(StartCopy(a_.Url("own"), Local("own.copy").string(), slow));
  }
  ASSERT_EQ(destroyed.wait_for(30s), std::future_status::ready);
  // The copy was cancelled: nothing under the final name, even a while later.
  std::this_thread::sleep_for(1500ms);
  EXPECT_FALSE(fs::exists(Local("own.copy")));
}

enum class Direction { kPush, kPull, kThirdParty };

class CopyCancelTest : public CopyTest, public ::testing::WithParamInterface<Direction> {};

// A copy capped at 16 Mbit/s (16 MiB: ~8 s) is cancelled once it has moved 1 MiB: Wait()
// says kCancelled within a second or two, nothing appears under the final name, and the
// receiver let go of the partial file (an uncapped copy right after resumes it instead of
// finding it busy with a copy that kept running).
TEST_P(CopyCancelTest, CancelStopsTheCopyPromptlyAndLeavesNothingUnderTheFinalName) {
  const std::uint64_t size = 16 << 20;
  std::string source, destination;
  fs::path final_path;
  switch (GetParam()) {
    case Direction::kPush:
      testing::WriteRandomFile(Local("big"), size, 3);
      source = Local("big").string();
      destination = a_.Url("big.copy");
      final_path = a_.spool() / "big.copy";
      break;
    case Direction::kPull:
      testing::WriteRandomFile(a_.spool() / "big", size, 3);
      source = a_.Url("big");
      destination = Local("big.copy").string();
      final_path = Local("big.copy");
      break;
    case Direction::kThirdParty:
      testing::WriteRandomFile(a_.spool() / "big", size, 3);
      source = a_.Url("big");
      destination = b_.Url("big.copy");
      final_path = b_.spool() / "big.copy";
      break;
  }
  TransferOptions slow = options_;
  slow.route.route_rate_bps = 16'000'000;
  slow.route.route_name = fmt::format("cancel-{}", static_cast<int>(GetParam()));
  auto started = std::make_shared<std::promise<void>>();
  auto signalled = std::make_shared<std::atomic<bool>>(false);
  slow.progress = [started, signalled](const Progress& p) {
    if (p.bytes_done >= (1u << 20) && !signalled->exchange(true)) started->set_value();
  };
  CopyHandle h = StartCopy(source, destination, slow);
  ASSERT_EQ(started->get_future().wait_for(30s), std::future_status::ready)
      << "the copy never got going";
  EXPECT_FALSE(h.Done());
  const auto t0 = std::chrono::steady_clock::now();
  h.Cancel();
  absl::StatusOr<TransferStats> r = h.Wait();
  const auto took = std::chrono::steady_clock::now() - t0;
  EXPECT_TRUE(absl::IsCancelled(r.status())) << r.status();
  EXPECT_LT(took, 3s);
  EXPECT_TRUE(h.Done());
  EXPECT_FALSE(fs::exists(final_path));

  // The receiver stopped and let go of the partial file: a new copy resumes it. (A third
  // party's destination agent notices its client left within ~0.5 s; until then it would
  // answer "busy", kUnavailable.)
  absl::StatusOr<TransferStats> again = absl::UnknownError("not run");
  TransferOptions resume = options_;
  resume.route.stripe_unit = 1 << 20;  // whole xxh3-tree leaves (the first run's were not)
  for (int i = 0; i < 40; ++i) {
    again = Copy(source, destination, resume);
    if (!absl::IsUnavailable(again.status())) break;
    std::this_thread::sleep_for(100ms);
  }
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_GT(again->resumed_bytes, 0u);
  EXPECT_LT(again->resumed_bytes, size);
  if (GetParam() == Direction::kPull) {  // the receiver's figures are ours
    // xxh3-tree: the resumed bytes' leaves are read back, the rest came in the block pass
    // (also after a resumed range that ends inside a leaf: a short block aligns the rest).
    EXPECT_GE(again->checksum_read_back_bytes, again->resumed_bytes);
    EXPECT_LT(again->checksum_read_back_bytes, size);
  }
  EXPECT_TRUE(SameBytes(
      testing::ReadFile(final_path),
      testing::ReadFile(GetParam() == Direction::kPush ? Local("big") : a_.spool() / "big")));
}

INSTANTIATE_TEST_SUITE_P(Directions, CopyCancelTest,
                         ::testing::Values(Direction::kPush, Direction::kPull,
                                           Direction::kThirdParty),
                         [](const ::testing::TestParamInfo<Direction>& info) {
                           switch (info.param) {
                             case Direction::kPush:
                               return std::string("Push");
                             case Direction::kPull:
                               return std::string("Pull");
                             case Direction::kThirdParty:
                               return std::string("ThirdParty");
                           }
                           return std::string("Unknown");
                         });

// Destroying a handle whose copy still runs cancels it and waits for it.
TEST_F(CopyTest, DestroyingTheHandleCancelsTheCopy) {
  testing::WriteRandomFile(a_.spool() / "big", 16 << 20, 4);
  TransferOptions slow = options_;
  slow.route.route_rate_bps = 16'000'000;
  slow.route.route_name = "cancel-destroy";
  const auto t0 = std::chrono::steady_clock::now();
  {
    CopyHandle h = StartCopy(a_.Url("big"), Local("big.copy").string(), slow);
    EXPECT_FALSE(h.Done());
  }
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 4s);
  EXPECT_FALSE(fs::exists(Local("big.copy")));
}

}  // namespace
}  // namespace gfrep::transfer
