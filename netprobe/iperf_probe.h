#pragma once

// The two ends of one route measurement, with iperf3's library (libiperf). They run in a
// process of their own (gfprobe's hidden `iperf-server` / `iperf-client` commands, which a
// site agent starts for `gfprobe route`): libiperf keeps global state and may exit the
// process on some errors, which a daemon must not risk.
//
// The client pulls (iperf3 -R), so bytes flow from the server (the route's source site) to
// the client (its destination), the direction replication uses. Before the bandwidth runs
// it measures the round-trip time as the time of a TCP handshake with `rtt_port` on the
// server's host (the source agent's listening port): the SYN / SYN-ACK exchange is one
// round trip and carries no queueing from the probe's own bytes.

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace gfrep::netprobe {

// One iperf3 test as one TCP server on `bind_host:port`; it serves a single test and exits,
// or gives up after `timeout_s`. Blocks. kUnavailable if it cannot listen.
absl::Status RunIperfServer(const std::string& bind_host, int port, int timeout_s);

struct IperfClientOptions {
  std::string host;         // the server's address
  int port = 0;             // the iperf3 server's port
  int streams = 1;          // parallel TCP streams, 1..64
  int seconds = 4;          // measured time
  int omit_seconds = 2;     // slow start, left out of the figures
  std::uint64_t window = 0; // SO_SNDBUF/SO_RCVBUF for the test's sockets, 0: autotuning
  std::string congestion;   // TCP_CONGESTION, empty: the system's default
  int connect_attempts = 25;  // the server may not be listening yet: 200 ms apart
};

struct IperfResult {
  int streams = 0;
  double seconds = 0;
  std::uint64_t bytes = 0;           // received by the client in the measured time
  double bits_per_second = 0;        // received
  std::uint64_t retransmits = 0;     // by the sender, in the measured time
  std::string congestion;            // used by the sender
};

// Runs one test (reverse mode: the server sends). kUnavailable when the server cannot be
// reached, kInternal with libiperf's message for other failures.
absl::StatusOr<IperfResult> RunIperfClient(const IperfClientOptions& options);

// The least of `samples` TCP handshake times with host:port, in milliseconds (each
// connection is closed at once). kUnavailable if no connection succeeds.
absl::StatusOr<double> MeasureConnectRtt(const std::string& host, int port, int samples);

// The largest socket buffer this host's kernel grants (min of net.core.rmem_max and
// wmem_max), 0 if unreadable.
std::uint64_t KernelMaxSocketBuffer();

// IperfResult as JSON ({"streams":..,"seconds":..,...}) and back (kInvalidArgument on a
// malformed object).
std::string ToJson(const IperfResult& r);
absl::StatusOr<IperfResult> IperfResultFromJson(const std::string& text);

}  // namespace gfrep::netprobe
