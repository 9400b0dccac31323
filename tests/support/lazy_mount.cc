#include "tests/support/lazy_mount.h"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <fstream>
#include <sstream>
#include <utility>

#include "absl/strings/str_cat.h"

namespace gfrep::testing {

namespace fs = std::filesystem;

bool IsMounted(const fs::path& dir) {
  std::error_code ec;
  const fs::path want = fs::weakly_canonical(dir, ec);
  std::ifstream in("/proc/self/mountinfo");
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream fields(line);
    std::string id, parent, dev, root, point;
    fields >> id >> parent >> dev >> root >> point;
    if (point == want.string()) return true;
  }
  return false;
}

std::string LazyMount::Unavailable() {
  if (::geteuid() != 0) return "needs root (FUSE mounts); CI runs as root";
  const int fd = ::open("/dev/fuse", O_RDWR | O_CLOEXEC);
  if (fd < 0) return absl::StrCat("needs /dev/fuse (open: ", std::strerror(errno), ")");
  ::close(fd);
  if (!fs::exists("/usr/bin/fusermount3")) {
    return "needs fusermount3 (package fuse3, tools/setup-deps)";
  }
  return "";
}

absl::StatusOr<LazyMount> LazyMount::Start(const fs::path& backing, const fs::path& mountpoint) {
  std::error_code ec;
  fs::create_directories(mountpoint, ec);
  if (ec)
    return absl::InternalError(absl::StrCat("mkdir ", mountpoint.string(), ": ", ec.message()));
  LazyMount m;
  m.mountpoint_ = fs::canonical(mountpoint, ec);
  absl::StatusOr<Subprocess> p =
      Subprocess::Start({BinPath("gfrep-test-lazyfs"), backing.string(), m.mountpoint_.string()});
  if (!p.ok()) return p.status();
  m.process_ = std::move(*p);
  m.up_ = true;
  // The line comes once fuse_mount has returned: the mount is in place.
  absl::StatusOr<std::string> line =
      m.process_.WaitForOutput("lazyfs: mounted", std::chrono::seconds(30));
  if (!line.ok()) return line.status();
  if (!IsMounted(m.mountpoint_)) {
    return absl::InternalError(absl::StrCat(m.mountpoint_.string(), " is not a mount point"));
  }
  return m;
}

LazyMount::LazyMount(LazyMount&& other) noexcept
    : process_(std::move(other.process_)),
      mountpoint_(std::move(other.mountpoint_)),
      up_(std::exchange(other.up_, false)) {}

LazyMount& LazyMount::operator=(LazyMount&& other) noexcept {
  if (this != &other) {
    ForceDown();
    process_ = std::move(other.process_);
    mountpoint_ = std::move(other.mountpoint_);
    up_ = std::exchange(other.up_, false);  // the moved-from one owns no mount
  }
  return *this;
}

LazyMount::~LazyMount() { ForceDown(); }

absl::StatusOr<std::string> LazyMount::Cut() {
  if (!process_.running()) return absl::FailedPreconditionError("the lazyfs is not running");
  process_.Signal(SIGUSR1);
  RunResult r = process_.Wait(std::chrono::seconds(60));
  if (r.exit_code != 0) {
    ForceDown();
    return absl::InternalError(
        absl::StrCat("lazyfs cut: exit ", r.exit_code, " signal ", r.signal, ": ", r.err));
  }
  if (IsMounted(mountpoint_)) {
    ForceDown();
    return absl::InternalError(absl::StrCat("lazyfs left ", mountpoint_.string(), " mounted"));
  }
  up_ = false;
  const std::size_t at = r.out.find("lazyfs: cut:");
  if (at == std::string::npos) return absl::InternalError(absl::StrCat("lazyfs said: ", r.out));
  return r.out.substr(at, r.out.find('\n', at) - at);
}

absl::Status LazyMount::Unmount() {
  if (!process_.running()) return absl::FailedPreconditionError("the lazyfs is not running");
  process_.Signal(SIGTERM);
  RunResult r = process_.Wait(std::chrono::seconds(30));
  if (r.exit_code != 0 || IsMounted(mountpoint_)) {
    ForceDown();
    return absl::InternalError(absl::StrCat("lazyfs unmount: exit ", r.exit_code, ": ", r.err));
  }
  up_ = false;
  return absl::OkStatus();
}

void LazyMount::ForceDown() {
  if (!up_) return;
  up_ = false;
  if (process_.running()) {
    process_.Signal(SIGTERM);
    (void)process_.Wait(std::chrono::seconds(20));  // kills it past that
  }
  if (IsMounted(mountpoint_)) {
    (void)RunCommand({"/usr/bin/fusermount3", "-u", "-z", mountpoint_.string()});
    if (IsMounted(mountpoint_)) (void)RunCommand({"/usr/bin/umount", "-l", mountpoint_.string()});
  }
}

}  // namespace gfrep::testing
