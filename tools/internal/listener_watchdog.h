#pragma once

// ListenerWatchdog notices a listening socket that nobody accepts from any more: the state
// gRPC 1.51 leaves its listener in after an accept4 error (accept_guard.h says why and how
// the guard prevents it; this is the net under it). Every `interval` it looks at this
// process's sockets listening on `port`: the kernel's accept queue length (TCP_INFO's
// tcpi_unacked, for a listening socket) and how often accept4 was called on each (the
// guard counts). Connections waiting for `stall` while no accept4 call came means the
// listener is dead: `on_dead` is called once, and the daemon exits for its supervisor to
// restart it (gfcatalogd: status kListenerDeadExitStatus; systemd's Restart=on-failure).
//
// Re-creating the gRPC server in the process instead was ruled out: its shutdown waits for
// every listener to acknowledge, and a listener that took gRPC's error path never does
// while another one is active; and a new CatalogServer would start with a new service
// anyway (worker pool, rate limits, long polls), as a restart does.
//
// Thread safety: Start/destructor from one thread; the callbacks run on the watchdog's own.

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"

namespace gfrep::tools {

// gfcatalogd's exit status when its gRPC listener died (EX_TEMPFAIL: try again).
inline constexpr int kListenerDeadExitStatus = 75;

// Decides from successive looks at one listener whether it is dead: true once connections
// have waited in its queue for `stall` without one accept call in between. Pure: tests
// drive it with made-up times.
class StallDetector {
 public:
  explicit StallDetector(std::chrono::milliseconds stall) : stall_(stall) {}
  // `queued`: connections in the accept queue now; `calls`: accept calls on it so far.
  bool Observe(std::chrono::steady_clock::time_point now, std::uint32_t queued, std::uint64_t calls);
  // How long connections have waited with no call, as of the last Observe.
  std::chrono::milliseconds stalled_for() const { return stalled_for_; }

 private:
  std::chrono::milliseconds stall_;
  std::optional<std::chrono::steady_clock::time_point> since_;  // queue seen non-empty, no call
  std::uint64_t calls_at_since_ = 0;
  std::chrono::milliseconds stalled_for_{0};
};

// This process's descriptors of TCP sockets listening on `port`.
std::vector<int> ListeningSocketsOnPort(int port);

// Connections waiting in the accept queue of listening TCP socket `fd`; kInternal if it
// cannot be read (not a TCP socket, closed).
absl::StatusOr<std::uint32_t> AcceptQueueLength(int fd);

struct ListenerWatchdogOptions {
  // The TCP port whose listening sockets are watched (gfcatalogd's gRPC port).
  int port = 0;
  // Time between looks.
  std::chrono::milliseconds interval{1000};
  // Connections waiting this long with no accept call: the listener is dead. 0: never
  // judged (the watchdog only ticks).
  std::chrono::milliseconds stall{10000};
  // accept calls on a listening descriptor so far (accept_guard.h AcceptCallsOn); a
  // descriptor answered with ~0 (kNotTracked) is not judged.
  std::function<std::uint64_t(int fd)> accept_calls;
  // Called once, on the watchdog's thread, when a listener is found dead (what was seen).
  std::function<void(const std::string& what)> on_dead;
  // Called after every look, on the watchdog's thread (e.g. to log what the guard shed).
  std::function<void()> on_tick;
};

class ListenerWatchdog {
 public:
  // Finds the listening sockets on options.port and starts watching them; kNotFound if
  // there is none, kInvalidArgument for bad options.
  static absl::StatusOr<std::unique_ptr<ListenerWatchdog>> Start(ListenerWatchdogOptions options);
  ~ListenerWatchdog();  // stops and joins

 private:
  explicit ListenerWatchdog(ListenerWatchdogOptions options, std::vector<int> fds);
  void Run();
  // One look at every listener; the description of a dead one, else nullopt.
  std::optional<std::string> Look();

  // Constant after construction.
  const ListenerWatchdogOptions options_;
  std::vector<int> fds_;  // watchdog thread only (after construction)
  std::map<int, StallDetector> detectors_;  // watchdog thread only
  std::mutex mu_;
  std::condition_variable wake_;
  bool stop_ = false;  // guarded by mu_
  std::thread thread_;
};

}  // namespace gfrep::tools
