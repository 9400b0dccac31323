#pragma once

// Congestion controls for the engine's sockets, per route by name (RouteOptions::congestion,
// gfcp --cc, a route's `cc` in the catalog).
//
// A name the running kernel offers is used as is. One it lacks is provided if this process
// can: first the kernel's own module (`modprobe tcp_NAME`), else, for "highspeed", gfrep's
// BPF implementation of RFC 3649 (transfer/bpf/highspeed.bpf.c), registered in the kernel
// under the name "highspeed" for as long as this process lives (its registration is tied to a
// file descriptor: a process killed with SIGKILL leaves nothing behind). Either needs root
// (CAP_SYS_ADMIN / CAP_BPF and CAP_NET_ADMIN) and, for BPF, a kernel with BTF and BPF
// congestion controls (Linux >= 5.13; the registration tied to a descriptor needs >= 6.4,
// older kernels get one that this process removes when it exits normally).
//
// The registration is global in the kernel, so it serves every network namespace and every
// process of the host; another process (e.g. a second agent) that finds "highspeed" already
// there uses it. If the registering process ends, sockets that use it keep it, and the next
// socket that asks for it makes this process register it again (see TuneSocket).
//
// gfrep also has a control of its own for its data connections, "gfrep_cubic" (kGfrepCubic):
// the kernel's CUBIC, except that a connection idle for less than five minutes keeps its window
// instead of restarting from the initial window (transfer/bpf/gfrep_cubic.bpf.c says why).
// EnsureCongestionControl provides it the same way as BPF "highspeed".
//
// Thread safety: every function may be called from any thread (one process-wide registry,
// guarded by a mutex). EnsureCongestionControl may block for a BPF load (tens of ms) or a
// modprobe child: call it at start-up, or accept that pause once per registration.

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace gfrep::transfer {

// Where an algorithm that sockets can select comes from.
enum class CongestionSource {
  kKernel,       // the kernel had it (built in, or a module someone loaded)
  kKernelModule, // this process loaded the kernel's module (modprobe tcp_NAME)
  kBpf,          // one of gfrep's BPF programs, registered by this process
  kBpfShared,    // one of gfrep's BPF programs, registered by another process on this host
};
std::string_view ToString(CongestionSource source);

struct CongestionControl {
  std::string name;
  CongestionSource source = CongestionSource::kKernel;
  // One line for logs: "highspeed: gfrep BPF (RFC 3649), registered by this process".
  std::string detail;
};

// CUBIC keeping its window over idle, gfrep's own (see above).
inline constexpr std::string_view kGfrepCubic = "gfrep_cubic";

struct EnsureOptions {
  // Try `modprobe tcp_NAME` before anything else (root only).
  bool allow_module = true;
  // Provide "highspeed" and "gfrep_cubic" with gfrep's BPF programs when the kernel lacks them.
  bool allow_bpf = true;
  // Register the BPF program the pre-6.4 way (no descriptor-bound link; removed when this
  // process calls ReleaseCongestionControls or exits normally, not when it is killed). Kernels
  // without links get this by themselves; tests force it to cover the path.
  bool legacy_registration = false;
};

// Makes `name` selectable with TCP_CONGESTION on this host if it is not already. Returns how
// it is provided. kInvalidArgument for a malformed name; kNotFound for an algorithm this host
// cannot have (no module, no BPF implementation); kFailedPrecondition for one that needs
// privileges or kernel features this process lacks (the message says which). A failure is
// remembered for 60 s, so that sockets asking again do not retry a modprobe each time.
absl::StatusOr<CongestionControl> EnsureCongestionControl(std::string_view name,
                                                          const EnsureOptions& options = {});

// Whether `name` has the form of a congestion control's name: [a-z0-9_-]{1,15} (the
// kernel's TCP_CA_NAME_MAX is 16 with the terminating zero).
bool IsCongestionControlName(std::string_view name);

// The kernel's list (net.ipv4.tcp_available_congestion_control), in its order.
std::vector<std::string> AvailableCongestionControls();

// What a socket on this host gets for `name` right now, without trying to provide it:
// kNotFound when the kernel does not offer it.
absl::StatusOr<CongestionControl> DescribeCongestionControl(std::string_view name);

// Counters of gfrep's BPF HighSpeed TCP, over every socket that used it since this process
// registered it. kNotFound when this process has not registered it.
struct HighSpeedCounters {
  std::uint64_t sockets = 0;     // connections that ran it
  std::uint64_t reductions = 0;  // window reductions (losses, ECN)
  std::uint64_t undos = 0;       // spurious reductions undone
  std::uint32_t last_cwnd = 0;   // the window at the latest reduction, segments
  std::uint32_t last_ssthresh = 0;  // and the threshold it was cut to
  std::uint32_t max_row = 0;     // highest row of the RFC's table a window reached (avoidance)
  std::uint32_t max_cwnd = 0;    // largest window that grew, segments
};
absl::StatusOr<HighSpeedCounters> ReadHighSpeedCounters();

// Counters of gfrep_cubic over every socket that used it since this process registered it.
// kNotFound when this process has not registered it.
struct GfrepCubicCounters {
  std::uint64_t sockets = 0;  // connections that ran it
  std::uint64_t kept = 0;     // restarts after idle undone: the window kept
  std::uint64_t let_go = 0;   // restarts left alone (idle for more than five minutes)
  std::uint32_t last_kept_cwnd = 0;     // the latest window kept, segments
  std::uint32_t last_restart_cwnd = 0;  // and what the kernel's restart had made of it
};
absl::StatusOr<GfrepCubicCounters> ReadGfrepCubicCounters();

// Removes what this process registered (its BPF programs); sockets already using them keep
// them until they close. Modules stay loaded. For tests and orderly shutdown; process exit
// does the same.
void ReleaseCongestionControls();

}  // namespace gfrep::transfer
