#pragma once

// AgentServer: the data-mover half of gfsited. It serves the files under a spool directory
// to authenticated peers (get), receives files into it (put), and, asked by a client,
// pulls a file from another agent into its spool (third-party). Received files are
// verified and renamed into place, then `on_file_committed` is called; the catalog role of
// a later issue hooks in there.
//
// Top-level spool names starting with ".gfrep-" are refused over the network, except the
// replica area (spool_names.h), whose files are written once: a put or pull_from to an
// existing replica name fails with kAlreadyExists. A bad peer costs one connection: a
// malformed message or an exception ends that connection only, a peer that has not
// authenticated may send at most 4 KiB per control message, and connections beyond
// `max_connections` (or `max_connections_per_peer` from one address) are closed at once.
//
// Threading: Start() binds; Run() runs the io_context on the calling thread until Stop().
// All sessions are coroutines on that one thread; fsync and whole-file checksums run on a
// small internal thread pool. Stop() may be called from any thread. Hooks run on the
// io thread and must not block.

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "transfer/client.h"
#include "transfer/options.h"

namespace gfrep::transfer {

// Default of AgentOptions::max_connections_per_peer (clients that keep many sessions open,
// such as a site agent's workers, size themselves to stay under it).
inline constexpr int kDefaultMaxConnectionsPerPeer = 2048;

struct AgentOptions {
  // Address to bind, e.g. "127.0.0.1:0".
  std::string listen = "127.0.0.1:0";
  // Directory served and written; created if missing. Its name (and that of any parent made
  // for it) is synced in the directory holding it before Create returns, so that what is
  // later made durable inside it cannot vanish with it at a power cut.
  std::filesystem::path spool;
  // Shared key (raw bytes; see auth.h). Required.
  std::string shared_key;
  // TLS: cert+key enable TLS sessions; ca also enables client-certificate authentication.
  TlsOptions tls;
  // Refuse sessions that do not use TLS on every connection (control and data).
  bool require_tls = false;
  // Mutual TLS only: refuse a control connection that is not authenticated by a verified
  // client certificate (clear text, or the shared key inside TLS). Data connections may still
  // be clear when the session asks (TransferOptions::tls_control). Needs tls.ca.
  bool require_mutual_tls = false;
  // Who may open a session by client certificate: called with the URI subject alternative
  // names of a verified certificate (gfrep://ROLE/NAME from gfca); a non-OK status refuses
  // the session with that status (PERMISSION_DENIED naming the identity). Unset: every
  // certificate the CA signed is accepted.
  std::function<absl::Status(const std::vector<std::string>& uris)> authorize_certificate;
  // Defaults for pulls this agent makes (third-party) and limits for sessions it serves.
  TransferOptions defaults;
  // Connections served at once, from all peers; more are closed at once. 1..1,000,000.
  // (gfsited raises its open-file limit to fit.)
  int max_connections = 4096;
  // Connections served at once from one peer address (a transfer with N streams uses N+1,
  // and one site agent runs several transfers). 1..max_connections.
  int max_connections_per_peer = kDefaultMaxConnectionsPerPeer;
  // A session kept open by its client for more files (SessionCache in client.h) is closed
  // after this long without a request.
  std::chrono::milliseconds session_idle{60000};
  // The gfprobe executable, run for route probes (internal/probe_service.h) as a child
  // process; empty: this agent refuses probes.
  std::filesystem::path probe_helper;
  // Called after a received file was verified, fsynced and renamed into place.
  std::function<void(const std::filesystem::path& path, const TransferStats& stats)>
      on_file_committed;
  std::shared_ptr<spdlog::logger> logger;
};

class AgentServer {
 public:
  // kInvalidArgument for a missing spool or key, or limits out of range.
  static absl::StatusOr<std::unique_ptr<AgentServer>> Create(AgentOptions options);
  ~AgentServer();

  // Binds and listens. Returns the bound endpoint (the real port when 0 was asked).
  absl::StatusOr<Endpoint> Start();
  // Serves until Stop().
  void Run();
  // Reads the certificate, key and CA files again (certificate rotation; gfsited does this on
  // SIGHUP): sessions that start afterwards use them, running ones keep what they began
  // with. On an error (a missing file, a key that does not match) the files in force stay.
  // Thread-safe.
  absl::Status ReloadTls();
  void Stop();

  struct Stats {
    std::uint64_t connections_accepted = 0;   // control and data, since Start()
    std::uint64_t files_on_warm_sessions = 0; // gets served over an already open session
    std::uint64_t files_sent_ahead = 0;       // of those, gets that came before the last
                                              // file's outcome (pipelined; README)
    std::uint64_t read_sessions = 0;          // streaming read sessions (remote_file.h) served
  };
  // Thread-safe.
  Stats stats() const;

 private:
  struct Impl;
  explicit AgentServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace gfrep::transfer
