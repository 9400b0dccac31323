// Streaming reads (transfer/remote_file.h) against an in-process AgentServer over real
// loopback TCP: bytes read at any offset are the source's, damaged pieces are fetched again
// or fail, the whole-file check catches a wrong file, and a source that changes or an agent
// that stops fails the read instead of hanging it.
#include "transfer/remote_file.h"

#include <gtest/gtest.h>

#include <fstream>
#include <random>
#include <thread>

#include "tests/support/temp_dir.h"
#include "transfer/agent.h"
#include "transfer/checksum.h"

namespace gfrep::transfer {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

std::string RandomBytes(std::size_t n, unsigned seed) {
  std::mt19937_64 rng(seed);
  std::string s(n, '\0');
  for (std::size_t i = 0; i < n; i += 8) {
    std::uint64_t v = rng();
    std::memcpy(s.data() + i, &v, std::min<std::size_t>(8, n - i));
  }
  return s;
}

// Writes `bytes` into `path` in place (same inode when it exists).
void WriteInPlace(const fs::path& path, const std::string& bytes) {
  fs::create_directories(path.parent_path());
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

class RemoteFileTest : public ::testing::Test {
 protected:
  RemoteFileTest() : dir_("remote_file") {
    options_.transfer.shared_key = std::string(32, 'k');
    options_.transfer.route.streams = 3;
    options_.transfer.io_timeout = 5000ms;
    options_.block_size = 256 * 1024;
    options_.readahead_bytes = 2 << 20;
  }
  ~RemoteFileTest() override { StopAgent(); }

  void StartAgent(std::int64_t corrupt_offset = -1, int corrupt_times = 0,
                  std::chrono::milliseconds session_idle = 60s) {
    AgentOptions o;
    o.spool = dir_.path() / "spool";
    o.shared_key = std::string(32, 'k');
    o.defaults.io_timeout = 5000ms;
    o.defaults.test_corrupt_offset = corrupt_offset;
    o.defaults.test_corrupt_times = corrupt_times;
    o.session_idle = session_idle;
    absl::StatusOr<std::unique_ptr<AgentServer>> server = AgentServer::Create(std::move(o));
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = std::move(*server);
    absl::StatusOr<Endpoint> e = server_->Start();
    ASSERT_TRUE(e.ok()) << e.status();
    endpoint_ = *e;
    thread_ = std::thread([this] { server_->Run(); });
  }
  void StopAgent() {
    if (server_ == nullptr) return;
    server_->Stop();
    thread_.join();
    server_.reset();
  }
  // Puts `bytes` into the spool as `name`; returns its checksum.
  std::string Put(const std::string& name, const std::string& bytes) {
    WriteInPlace(dir_.path() / "spool" / name, bytes);
    return ChecksumOf(ChecksumAlgorithm::kXxh3_128, bytes);
  }
  absl::StatusOr<std::unique_ptr<RemoteFile>> Open(const std::string& name) {
    return RemoteFile::Open(endpoint_, name, options_);
  }
  // Reads the whole file front to back in `chunk`-byte reads.
  static absl::StatusOr<std::string> ReadAll(RemoteFile& f, std::size_t chunk) {
    std::string out;
    std::string buf(chunk, '\0');
    for (;;) {
      absl::StatusOr<std::size_t> n = f.ReadAt(out.size(), buf.data(), buf.size());
      if (!n.ok()) return n.status();
      if (*n == 0) return out;
      out.append(buf.data(), *n);
    }
  }

  testing::TempDir dir_;
  RemoteReadOptions options_;
  std::unique_ptr<AgentServer> server_;
  std::thread thread_;
  Endpoint endpoint_;
};

TEST_F(RemoteFileTest, SequentialReadReturnsTheFileAndVerifiesItWhole) {
  StartAgent();
  const std::string bytes = RandomBytes(9 * 1024 * 1024 + 12345, 1);
  options_.expected_checksum = Put("f", bytes);
  options_.expected_size = bytes.size();
  absl::StatusOr<std::unique_ptr<RemoteFile>> f = Open("f");
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ((*f)->size(), bytes.size());
  absl::StatusOr<std::string> got = ReadAll(**f, 128 * 1024);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_TRUE(*got == bytes);
  RemoteFile::Stats st = (*f)->stats();
  EXPECT_TRUE(st.whole_file_verified);
  EXPECT_EQ(st.bytes_fetched, bytes.size());  // every byte fetched once
  EXPECT_EQ(server_->stats().read_sessions, 1u);
  // Read-ahead: most reads found their bytes already here.
  EXPECT_LT(st.reads_waited * 4, st.reads) << st.reads_waited << " of " << st.reads;
}

TEST_F(RemoteFileTest, RandomReadsAtAnyOffsetMatchTheSourceWithASmallCache) {
  StartAgent();
  const std::string bytes = RandomBytes(6 * 1024 * 1024 + 7, 2);
  options_.expected_checksum = Put("r", bytes);
  options_.cache_bytes = 1 << 20;  // 4 pieces: reads evict all the time
  absl::StatusOr<std::unique_ptr<RemoteFile>> f = Open("r");
  ASSERT_TRUE(f.ok()) << f.status();
  std::mt19937_64 rng(3);
  std::string buf(700 * 1024, '\0');
  for (int i = 0; i < 200; ++i) {
    const std::uint64_t off = rng() % (bytes.size() + 10);
    const std::size_t n = 1 + rng() % buf.size();
    absl::StatusOr<std::size_t> got = (*f)->ReadAt(off, buf.data(), n);
    ASSERT_TRUE(got.ok()) << got.status() << " at " << off;
    const std::size_t want = off >= bytes.size() ? 0 : std::min<std::size_t>(n, bytes.size() - off);
    ASSERT_EQ(*got, want) << "at " << off;
    ASSERT_EQ(std::string_view(buf.data(), *got), std::string_view(bytes).substr(off < bytes.size() ? off : 0, *got))
        << "bytes differ at offset " << off;
  }
  // Pieces dropped before the whole-file hash reached them: no whole-file claim.
  EXPECT_FALSE((*f)->stats().whole_file_verified);
}

TEST_F(RemoteFileTest, ConcurrentReadersOfOneFileGetTheirOwnBytes) {
  StartAgent();
  const std::string bytes = RandomBytes(8 * 1024 * 1024, 4);
  Put("c", bytes);
  options_.cache_bytes = 2 << 20;
  absl::StatusOr<std::unique_ptr<RemoteFile>> f = Open("c");
  ASSERT_TRUE(f.ok()) << f.status();
  std::atomic<int> bad{0};
  std::vector<std::thread> readers;
  for (int t = 0; t < 4; ++t) {
    readers.emplace_back([&, t] {
      std::mt19937_64 rng(10 + t);
      std::string buf(200 * 1024, '\0');
      for (int i = 0; i < 60; ++i) {
        const std::uint64_t off = rng() % bytes.size();
        absl::StatusOr<std::size_t> n = (*f)->ReadAt(off, buf.data(), buf.size());
        if (!n.ok() || std::string_view(buf.data(), *n) != std::string_view(bytes).substr(off, *n)) ++bad;
      }
    });
  }
  for (std::thread& r : readers) r.join();
  EXPECT_EQ(bad.load(), 0);
}

TEST_F(RemoteFileTest, SmallAndEmptyFiles) {
  StartAgent();
  Put("small", "hello, remote");
  Put("empty", "");
  absl::StatusOr<std::unique_ptr<RemoteFile>> f = Open("small");
  ASSERT_TRUE(f.ok()) << f.status();
  char buf[64];
  absl::StatusOr<std::size_t> n = (*f)->ReadAt(7, buf, sizeof buf);
  ASSERT_TRUE(n.ok()) << n.status();
  EXPECT_EQ(std::string(buf, *n), "remote");
  absl::StatusOr<std::unique_ptr<RemoteFile>> e = Open("empty");
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_EQ((*e)->size(), 0u);
  n = (*e)->ReadAt(0, buf, sizeof buf);
  ASSERT_TRUE(n.ok()) << n.status();
  EXPECT_EQ(*n, 0u);
}

TEST_F(RemoteFileTest, ADamagedPieceIsFetchedAgainAndNeverReturned) {
  const std::uint64_t at = 3 * 1024 * 1024 + 100;
  StartAgent(static_cast<std::int64_t>(at), 1);
  const std::string bytes = RandomBytes(5 * 1024 * 1024, 5);
  options_.expected_checksum = Put("d", bytes);
  absl::StatusOr<std::unique_ptr<RemoteFile>> f = Open("d");
  ASSERT_TRUE(f.ok()) << f.status();
  absl::StatusOr<std::string> got = ReadAll(**f, 64 * 1024);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_TRUE(*got == bytes);
  EXPECT_EQ((*f)->stats().pieces_damaged, 1u);
  EXPECT_TRUE((*f)->stats().whole_file_verified);
}

TEST_F(RemoteFileTest, APieceDamagedEveryTimeFailsWithDataLoss) {
  const std::uint64_t at = 1024 * 1024;
  StartAgent(static_cast<std::int64_t>(at), 100);
  const std::string bytes = RandomBytes(2 * 1024 * 1024, 6);
  Put("d", bytes);
  absl::StatusOr<std::unique_ptr<RemoteFile>> f = Open("d");
  ASSERT_TRUE(f.ok()) << f.status();
  std::string buf(4096, '\0');
  absl::StatusOr<std::size_t> n = (*f)->ReadAt(at, buf.data(), buf.size());
  EXPECT_TRUE(absl::IsDataLoss(n.status())) << n.status();
}

TEST_F(RemoteFileTest, AFileOtherThanExpectedFailsTheReadThatReachesItsEnd) {
  StartAgent();
  const std::string bytes = RandomBytes(3 * 1024 * 1024, 7);
  Put("w", bytes);
  options_.expected_checksum = ChecksumOf(ChecksumAlgorithm::kXxh3_128, "something else");
  absl::StatusOr<std::unique_ptr<RemoteFile>> f = Open("w");
  ASSERT_TRUE(f.ok()) << f.status();
  absl::StatusOr<std::string> got = ReadAll(**f, 1 << 20);
  EXPECT_TRUE(absl::IsDataLoss(got.status())) << got.status();
  EXPECT_FALSE((*f)->stats().whole_file_verified);
  EXPECT_TRUE((*f)->stats().whole_file_mismatch);
  // A read at the end is no success either. It returned 0, and the mismatch was recorded
  // after the lock that made the last piece ready was let go: a reader could get the last
  // bytes in that window, then 0, and take the file for good (CI, 2026-11-28, ASan on a busy
  // machine; 22 of 600 runs here with three at once). Both are closed now.
  char b[16];
  EXPECT_TRUE(absl::IsDataLoss((*f)->ReadAt(bytes.size(), b, sizeof b).status()));
}

TEST_F(RemoteFileTest, WrongSizeMissingFileAndWrongKeyFailAtOpen) {
  StartAgent();
  Put("s", "12345");
  options_.expected_size = 6;
  EXPECT_TRUE(absl::IsDataLoss(Open("s").status()));
  options_.expected_size = 0;
  EXPECT_TRUE(absl::IsNotFound(Open("nope").status())) << Open("nope").status();
  EXPECT_TRUE(absl::IsInvalidArgument(Open("../escape").status())) << Open("../escape").status();
  options_.transfer.shared_key = std::string(32, 'x');
  EXPECT_TRUE(absl::IsPermissionDenied(Open("s").status())) << Open("s").status();
}

TEST_F(RemoteFileTest, ASourceThatChangesFailsTheNextFetchWithAborted) {
  StartAgent();
  const std::string bytes = RandomBytes(8 * 1024 * 1024, 8);
  Put("m", bytes);
  options_.readahead_bytes = 256 * 1024;
  options_.cache_bytes = 1 << 20;
  absl::StatusOr<std::unique_ptr<RemoteFile>> f = Open("m");
  ASSERT_TRUE(f.ok()) << f.status();
  std::string buf(4096, '\0');
  ASSERT_TRUE((*f)->ReadAt(0, buf.data(), buf.size()).ok());
  Put("m", RandomBytes(8 * 1024 * 1024 + 1, 9));  // rewritten in place: another version
  absl::StatusOr<std::size_t> n = (*f)->ReadAt(6 * 1024 * 1024, buf.data(), buf.size());
  EXPECT_TRUE(absl::IsAborted(n.status())) << n.status();
}

TEST_F(RemoteFileTest, AnAgentThatStopsFailsTheReadInsteadOfHangingIt) {
  StartAgent();
  const std::string bytes = RandomBytes(8 * 1024 * 1024, 10);
  Put("k", bytes);
  options_.readahead_bytes = 256 * 1024;
  options_.cache_bytes = 1 << 20;
  absl::StatusOr<std::unique_ptr<RemoteFile>> f = Open("k");
  ASSERT_TRUE(f.ok()) << f.status();
  std::string buf(4096, '\0');
  ASSERT_TRUE((*f)->ReadAt(0, buf.data(), buf.size()).ok());
  StopAgent();
  auto start = std::chrono::steady_clock::now();
  absl::StatusOr<std::size_t> n = (*f)->ReadAt(7 * 1024 * 1024, buf.data(), buf.size());
  EXPECT_TRUE(absl::IsUnavailable(n.status())) << n.status();
  EXPECT_LT(std::chrono::steady_clock::now() - start, 4s);  // well before io_timeout (5 s)
}

TEST_F(RemoteFileTest, ClosingAFileWhoseAgentWentAwayIsPrompt) {
  StartAgent();
  Put("g", RandomBytes(4 * 1024 * 1024, 12));
  absl::StatusOr<std::unique_ptr<RemoteFile>> f = Open("g");
  ASSERT_TRUE(f.ok()) << f.status();
  std::string buf(4096, '\0');
  ASSERT_TRUE((*f)->ReadAt(2 * 1024 * 1024, buf.data(), buf.size()).ok());  // data connections up
  StopAgent();
  std::this_thread::sleep_for(100ms);  // its connections have ended by now
  auto start = std::chrono::steady_clock::now();
  f->reset();
  // (It used to wait out a 1-s grace period for the agent's reason on every data connection.)
  EXPECT_LT(std::chrono::steady_clock::now() - start, 500ms) << std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

TEST_F(RemoteFileTest, AnIdleSessionIsClosedByTheAgent) {
  StartAgent(-1, 0, 300ms);
  Put("i", RandomBytes(4 * 1024 * 1024, 11));
  options_.readahead_bytes = 256 * 1024;
  absl::StatusOr<std::unique_ptr<RemoteFile>> f = Open("i");
  ASSERT_TRUE(f.ok()) << f.status();
  std::this_thread::sleep_for(1500ms);
  std::string buf(4096, '\0');
  absl::StatusOr<std::size_t> n = (*f)->ReadAt(3 * 1024 * 1024, buf.data(), buf.size());
  EXPECT_TRUE(absl::IsUnavailable(n.status())) << n.status();
}

}  // namespace
}  // namespace gfrep::transfer
