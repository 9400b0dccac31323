// gfmount with real processes on loopback (gfcatalogd, gfsited agents a1 at site A and b1 at
// site B, gfreg, gfrep): the namespace mounted as node a1 and read by unchanged programs
// (ls, stat, cat, md5sum, dd, python3): a file with a local replica and a file only at b1
// read the source's bytes; a rewritten file (new generation) shows the new bytes, never the
// old; a file rewritten in a loop while two readers read it whole is always read as one whole
// version; an open handle keeps reading its own generation; a replica the catalog marks
// corrupt is not served; writes fail (read-only); SIGTERM unmounts. Needs root and /dev/fuse (CI runs as root): skipped with a message otherwise.
// The mount is taken down in TearDown (SIGTERM, then fusermount3 -u -z if still there) also
// when a check fails.
#include <fcntl.h>
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <sstream>
#include <thread>
#include <vector>

#include "tests/support/federation.h"

namespace gfrep {
namespace {

namespace fs = std::filesystem;
using testing::RunCommand;
using testing::RunResult;

// True if `dir` is a mount point (listed in /proc/self/mountinfo).
bool IsMounted(const fs::path& dir) {
  std::ifstream in("/proc/self/mountinfo");
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream fields(line);
    std::string id, parent, dev, root, point;
    fields >> id >> parent >> dev >> root >> point;
    if (point == dir.string()) return true;
  }
  return false;
}

std::string Md5(const fs::path& file) {
  RunResult r = RunCommand({"/usr/bin/md5sum", file.string()});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  return r.out.substr(0, 32);
}

// A whole read of a file as `cat` does it (open, read to the end, close): the bytes, or the
// errno and name of the call that failed.
struct WholeRead {
  std::string bytes;
  int error = 0;
  std::string call;
};

WholeRead ReadWhole(const fs::path& file) {
  WholeRead r;
  const int fd = ::open(file.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    r.error = errno;
    r.call = "open";
    return r;
  }
  std::vector<char> buffer(1 << 20);
  while (true) {
    const ssize_t n = ::read(fd, buffer.data(), buffer.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      r.error = errno;
      r.call = "read";
      break;
    }
    if (n == 0) break;
    r.bytes.append(buffer.data(), static_cast<std::size_t>(n));
  }
  ::close(fd);
  return r;
}

// Reads exactly `n` bytes of `fd` at its position ("" and a failure on a short read).
std::string ReadN(int fd, std::size_t n) {
  std::string out(n, '\0');
  std::size_t done = 0;
  while (done < n) {
    const ssize_t got = ::read(fd, out.data() + done, n - done);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) {
      ADD_FAILURE() << "read returned " << got << " after " << done << " of " << n
                    << " bytes: " << std::strerror(errno);
      return "";
    }
    done += static_cast<std::size_t>(got);
  }
  return out;
}

class GfmountTest : public testing::FederationTest {
 protected:
  GfmountTest() : FederationTest("gfmount") {}

  void SetUp() override {
    if (::geteuid() != 0) GTEST_SKIP() << "gfmount test needs root (FUSE mount); CI runs as root";
    if (int fd = ::open("/dev/fuse", O_RDWR | O_CLOEXEC); fd < 0) {
      GTEST_SKIP() << "gfmount test needs /dev/fuse (open: " << std::strerror(errno) << ")";
    } else {
      ::close(fd);
    }
    if (!fs::exists("/usr/bin/fusermount3")) {
      GTEST_SKIP() << "gfmount test needs fusermount3 (package fuse3, tools/setup-deps)";
    }
    StartFederation({{"a1", "A"}, {"b1", "B"}});
    mnt_ = dir_.path() / "mnt";
    fs::create_directories(mnt_);
  }

