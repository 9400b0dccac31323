#pragma once

// LazyMount runs gfrep-test-lazyfs (tests/support/lazyfs/lazy_fs.h has its model) over a
// backing directory, for power-cut tests: processes write through the mount, the test
// kills them (kill -9), then Cut() drops everything they did not fsync, as a power loss
// would, and leaves the backing directory as a disk would be found at reboot. A new
// LazyMount over the same backing directory takes what is there as durable.
//
// Needs root and /dev/fuse: Unavailable() says why not, for GTEST_SKIP. The destructor
// takes a mount still there down (SIGTERM, then fusermount3 -u -z, umount -l), also when
// a test fails.
//
// Thread safety: none; owned by one test.

#include <filesystem>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "tests/support/subprocess.h"

namespace gfrep::testing {

// True if `dir` is a mount point (listed in /proc/self/mountinfo).
bool IsMounted(const std::filesystem::path& dir);

class LazyMount {
 public:
  // Why FUSE mounts cannot be made here ("" if they can): not root, no /dev/fuse, no
  // fusermount3.
  static std::string Unavailable();

  // Mounts `backing` (an existing directory) on `mountpoint` (made if missing) and waits
  // until the mount is there. kDeadlineExceeded or kUnavailable (with the lazyfs's stderr)
  // if it is not.
  static absl::StatusOr<LazyMount> Start(const std::filesystem::path& backing,
                                         const std::filesystem::path& mountpoint);

  LazyMount() = default;
  ~LazyMount();
  LazyMount(LazyMount&& other) noexcept;
  LazyMount& operator=(LazyMount&& other) noexcept;

  // The power cut. REQUIRES: every process that used the mount is dead (killed and
  // reaped). Returns the lazyfs's summary line; kInternal if it failed or left the mount.
  absl::StatusOr<std::string> Cut();
  // A clean unmount: the backing directory keeps everything.
  absl::Status Unmount();

  const std::filesystem::path& path() const { return mountpoint_; }
  bool mounted() { return process_.running(); }

 private:
  // Unmounts by any means (for the destructor and failures).
  void ForceDown();

  Subprocess process_;
  std::filesystem::path mountpoint_;
  // This object's lazyfs may still be mounted (false once Cut or Unmount saw it go: a
  // later mount on the same path is another object's).
  bool up_ = false;
};

}  // namespace gfrep::testing
