#include "tools/internal/listener_watchdog.h"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

#include <charconv>
#include <filesystem>
#include <system_error>

#include <fmt/format.h>

namespace gfrep::tools {
namespace {

// True if `fd` is a TCP socket of this process listening on `port`.
bool ListensOn(int fd, int port) {
  int value = 0;
  socklen_t len = sizeof(value);
  if (::getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &value, &len) != 0 || value == 0) return false;
  len = sizeof(value);
  if (::getsockopt(fd, SOL_SOCKET, SO_PROTOCOL, &value, &len) != 0 || value != IPPROTO_TCP) return false;
  sockaddr_storage addr{};
  len = sizeof(addr);
  if (::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) return false;
  if (addr.ss_family == AF_INET) return ntohs(reinterpret_cast<const sockaddr_in*>(&addr)->sin_port) == port;
  if (addr.ss_family == AF_INET6) return ntohs(reinterpret_cast<const sockaddr_in6*>(&addr)->sin6_port) == port;
  return false;
}

}  // namespace

bool StallDetector::Observe(std::chrono::steady_clock::time_point now, std::uint32_t queued,
                            std::uint64_t calls) {
  if (queued == 0) {
    since_.reset();
    stalled_for_ = std::chrono::milliseconds(0);
    return false;
  }
  if (!since_ || calls != calls_at_since_) {  // first sight of a queue, or progress since
    since_ = now;
    calls_at_since_ = calls;
    stalled_for_ = std::chrono::milliseconds(0);
    return false;
  }
  stalled_for_ = std::chrono::duration_cast<std::chrono::milliseconds>(now - *since_);
  return stalled_for_ >= stall_;
}

std::vector<int> ListeningSocketsOnPort(int port) {
  std::vector<int> fds;
  std::error_code ec;
  for (std::filesystem::directory_iterator it("/proc/self/fd", ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    int fd = -1;
    if (std::from_chars(name.data(), name.data() + name.size(), fd).ec != std::errc{}) continue;
    if (ListensOn(fd, port)) fds.push_back(fd);
  }
  return fds;
}

absl::StatusOr<std::uint32_t> AcceptQueueLength(int fd) {
  tcp_info info{};
  socklen_t len = sizeof(info);
  if (::getsockopt(fd, IPPROTO_TCP, TCP_INFO, &info, &len) != 0) {
    return absl::InternalError(fmt::format("TCP_INFO of descriptor {}: errno {}", fd, errno));
  }
  if (info.tcpi_state != TCP_LISTEN) {
    return absl::InternalError(fmt::format("descriptor {} is not listening", fd));
  }
  // For a listening socket the kernel reports the accept queue's length in tcpi_unacked
  // (and its limit, the listen backlog, in tcpi_sacked): tcp_get_info() in net/ipv4/tcp.c.
  return info.tcpi_unacked;
}

absl::StatusOr<std::unique_ptr<ListenerWatchdog>> ListenerWatchdog::Start(ListenerWatchdogOptions options) {
  if (options.port <= 0 || options.port > 65535 || options.interval.count() <= 0 ||
      options.stall.count() < 0 || !options.accept_calls || !options.on_dead) {
    return absl::InvalidArgumentError("listener watchdog: needs a port, a positive interval, a "
                                      "stall not negative, accept_calls and on_dead");
  }
  std::vector<int> fds = ListeningSocketsOnPort(options.port);
  if (fds.empty()) {
    return absl::NotFoundError(fmt::format("listener watchdog: nothing listens on port {}", options.port));
  }
  return std::unique_ptr<ListenerWatchdog>(new ListenerWatchdog(std::move(options), std::move(fds)));
}

ListenerWatchdog::ListenerWatchdog(ListenerWatchdogOptions options, std::vector<int> fds)
    : options_(std::move(options)), fds_(std::move(fds)) {
  thread_ = std::thread([this] { Run(); });
}

ListenerWatchdog::~ListenerWatchdog() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  wake_.notify_all();
  thread_.join();
}

void ListenerWatchdog::Run() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!wake_.wait_for(lock, options_.interval, [this] { return stop_; })) {
    lock.unlock();
    std::optional<std::string> dead = Look();
    if (options_.on_tick) options_.on_tick();
    if (dead) {
      options_.on_dead(*dead);
      return;  // once: the daemon is on its way out
    }
    lock.lock();
  }
}

std::optional<std::string> ListenerWatchdog::Look() {
  if (options_.stall.count() == 0) return std::nullopt;
  // A descriptor that no longer listens on the port (gRPC replaced its listener): look again.
  for (int fd : fds_) {
    if (!ListensOn(fd, options_.port)) {
      fds_ = ListeningSocketsOnPort(options_.port);
      detectors_.clear();
      break;
    }
  }
  const auto now = std::chrono::steady_clock::now();
  for (int fd : fds_) {
    absl::StatusOr<std::uint32_t> queued = AcceptQueueLength(fd);
    const std::uint64_t calls = options_.accept_calls(fd);
    if (!queued.ok() || calls == ~std::uint64_t{0}) continue;  // cannot judge this one
    StallDetector& d = detectors_.try_emplace(fd, options_.stall).first->second;
    if (d.Observe(now, *queued, calls)) {
      return fmt::format("{} connections have waited {:.1f} s in the accept queue of port {} "
                         "(descriptor {}) and nothing accepted them",
                         *queued, std::chrono::duration<double>(d.stalled_for()).count(), options_.port, fd);
    }
  }
  return std::nullopt;
}

}  // namespace gfrep::tools