  void TearDown() override {
    if (mnt_.empty()) return;
    if (gfmount_.pid() > 0 && gfmount_.running()) {
      gfmount_.Signal(SIGTERM);
      RunResult r = gfmount_.Wait(std::chrono::seconds(20));
      EXPECT_EQ(r.exit_code, 0) << "gfmount: signal " << r.signal << ": " << r.err;
    }
    // gfmount unmounts on SIGTERM; if it could not (killed, hung), take the mount down here
    // before the temporary directory under it is removed.
    EXPECT_FALSE(IsMounted(mnt_)) << "gfmount left " << mnt_ << " mounted";
    if (IsMounted(mnt_)) {
      (void)RunCommand({"/usr/bin/fusermount3", "-u", "-z", mnt_.string()});
      if (IsMounted(mnt_)) (void)RunCommand({"/usr/bin/umount", "-l", mnt_.string()});
    }
  }

  // Mounts the catalog (catalog_ unless `catalog` is given) on mnt_ as node a1 of site A and
  // waits until the mount is there.
  void Mount(const std::string& catalog = "") {
    auto p = testing::Subprocess::Start(
        {testing::BinPath("gfmount"), catalog.empty() ? catalog_ : catalog, mnt_.string(), "--site", "A", "--node", "a1",
         "--key-file", key_, "--ttl", "1", "--log-level", "debug", "--tmp-dir", dir_.Sub("")},
        ToolOptions());
    ASSERT_TRUE(p.ok()) << p.status();
    gfmount_ = std::move(*p);
    for (int i = 0; i < 200 && !IsMounted(mnt_); ++i) {
      ASSERT_TRUE(gfmount_.running()) << "gfmount exited: " << gfmount_.Stderr();
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    ASSERT_TRUE(IsMounted(mnt_)) << gfmount_.Stderr();
  }

  std::string Cat(const std::string& path) {
    RunResult r = RunCommand({"/bin/cat", (mnt_ / path.substr(1)).string()});
    EXPECT_EQ(r.exit_code, 0) << r.err;
    return r.out;
  }

  // The source file Store(path, size, seed) wrote.
  fs::path Source(std::uint64_t seed) { return dir_.path() / ("local-" + std::to_string(seed)); }

  fs::path mnt_;
  testing::Subprocess gfmount_;
};

TEST_F(GfmountTest, UnchangedProgramsReadLocalAndRemoteFilesAndNeverAStaleOne) {
  const std::string local = Store("/exp/local", 3 << 20, 1, "a1");
  const std::string remote = Store("/exp/remote", (2 << 20) + 17, 2, "b1");
  Mount();

  // ls -l and stat: the namespace with the catalog's sizes.
  RunResult r = RunCommand({"/bin/ls", "-l", (mnt_ / "exp").string()});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find(std::to_string(local.size()) + " "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find(" local\n"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find(std::to_string(remote.size()) + " "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find(" remote\n"), std::string::npos) << r.out;
  r = RunCommand({"/usr/bin/stat", "-c", "%s %F", (mnt_ / "exp/remote").string()});
  EXPECT_EQ(r.out, std::to_string(remote.size()) + " regular file\n") << r.err;
  r = RunCommand({"/usr/bin/stat", "-c", "%F", (mnt_ / "exp").string()});
  EXPECT_EQ(r.out, "directory\n") << r.err;
  r = RunCommand({"/usr/bin/stat", (mnt_ / "exp/none").string()});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("No such file"), std::string::npos) << r.err;

  // cat, md5sum, dd, python3 of the local replica and of the remote one.
  EXPECT_TRUE(Cat("/exp/local") == local) << "cat of the local file differs";
  EXPECT_TRUE(Cat("/exp/remote") == remote) << "cat of the remote file differs";
  EXPECT_EQ(Md5(mnt_ / "exp/local"), Md5(Source(1)));
  EXPECT_EQ(Md5(mnt_ / "exp/remote"), Md5(Source(2)));
  r = RunCommand(
      {"/bin/dd", "if=" + (mnt_ / "exp/remote").string(), "bs=1M", "skip=1", "status=none"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(r.out == remote.substr(1 << 20)) << "dd skip=1 read " << r.out.size() << " bytes";
  r = RunCommand({"/usr/bin/python3", "-c",
                  "import sys; f = open(sys.argv[1], 'rb'); f.seek(1000000); "
                  "sys.stdout.write(f.read(10).hex())",
                  (mnt_ / "exp/local").string()});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  std::string hex;
  for (unsigned char c : local.substr(1000000, 10)) hex += fmt::format("{:02x}", c);
  EXPECT_EQ(r.out, hex);
  const std::string log = gfmount_.Stderr();
  EXPECT_NE(log.find("open /exp/local generation=1"), std::string::npos) << log;
  EXPECT_NE(log.find("from=a1 local=true"), std::string::npos) << log;
  EXPECT_NE(log.find("from=b1 local=false"), std::string::npos) << log;

  // A new generation written at b1 (a1's replica is now stale): read at once, the new bytes,
  // from b1, although the kernel and the view had the old size and pages a moment ago.
  EXPECT_TRUE(Cat("/exp/local") == local);  // pages of generation 1 in the page cache
  const std::string rewritten = Store("/exp/local", (4 << 20) + 3, 3, "b1");
  EXPECT_TRUE(Cat("/exp/local") == rewritten) << "not the new generation";
  EXPECT_EQ(Md5(mnt_ / "exp/local"), Md5(Source(3)));
  r = RunCommand({"/usr/bin/stat", "-c", "%s", (mnt_ / "exp/local").string()});
  EXPECT_EQ(r.out, std::to_string(rewritten.size()) + "\n");

  // Read-only: writes are refused, nothing changes in the catalog.
  r = RunCommand({"/usr/bin/touch", (mnt_ / "exp/new").string()});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("Read-only"), std::string::npos) << r.err;
  r = RunCommand({"/bin/mkdir", (mnt_ / "exp/d").string()});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_TRUE(absl::IsNotFound(client_->Stat("/exp/new").status()));

  // An unmount from outside ends gfmount cleanly.
  r = RunCommand({"/usr/bin/fusermount3", "-u", mnt_.string()});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  r = gfmount_.Wait(std::chrono::seconds(20));
  EXPECT_EQ(r.exit_code, 0) << "signal " << r.signal << ": " << r.err;
  EXPECT_FALSE(IsMounted(mnt_));
}

// Issue 37, finding 2: a file alternating between an 8 MiB and a 6 MiB version, rewritten
// every 0.5 s at one site and read whole in a loop by two readers through the mount at
// another, was read 160 times of 1,003 as 6 MiB of the 8 MiB version's bytes, without an
// error: the kernel took the size from the newer generation's attributes and the bytes from
// the older generation's pages or handle (one kernel inode stood for every generation of the
// path). Every read must be exactly one whole version.
TEST_F(GfmountTest, AFileRewrittenInALoopIsAlwaysReadAsOneWholeVersion) {
  const std::string v6 = Store("/exp/flip", 6 << 20, 31, "b1");
  const std::string v8 = Store("/exp/flip", 8 << 20, 32, "b1");
  ASSERT_NE(v6, v8.substr(0, v6.size()));  // a truncated 8 MiB version is told from v6
  ASSERT_NO_FATAL_FAILURE(Mount());
  const fs::path file = mnt_ / "exp/flip";

  struct Tally {
    int v6 = 0;
    int v8 = 0;
    int wrong = 0;   // neither version, whole
    int failed = 0;  // an open or read that failed
    std::string first_problem;
  };
  Tally tallies[2];
  std::atomic<bool> stop{false};
  std::vector<std::thread> readers;
  for (Tally& tally : tallies) {
    readers.emplace_back([&, &t = tally] {
      while (!stop) {
        WholeRead r = ReadWhole(file);
        std::string problem;
        if (r.error != 0) {
          ++t.failed;
          problem = fmt::format("{}: {}", r.call, std::strerror(r.error));
        } else if (r.bytes == v6) {
          ++t.v6;
        } else if (r.bytes == v8) {
          ++t.v8;
        } else {
          ++t.wrong;
          problem = fmt::format("{} bytes, {}", r.bytes.size(),
                                r.bytes == v8.substr(0, r.bytes.size())
                                    ? "the 8 MiB version's first bytes"
                                    : (r.bytes == v6.substr(0, r.bytes.size())
                                           ? "the 6 MiB version's first bytes"
                                           : "a mix"));
        }
        if (!problem.empty() && t.first_problem.empty()) t.first_problem = problem;
      }
    });
  }
  // 16 rewrites at b1, one each 0.5 s (or as fast as gfreg goes), alternating 6 and 8 MiB.
  int rewrites = 0;
  for (int i = 0; i < 16; ++i) {
    const auto start = std::chrono::steady_clock::now();
    RunResult w = Tool({"gfreg", Source(i % 2 == 0 ? 31 : 32).string(), "/exp/flip", "--node", "b1"});
    EXPECT_EQ(w.exit_code, 0) << w.err;
    if (w.exit_code != 0) break;
    ++rewrites;
    std::this_thread::sleep_until(start + std::chrono::milliseconds(500));
  }
  stop = true;
  for (std::thread& t : readers) t.join();

  Tally all;
  for (const Tally& t : tallies) {
    all.v6 += t.v6;
    all.v8 += t.v8;
    all.wrong += t.wrong;
    all.failed += t.failed;
    if (all.first_problem.empty()) all.first_problem = t.first_problem;
  }
  // Opens of an older generation's node, answered ESTALE and retried by the kernel.
  const std::string log = gfmount_.Stderr();
  int stale_opens = 0;
  for (std::size_t at = log.find("ABORTED"); at != std::string::npos;
       at = log.find("ABORTED", at + 1)) {
    ++stale_opens;
  }
  const std::string summary = fmt::format(
      "rewrites={} reads={} v6={} v8={} wrong={} failed={} estale_opens={} first problem: {}",
      rewrites, all.v6 + all.v8 + all.wrong + all.failed, all.v6, all.v8, all.wrong, all.failed,
      stale_opens, all.first_problem.empty() ? "none" : all.first_problem);
  std::cout << summary << std::endl;
  EXPECT_EQ(all.wrong, 0) << summary;
  EXPECT_EQ(all.failed, 0) << summary;
  EXPECT_GE(all.v6, 1) << summary;
  EXPECT_GE(all.v8, 1) << summary;
}

// A handle reads the generation it opened to its end while the file is rewritten (its size
// stays that generation's), and an open after the rewrite reads the new version: for a
// replica of this node (read through its descriptor) and for one at another site (streamed).
TEST_F(GfmountTest, AnOpenHandleKeepsReadingItsGenerationWhileTheFileIsRewritten) {
  const std::map<std::string, std::uint64_t> seed_of = {{"a1", 41}, {"b1", 43}};
  std::map<std::string, std::string> old_bytes;
  for (const auto& [node, seed] : seed_of) {
    old_bytes[node] = Store("/exp/held-" + node, 8 << 20, seed, node);
  }
  ASSERT_NO_FATAL_FAILURE(Mount());
  constexpr std::size_t kHead = 1 << 20;
  for (const auto& [node, seed] : seed_of) {
    SCOPED_TRACE("replica at " + node);
    const std::string& old = old_bytes[node];
    const fs::path file = mnt_ / ("exp/held-" + node);
    const int fd = ::open(file.c_str(), O_RDONLY | O_CLOEXEC);
    ASSERT_GE(fd, 0) << std::strerror(errno);
    EXPECT_TRUE(ReadN(fd, kHead) == old.substr(0, kHead)) << "first MiB";

    const std::string fresh = Store("/exp/held-" + node, 6 << 20, seed + 1, node);
    // The mount shows the new version to a new lookup (event or TTL)...
    struct stat st {};
    for (int i = 0; i < 200; ++i) {
      if (::stat(file.c_str(), &st) == 0 && static_cast<std::size_t>(st.st_size) == fresh.size()) {
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    EXPECT_EQ(static_cast<std::size_t>(st.st_size), fresh.size()) << "the rewrite was not seen";
    // ...while the open handle still has the old generation's size and bytes to its end.
    ASSERT_EQ(::fstat(fd, &st), 0);
    EXPECT_EQ(static_cast<std::size_t>(st.st_size), old.size());
    EXPECT_TRUE(ReadN(fd, old.size() - kHead) == old.substr(kHead)) << "the rest";
    char extra = 0;
    EXPECT_EQ(::read(fd, &extra, 1), 0) << "bytes past the old generation's end";
    ::close(fd);

    WholeRead again = ReadWhole(file);
    EXPECT_EQ(again.error, 0) << again.call << ": " << std::strerror(again.error);
    EXPECT_EQ(again.bytes.size(), fresh.size());
    EXPECT_TRUE(again.bytes == fresh) << "a new open does not read the new version";
  }
}

// A list of catalog front ends (gfcatalogd --shared) is one mount option value: its commas
// once split FUSE's options ("fuse: unknown option(s)") and the mount failed.
TEST_F(GfmountTest, MountsGivenAListOfCatalogFrontEnds) {
  const std::string bytes = Store("/exp/listed", 1 << 20, 5, "a1");
  const std::string list = catalog_ + "," + catalog_;
  Mount(list);
  EXPECT_TRUE(Cat("/exp/listed") == bytes) << "cat through the mount differs";
  std::ifstream in("/proc/self/mountinfo");
  std::string mountinfo((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_NE(mountinfo.find("gfrep:" + list), std::string::npos) << mountinfo;
}

TEST_F(GfmountTest, AReplicaTheCatalogMarksCorruptIsNotServedFromThisNode) {
  const std::string bytes = Store("/exp/bad", 1 << 20, 4, "a1");
  RunResult r = Tool({"gfrep", "-N", "2", "/exp/bad"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  ASSERT_EQ(Replica("b1", "/exp/bad"), bytes);
  Mount();
  EXPECT_TRUE(Cat("/exp/bad") == bytes);  // read locally at a1 first

  // a1's bytes damaged (mtime put back so the size/mtime check alone would pass) and its
  // record marked corrupt, as a check of a1's agent would.
  auto a = client_->Stat("/exp/bad");
  ASSERT_TRUE(a.ok());
  fs::path file =
      Spool("a1") / ".gfrep-data" / std::to_string(a->inode) / std::to_string(a->generation);
  auto mtime = fs::last_write_time(file);
  testing::FlipByte(file, 4096);
  fs::last_write_time(file, mtime);
  catalog::ReplicaTransition t;
  t.inode = a->inode;
  t.node = "a1";
  t.generation = a->generation;
  t.from = catalog::ReplicaState::kComplete;
  t.to = catalog::ReplicaState::kCorrupt;
  t.note = "gfmount_test";
  auto done = client_->TransitionReplicas({t});
  ASSERT_TRUE(done.ok()) << done.status();
  ASSERT_TRUE((*done)[0].ok()) << (*done)[0];

  EXPECT_TRUE(Cat("/exp/bad") == bytes) << "the damaged replica was served";
  EXPECT_EQ(Md5(mnt_ / "exp/bad"), Md5(Source(4)));
  const std::string log = gfmount_.Stderr();
  EXPECT_NE(log.find("open /exp/bad generation=1 size=1048576 from=b1 local=false"),
            std::string::npos)
      << log;

  // SIGTERM unmounts (TearDown checks the same after any test).
  gfmount_.Signal(SIGTERM);
  r = gfmount_.Wait(std::chrono::seconds(20));
  EXPECT_EQ(r.exit_code, 0) << "signal " << r.signal << ": " << r.err;
  EXPECT_FALSE(IsMounted(mnt_));
}

}  // namespace
}  // namespace gfrep
