// gfmount with real processes on loopback (gfcatalogd, gfsited agents a1 at site A and b1 at
// site B, gfreg, gfrep): the namespace mounted as node a1 and read by unchanged programs
// (ls, stat, cat, md5sum, dd, python3): a file with a local replica and a file only at b1
// read the source's bytes; a rewritten file (new generation) shows the new bytes, never the
// old; a replica the catalog marks corrupt is not served; writes fail (read-only); SIGTERM
// unmounts. Needs root and /dev/fuse (CI runs as root): skipped with a message otherwise.
// The mount is taken down in TearDown (SIGTERM, then fusermount3 -u -z if still there) also
// when a check fails.
#include <fcntl.h>
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

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
      EXPECT_EQ(r.exit_code, 0) << "gfmount: " << r.err;
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
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_FALSE(IsMounted(mnt_));
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
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_FALSE(IsMounted(mnt_));
}

}  // namespace
}  // namespace gfrep
