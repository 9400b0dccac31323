#pragma once

// CatalogServer serves a Catalog (usually OpenRocksCatalog's) over gRPC: the service
// gfrep.catalog.v1.Catalog of catalog/proto/catalog.proto, and beside it
// gfrep.catalog.v1.Telemetry (the agents' live figures, to ServerOptions::telemetry_sink),
// callback API. gfcatalogd is a
// thin main around it; tests and benchmarks start one in-process on 127.0.0.1:0.
//
// The service converts and carries: it identifies the caller (certificate or token), applies
// the caller's rate, and makes the call on an AuthorizedCatalog (authorization.h), which
// decides what the caller may do.
//
// Threads: gRPC's callback threads only parse, convert and hand over. Everything that
// touches the disk (every mutation waits for a WAL fsync; scans) runs on a worker pool
// (options.worker_threads); short point lookups (Stat, Get*) run inline. A ReadEvents long
// poll or a Watch stream with nothing new to read waits without a thread
// (internal/event_waiters.h: one follower thread wakes them all on the next event), so
// pollers never starve the other calls, and each identity may hold a bounded number.
//
// Thread safety: Start/Shutdown from one thread; the catalog must outlive the server.

#include <functional>
#include <map>
#include <vector>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "catalog/catalog.h"

namespace gfrep::catalog {

struct ServerOptions {
  // host:port to bind; port 0 picks a free one (see CatalogServer::address()).
  std::string listen = "127.0.0.1:0";
  // PEM server certificate chain and key. Both empty: plaintext.
  std::string tls_cert_pem;
  std::string tls_key_pem;
  // PEM of the CA whose certificates clients must present (mutual TLS; needs the pair
  // above). Set: every call is authorized by the caller's identity (catalog/authorization.h) and
  // a refusal is PERMISSION_DENIED naming the action and the identity. Empty: no client
  // certificates, no identities, everything allowed (development on loopback).
  std::string tls_client_ca_pem;
  // Certificate rotation without a restart: the files the three PEMs above were read from,
  // and how often to look at them again (gRPC's file watcher; a new pair is used for new
  // connections once both files changed and match). Zero or no paths: the PEMs stay.
  std::string tls_cert_file;
  std::string tls_key_file;
  std::string tls_client_ca_file;
  std::chrono::seconds tls_reload_interval{0};
  // With mutual TLS: the key that user tokens are signed with (catalog/token.h; raw bytes).
  // Set: a client may present a token instead of a certificate (client certificates are
  // then requested, not required; a caller with neither is refused). Empty: certificates only.
  std::string token_key;
  // Re-read the revoked tokens from the catalog at most this often (on a token's use), for
  // revocations made through another front end on a shared database (gfcatalogd --shared).
  // 0: read once, at start (this server makes every revocation itself).
  std::chrono::milliseconds revocation_refresh{0};
  // Called for every refused call (on a gRPC thread): e.g. a log line.
  // Also told when the audit event of a refusal could not be written.
  std::function<void(const absl::Status&)> on_denied;
  // With mutual TLS: calls a second each identity may make (0: no limit), and the burst it
  // may make at once (0: twice the rate). A caller over its rate gets RESOURCE_EXHAUSTED
  // with trailing metadata "gfrep-retry-after-ms" (CatalogClient waits and retries within
  // its timeout); other callers are not slowed by it.
  double max_calls_per_identity = 0;
  double max_call_burst_per_identity = 0;
  // With mutual TLS: replication requests a user may have open (queued or running) at once;
  // one more is RESOURCE_EXHAUSTED naming the user and the quota (0: no quota). Bounds the
  // planner's work any one user can queue. Admins and policies are not counted.
  std::size_t max_open_requests_per_user = 0;
  // Threads that run blocking catalog calls (mutations wait for an fsync each; more
  // threads let more writers share one group commit).
  int worker_threads = 64;
  // A connection that has not finished its (TLS and HTTP/2) handshake by then is closed: a
  // flood of connections that never speak holds no file descriptor for long. gRPC's own
  // default is 120 s.
  std::chrono::milliseconds handshake_timeout{10000};
  // A connection with no call for this long is closed (clients reconnect when they next call).
  std::chrono::milliseconds max_connection_idle{600000};
  // Calls (HTTP/2 streams) one connection may have open at once; a client's further calls
  // wait in its channel until one ends. Long polls and Watch streams count.
  int max_concurrent_streams = 1000;
  // Memory gRPC may give its connections (its ResourceQuota): near it, new connections are
  // dropped as they are accepted and idle connections give back their buffers. 0: gRPC's
  // default, no bound.
  std::int64_t memory_quota_bytes = 0;
  // Largest request or response message, bytes.
  int max_message_bytes = 64 << 20;
  // Longest long-poll a ReadEvents caller may ask for.
  std::chrono::milliseconds max_event_wait{30000};
  // Long polls (ReadEvents waiting, Watch streams) one identity (without mutual TLS: one
  // address) may hold at once; more are refused with RESOURCE_EXHAUSTED. They hold no thread.
  std::size_t max_long_polls_per_identity = 64;
  // Where the Telemetry service's batches go (validated; called on a gRPC thread: keep it
  // quick). Null: the service answers kUnimplemented (no dashboard).
  std::function<absl::Status(const TelemetryBatch&)> telemetry_sink;
  // Request::in_flight_bytes of the requests GetRequest and ListRequests return (null: 0).
  std::function<std::uint64_t(std::uint64_t request_id)> request_in_flight;
  // The daemon's heartbeat timeout and dead-node interval (gfcatalogd --node-timeout,
  // --node-dead-after): ListNodes says of each node whether it is live, suspect or dead
  // (Node::liveness). Zero timeout: not said.
  std::chrono::nanoseconds node_timeout{0};
  std::chrono::nanoseconds node_dead_after{0};
};

// Server-side latency of each RPC method (from the call's arrival to its status being sent),
// as a histogram: counts per upper bound `kRpcLatencyBounds` (seconds, cumulative as
// Prometheus wants them: each count includes the faster ones), the sum and the total.
inline constexpr double kRpcLatencyBounds[] = {0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01,
                                               0.025,  0.05,    0.1,    0.25,  0.5,    1,     2.5,
                                               5,      10};
struct RpcLatency {
  std::vector<std::uint64_t> buckets;  // one per bound, cumulative
  std::uint64_t count = 0;             // all calls (the +Inf bucket)
  double sum_seconds = 0;
  std::uint64_t errors = 0;            // calls that ended with a status other than OK
};

class CatalogServer {
 public:
  // Binds, registers the service and starts serving. kUnavailable if the address cannot
  // be bound, kInvalidArgument for bad options.
  static absl::StatusOr<std::unique_ptr<CatalogServer>> Start(Catalog& catalog,
                                                              const ServerOptions& options);
  ~CatalogServer();  // Shutdown()

  // The bound address, "host:port" with the real port.
  const std::string& address() const;
  // Method ("/gfrep.catalog.v1.Catalog/Stat") -> its latencies so far. Thread-safe.
  std::map<std::string, RpcLatency> RpcLatencies() const;
  // Calls refused by authorization so far.
  std::uint64_t denied_calls() const;
  // Calls refused with RESOURCE_EXHAUSTED for being over their identity's rate.
  std::uint64_t rate_limited_calls() const;
  // Long polls (ReadEvents waits, Watch streams between events) waiting now.
  std::size_t long_polls_waiting() const;
  int port() const;

  // Stops accepting calls, cancels Watch streams, waits for running calls (up to 5 s).
  void Shutdown();
  // Blocks until Shutdown() is called from another thread.
  void Wait();

 private:
  struct Impl;
  explicit CatalogServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace gfrep::catalog
