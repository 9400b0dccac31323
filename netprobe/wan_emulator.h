#pragma once

// WanEmulator is a userspace WAN link between two network namespaces, for a kernel
// whose tc has no netem. It creates a TUN device in each namespace (opened after
// setns into it, so one process holds both fds) and forwards every IP packet read
// from one to the other after a one-way delay, at a bottleneck rate, through a
// bounded drop-tail queue, with optional random loss; each direction has its own
// settings, counters, scheduler and delay line. End-to-end TCP therefore sees the real
// RTT, rate and loss. The devices vanish when the emulator is destroyed.
//
// The caller assigns addresses and routes to the devices (gftopo does); the emulator
// sets their MTU and brings them up.
//
// Thread safety: single-threaded. Run() blocks the calling thread; it blocks SIGINT,
// SIGTERM and SIGUSR1 in that thread and receives them through a signalfd.

#include <spdlog/logger.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "netprobe/link_options.h"

namespace gfrep::netprobe {

struct EmulatorOptions {
  // Network namespaces ("ip netns" names, or absolute paths of ns files) of side A and B.
  // Empty means the emulator's own namespace.
  std::string netns_a;
  std::string netns_b;

  // TUN device names (at most 15 characters). They must differ if the namespaces are equal.
  std::string device_a = "wan0";
  std::string device_b = "wan0";

  // MTU of both devices; large MTUs keep the packet rate (and CPU cost) low.
  int mtu = 9000;

  // Packets travelling A -> B and B -> A.
  DirectionOptions a_to_b;
  DirectionOptions b_to_a;

  // Seed of the loss RNG (each direction derives its own stream from it).
  std::uint64_t seed = 1;

  // Progress and errors. Null means spdlog::default_logger().
  std::shared_ptr<spdlog::logger> logger;
};

absl::Status Validate(const EmulatorOptions& options);

struct EmulatorStats {
  DirectionStats a_to_b;
  DirectionStats b_to_a;
  std::uint64_t wakeups = 0;  // epoll returns, for CPU-cost accounting
};

class WanEmulator {
 public:
  // Creates both TUN devices (MTU set, up). kInvalidArgument for bad options,
  // kNotFound for a missing namespace, kPermissionDenied / kInternal for system errors.
  static absl::StatusOr<std::unique_ptr<WanEmulator>> Create(const EmulatorOptions& options);

  virtual ~WanEmulator() = default;

  // Forwards packets until SIGINT or SIGTERM arrives. On SIGUSR1 calls `on_report`
  // (may be empty) with the current counters and continues.
  virtual absl::Status Run(const std::function<void(const EmulatorStats&)>& on_report) = 0;

  virtual EmulatorStats stats() const = 0;
};

}  // namespace gfrep::netprobe

namespace gfrep::netprobe {

// {"generation": G, "a_to_b": {"packets_in": .., ...}, "b_to_a": {..}, "wakeups": W}
std::string StatsToJson(const EmulatorStats& stats, std::uint64_t generation);

}  // namespace gfrep::netprobe
