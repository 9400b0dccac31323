// The disk probe (netprobe/disk_probe.h): the recommendation from synthetic rows (pure), the
// option checks, and, as root, real measurements on file systems the tests mount themselves:
// a small tmpfs, a ramfs (refuses O_DIRECT) and ext4 on a loop device of a 64 MiB file.
// Every mount and loop device is undone by the test that made it, also when it fails.

#include "netprobe/disk_probe.h"

#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/mount.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "tests/support/subprocess.h"
#include "tests/support/temp_dir.h"

namespace gfrep::netprobe {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using ::testing::StartsWith;

constexpr std::uint64_t kKiB = 1024;
constexpr std::uint64_t kMiB = 1024 * 1024;

DiskRow Row(DiskMode mode, DiskOp op, std::uint64_t io_size, int parallel, double mbps) {
  DiskRow r;
  r.mode = mode;
  r.op = op;
  r.io_size = io_size;
  r.parallel = parallel;
  r.bytes = 100'000'000;
  r.seconds = 100.0 / mbps;  // 100 MB at mbps
  return r;
}

DiskRow W(std::uint64_t io_size, double mbps, int parallel = 1,
          DiskMode mode = DiskMode::kBuffered) {
  return Row(mode, DiskOp::kWrite, io_size, parallel, mbps);
}

DiskProbeResult Synthetic(std::vector<DiskRow> rows) {
  DiskProbeResult r;
  r.dir = "/spool";
  r.fs_type = "ext2/3/4";
  r.measured_ns = 77;
  r.direct_measured = true;
  r.rows = std::move(rows);
  return r;
}

// --- RecommendDisk (pure) --------------------------------------------------------------

TEST(RecommendDiskTest, PicksTheSmallestSizeWithinNinetyPercentOfTheBestWrite) {
  DiskProbeResult r =
      Synthetic({W(4 * kKiB, 100), W(64 * kKiB, 450), W(256 * kKiB, 480), W(1 * kMiB, 500),
                 W(4 * kMiB, 505), Row(DiskMode::kBuffered, DiskOp::kRead, 1 * kMiB, 1, 900)});
  r.direct_measured = false;
  r.direct_note = "unsupported: open with O_DIRECT: Invalid argument";
  absl::StatusOr<DiskAdvice> a = RecommendDisk(r, 1);
  ASSERT_TRUE(a.ok()) << a.status();
  // Best 505 MB/s; 90 % is 454.5: 64 KiB (450) misses, 256 KiB (480) is the smallest in.
  EXPECT_EQ(a->profile.write_io_size_bytes, 256 * kKiB);
  EXPECT_FALSE(a->profile.direct);
  EXPECT_EQ(a->parallel, 1);
  EXPECT_DOUBLE_EQ(a->profile.write_mbps, 505);
  EXPECT_DOUBLE_EQ(a->profile.read_mbps, 900);
  EXPECT_EQ(a->profile.dir, "/spool");
  EXPECT_EQ(a->profile.measured_ns, 77);
  // About one second at 480 MB/s, a power of two: 256 MiB (512 MiB would be over a second).
  EXPECT_EQ(a->profile.flush_interval_bytes, 256 * kMiB);
  ASSERT_EQ(a->reasons.size(), 3u);
  EXPECT_THAT(a->reasons[0], HasSubstr("256 KiB"));
  EXPECT_THAT(a->reasons[1], HasSubstr("unsupported"));
  EXPECT_TRUE(catalog::Validate(a->profile).ok());
}

TEST(RecommendDiskTest, ChoosesDirectWhenDirectIsTheFasterAtTheChosenSize) {
  DiskProbeResult r =
      Synthetic({W(64 * kKiB, 450), W(256 * kKiB, 480), W(1 * kMiB, 500),
                 W(64 * kKiB, 300, 1, DiskMode::kDirect), W(256 * kKiB, 650, 1, DiskMode::kDirect),
                 W(1 * kMiB, 700, 1, DiskMode::kDirect)});
  absl::StatusOr<DiskAdvice> a = RecommendDisk(r, 1);
  ASSERT_TRUE(a.ok()) << a.status();
  // Best 700; 90 % is 630: only direct 256 KiB (650) and direct 1 MiB qualify.
  EXPECT_EQ(a->profile.write_io_size_bytes, 256 * kKiB);
  EXPECT_TRUE(a->profile.direct);
  EXPECT_THAT(a->reasons[1], HasSubstr("O_DIRECT"));
  EXPECT_TRUE(catalog::Validate(a->profile).ok());
}

TEST(RecommendDiskTest, BufferedWinsATieBreakOnlyByRate) {
  DiskProbeResult r = Synthetic({W(1 * kMiB, 500), W(1 * kMiB, 480, 1, DiskMode::kDirect)});
  absl::StatusOr<DiskAdvice> a = RecommendDisk(r, 1);
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_FALSE(a->profile.direct);
  EXPECT_THAT(a->reasons[1], HasSubstr("faster than O_DIRECT"));
}

TEST(RecommendDiskTest, ConsidersOnlyRowsWithUpToStreamsParallelWriters) {
  DiskProbeResult r = Synthetic({W(64 * kKiB, 200), W(1 * kMiB, 300), W(1 * kMiB, 420, 2),
                                 W(1 * kMiB, 900, 4), W(1 * kMiB, 950, 8)});
  absl::StatusOr<DiskAdvice> one = RecommendDisk(r, 1);
  ASSERT_TRUE(one.ok());
  EXPECT_EQ(one->profile.write_io_size_bytes, 1 * kMiB);
  EXPECT_EQ(one->parallel, 1);
  absl::StatusOr<DiskAdvice> four = RecommendDisk(r, 4);
  ASSERT_TRUE(four.ok());
  EXPECT_EQ(four->parallel, 4);  // 900 is the best with 1..4 streams; 8 streams are not considered
  EXPECT_EQ(four->profile.flush_interval_bytes, 512 * kMiB);
  EXPECT_DOUBLE_EQ(four->profile.write_mbps, 950) << "the best of all rows, for the record";
}

TEST(RecommendDiskTest, FlushIntervalIsClampedAndAtLeastTheIoSize) {
  absl::StatusOr<DiskAdvice> slow = RecommendDisk(Synthetic({W(64 * kKiB, 5)}), 1);
  ASSERT_TRUE(slow.ok());
  EXPECT_EQ(slow->profile.flush_interval_bytes, 8 * kMiB);
  absl::StatusOr<DiskAdvice> big = RecommendDisk(Synthetic({W(16 * kMiB, 5)}), 1);
  ASSERT_TRUE(big.ok());
  EXPECT_EQ(big->profile.flush_interval_bytes, 16 * kMiB);
  absl::StatusOr<DiskAdvice> fast = RecommendDisk(Synthetic({W(1 * kMiB, 50'000)}), 1);
  ASSERT_TRUE(fast.ok());
  EXPECT_EQ(fast->profile.flush_interval_bytes, 1024 * kMiB);
}

TEST(RecommendDiskTest, WithoutWriteRowsThereIsNoRecommendation) {
  EXPECT_EQ(RecommendDisk(Synthetic({}), 1).status().code(), absl::StatusCode::kFailedPrecondition);
  DiskProbeResult reads = Synthetic({Row(DiskMode::kBuffered, DiskOp::kRead, kMiB, 1, 800)});
  EXPECT_EQ(RecommendDisk(reads, 1).status().code(), absl::StatusCode::kFailedPrecondition);
  DiskProbeResult parallel_only = Synthetic({W(kMiB, 800, 4)});
  EXPECT_EQ(RecommendDisk(parallel_only, 2).status().code(), absl::StatusCode::kFailedPrecondition);
}

TEST(DiskProbeFormatTest, JsonAndTableSayWhyDirectIsMissing) {
  DiskProbeResult r =
      Synthetic({W(kMiB, 500), Row(DiskMode::kBuffered, DiskOp::kRead, kMiB, 1, 600)});
  r.direct_measured = false;
  r.direct_note = "unsupported: open with O_DIRECT: Invalid argument";
  r.notes = {"writes include the fdatasync"};
  absl::StatusOr<DiskAdvice> a = RecommendDisk(r, 1);
  std::string json = ToJson(r, a);
  EXPECT_THAT(json, HasSubstr(R"("direct":"unsupported: open with O_DIRECT: Invalid argument")"));
  EXPECT_THAT(json, HasSubstr(R"("mode":"buffered","op":"write")"));
  EXPECT_THAT(json, HasSubstr(R"("write_io_size_bytes":1048576)"));
  std::string table = FormatTable(r, a);
  EXPECT_THAT(table, HasSubstr("O_DIRECT: unsupported: open with O_DIRECT"));
  EXPECT_THAT(table, HasSubstr("buffered  write      1 MiB        1"));
  EXPECT_THAT(table, HasSubstr("recommended: write I/O size 1 MiB, buffered"));
  std::string no_advice = ToJson(r, absl::FailedPreconditionError("nothing"));
  EXPECT_THAT(no_advice, HasSubstr(R"("recommendation_error":"nothing")"));
}

// --- Options and directory checks (no root needed) -------------------------------------

TEST(DiskProbeTest, ValidateRejectsBadOptions) {
  DiskProbeOptions o;
  o.dir = "/tmp";
  EXPECT_TRUE(Validate(o).ok());
  o.io_sizes = {1000};
  EXPECT_THAT(std::string(Validate(o).message()), HasSubstr("multiple of 4 KiB"));
  o.io_sizes = {512 * kMiB};
  EXPECT_THAT(std::string(Validate(o).message()), HasSubstr("larger than the bytes"));
  o.io_sizes = {4 * kKiB};
  o.parallel = {0};
  EXPECT_EQ(Validate(o).code(), absl::StatusCode::kInvalidArgument);
  o.parallel = {16};
  o.bytes = 8 * kMiB;  // 16 x 1 MiB does not fit
  EXPECT_THAT(std::string(Validate(o).message()), HasSubstr("16 streams"));
  o.parallel = {1};
  o.buffered = o.direct = false;
  EXPECT_EQ(Validate(o).code(), absl::StatusCode::kInvalidArgument);
  o.buffered = true;
  o.dir.clear();
  EXPECT_EQ(Validate(o).code(), absl::StatusCode::kInvalidArgument);
}

TEST(DiskProbeTest, MissingDirectoryIsNotFound) {
  testing::TempDir dir("disk-probe");
  DiskProbeOptions o;
  o.dir = dir.path() / "nope";
  absl::StatusOr<DiskProbeResult> r = ProbeDisk(o);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("no such directory"));
  testing::WriteRandomFile(dir.path() / "file", 10, 1);
  o.dir = dir.path() / "file";
  EXPECT_EQ(ProbeDisk(o).status().code(), absl::StatusCode::kFailedPrecondition);
}

// --- Real file systems (root) ----------------------------------------------------------

// Small options so that a run takes a fraction of a second.
DiskProbeOptions Small(const fs::path& dir, std::uint64_t bytes = 2 * kMiB) {
  DiskProbeOptions o;
  o.dir = dir;
  o.bytes = bytes;
  o.io_sizes = {4 * kKiB, 64 * kKiB, 1 * kMiB};
  o.parallel = {1, 2, 4};
  o.parallel_io_size = 256 * kKiB;
  return o;
}

// A directory of ours (mkdtemp) with a file system mounted on it; unmounted and removed on
// destruction. `ok()` false (with `error()`) when it could not be mounted.
class Mount {
 public:
  // `source`: the device for a device file system (ours), a label otherwise.
  Mount(const char* type, const std::string& data, unsigned long flags = 0,
        const std::string& source = "gfrep-disk-probe") {
    char tmpl[] = "/tmp/gfrep-disk-probe-XXXXXX";
    if (::mkdtemp(tmpl) == nullptr) {
      error_ = std::string("mkdtemp: ") + std::strerror(errno);
      return;
    }
    path_ = tmpl;
    if (::mount(source.c_str(), path_.c_str(), type, flags,
                data.empty() ? nullptr : data.c_str()) != 0) {
      error_ = std::string("mount ") + type + " " + source + ": " + std::strerror(errno);
      return;
    }
    mounted_ = true;
  }
  ~Mount() {
    if (mounted_ && ::umount2(path_.c_str(), 0) != 0) {
      (void)::umount2(path_.c_str(), MNT_DETACH);  // ignored: last resort, nothing else to do
    }
    if (!path_.empty()) (void)::rmdir(path_.c_str());  // ignored: best-effort cleanup
  }
  Mount(const Mount&) = delete;
  Mount& operator=(const Mount&) = delete;
  bool ok() const { return mounted_; }
  const std::string& error() const { return error_; }
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
  bool mounted_ = false;
  std::string error_;
};

// Entries of `dir` other than lost+found: the probe must leave none.
std::vector<std::string> Leftovers(const fs::path& dir) {
  std::vector<std::string> out;
  for (const fs::directory_entry& e : fs::directory_iterator(dir)) {
    if (e.path().filename() != "lost+found") out.push_back(e.path().filename().string());
  }
  return out;
}

void ExpectRowsFor(const DiskProbeResult& r, DiskMode mode, const DiskProbeOptions& o) {
  int writes = 0, reads = 0;
  for (const DiskRow& row : r.rows) {
    if (row.mode != mode) continue;
    EXPECT_GT(row.bytes, 0u);
    EXPECT_GT(row.seconds, 0);
    EXPECT_GT(row.MBps(), 0);
    EXPECT_LE(row.bytes, o.bytes);
    ++(row.op == DiskOp::kWrite ? writes : reads);
  }
  // Three sizes at one stream, then 256 KiB at 1, 2 and 4 streams.
  EXPECT_EQ(writes, 6) << ToString(mode);
  EXPECT_EQ(reads, 6) << ToString(mode);
}

class DiskProbeRootTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (::geteuid() != 0) GTEST_SKIP() << "needs root to mount file systems";
  }
};

TEST_F(DiskProbeRootTest, TmpfsGivesPositiveBufferedRowsAndSaysWhatItDidWithDirect) {
  Mount m("tmpfs", "size=8m");
  if (!m.ok()) GTEST_SKIP() << m.error();
  DiskProbeOptions o = Small(m.path());
  absl::StatusOr<DiskProbeResult> r = ProbeDisk(o);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->fs_type, "tmpfs");
  EXPECT_GT(r->free_bytes, 7 * kMiB);
  ExpectRowsFor(*r, DiskMode::kBuffered, o);
  // tmpfs refuses O_DIRECT before Linux 6.6 and accepts it since; either way the probe
  // completes and says which.
  std::string json = ToJson(*r, RecommendDisk(*r, 1));
  if (r->direct_measured) {
    ExpectRowsFor(*r, DiskMode::kDirect, o);
    EXPECT_THAT(json, HasSubstr(R"("direct":"supported")"));
  } else {
    EXPECT_THAT(r->direct_note, StartsWith("unsupported: "));
    EXPECT_THAT(json, HasSubstr(R"("direct":"unsupported: )"));
  }
  EXPECT_THAT(FormatTable(*r, RecommendDisk(*r, 1)), HasSubstr("posix_fadvise(DONTNEED)"));
  EXPECT_TRUE(RecommendDisk(*r, 1).ok());
  EXPECT_THAT(Leftovers(m.path()), ::testing::IsEmpty());
}

TEST_F(DiskProbeRootTest, RamfsRefusesDirectAndThatIsReportedNotFatal) {
  Mount m("ramfs", "");
  if (!m.ok()) GTEST_SKIP() << m.error();
  DiskProbeOptions o = Small(m.path());
  absl::StatusOr<DiskProbeResult> r = ProbeDisk(o);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_FALSE(r->direct_measured);
  EXPECT_EQ(r->direct_note, "unsupported: open with O_DIRECT: Invalid argument");
  ExpectRowsFor(*r, DiskMode::kBuffered, o);
  absl::StatusOr<DiskAdvice> a = RecommendDisk(*r, 1);
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_FALSE(a->profile.direct);
  EXPECT_THAT(ToJson(*r, a),
              HasSubstr(R"("direct":"unsupported: open with O_DIRECT: Invalid argument")"));
  std::string table = FormatTable(*r, a);
  EXPECT_THAT(table, HasSubstr("(O_DIRECT unsupported: open with O_DIRECT: Invalid argument)"));
  EXPECT_THAT(table, HasSubstr("free space not checked"));
  EXPECT_THAT(Leftovers(m.path()), ::testing::IsEmpty()) << "also the refused O_DIRECT file";
}

TEST_F(DiskProbeRootTest, NotEnoughFreeSpaceFailsBeforeWriting) {
  Mount m("tmpfs", "size=4m");
  if (!m.ok()) GTEST_SKIP() << m.error();
  absl::StatusOr<DiskProbeResult> r = ProbeDisk(Small(m.path(), 8 * kMiB));
  EXPECT_EQ(r.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("not enough free space"));
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("8 MiB"));
  EXPECT_THAT(Leftovers(m.path()), ::testing::IsEmpty());
}

TEST_F(DiskProbeRootTest, ReadOnlyFileSystemIsPermissionDenied) {
  Mount m("tmpfs", "size=4m", MS_RDONLY);
  if (!m.ok()) GTEST_SKIP() << m.error();
  absl::StatusOr<DiskProbeResult> r = ProbeDisk(Small(m.path()));
  EXPECT_EQ(r.status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("not writable"));
}

// Where a system tool lives (/usr/sbin is not on every PATH); empty if nowhere.
std::string SystemTool(const std::string& name) {
  for (const char* dir : {"/usr/sbin/", "/sbin/", "/usr/bin/", "/bin/"}) {
    if (::access((dir + name).c_str(), X_OK) == 0) return dir + name;
  }
  return "";
}

// A loop device of our own over a file, detached on destruction (only that device).
class LoopDevice {
 public:
  explicit LoopDevice(const fs::path& image) : losetup_(SystemTool("losetup")) {
    if (losetup_.empty()) {
      error_ = "no losetup (package mount; tools/setup-deps)";
      return;
    }
    testing::RunResult r = testing::RunCommand({losetup_, "--find", "--show", image.string()});
    if (r.exit_code != 0) {
      error_ = "losetup: " + r.err;
      return;
    }
    device_ = r.out.substr(0, r.out.find('\n'));
    if (device_.rfind("/dev/loop", 0) != 0) {
      error_ = "losetup printed " + r.out;
      device_.clear();
    }
  }
  ~LoopDevice() {
    if (!device_.empty())
      (void)testing::RunCommand({losetup_, "-d", device_});  // ignored: best effort
  }
  LoopDevice(const LoopDevice&) = delete;
  LoopDevice& operator=(const LoopDevice&) = delete;
  bool ok() const { return !device_.empty(); }
  const std::string& error() const { return error_; }
  const std::string& device() const { return device_; }

