#pragma once

// Agent side of a route probe (`gfprobe route`, netprobe/route_probe.h). An authenticated
// client asks one agent to run an iperf3 server (`probe_serve`) and another to measure
// against it (`probe_run`); the agent runs the measurement in a helper process (gfprobe's
// hidden `iperf-server` / `iperf-client` commands: libiperf keeps global state and may exit
// its process, so it never runs inside the daemon) and answers with the helper's JSON.
//
// Wire (after authentication, on the control connection):
//   {"op":"probe_serve","seconds":S}          -> {"op":"probe_ready","port":P}
//       the helper serves one iperf3 test on the agent's address, port P, and exits; it is
//       killed after S + 30 s if no test came.
//   {"op":"probe_run","host":H,"port":P,"rtt_port":R,"streams":N,"seconds":S,"omit":O,
//    "window":W}                              -> {"op":"probe_result","result":{...}}
//       connect-time RTT to H:R, then iperf3 -R -P N -t S -O O -w W against H:P.
// One probe at a time per agent (kUnavailable "busy" otherwise); an agent without a helper
// refuses with kUnimplemented. Limits: streams 1..64, seconds 1..60, omit 0..10.
//
// Threading: all on the agent's io thread; the helpers are child processes, read and reaped
// asynchronously. KillAll() (agent stop) ends every helper at once.

#include <sys/types.h>

#include <filesystem>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "transfer/internal/engine.h"

namespace gfrep::transfer::internal {

class ProbeService {
 public:
  // `helper`: the gfprobe executable (empty: probes refused). `bind_host`: the agent's
  // listening address, where the iperf3 server listens too.
  ProbeService(std::filesystem::path helper, std::string bind_host)
      : helper_(std::move(helper)), bind_host_(std::move(bind_host)) {}

  static bool IsProbeOp(std::string_view op) { return op == "probe_serve" || op == "probe_run"; }

  // Serves one probe request on `conn`; the connection ends afterwards.
  asio::awaitable<absl::Status> Serve(ConnPtr conn, const Json& request, spdlog::logger& log);

  void KillAll();

 private:
  asio::awaitable<absl::Status> ServeServer(ConnPtr conn, const Json& request, spdlog::logger& log);
  asio::awaitable<absl::Status> ServeRun(ConnPtr conn, const Json& request, spdlog::logger& log);
  // Spawn() of a helper that then counts as this agent's probe (busy_) and is killed by
  // KillAll().
  absl::StatusOr<std::pair<pid_t, int>> StartHelper(const std::vector<std::string>& args);
  // Reads the child's stdout to its end (at most 1 MiB), killing it after `limit`, and reaps
  // it. Returns its output, or an error naming how it ended.
  asio::awaitable<absl::StatusOr<std::string>> Collect(pid_t pid, int out_fd, std::chrono::seconds limit);

  const std::filesystem::path helper_;
  const std::string bind_host_;
  bool busy_ = false;
  bool stopping_ = false;
  std::set<pid_t> children_;
};

}  // namespace gfrep::transfer::internal
