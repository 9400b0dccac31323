#include "transfer/internal/mapped_read.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "tests/support/temp_dir.h"

namespace gfrep::transfer::internal {
namespace {

// Collects what MapAndVisit hands out into room made beforehand (a visit may be left by a
// jump mid-copy, so it must not allocate: a string growing inside it leaked its new buffer);
// optionally truncates the file after the first piece.
struct Collect {
  explicit Collect(std::size_t room) : bytes(room, '\0') {}
  std::string bytes;
  std::size_t filled = 0;
  int pieces = 0;
  int truncate_fd = -1;
  off_t truncate_to = 0;
  static void Visit(void* ctx, const unsigned char* data, std::size_t n) {
    auto* c = static_cast<Collect*>(ctx);
    if (c->filled + n > c->bytes.size()) std::abort();  // more than asked for
    std::memcpy(c->bytes.data() + c->filled, data, n);
    c->filled += n;
    if (++c->pieces == 1 && c->truncate_fd >= 0 &&
        ::ftruncate(c->truncate_fd, c->truncate_to) != 0) {
      std::abort();
    }
  }
  std::string Got() const { return bytes.substr(0, filled); }
};

class MappedReadTest : public ::testing::Test {
 protected:
  MappedReadTest() : dir_("mapped") {}
  int Open(std::uint64_t size, int flags = O_RDONLY) {
    testing::WriteRandomFile(path(), size, 7);
    fd_ = ::open(path().c_str(), flags | O_CLOEXEC);
    return fd_;
  }
  std::filesystem::path path() const { return dir_.path() / "f"; }
  ~MappedReadTest() override {
    if (fd_ >= 0) ::close(fd_);
  }
  testing::TempDir dir_;
  int fd_ = -1;
};

TEST_F(MappedReadTest, VisitsExactlyTheRangeInPiecesAtAnUnalignedOffset) {
  const int fd = Open(3 << 20);
  ASSERT_GE(fd, 0);
  const std::string all = testing::ReadFile(path());
  Collect c(1 << 20);
  ASSERT_TRUE(MapAndVisit(fd, 12345, 1 << 20, 256 * 1024, &Collect::Visit, &c).ok());
  EXPECT_EQ(c.Got(), all.substr(12345, 1 << 20));
  EXPECT_EQ(c.pieces, 4);
}

TEST_F(MappedReadTest, ARangePastTheEndOfTheFileIsAbortedNotASignal) {
  const int fd = Open(1 << 20);
  ASSERT_GE(fd, 0);
  Collect c(1 << 20);
  absl::Status s = MapAndVisit(fd, 512 * 1024, 1 << 20, 256 * 1024, &Collect::Visit, &c);
  EXPECT_TRUE(absl::IsAborted(s)) << s;
}

TEST_F(MappedReadTest, AFileTruncatedDuringTheVisitIsAbortedNotASignal) {
  // The pages were mapped before the visit began; the truncation after the first piece takes
  // them away, and the next piece's first access faults (SIGBUS) inside the window.
  const int fd = Open(4 << 20);
  ASSERT_GE(fd, 0);
  const int writable = ::open(path().c_str(), O_WRONLY | O_CLOEXEC);
  ASSERT_GE(writable, 0);
  Collect c(4 << 20);
  c.truncate_fd = writable;
  c.truncate_to = 0;
  absl::Status s = MapAndVisit(fd, 0, 4 << 20, 256 * 1024, &Collect::Visit, &c);
  ::close(writable);
  EXPECT_TRUE(absl::IsAborted(s)) << s;
  EXPECT_EQ(c.pieces, 1);
  // The thread's window is closed again: a later visit of another file works.
  const int again = ::open(path().c_str(), O_RDWR | O_CLOEXEC);
  ASSERT_GE(again, 0);
  ASSERT_EQ(::ftruncate(again, 1 << 20), 0);
  Collect d(1 << 20);
  EXPECT_TRUE(MapAndVisit(again, 0, 1 << 20, 0, &Collect::Visit, &d).ok());
  EXPECT_EQ(d.filled, 1u << 20);
  ::close(again);
}

TEST_F(MappedReadTest, AFileThatCannotBeMappedIsUnavailable) {
  int p[2];
  ASSERT_EQ(::pipe(p), 0);
  Collect c(4096);
  absl::Status s = MapAndVisit(p[0], 0, 4096, 0, &Collect::Visit, &c);
  ::close(p[0]);
  ::close(p[1]);
  EXPECT_TRUE(absl::IsUnavailable(s)) << s;
  EXPECT_EQ(c.pieces, 0);
}

// While it lives, the sanitizers' options in the environment (which a re-executed death-test
// child reads) end with log_path=stderr (a later option wins over an earlier one).
class SanitizerReportsToStderr {
 public:
  SanitizerReportsToStderr() {
    for (const char* name : {"ASAN_OPTIONS", "UBSAN_OPTIONS", "TSAN_OPTIONS"}) {
      const char* v = std::getenv(name);
      if (v == nullptr) continue;
      saved_.emplace_back(name, v);
      ::setenv(name, (std::string(v) + ":log_path=stderr").c_str(), 1);
    }
  }
  ~SanitizerReportsToStderr() {
    for (const auto& [name, value] : saved_) ::setenv(name.c_str(), value.c_str(), 1);
  }

 private:
  std::vector<std::pair<std::string, std::string>> saved_;
};

TEST(MappedReadDeathTest, ASigbusOutsideAVisitStillKillsTheProcess) {
  // The handler only takes faults inside a visit's window; any other SIGBUS goes to the
  // action that was there before: the default (the process dies of SIGBUS), or a sanitizer's
  // handler installed earlier (it reports and aborts or exits with its code). Never a
  // normal exit.
  // The file is made inside the child and unlinked at once: a child that dies leaves nothing
  // behind (a fixture's temporary directory, made again in each re-executed child, did).
  ::testing::FLAGS_gtest_death_test_style = "threadsafe";
  // A sanitizer's report of the child's SIGBUS is expected here: it goes to the child's
  // stderr (which the death test reads), not to the report files by which
  // tools/run-sanitized fails a program.
  SanitizerReportsToStderr child_reports;
  EXPECT_EXIT(
      {
        char name[] = "/tmp/gfrep-sigbus-XXXXXX";
        const int fd = ::mkstemp(name);
        if (fd < 0) _exit(6);
        ::unlink(name);
        if (::ftruncate(fd, 1 << 20) != 0) _exit(7);
        Collect c(4096);
        if (!MapAndVisit(fd, 0, 4096, 0, &Collect::Visit, &c).ok()) _exit(3);
        void* m = ::mmap(nullptr, 1 << 20, PROT_READ, MAP_SHARED, fd, 0);
        if (m == MAP_FAILED) _exit(4);
        if (::ftruncate(fd, 0) != 0) _exit(5);
        volatile unsigned char x = static_cast<const unsigned char*>(m)[8192];
        (void)x;
        _exit(0);
      },
      [](int status) {
        // Ours: 0 (no fault) and 3-7 (set-up failed). A sanitizer's handler ends the process
        // with its own exit code (ThreadSanitizer: 66) or SIGABRT (AddressSanitizer).
        if (WIFSIGNALED(status)) return WTERMSIG(status) == SIGBUS || WTERMSIG(status) == SIGABRT;
        const int code = WEXITSTATUS(status);
        return code != 0 && (code < 3 || code > 7);
      },
      "");
}

}  // namespace
}  // namespace gfrep::transfer::internal
