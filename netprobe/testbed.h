#pragma once

// Builds, tears down and inspects a topology (topology.h) on this machine: network
// namespaces for nodes and site routers, veth links and a bridge per site, and one
// gfwanem process per route between the two site routers, so every node pair using a
// route shares its bottleneck. Needs root. Runs `ip`, `sysctl` and gfwanem as child
// processes and blocks while they run.
//
// Host state touched: only net.core.rmem_max / wmem_max, raised (never lowered) to the
// topology's buffer size; the old values are saved under state_dir and restored by the
// last Down(). Everything else lives inside namespaces named gfrep-*.
//
// Thread safety: none; one caller at a time per topology.

#include <spdlog/logger.h>

#include <filesystem>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "netprobe/topology.h"

namespace gfrep::netprobe {

struct TestbedOptions {
  // Per-topology state (emulator pid files, logs, stats) goes to state_dir/<topology>/.
  std::filesystem::path state_dir = "/run/gfrep-topo";

  // The gfwanem executable.
  std::filesystem::path emulator;

  // Progress and errors. Null means spdlog::default_logger().
  std::shared_ptr<spdlog::logger> logger;
};

// Brings the topology up. Idempotent: a healthy topology is left alone; a partial one
// (e.g. after a failed Up) is torn down first. On failure tears down what it made.
// kFailedPrecondition when not root, /dev/net/tun is missing, or another topology that is
// up uses one of the same namespaces (e.g. lfn-1g and lfn-1g-loss: both have sites a, b).
absl::Status TestbedUp(const Topology& topology, const TestbedOptions& options);

// Stops the emulators, deletes the namespaces, restores host sysctls (when no other
// topology is up). Idempotent; works after a failed Up. kFailedPrecondition (and nothing
// touched) if another topology that is up owns one of the namespaces.
absl::Status TestbedDown(const Topology& topology, const TestbedOptions& options);

struct TestbedStatus {
  bool up = false;      // every namespace exists and every emulator runs
  bool partial = false; // something exists, but not everything
  std::string text;     // human-readable report, one line per item
};
TestbedStatus GetTestbedStatus(const Topology& topology, const TestbedOptions& options);

// Asks every route's emulator for its counters (SIGUSR1) and returns them as a JSON
// object {"ROUTE": {"a_to_b": {...}, "b_to_a": {...}}, ...}. kFailedPrecondition if
// the topology is not up; kDeadlineExceeded if an emulator does not answer in 5 s.
absl::StatusOr<std::string> TestbedStats(const Topology& topology, const TestbedOptions& options);

}  // namespace gfrep::netprobe
