#include "transfer/internal/mapped_read.h"

#include <setjmp.h>
#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <mutex>

#include <fmt/format.h>

namespace gfrep::transfer::internal {
namespace {

// The calling thread's window: a SIGBUS at an address inside it jumps to `jump`.
struct Window {
  sigjmp_buf* jump = nullptr;
  const unsigned char* begin = nullptr;
  const unsigned char* end = nullptr;
};
thread_local Window t_window;
std::atomic<std::uint64_t> g_visits{0};
struct sigaction g_previous {};

void OnSigbus(int sig, siginfo_t* info, void* context) {
  const auto* at = static_cast<const unsigned char*>(info->si_addr);
  Window& w = t_window;
  if (w.jump != nullptr && at >= w.begin && at < w.end) siglongjmp(*w.jump, 1);
  // Not ours: what was there before.
  if ((g_previous.sa_flags & SA_SIGINFO) != 0 && g_previous.sa_sigaction != nullptr) {
    g_previous.sa_sigaction(sig, info, context);
    return;
  }
  if (g_previous.sa_handler == SIG_IGN) return;
  if (g_previous.sa_handler == SIG_DFL || g_previous.sa_handler == nullptr) {
    // Returning re-runs the faulting access, which now takes the default action.
    ::signal(SIGBUS, SIG_DFL);
    return;
  }
  g_previous.sa_handler(sig);
}

void InstallHandler() {
  static std::once_flag once;
  std::call_once(once, [] {
    struct sigaction sa {};
    sa.sa_sigaction = OnSigbus;
    sa.sa_flags = SA_SIGINFO;
    sigemptyset(&sa.sa_mask);
    ::sigaction(SIGBUS, &sa, &g_previous);
  });
}

// Visits [p, p + n) in pieces; true if it ran to the end, false after a SIGBUS in it.
// Separate function with nothing but plain locals: it may be left by siglongjmp.
bool GuardedVisit(const unsigned char* p, std::size_t n, std::size_t piece, VisitFn visit,
                  void* ctx) {
  sigjmp_buf jump;
  if (sigsetjmp(jump, 1) != 0) {
    t_window = Window{};
    return false;
  }
  t_window = Window{&jump, p, p + n};
  for (std::size_t done = 0; done < n;) {
    std::size_t k = n - done < piece ? n - done : piece;
    visit(ctx, p + done, k);
    done += k;
  }
  t_window = Window{};
  return true;
}

}  // namespace

absl::Status MapAndVisit(int fd, std::uint64_t offset, std::uint64_t length, std::size_t piece,
                         VisitFn visit, void* ctx) {
  if (length == 0) return absl::OkStatus();
  InstallHandler();
  static const auto kPage = static_cast<std::uint64_t>(::sysconf(_SC_PAGESIZE));
  const std::uint64_t start = offset / kPage * kPage;
  const std::uint64_t span = offset + length - start;
  void* m = ::mmap(nullptr, span, PROT_READ, MAP_SHARED, fd, static_cast<off_t>(start));
  if (m == MAP_FAILED) {
    return absl::UnavailableError(fmt::format("mmap: {}", std::strerror(errno)));
  }
  // Map the whole window at once (one walk of the page cache instead of a fault per 16
  // pages); a range past the end of the file fails here already.
  bool shrank = false;
  if (::madvise(m, span, MADV_POPULATE_READ) != 0) {
    shrank = errno == EFAULT;  // EINVAL: a kernel before 5.14, faults map the pages instead
  }
  if (!shrank) {
    shrank = !GuardedVisit(static_cast<const unsigned char*>(m) + (offset - start), length,
                           piece == 0 ? length : piece, visit, ctx);
  }
  ::munmap(m, span);
  if (shrank) return absl::AbortedError("source shrank while it was read");
  g_visits.fetch_add(1, std::memory_order_relaxed);
  return absl::OkStatus();
}

std::uint64_t MappedVisits() { return g_visits.load(std::memory_order_relaxed); }

}  // namespace gfrep::transfer::internal