 private:
  std::string losetup_;
  std::string device_;
  std::string error_;
};

TEST_F(DiskProbeRootTest, Ext4OnALoopDeviceMeasuresBothModes) {
  testing::TempDir dir("disk-probe-loop");
  const fs::path image = dir.path() / "ext4.img";
  {
    int fd = ::open(image.c_str(), O_CREAT | O_WRONLY | O_CLOEXEC, 0600);
    ASSERT_GE(fd, 0) << std::strerror(errno);
    ASSERT_EQ(::ftruncate(fd, 64 * kMiB), 0) << std::strerror(errno);
    ::close(fd);
  }
  LoopDevice loop(image);
  if (!loop.ok()) GTEST_SKIP() << "no loop device: " << loop.error();
  const std::string mkfs_ext4 = SystemTool("mkfs.ext4");
  if (mkfs_ext4.empty()) GTEST_SKIP() << "no mkfs.ext4 (package e2fsprogs; tools/setup-deps)";
  testing::RunResult mkfs = testing::RunCommand({mkfs_ext4, "-q", "-F", loop.device()});
  ASSERT_EQ(mkfs.exit_code, 0) << mkfs.err;
  {
    Mount m("ext4", "", 0, loop.device());
    ASSERT_TRUE(m.ok()) << m.error();
    DiskProbeOptions o = Small(m.path(), 8 * kMiB);
    absl::StatusOr<DiskProbeResult> r = ProbeDisk(o);
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->fs_type, "ext2/3/4");
    EXPECT_TRUE(r->direct_measured) << r->direct_note;
    ExpectRowsFor(*r, DiskMode::kBuffered, o);
    ExpectRowsFor(*r, DiskMode::kDirect, o);
    EXPECT_THAT(ToJson(*r, RecommendDisk(*r, 1)), HasSubstr(R"("direct":"supported")"));
    absl::StatusOr<DiskAdvice> a = RecommendDisk(*r, 4);
    ASSERT_TRUE(a.ok()) << a.status();
    EXPECT_TRUE(catalog::Validate(a->profile).ok());
    EXPECT_THAT(Leftovers(m.path()), ::testing::IsEmpty());
  }  // unmounted before the loop device is detached
}

}  // namespace
}  // namespace gfrep::netprobe
