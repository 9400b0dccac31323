#pragma once

// Client operations of the transfer engine: push a local file to an agent (gfsited), pull
// a file from an agent to a local path, and third-party copies (agent B pulls from agent
// A; the caller only orchestrates, the bytes flow A -> B directly).
//
// Every operation authenticates the control connection (shared key challenge-response, or
// TLS client certificate), sets up a session, opens `route.streams` data connections and
// moves the missing ranges. The receiver writes into a temporary file beside its journal
// (restart markers) and renames it into place only after the end-to-end checksum matched,
// so re-running an interrupted copy resumes it and nothing partial is ever visible under
// the final name.
//
// Error codes: kInvalidArgument (bad options/paths), kPermissionDenied (authentication,
// path escapes), kNotFound (missing source), kUnavailable (connection refused/lost: retry),
// kDeadlineExceeded (peer idle past io_timeout), kResourceExhausted (disk full),
// kDataLoss (checksum mismatch after max_resend_rounds; nothing was put in place).
//
// The blocking functions run their own io_context on the calling thread. The awaitable
// forms run on the caller's executor (one thread), use a small internal thread pool for
// fsync and checksums, and are what gfsited uses for third-party pulls.

#include <boost/asio/awaitable.hpp>

#include <chrono>
#include <cstdint>
#include <memory>
#include <filesystem>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "transfer/options.h"
#include "transfer/tcp_figures.h"
#include "transfer/url.h"  // Endpoint, ParseEndpoint, GfUrl, ParseGfUrl, IsGfUrl

namespace gfrep::transfer {

struct TransferStats {
  std::uint64_t bytes = 0;              // file size
  std::uint64_t bytes_transferred = 0;  // moved by this run (excludes resumed bytes)
  std::uint64_t resumed_bytes = 0;      // already present at the receiver when this run began
  double seconds = 0;
  int streams = 0;
  std::string checksum;          // "xxh3-128:<hex>" of the file now in place
  std::string congestion;        // TCP congestion control actually used (sender side)
  // Who encrypted the sender's data records: "" (no TLS), "openssl" (user space) or "ktls"
  // / "ktls-send" (the kernel; TLS records sent with sendfile). Empty from a peer built
  // before 2026-11-26.
  std::string tls;
  int resend_rounds = 0;         // rounds of re-sending damaged blocks
  // Receiver side: bytes read back from the partial file for the end-to-end checksum (blocks
  // that arrived ahead of its frontier and did not fit the receive pool, resumed bytes, or
  // the whole file after a damaged frontier block). 0 when the receiver is the peer.
  std::uint64_t checksum_read_back_bytes = 0;
  // The pull ran on a warm session of a SessionCache (no connection was opened for it).
  bool reused_session = false;
  // The data connections as the sender's TCP saw them during this file (tcp_figures.h;
  // zeros from a peer built before 2026-11-24). A pull whose sender did not say takes the
  // least RTT of its own control connection.
  TcpFigures tcp;
};

// local file -> agent:remote_path.
absl::StatusOr<TransferStats> Push(const std::filesystem::path& local, const Endpoint& agent,
                                   std::string_view remote_path, const TransferOptions& options);

// agent:remote_path -> local file. The partial file and journal live in
// `<local dir>/.gfrep-tmp/`.
absl::StatusOr<TransferStats> Pull(const Endpoint& agent, std::string_view remote_path,
                                   const std::filesystem::path& local,
                                   const TransferOptions& options);

// src:src_path -> dst:dst_path, bytes flowing directly between the agents. `options`
// (streams, rates, TLS, checksums...) are passed on to the destination agent, which
// pulls with its own shared key. Progress comes from the destination agent.
absl::StatusOr<TransferStats> ThirdParty(const Endpoint& src, std::string_view src_path,
                                         const Endpoint& dst, std::string_view dst_path,
                                         const TransferOptions& options);

// Route probes between two agents (internal/probe_service.h has the protocol; gfprobe route
// drives them). Both authenticate like a copy. kUnimplemented: the agent has no probe
// helper; kUnavailable: it is busy with another probe.
//
// Asks `agent` to serve one iperf3 test for up to `seconds`; returns the port. A non-empty
// `congestion` is made available at that agent first (transfer/congestion.h: the kernel's
// module or gfrep's BPF highspeed), since the server's sockets send with it.
absl::StatusOr<std::uint16_t> StartProbeServer(const Endpoint& agent, int seconds,
                                               const TransferOptions& options,
                                               const std::string& congestion = "");
struct ProbeRunRequest {
  std::string host;            // the probe server's agent address
  std::uint16_t port = 0;      // StartProbeServer's port
  std::uint16_t rtt_port = 0;  // that agent's own port (handshake RTT)
  int streams = 1;
  int seconds = 4;
  int omit_seconds = 2;
  std::uint64_t window = 0;    // socket buffer of the test's sockets, 0: autotuning
  std::string congestion;      // the sender's TCP_CONGESTION (iperf3 -C), empty: its default
};
// Asks `agent` to measure from the probe server to itself; returns the helper's JSON result
// (netprobe::IperfResult fields plus "rtt_ms").
absl::StatusOr<std::string> RunProbe(const Endpoint& agent, const ProbeRunRequest& request,
                                     const TransferOptions& options);

// Warm sessions to source agents, so that many files pulled from one agent flow back to back
// over connections that are already open, authenticated and past slow start (GridFTP's
// pipelining, FDT's continuous stream), instead of paying connection setup (about five round
// trips) and slow start per file. A pull given a cache takes a warm session to the same agent
// with the same route settings (streams, buffer, congestion control, pacing, TLS) if there is
// one, and after it succeeded puts its control and data connections back; a failed pull
// closes them. A warm session that went stale (the agent restarted or dropped it after its
// idle limit) is noticed at the first request and replaced by a new one, transparently: the
// destination has not been touched by then.
//
// Thread safety: none. Every connection belongs to the io_context it was opened on, so use
// one cache per io_context, from that io_context's thread only (a site agent keeps one per
// worker), and destroy it before the io_context.
class SessionCache {
 public:
  struct Stats {
    std::uint64_t opened = 0;   // sessions opened (each: 1 control + `streams` data connections)
    std::uint64_t reused = 0;   // pulls that ran on a warm session
    std::uint64_t stale = 0;    // warm sessions found dead at reuse and replaced
    std::uint64_t ahead = 0;    // pulls that sent their get ahead on a session in use
  };
  // Sessions idle longer than `idle_limit` are closed instead of reused (agents drop theirs
  // after AgentOptions::session_idle, 60 s by default); at most `max_idle` are kept.
  explicit SessionCache(std::chrono::milliseconds idle_limit = std::chrono::seconds(20),
                        std::size_t max_idle = 8);
  ~SessionCache();
  SessionCache(const SessionCache&) = delete;
  SessionCache& operator=(const SessionCache&) = delete;

