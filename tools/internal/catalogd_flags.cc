#include "tools/internal/catalogd_flags.h"

#include <fmt/format.h>

#include <cstdint>
#include <fstream>
#include <sstream>

#include "catalog/token.h"

namespace gfrep::tools {
namespace {

absl::StatusOr<std::string> ReadPem(const std::string& path) {
  std::ifstream in(path);
  if (!in) return absl::InvalidArgumentError(fmt::format("cannot read {}", path));
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace

void AddCatalogdFlags(CLI::App& app, CatalogdFlags& f) {
  app.add_option(
         "--db", f.db,
         "Where the catalog is kept: a RocksDB directory (created if missing), or a "
         "PostgreSQL database, postgresql://USER@HOST:PORT/DBNAME or "
         "'postgresql:host=SOCKETDIR port=P dbname=D' (schema created or migrated at start)")
      ->required();
  app.add_flag("--shared", f.shared,
               "One of several front ends on one PostgreSQL --db (start each with --shared): any "
               "serves any client, mutations are serialized in the database, and the planner, "
               "repairer and policy engine run in one of them at a time (the leader)");
  app.add_option("--listen", f.listen, "HOST:PORT to serve gRPC on (port 0: any free port)")
      ->capture_default_str();
  app.add_option("--tls-cert", f.tls_cert, "PEM server certificate chain (enables TLS)");
  app.add_option("--tls-key", f.tls_key, "PEM private key for --tls-cert");
  app.add_option("--tls-client-ca", f.tls_client_ca,
                 "PEM CA whose certificates clients must present (mutual TLS); every call is then "
                 "authorized by the caller's identity (gfca issue node|user|admin NAME)");
  app.add_flag(
      "--insecure", f.insecure,
      "Serve a non-loopback address without mutual TLS: anyone who reaches the port may do "
      "anything (development only)");
  app.add_option("--max-open-requests-per-user", f.open_requests_per_user,
                 "With mutual TLS: replication requests a user may have queued or running at once; "
                 "0 = no quota")
      ->capture_default_str();
  app.add_option("--max-long-polls-per-identity", f.long_polls_per_identity,
                 "Event-log long polls (and Watch streams) one identity, or one address without "
                 "mutual TLS, may hold at once; they hold no thread")
      ->check(CLI::Range(std::size_t{1}, std::size_t{1000000}))
      ->capture_default_str();
  app.add_option(
      "--token-key", f.token_key,
      "With mutual TLS: the key user tokens are signed with (gfca init writes token.key; "
      "gfauth token create mints them): users may then present a token instead of a certificate");
  app.add_option("--max-message-mib", f.max_message_mib, "Largest request or response message, MiB")
      ->check(CLI::Range(1, 1024))
      ->capture_default_str();
  app.add_option("--handshake-timeout", f.handshake_timeout_s,
                 "Seconds a new connection may take to finish its TLS and HTTP/2 handshake before "
                 "it is closed")
      ->check(CLI::Range(0.1, 3600.0))
      ->capture_default_str();
  app.add_option(
         "--fd-reserve", f.fd_reserve,
         "File descriptors kept free for the catalog's own work: a gRPC connection accepted "
         "with fewer left is closed at once (its client retries), so that the listener never "
         "runs out of them (gRPC 1.51 stops accepting for good when it does)")
      ->check(CLI::Range(0, 1000000))
      ->capture_default_str();
  app.add_option("--listener-watchdog", f.listener_watchdog_s,
                 "Seconds connections may wait in the gRPC listener's accept queue with nothing "
                 "accepting them before gfcatalogd exits with status 75 for its supervisor to "
                 "restart it (systemd: Restart=on-failure); 0 = no watchdog")
      ->check(CLI::Range(0.0, 3600.0))
      ->capture_default_str();
  f.max_streams = catalog::ServerOptions{}.max_concurrent_streams;
  app.add_option(
         "--max-streams-per-connection", f.max_streams,
         "Calls one client connection may have open at once (HTTP/2 streams, long polls and "
         "Watch streams included); further ones wait in the client")
      ->check(CLI::Range(1, 1000000))
      ->capture_default_str();
  app.add_option("--grpc-memory", f.grpc_memory,
                 "Memory gRPC may give its connections (e.g. 2G; 0 = no bound): near it, new "
                 "connections are dropped and idle ones give back their buffers")
      ->capture_default_str();
  const replica::web::HttpServerOptions http_defaults;
  f.http_limits = {http_defaults.max_connections, http_defaults.max_connections_per_client,
                   http_defaults.descriptor_reserve};
  AddHttpLimitFlags(app, f.http_limits);
  app.add_flag("--test-no-accept-guard", f.test_no_accept_guard, "")->group("");
  app.add_option("--tls-reload-interval", f.tls_reload_s,
                 "Seconds between looks at the --tls-cert/--tls-key/--tls-client-ca files: rotated "
                 "certificates are used for new connections without a restart; 0 = read once")
      ->check(CLI::Range(0, 86400))
      ->capture_default_str();
  app.add_option("--max-calls-per-identity", f.max_calls_per_identity,
                 "With mutual TLS: calls a second each identity may make, in bursts of twice that "
                 "(over it: RESOURCE_EXHAUSTED, and clients wait and retry); 0 = no limit")
      ->check(CLI::Range(0.0, 1e9))
      ->capture_default_str();
  app.add_option("--workers", f.workers, "Threads running catalog operations")
      ->check(CLI::Range(1, 1024))
      ->capture_default_str();
  app.add_flag(
      "--unsafe-no-sync", f.no_sync,
      "Acknowledge writes before the WAL is synced (benchmarks only: loses data on crash)");
  app.add_flag("--no-planner", f.no_planner,
               "Do not run the replica planner (requests stay queued)");
  app.add_option("--node-timeout", f.node_timeout_s,
                 "Planner: seconds without a heartbeat after which a node is down (no source or "
                 "destination; its open tasks are planned elsewhere)")
      ->check(CLI::Range(1, 86400))
      ->capture_default_str();
  app.add_option("--node-dead-after", f.node_dead_after_s,
                 "Repairer: seconds without a heartbeat after which a node is dead: its replicas "
                 "stop counting toward any holder's copies and are made again elsewhere (checked "
                 "before they count again if it comes back); at least --node-timeout")
      ->check(CLI::Range(1, 365 * 86400))
      ->capture_default_str();
  f.open_per_node = replica::plan::PlannerOptions{}.max_open_tasks_per_node;
  app.add_option("--max-open-tasks-per-node", f.open_per_node,
                 "Planner: queued or leased tasks per destination node at most; a node whose "
                 "gfsited reports its --workers gets at least 5 per worker (claims ahead and "
                 "commits in flight hold tasks too)")
      ->check(CLI::Range(1, 100000))
      ->capture_default_str();
  app.add_option("--keep-finished-requests", f.keep_finished_days,
                 "Planner: days a finished request (and its tasks) is kept before it is forgotten; "
                 "0 keeps them forever")
      ->check(CLI::Range(0.0, 36500.0))
      ->capture_default_str();
  app.add_flag("--no-repair", f.no_repair,
               "Do not repair lost and corrupt replicas (no repair requests are made)");
  app.add_option("--repair-scan-interval", f.repair_scan_s,
                 "Repairer: seconds between full scans of every node's replica records for bad "
                 "ones (lost and corrupt ones are also acted on as they are reported)")
      ->check(CLI::Range(0.1, 86400.0))
      ->capture_default_str();
  app.add_option("--policies", f.policies,
                 "Replication policy file (YAML, replica/plan/policy.h), stored in the catalog at "
                 "start and on SIGHUP (a file with mistakes is refused and the rules in force "
                 "stay); gfpolicy changes the stored rules too");
  app.add_flag("--no-policies", f.no_policies, "Do not enforce replication policies");
  app.add_option(
      "--policy-state", f.policy_state,
      "Where the last run of each scheduled rule is kept (default: DB-policy-state.json)");
  app.add_option("--removed-rule-grace", f.removed_rule_grace_s,
                 "Seconds the copies of a removed rule stay before they go (unless another rule or "
                 "a gfrep request needs them; never the last one)")
      ->check(CLI::Range(0.0, 365 * 86400.0))
      ->capture_default_str();
  app.add_option("--release-interval", f.release_interval_s,
                 "Seconds between looks for copies whose rule ended (a lifetime passed, the rule "
                 "was removed)")
      ->check(CLI::Range(0.1, 86400.0))
      ->capture_default_str();
  app.add_option("--http", f.http,
                 "Serve the dashboard (/), /metrics, /healthz and /readyz on HOST:PORT (off by "
                 "default; loopback only unless --http-public)");
  app.add_flag("--http-public", f.http_public,
               "Allow --http on a non-loopback address (no authentication on these pages yet)");
  app.add_flag("--no-telemetry", f.no_telemetry,
               "Refuse the agents' live telemetry (then no dashboard graphs and no in-flight bytes "
               "in gfrep; agents stop sending)");
}

absl::StatusOr<replica::daemon::CatalogdOptions> CatalogdOptionsOf(
    const CatalogdFlags& f, std::shared_ptr<spdlog::logger> log) {
  using std::chrono::milliseconds;
  replica::daemon::CatalogdOptions o;
  if (!f.http.empty()) {
    if (absl::Status s = replica::web::CheckHttpListen(f.http, f.http_public); !s.ok()) return s;
  }
  absl::StatusOr<std::uint64_t> grpc_memory = ParseSize(f.grpc_memory);
  if (!grpc_memory.ok() || *grpc_memory > static_cast<std::uint64_t>(INT64_MAX)) {
    return absl::InvalidArgumentError(
        fmt::format("--grpc-memory {}: not a size (e.g. 2G, or 0)", f.grpc_memory));
  }
  o.store.path = f.db;
  o.store.sync = !f.no_sync;
  o.store.shared = f.shared;
  catalog::ServerOptions& s = o.server;
  s.listen = f.listen;
  s.worker_threads = f.workers;
  s.max_calls_per_identity = f.max_calls_per_identity;
  s.tls_cert_file = f.tls_cert;
  s.tls_key_file = f.tls_key;
  s.tls_client_ca_file = f.tls_client_ca;
  s.tls_reload_interval = std::chrono::seconds(f.tls_reload_s);
  s.max_message_bytes = f.max_message_mib << 20;
  s.max_open_requests_per_user = f.open_requests_per_user;
  s.max_long_polls_per_identity = f.long_polls_per_identity;
  s.handshake_timeout = milliseconds(static_cast<std::int64_t>(f.handshake_timeout_s * 1000));
  s.max_concurrent_streams = f.max_streams;
  s.memory_quota_bytes = static_cast<std::int64_t>(*grpc_memory);
  if (!f.tls_cert.empty() || !f.tls_key.empty()) {
    absl::StatusOr<std::string> cert = ReadPem(f.tls_cert);
    if (!cert.ok()) return cert.status();
    absl::StatusOr<std::string> key = ReadPem(f.tls_key);
    if (!key.ok()) return key.status();
    s.tls_cert_pem = *cert;
    s.tls_key_pem = *key;
  }
  if (!f.tls_client_ca.empty()) {
    absl::StatusOr<std::string> ca = ReadPem(f.tls_client_ca);
    if (!ca.ok()) return ca.status();
    s.tls_client_ca_pem = *ca;
    if (!f.token_key.empty()) {
      absl::StatusOr<std::string> key = catalog::ReadTokenKey(f.token_key);
      if (!key.ok()) return key.status();
      s.token_key = *key;
    }
  } else if (!f.token_key.empty()) {
    return absl::InvalidArgumentError("--token-key needs mutual TLS (--tls-client-ca)");
  }
  o.insecure = f.insecure;
  o.telemetry = !f.no_telemetry;
  o.planner = !f.no_planner;
  o.planner_options.max_open_tasks_per_node = f.open_per_node;
  o.planner_options.finished_request_retention =
      std::chrono::seconds(static_cast<std::int64_t>(f.keep_finished_days * 86400));
  o.repair = !f.no_repair;
  o.repairer_options.scan_interval =
      milliseconds(static_cast<std::int64_t>(f.repair_scan_s * 1000));
  o.policies = !f.no_policies;
  o.policy_options.state_file = f.policy_state;
  o.policy_options.removed_rule_grace =
      milliseconds(static_cast<std::int64_t>(f.removed_rule_grace_s * 1000));
  o.policy_options.release_interval =
      milliseconds(static_cast<std::int64_t>(f.release_interval_s * 1000));
  o.node_timeout = std::chrono::seconds(f.node_timeout_s);
  o.node_dead_after = std::chrono::seconds(f.node_dead_after_s);
  o.http.listen = f.http;
  o.http.max_connections = f.http_limits.max_connections;
  o.http.max_connections_per_client = f.http_limits.max_connections_per_client;
  o.http.descriptor_reserve = f.http_limits.fd_reserve;
  o.logger = std::move(log);
  if (absl::Status c = replica::daemon::CheckCatalogdOptions(o); !c.ok()) return c;
  // The policy file is read, checked and stored in the catalog at start (the policy engine
  // enforces the catalog's document; gfpolicy changes it too).
  if (!f.policies.empty()) {
    absl::StatusOr<std::string> text = replica::daemon::ReadPolicyFile(f.policies);
    if (!text.ok()) return text.status();
    o.policy_text = std::move(*text);
    o.policy_source = f.policies;
  }
  return o;
}

}  // namespace gfrep::tools
