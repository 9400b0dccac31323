#include "tests/support/subprocess.h"

#include <gtest/gtest.h>
#include <signal.h>

namespace gfrep::testing {
namespace {

TEST(SubprocessTest, CapturesOutputAndExitCode) {
  RunResult r = RunCommand({"/bin/sh", "-c", "echo hello; echo oops >&2; exit 3"});
  EXPECT_EQ(r.exit_code, 3);
  EXPECT_EQ(r.out, "hello\n");
  EXPECT_EQ(r.err, "oops\n");
}

TEST(SubprocessTest, FeedsStdin) {
  SubprocessOptions opts;
  opts.stdin_data = "abc";
  RunResult r = RunCommand({"/bin/cat"}, opts);
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_EQ(r.out, "abc");
}

TEST(SubprocessTest, WaitForListenParsesAddress) {
  auto p = Subprocess::Start({"/bin/sh", "-c", "echo 'x listening on 127.0.0.1:4242'; sleep 30"});
  ASSERT_TRUE(p.ok()) << p.status();
  auto addr = p->WaitForListen(std::chrono::seconds(10));
  ASSERT_TRUE(addr.ok()) << addr.status();
  EXPECT_EQ(*addr, "127.0.0.1:4242");
  RunResult r = p->Kill();
  EXPECT_EQ(r.signal, SIGKILL);
}

TEST(SubprocessTest, AssigningANewProcessRemovesTheOldOnesOutputDirectory) {
  auto first = Subprocess::Start({"/bin/sh", "-c", "echo one; sleep 30"});
  ASSERT_TRUE(first.ok()) << first.status();
  const std::filesystem::path old_dir = first->out_path().parent_path();
  ASSERT_TRUE(std::filesystem::exists(old_dir));
  auto second = Subprocess::Start({"/bin/sh", "-c", "echo two; sleep 30"});
  ASSERT_TRUE(second.ok()) << second.status();
  const std::filesystem::path new_dir = second->out_path().parent_path();
  *first = std::move(*second);  // a test restarting a daemon does this
  EXPECT_FALSE(std::filesystem::exists(old_dir));
  EXPECT_TRUE(std::filesystem::exists(new_dir));
  first->Kill();
}

TEST(SubprocessTest, WaitForOutputReportsEarlyExit) {
  auto p = Subprocess::Start({"/bin/sh", "-c", "echo boom >&2; exit 1"});
  ASSERT_TRUE(p.ok());
  auto line = p->WaitForOutput("never", std::chrono::seconds(10));
  EXPECT_EQ(line.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_NE(line.status().message().find("boom"), std::string_view::npos);
}

}  // namespace
}  // namespace gfrep::testing