  // Pipelining (GridFTP's, for a stream of files to one agent): once `sessions` sessions to
  // an agent (with the same route settings) are open and none is idle, a pull of a whole
  // file sends its get on one in use whose file is under way, and the agent starts it right
  // after that file's finish: the next file's bytes follow without a round trip between. The
  // pull then waits for that session. 0 (the default): never; every pull without an idle
  // session opens one.
  void SetPipelining(std::size_t sessions);
  // Warm sessions kept now.
  std::size_t idle() const;
  const Stats& stats() const;
  // Closes every warm session.
  void Clear();

  struct Impl;  // internal/session_cache.h
  Impl& impl() { return *impl_; }

 private:
  std::unique_ptr<Impl> impl_;
};

// Awaitable pull into an explicit destination: `final_path` appears only when complete and
// verified; `tmp_dir` holds the partial file and journal. This is the call a site agent
// makes to replicate a file from another agent into its spool.
boost::asio::awaitable<absl::StatusOr<TransferStats>> AsyncPull(
    const Endpoint& agent, std::string remote_path, std::filesystem::path final_path,
    std::filesystem::path tmp_dir, TransferOptions options);
// As above, over a warm session of `cache` when there is one (REQUIRES: `cache` is used only
// on this coroutine's io_context thread and outlives the pull).
boost::asio::awaitable<absl::StatusOr<TransferStats>> AsyncPull(
    const Endpoint& agent, std::string remote_path, std::filesystem::path final_path,
    std::filesystem::path tmp_dir, TransferOptions options, SessionCache* cache);

}  // namespace gfrep::transfer
