#include "tools/internal/accept_guard.h"

#include <dlfcn.h>
#include <fcntl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <mutex>

namespace gfrep::tools {
namespace {

using Accept4Fn = int (*)(int, sockaddr*, socklen_t*, int);

// Listening sockets are opened early, so their numbers are small; calls on higher ones are
// not counted per descriptor.
constexpr int kTrackedFds = 4096;
// One call drains at most this many connections it has to shed; a flood that outruns it
// leaves the rest for the next call (each new connection wakes the listener again).
constexpr int kMaxHandledPerCall = 4096;

std::atomic<std::uint64_t> calls_on[kTrackedFds];
std::atomic<int> reserve_kept{-1};  // < 0: not installed, calls pass through
std::atomic<std::uint64_t> accepted{0};
std::atomic<std::uint64_t> shed{0};
std::atomic<std::uint64_t> dropped{0};
std::mutex spare_mu;
int spare = -1;  // guarded by spare_mu

// The C library's accept4 (the next definition after ours), looked up once.
Accept4Fn RealAccept4() {
  static const Accept4Fn real = reinterpret_cast<Accept4Fn>(::dlsym(RTLD_NEXT, "accept4"));
  return real;
}

int OpenSpare() { return ::open("/dev/null", O_RDONLY | O_CLOEXEC); }

// True if descriptor `fd` leaves fewer than `reserve` free below the soft limit. Descriptors
// are allocated lowest first, so a new one this high means the table is nearly full.
bool WithinReserve(int fd, int reserve) {
  if (reserve <= 0) return false;
  rlimit rl{};
  if (::getrlimit(RLIMIT_NOFILE, &rl) != 0 || rl.rlim_cur == RLIM_INFINITY) return false;
  return static_cast<rlim_t>(fd) + static_cast<rlim_t>(reserve) >= rl.rlim_cur;
}

// The table is full: gives up the spare descriptor for the time it takes to accept the
// waiting connection and close it. 0 when one was shed, else accept's errno (EAGAIN: the
// queue is empty; EMFILE: another thread took the freed slot, or there is no spare).
int ShedWithSpare(int listen_fd) {
  std::lock_guard<std::mutex> lock(spare_mu);
  if (spare < 0) spare = OpenSpare();
  if (spare < 0) return EMFILE;
  ::close(spare);
  const int c = RealAccept4()(listen_fd, nullptr, nullptr, SOCK_CLOEXEC);
  const int error = errno;
  if (c >= 0) ::close(c);
  spare = OpenSpare();  // may fail if another thread took the slot: tried again next time
  return c >= 0 ? 0 : error;
}

// Errors accept(2) reports for a connection that failed while it waited: it is gone, the
// others in the queue are not.
bool ConnectionGone(int error) {
  switch (error) {
    case ECONNABORTED:
    case EPROTO:
    case ENOPROTOOPT:
    case ENETDOWN:
    case ENONET:
    case EHOSTDOWN:
    case EHOSTUNREACH:
    case ENETUNREACH:
    case EOPNOTSUPP:
    case EPERM:  // a firewall rule refused it
      return true;
    default:
      return false;
  }
}

}  // namespace

void InstallAcceptGuard(int reserve) {
  {
    std::lock_guard<std::mutex> lock(spare_mu);
    if (spare < 0) spare = OpenSpare();
  }
  reserve_kept.store(reserve < 0 ? 0 : reserve, std::memory_order_release);
}

AcceptGuardCounters GetAcceptGuardCounters() {
  return {accepted.load(std::memory_order_relaxed), shed.load(std::memory_order_relaxed),
          dropped.load(std::memory_order_relaxed)};
}

std::uint64_t AcceptCallsOn(int fd) {
  if (fd < 0 || fd >= kTrackedFds) return kNotTracked;
  return calls_on[fd].load(std::memory_order_relaxed);
}

bool AcceptGuardInterposed() {
  return ::dlsym(RTLD_DEFAULT, "accept4") == reinterpret_cast<void*>(&::accept4);
}

}  // namespace gfrep::tools

// The definition the dynamic linker binds every accept4 call of the process to (the
// executable exports it: tools/CMakeLists.txt, --export-dynamic-symbol). See accept_guard.h.
extern "C" int accept4(int fd, sockaddr* addr, socklen_t* addrlen, int flags) {
  using namespace gfrep::tools;
  const Accept4Fn real = RealAccept4();
  if (real == nullptr) {
    errno = ENOSYS;
    return -1;
  }
  if (fd >= 0 && fd < kTrackedFds) calls_on[fd].fetch_add(1, std::memory_order_relaxed);
  const int reserve = reserve_kept.load(std::memory_order_acquire);
  if (reserve < 0) return real(fd, addr, addrlen, flags);
  // A blocking caller would take EAGAIN for a failure: leave it alone.
  const int fd_flags = ::fcntl(fd, F_GETFL);
  if (fd_flags < 0 || (fd_flags & O_NONBLOCK) == 0) return real(fd, addr, addrlen, flags);
  const socklen_t room = addrlen != nullptr ? *addrlen : 0;
  for (int handled = 0; handled < kMaxHandledPerCall; ++handled) {
    if (addrlen != nullptr) *addrlen = room;
    const int c = real(fd, addr, addrlen, flags);
    if (c >= 0) {
      if (!WithinReserve(c, reserve)) {
        accepted.fetch_add(1, std::memory_order_relaxed);
        return c;
      }
      ::close(c);
      shed.fetch_add(1, std::memory_order_relaxed);
      continue;
    }
    const int error = errno;
    if (error == EINTR) continue;
    if (error == EMFILE || error == ENFILE) {
      const int e = ShedWithSpare(fd);
      if (e == 0) {
        shed.fetch_add(1, std::memory_order_relaxed);
        continue;
      }
      if (ConnectionGone(e)) {
        dropped.fetch_add(1, std::memory_order_relaxed);
        continue;
      }
      break;  // queue empty, or no descriptor to be had right now: EAGAIN below
    }
    if (ConnectionGone(error)) {
      dropped.fetch_add(1, std::memory_order_relaxed);
      continue;
    }
    if (error == ENOBUFS || error == ENOMEM) break;
    errno = error;  // EAGAIN, or the caller's own mistake (EBADF, EINVAL, ...): as it was
    return -1;
  }
  // gRPC re-arms its listener on EAGAIN and on nothing else.
  errno = EAGAIN;
  return -1;
}
