// gfcatalogd: the shared catalog of a gfrep federation (RocksDB or PostgreSQL, + gRPC).
//   gfcatalogd --db DIR|postgresql://... --listen HOST:PORT [--tls-cert PEM --tls-key PEM]
// Prints "listening on HOST:PORT" once bound; stops cleanly on SIGINT/SIGTERM.
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <sstream>

#include <fmt/format.h>

#include "catalog/catalog.h"
#include "catalog/catalog_service.h"
#include "catalog/internal/kv_catalog.h"
#include "catalog/internal/kv_store.h"
#include "catalog/token.h"
#include "replica/core/metrics.h"
#include "replica/plan/planner.h"
#include "replica/plan/policy_engine.h"
#include "replica/plan/repairer.h"
#include "replica/web/dashboard.h"
#include "replica/web/http_server.h"
#include "replica/web/telemetry.h"
#include "tools/internal/accept_guard.h"
#include "tools/internal/cli.h"
#include "tools/internal/listener_watchdog.h"

namespace {

absl::StatusOr<std::string> ReadPem(const std::string& path) {
  std::ifstream in(path);
  if (!in) return absl::InvalidArgumentError(fmt::format("cannot read {}", path));
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace

int main(int argc, char** argv) {
  using namespace gfrep;
  constexpr const char* kProgram = "gfcatalogd";
  CLI::App app{"gfcatalogd: the gfrep catalog service (namespace, replicas, topology, tasks)"};
  tools::CommonFlags common;
  std::string db;
  std::string listen = "127.0.0.1:7400";
  std::string tls_cert, tls_key;
  int workers = 64;
  bool no_sync = false;
  tools::AddCommonFlags(app, common);
  tools::AddLogFileFlags(app, common);
  app.add_option("--db", db,
                 "Where the catalog is kept: a RocksDB directory (created if missing), or a "
                 "PostgreSQL database, postgresql://USER@HOST:PORT/DBNAME or "
                 "'postgresql:host=SOCKETDIR port=P dbname=D' (schema created or migrated at start)")
      ->required();
  bool shared = false;
  app.add_flag("--shared", shared,
               "One of several front ends on one PostgreSQL --db (start each with --shared): any "
               "serves any client, mutations are serialized in the database, and the planner, "
               "repairer and policy engine run in one of them at a time (the leader)");
  app.add_option("--listen", listen, "HOST:PORT to serve gRPC on (port 0: any free port)")
      ->capture_default_str();
  app.add_option("--tls-cert", tls_cert, "PEM server certificate chain (enables TLS)");
  app.add_option("--tls-key", tls_key, "PEM private key for --tls-cert");
  std::string tls_client_ca;
  bool insecure = false;
  app.add_option("--tls-client-ca", tls_client_ca,
                 "PEM CA whose certificates clients must present (mutual TLS); every call is then "
                 "authorized by the caller's identity (gfca issue node|user|admin NAME)");
  app.add_flag("--insecure", insecure,
               "Serve a non-loopback address without mutual TLS: anyone who reaches the port may do "
               "anything (development only)");
  std::size_t open_requests_per_user = 1000;
  app.add_option("--max-open-requests-per-user", open_requests_per_user,
                 "With mutual TLS: replication requests a user may have queued or running at once; 0 = no quota")
      ->capture_default_str();
  std::size_t long_polls_per_identity = 64;
  app.add_option("--max-long-polls-per-identity", long_polls_per_identity,
                 "Event-log long polls (and Watch streams) one identity, or one address without "
                 "mutual TLS, may hold at once; they hold no thread")
      ->check(CLI::Range(std::size_t{1}, std::size_t{1000000}))
      ->capture_default_str();
  std::string token_key;
  app.add_option("--token-key", token_key,
                 "With mutual TLS: the key user tokens are signed with (gfca init writes token.key; "
                 "gfauth token create mints them): users may then present a token instead of a certificate");
  int max_message_mib = 64;
  app.add_option("--max-message-mib", max_message_mib, "Largest request or response message, MiB")
      ->check(CLI::Range(1, 1024))
      ->capture_default_str();
  double handshake_timeout_s = 10;
  app.add_option("--handshake-timeout", handshake_timeout_s,
                 "Seconds a new connection may take to finish its TLS and HTTP/2 handshake before it is closed")
      ->check(CLI::Range(0.1, 3600.0))
      ->capture_default_str();
  int fd_reserve = 64;
  app.add_option("--fd-reserve", fd_reserve,
                 "File descriptors kept free for the catalog's own work: a gRPC connection accepted "
                 "with fewer left is closed at once (its client retries), so that the listener never "
                 "runs out of them (gRPC 1.51 stops accepting for good when it does)")
      ->check(CLI::Range(0, 1000000))
      ->capture_default_str();
  double listener_watchdog_s = 10;
  app.add_option("--listener-watchdog", listener_watchdog_s,
                 "Seconds connections may wait in the gRPC listener's accept queue with nothing "
                 "accepting them before gfcatalogd exits with status 75 for its supervisor to "
                 "restart it (systemd: Restart=on-failure); 0 = no watchdog")
      ->check(CLI::Range(0.0, 3600.0))
      ->capture_default_str();
  int max_streams = catalog::ServerOptions{}.max_concurrent_streams;
  app.add_option("--max-streams-per-connection", max_streams,
                 "Calls one client connection may have open at once (HTTP/2 streams, long polls and "
                 "Watch streams included); further ones wait in the client")
      ->check(CLI::Range(1, 1000000))
      ->capture_default_str();
  std::string grpc_memory = "2G";
  app.add_option("--grpc-memory", grpc_memory,
                 "Memory gRPC may give its connections (e.g. 2G; 0 = no bound): near it, new "
                 "connections are dropped and idle ones give back their buffers")
      ->capture_default_str();
  const replica::web::HttpServerOptions http_defaults;
  tools::HttpLimitFlags http_limits{http_defaults.max_connections, http_defaults.max_connections_per_client,
                                    http_defaults.descriptor_reserve};
  tools::AddHttpLimitFlags(app, http_limits);
  bool test_no_accept_guard = false;
  app.add_flag("--test-no-accept-guard", test_no_accept_guard, "")->group("");
  int tls_reload_s = 60;
  app.add_option("--tls-reload-interval", tls_reload_s,
                 "Seconds between looks at the --tls-cert/--tls-key/--tls-client-ca files: rotated "
                 "certificates are used for new connections without a restart; 0 = read once")
      ->check(CLI::Range(0, 86400))
      ->capture_default_str();
  double max_calls_per_identity = 5000;
  app.add_option("--max-calls-per-identity", max_calls_per_identity,
                 "With mutual TLS: calls a second each identity may make, in bursts of twice that "
                 "(over it: RESOURCE_EXHAUSTED, and clients wait and retry); 0 = no limit")
      ->check(CLI::Range(0.0, 1e9))
      ->capture_default_str();
  app.add_option("--workers", workers, "Threads running catalog operations")
      ->check(CLI::Range(1, 1024))
      ->capture_default_str();
  app.add_flag("--unsafe-no-sync", no_sync,
               "Acknowledge writes before the WAL is synced (benchmarks only: loses data on crash)");
  bool no_planner = false;
  app.add_flag("--no-planner", no_planner,
               "Do not run the replica planner (requests stay queued)");
  int node_timeout_s = 30;
  app.add_option("--node-timeout", node_timeout_s,
                 "Planner: seconds without a heartbeat after which a node is down (no source or "
                 "destination; its open tasks are planned elsewhere)")
      ->check(CLI::Range(1, 86400))
      ->capture_default_str();
  int open_per_node = replica::plan::PlannerOptions{}.max_open_tasks_per_node;
  app.add_option("--max-open-tasks-per-node", open_per_node,
                 "Planner: queued or leased tasks per destination node at most; a node whose "
                 "gfsited reports its --workers gets at least 5 per worker (claims ahead and "
                 "commits in flight hold tasks too)")
      ->check(CLI::Range(1, 100000))
      ->capture_default_str();
  double keep_finished_days = 7;
  app.add_option("--keep-finished-requests", keep_finished_days,
                 "Planner: days a finished request (and its tasks) is kept before it is forgotten; "
                 "0 keeps them forever")
      ->check(CLI::Range(0.0, 36500.0))
      ->capture_default_str();
  bool no_repair = false;
  app.add_flag("--no-repair", no_repair,
               "Do not repair lost and corrupt replicas (no repair requests are made)");
  double repair_scan_s = 600;
  app.add_option("--repair-scan-interval", repair_scan_s,
                 "Repairer: seconds between full scans of every node's replica records for bad "
                 "ones (lost and corrupt ones are also acted on as they are reported)")
      ->check(CLI::Range(0.1, 86400.0))
      ->capture_default_str();
  std::string policies, policy_state;
  app.add_option("--policies", policies,
                 "Replication policy file (YAML, replica/plan/policy.h), stored in the catalog at start "
                 "and on SIGHUP (a file with mistakes is refused and the rules in force stay); "
                 "gfpolicy changes the stored rules too");
  bool no_policies = false;
  app.add_flag("--no-policies", no_policies, "Do not enforce replication policies");
  app.add_option("--policy-state", policy_state,
                 "Where the last run of each scheduled rule is kept (default: DB-policy-state.json)");
  double removed_rule_grace_s = 3600;
  app.add_option("--removed-rule-grace", removed_rule_grace_s,
                 "Seconds the copies of a removed rule stay before they go (unless another rule or "
                 "a gfrep request needs them; never the last one)")
      ->check(CLI::Range(0.0, 365 * 86400.0))
      ->capture_default_str();
  double release_interval_s = 60;
  app.add_option("--release-interval", release_interval_s,
                 "Seconds between looks for copies whose rule ended (a lifetime passed, the rule "
                 "was removed)")
      ->check(CLI::Range(0.1, 86400.0))
      ->capture_default_str();
  std::string http;
  app.add_option("--http", http,
                 "Serve the dashboard (/), /metrics, /healthz and /readyz on HOST:PORT (off by "
                 "default; loopback only unless --http-public)");
  bool http_public = false;
  app.add_flag("--http-public", http_public,
               "Allow --http on a non-loopback address (no authentication on these pages yet)");
  bool no_telemetry = false;
  app.add_flag("--no-telemetry", no_telemetry,
               "Refuse the agents' live telemetry (then no dashboard graphs and no in-flight bytes "
               "in gfrep; agents stop sending)");
  CLI11_PARSE(app, argc, argv);
  if (!http.empty() && no_telemetry) {
    return tools::Fail(kProgram, "--http needs the telemetry: drop --no-telemetry", 2);
  }
  if (!http.empty()) {
    if (absl::Status s = replica::web::CheckHttpListen(http, http_public); !s.ok()) {
      return tools::Fail(kProgram, std::string(s.message()), 2);
    }
  }
  absl::StatusOr<std::uint64_t> grpc_memory_bytes = tools::ParseSize(grpc_memory);
  if (!grpc_memory_bytes.ok() || *grpc_memory_bytes > static_cast<std::uint64_t>(INT64_MAX)) {
    return tools::Fail(kProgram, fmt::format("--grpc-memory {}: not a size (e.g. 2G, or 0)", grpc_memory), 2);
  }
  absl::StatusOr<std::shared_ptr<spdlog::logger>> made_log = tools::MakeLoggerOrError(kProgram, common);
  if (!made_log.ok()) return tools::Fail(kProgram, std::string(made_log.status().message()), 2);
  std::shared_ptr<spdlog::logger> log = *made_log;
  // The policy file is read, checked and stored in the catalog (the policy engine enforces
  // the catalog's document; gfpolicy changes it too). A mistake is a clear error at start.
  auto read_policies = [&]() -> absl::StatusOr<std::string> {
    std::ifstream in(policies, std::ios::binary);
    if (!in) return absl::NotFoundError(fmt::format("{}: cannot read", policies));
    std::stringstream text;
    text << in.rdbuf();
    absl::StatusOr<std::vector<replica::plan::PolicyRule>> rules =
        replica::plan::ParsePolicies(text.str(), policies);
    if (!rules.ok()) return rules.status();
    return text.str();
  };
  std::string policy_text;
  if (!policies.empty()) {
    absl::StatusOr<std::string> text = read_policies();
    if (!text.ok()) return tools::Fail(kProgram, text.status().ToString());
    policy_text = std::move(*text);
  }

  // Signals are taken synchronously by sigwait below; block them before any thread starts.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGHUP);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  catalog::CatalogOptions options;
  options.path = db;
  options.sync = !no_sync;
  options.shared = shared;
  const bool on_postgres = catalog::internal::IsPostgresUrl(db);
  if (on_postgres && !no_policies && policy_state.empty()) {
    return tools::Fail(kProgram, "--db on PostgreSQL needs --policy-state FILE (or --no-policies)",
                       2);
  }
  absl::StatusOr<std::unique_ptr<catalog::Catalog>> store = catalog::OpenCatalog(options);
  if (!store.ok()) return tools::Fail(kProgram, store.status().ToString());
  const std::string where = catalog::internal::StoreOf(**store)->Describe();

  // Live telemetry from the agents, for the dashboard and /metrics (replica/web/telemetry.h).
  // Kept unless --no-telemetry (it also gives gfrep the bytes its running copies received).
  std::unique_ptr<replica::web::TelemetryHub> hub;
  catalog::ServerOptions server_options;
  if (!no_telemetry) {
    hub = std::make_unique<replica::web::TelemetryHub>();
    server_options.telemetry_sink = [hub = hub.get()](const catalog::TelemetryBatch& b) { return hub->Add(b); };
    server_options.request_in_flight = [hub = hub.get()](std::uint64_t id) { return hub->InFlightBytes(id); };
  }
  server_options.listen = listen;
  server_options.worker_threads = workers;
  server_options.max_calls_per_identity = max_calls_per_identity;
  server_options.tls_cert_file = tls_cert;
  server_options.tls_key_file = tls_key;
  server_options.tls_client_ca_file = tls_client_ca;
  server_options.tls_reload_interval = std::chrono::seconds(tls_reload_s);
  server_options.max_message_bytes = max_message_mib << 20;
  server_options.max_open_requests_per_user = open_requests_per_user;
  server_options.max_long_polls_per_identity = long_polls_per_identity;
  // Other front ends revoke tokens too: their revocations are read within a second.
  if (shared) server_options.revocation_refresh = std::chrono::seconds(1);
  server_options.handshake_timeout = std::chrono::milliseconds(static_cast<std::int64_t>(handshake_timeout_s * 1000));
  // Each client connection is a file descriptor: the usual soft limit of 1024 would let a
  // thousand idle connections lock everyone else out.
  if (absl::Status s = tools::RaiseOpenFileLimit(1u << 20, *log); !s.ok() && absl::IsInternal(s)) {
    log->warn("{}", s.ToString());
  }
  // Before gRPC accepts its first connection: connections that would leave fewer than
  // --fd-reserve descriptors are closed at accept (tools/internal/accept_guard.h).
  if (!test_no_accept_guard) {
    tools::InstallAcceptGuard(fd_reserve);
    if (!tools::AcceptGuardInterposed()) {
      log->error("the accept guard is not in effect (accept4 not exported by this binary): running "
                 "out of descriptors may stop the gRPC listener until a restart");
    }
  }
  server_options.max_concurrent_streams = max_streams;
  server_options.memory_quota_bytes = static_cast<std::int64_t>(*grpc_memory_bytes);
  if (!tls_cert.empty() || !tls_key.empty()) {
    absl::StatusOr<std::string> cert = ReadPem(tls_cert);
    absl::StatusOr<std::string> key = ReadPem(tls_key);
    if (!cert.ok()) return tools::Fail(kProgram, std::string(cert.status().message()));
    if (!key.ok()) return tools::Fail(kProgram, std::string(key.status().message()));
    server_options.tls_cert_pem = *cert;
    server_options.tls_key_pem = *key;
  }
  if (!tls_client_ca.empty()) {
    absl::StatusOr<std::string> ca = ReadPem(tls_client_ca);
    if (!ca.ok()) return tools::Fail(kProgram, std::string(ca.status().message()));
    server_options.tls_client_ca_pem = *ca;
    server_options.on_denied = [log](const absl::Status& s) { log->warn("refused: {}", std::string(s.message())); };
    if (!token_key.empty()) {
      absl::StatusOr<std::string> key = catalog::ReadTokenKey(token_key);
      if (!key.ok()) return tools::Fail(kProgram, std::string(key.status().message()), 2);
      server_options.token_key = *key;
    }
  } else {
    if (!token_key.empty()) return tools::Fail(kProgram, "--token-key needs mutual TLS (--tls-client-ca)", 2);
    const std::string host = listen.substr(0, listen.rfind(':'));
    if (!replica::web::IsLoopbackHost(host) && !insecure) {
      return tools::Fail(kProgram,
                         fmt::format("--listen {}: not a loopback address, and no mutual TLS: anyone who "
                                     "reaches the port could delete the namespace. Give --tls-cert, "
                                     "--tls-key and --tls-client-ca (gfca init; gfca issue catalog NAME "
                                     "--host ADDRESS), or --insecure for a trusted test network",
                                     listen),
                         2);
    }
    log->warn("UNAUTHENTICATED catalog: every caller may do everything (no --tls-client-ca){}",
              insecure ? "; --insecure on a non-loopback address" : "");
  }
  absl::StatusOr<std::unique_ptr<catalog::CatalogServer>> server =
      catalog::CatalogServer::Start(**store, server_options);
  if (!server.ok()) return tools::Fail(kProgram, server.status().ToString());
  std::printf("listening on %s\n", (*server)->address().c_str());
  std::fflush(stdout);
  log->info("serving db={} listen={} tls={} sync={}", where, (*server)->address(),
            !tls_cert.empty(), !no_sync);

  // The net under the accept guard: a listener that stopped accepting anyway ends the
  // process, for its supervisor to start it again (tools/internal/listener_watchdog.h). Its
  // tick also reports what the guard shed, at most every 10 s.
  tools::ListenerWatchdogOptions wopt;
  wopt.port = (*server)->port();
  wopt.stall = std::chrono::milliseconds(static_cast<std::int64_t>(listener_watchdog_s * 1000));
  wopt.accept_calls = [](int fd) { return tools::AcceptCallsOn(fd); };
  wopt.on_dead = [log](const std::string& what) {
    log->critical("the gRPC listener stopped accepting: {}; exiting with status {} to be restarted",
                  what, tools::kListenerDeadExitStatus);
    log->flush();
    // Nothing to shut down gracefully: gRPC's shutdown would wait for the dead listener, and
    // every acknowledged write is already durable (README "What is guaranteed").
    std::_Exit(tools::kListenerDeadExitStatus);
  };
  wopt.on_tick = [log, fd_reserve, reported = tools::AcceptGuardCounters{},
                  at = std::chrono::steady_clock::time_point{}]() mutable {
    const auto now = std::chrono::steady_clock::now();
    if (now - at < std::chrono::seconds(10)) return;
    const tools::AcceptGuardCounters c = tools::GetAcceptGuardCounters();
    if (c.shed != reported.shed || c.dropped != reported.dropped) {
      log->warn("gRPC connections closed at accept to keep {} descriptors free: {} (+{} since the "
                "last report); {} that failed while queued skipped",
                fd_reserve, c.shed, c.shed - reported.shed, c.dropped);
      reported = c;
      at = now;
    }
  };
  absl::StatusOr<std::unique_ptr<tools::ListenerWatchdog>> watchdog = tools::ListenerWatchdog::Start(wopt);
  if (!watchdog.ok()) log->error("no listener watchdog: {}", watchdog.status().ToString());

  if (!policies.empty()) {
    absl::StatusOr<catalog::PolicyDocument> put =
        (*store)->PutPolicies(policy_text, policies, std::nullopt);
    if (!put.ok()) return tools::Fail(kProgram, put.status().ToString());
  }

  // The federation's background work: the replica planner turns replication requests into
  // transfer tasks (replica/plan/planner.h); the repairer makes the copies of lost and corrupt
  // replicas again, through requests the planner runs (replica/plan/repairer.h); policies become
  // requests (replica/plan/policy_engine.h). One process runs them: this one alone, or, with
  // --shared, the front end that holds the database's leadership (taken over within about
  // a second when the leader dies; catalog/internal/kv_store.h HoldLeadership).
  struct Background {
    std::unique_ptr<replica::plan::Planner> planner;
    std::unique_ptr<replica::plan::Repairer> repairer;
    std::unique_ptr<replica::plan::PolicyEngine> policy_engine;
    void Stop() {
      if (policy_engine) policy_engine->Stop();
      if (repairer) repairer->Stop();
      if (planner) planner->Stop();
      policy_engine.reset();
      repairer.reset();
      planner.reset();
    }
  };
  Background background;
  auto start_background = [&]() -> absl::Status {
    if (!no_planner) {
      replica::plan::PlannerOptions planner_options;
      planner_options.catalog = store->get();
      planner_options.logger = log;
      planner_options.heartbeat_timeout = std::chrono::seconds(node_timeout_s);
      planner_options.max_open_tasks_per_node = open_per_node;
      planner_options.finished_request_retention =
          std::chrono::seconds(static_cast<std::int64_t>(keep_finished_days * 86400));
      absl::StatusOr<std::unique_ptr<replica::plan::Planner>> p =
          replica::plan::Planner::Create(planner_options);
      if (!p.ok()) return p.status();
      background.planner = std::move(*p);
      background.planner->Start();
    }
    if (!no_repair) {
      replica::plan::RepairerOptions repair_options;
      repair_options.catalog = store->get();
      repair_options.logger = log;
      repair_options.scan_interval =
          std::chrono::milliseconds(static_cast<std::int64_t>(repair_scan_s * 1000));
      repair_options.node_timeout = std::chrono::seconds(node_timeout_s);
      background.repairer = std::make_unique<replica::plan::Repairer>(repair_options);
      background.repairer->Start();
    }
    if (!no_policies) {
      replica::plan::PolicyEngineOptions po;
      po.catalog = store->get();
      po.logger = log;
      po.state_file = policy_state.empty() ? db + "-policy-state.json" : policy_state;
      po.removed_rule_grace =
          std::chrono::milliseconds(static_cast<std::int64_t>(removed_rule_grace_s * 1000));
      po.release_interval =
          std::chrono::milliseconds(static_cast<std::int64_t>(release_interval_s * 1000));
      background.policy_engine = std::make_unique<replica::plan::PolicyEngine>(po);
      background.policy_engine->Start();
    }
    return absl::OkStatus();
  };
  catalog::internal::KvStore* const kv = catalog::internal::StoreOf(**store);
  bool leading = false;
  // Takes or checks the leadership and starts or stops the background work to match.
  auto lead = [&]() -> absl::Status {
    const bool now = kv == nullptr || kv->HoldLeadership();
    if (now == leading) return absl::OkStatus();
    leading = now;
    if (!now) {
      log->warn("leadership lost: the planner, repairer and policy engine stop here");
      background.Stop();
      return absl::OkStatus();
    }
    if (shared) log->info("leader: the planner, repairer and policy engine run here");
    return start_background();
  };
  if (absl::Status s = lead(); !s.ok()) return tools::Fail(kProgram, s.ToString());
  if (shared && !leading) log->info("follower: another front end runs the planner");

  // The dashboard, /metrics and health checks (replica/web/dashboard.h, replica/web/http_server.h).
  std::unique_ptr<replica::web::Dashboard> dashboard;
  std::unique_ptr<replica::web::HttpServer> web;
  if (!http.empty()) {
    replica::web::DashboardOptions dopt;
    dopt.catalog = store->get();
    dopt.hub = hub.get();
    dopt.node_timeout = std::chrono::seconds(node_timeout_s);
    dopt.logger = log;
    dashboard = std::make_unique<replica::web::Dashboard>(dopt);
    replica::web::HttpRoutes routes;
    dashboard->AddRoutes(routes);
    replica::web::AddHealthRoutes(routes, [cat = store->get()]() -> absl::Status {
      absl::StatusOr<std::uint64_t> seq = cat->LastEventSeq();  // the database answers
      return seq.ok() ? absl::OkStatus() : seq.status();
    });
    routes.pages["/metrics"] = [d = dashboard.get(), srv = server->get(), cat = store->get()](const replica::web::HttpRequest&) {
      replica::MetricsText m;
      d->AppendMetrics(m);
      // Catalog RPC latency (server side, per method) and the storage engine's figures.
      const std::map<std::string, catalog::RpcLatency> rpcs = srv->RpcLatencies();
      m.Family("gfrep_catalog_rpc_duration_seconds", "histogram",
               "Catalog RPCs, from arrival to status sent, by method");
      for (const auto& [method, h] : rpcs) {
        const std::string name = method.substr(method.rfind('/') + 1);
        for (std::size_t i = 0; i < h.buckets.size(); ++i) {
          m.Sample("gfrep_catalog_rpc_duration_seconds_bucket",
                   {{"method", name}, {"le", fmt::format("{}", catalog::kRpcLatencyBounds[i])}},
                   static_cast<double>(h.buckets[i]));
        }
        m.Sample("gfrep_catalog_rpc_duration_seconds_bucket", {{"method", name}, {"le", "+Inf"}},
                 static_cast<double>(h.count));
        m.Sample("gfrep_catalog_rpc_duration_seconds_sum", {{"method", name}}, h.sum_seconds);
        m.Sample("gfrep_catalog_rpc_duration_seconds_count", {{"method", name}}, static_cast<double>(h.count));
      }
      m.Counter("gfrep_catalog_denied_calls_total", "Catalog calls refused by authorization (PERMISSION_DENIED)",
                static_cast<double>(srv->denied_calls()));
      m.Counter("gfrep_catalog_connections_shed_total",
                "gRPC connections closed at accept to keep --fd-reserve file descriptors free",
                static_cast<double>(tools::GetAcceptGuardCounters().shed));
      m.Counter("gfrep_catalog_rate_limited_calls_total",
                "Catalog calls refused for being over their identity's rate (RESOURCE_EXHAUSTED)",
                static_cast<double>(srv->rate_limited_calls()));
      m.Family("gfrep_catalog_rpc_errors_total", "counter", "Catalog RPCs that ended with a status other than OK");
      for (const auto& [method, h] : rpcs) {
        m.Sample("gfrep_catalog_rpc_errors_total", {{"method", method.substr(method.rfind('/') + 1)}},
                 static_cast<double>(h.errors));
      }
      if (absl::StatusOr<std::map<std::string, std::uint64_t>> st = cat->StorageStats(); st.ok()) {
        for (const auto& [name, v] : *st) {
          const std::string metric = "gfrep_catalog_rocksdb_" + name;
          m.Gauge(metric, fmt::format("RocksDB {} (all column families)", name), static_cast<double>(v));
        }
      }
      return replica::web::HttpResponse{200, replica::kMetricsContentType, m.text(), {}};
    };
    replica::web::HttpServerOptions hopt;
    hopt.listen = http;
    hopt.max_connections = http_limits.max_connections;
    hopt.max_connections_per_client = http_limits.max_connections_per_client;
    hopt.descriptor_reserve = http_limits.fd_reserve;
    hopt.logger = log;
    absl::StatusOr<std::unique_ptr<replica::web::HttpServer>> started = replica::web::HttpServer::Start(hopt, std::move(routes));
    if (!started.ok()) return tools::Fail(kProgram, started.status().ToString());
    web = std::move(*started);
    dashboard->Start();
    std::printf("dashboard on http://%s/\n", web->address().c_str());
    std::fflush(stdout);
    log->info("dashboard on http://{}/ (/metrics, /healthz, /readyz)", web->address());
  }

  int sig = 0;
  for (;;) {
    if (shared) {
      // Signals, and a look at the leadership every 500 ms.
      const timespec tick{0, 500'000'000};
      sig = sigtimedwait(&signals, nullptr, &tick);
      if (sig < 0) {
        if (absl::Status s = lead(); !s.ok()) {
          log->error("starting the planner: {}", s.ToString());
          background.Stop();
          leading = false;
        }
        continue;
      }
    } else {
      sigwait(&signals, &sig);
    }
    if (sig != SIGHUP) break;
    if (policies.empty()) {
      log->info("SIGHUP: no --policies file to reload");
      continue;
    }
    absl::StatusOr<std::string> text = read_policies();
    if (!text.ok()) {
      log->error("SIGHUP: {} refused, the rules in force stay: {}", policies,
                 text.status().ToString());
      continue;
    }
    absl::StatusOr<catalog::PolicyDocument> put = (*store)->PutPolicies(*text, policies, std::nullopt);
    if (!put.ok()) {
      log->error("SIGHUP: storing {}: {}", policies, put.status().ToString());
      continue;
    }
    log->info("SIGHUP: policies reloaded from {} (version {})", policies, put->version);
  }
  log->info("signal {}: shutting down", sig);
  if (watchdog.ok()) watchdog->reset();
  if (dashboard) dashboard->Stop();  // first: it holds the pages' connections
  if (web) web->Stop();
  background.Stop();
  (*server)->Shutdown();
  server->reset();
  store->reset();
  return 0;
}
