#include "transfer/errno_status.h"

#include <gtest/gtest.h>

#include <cerrno>

namespace gfrep::transfer {
namespace {

TEST(ErrnoStatusTest, EachErrnoHasItsCodeAndTheMessageSaysWhere) {
  const absl::Status full = ErrnoStatus(ENOSPC, "fsync /spool");
  EXPECT_TRUE(absl::IsResourceExhausted(full)) << full;
  EXPECT_NE(full.message().find("fsync /spool: "), absl::string_view::npos) << full;
  EXPECT_NE(full.message().find("(disk full)"), absl::string_view::npos) << full;
  EXPECT_TRUE(absl::IsResourceExhausted(ErrnoStatus(EDQUOT, "write")));
  EXPECT_TRUE(absl::IsNotFound(ErrnoStatus(ENOENT, "open")));
  EXPECT_TRUE(absl::IsPermissionDenied(ErrnoStatus(EACCES, "open")));
  EXPECT_TRUE(absl::IsPermissionDenied(ErrnoStatus(EPERM, "chmod")));
  EXPECT_TRUE(absl::IsAlreadyExists(ErrnoStatus(EEXIST, "rename")));
  EXPECT_TRUE(absl::IsUnavailable(ErrnoStatus(EPIPE, "send")));
  EXPECT_TRUE(absl::IsUnavailable(ErrnoStatus(ECONNRESET, "recv")));
  EXPECT_TRUE(absl::IsInternal(ErrnoStatus(EIO, "read")));
}

}  // namespace
}  // namespace gfrep::transfer
