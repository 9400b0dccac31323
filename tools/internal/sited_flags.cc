#include "tools/internal/sited_flags.h"

#include <algorithm>
#include <filesystem>
#include <tuple>

#include "catalog/identity.h"
#include "tools/internal/catalog_flags.h"
#include "transfer/auth.h"

namespace gfrep::tools {

void AddSitedFlags(CLI::App& app, SitedFlags& f) {
  const transfer::AgentOptions agent_defaults;
  f.max_connections = agent_defaults.max_connections;
  f.max_connections_per_peer = agent_defaults.max_connections_per_peer;
  app.add_option("--listen", f.listen, "address to listen on (HOST:PORT; port 0 picks one)");
  app.add_option("--spool", f.spool, "spool directory served and written")->required();
  app.add_option("--key-file", f.key_file,
                 "shared key file (default ~/.gfrep/shared_key, created on first use)");
  app.add_option("--tls-cert", f.tls_cert, "PEM certificate chain (enables TLS sessions)");
  app.add_option("--tls-key", f.tls_key, "PEM private key of --tls-cert");
  app.add_option("--tls-ca", f.tls_ca,
                 "PEM CA: verifies agents we pull from, and client certificates");
  app.add_flag("--require-tls", f.require_tls,
               "refuse sessions without TLS on every connection (control and data)");
  app.add_flag("--require-mutual-tls", f.require_mutual_tls,
               "refuse control connections without a verified client certificate (shared-key "
               "sessions, in clear or inside TLS); data may stay clear");
  app.add_flag(
      "--insecure", f.insecure,
      "Listen on a non-loopback address without a certificate set (--tls-cert, --tls-key, "
      "--tls-ca): agents then authenticate each other by the shared key only and nothing is "
      "encrypted. For trusted test networks");
  // Not users: an agent cannot check the namespace's modes, so a user's certificate would
  // read and write replicas the catalog may not let that user see.
  app.add_option("--tls-peers", f.tls_peers,
                 "roles whose client certificates (gfrep://ROLE/NAME) may open sessions here")
      ->capture_default_str();
  app.add_option("--buffer", f.buffer,
                 "socket buffer for accepted data connections (e.g. 4M; 0 = kernel autotuning)");
  app.add_option("--journal-interval", f.journal_interval,
                 "make restart markers durable every SIZE received bytes");
  app.add_option("--max-connections", f.max_connections,
                 "connections served at once; more are closed at once")
      ->check(CLI::Range(1, 1000000));
  app.add_option("--max-connections-per-peer", f.max_connections_per_peer,
                 "connections served at once from one address (a transfer uses streams + 1)")
      ->check(CLI::Range(1, 1000000));
  app.add_option("--probe-helper", f.probe_helper,
                 "gfprobe executable run for route probes (default: gfprobe beside gfsited; "
                 "'none' refuses probes)");
  app.add_option("--test-corrupt-offset", f.corrupt_offset, "")->group("");
  app.add_option("--test-corrupt-times", f.corrupt_times, "")->group("");
  // Catalog role (replica/agent/site_agent.h): join a federation and execute its transfer tasks.
  const replica::agent::SiteAgentOptions defaults;
  f.workers = defaults.workers;
  f.initial_in_flight = defaults.initial_in_flight;
  f.io_threads = defaults.io_threads;
  f.adapt_in_flight = defaults.adapt_in_flight;
  f.check_interval_s = std::chrono::duration<double>(defaults.check_interval).count();
  f.straggler_after_s = std::chrono::duration<double>(defaults.straggler_after).count();
  f.slow_source_after_s = std::chrono::duration<double>(defaults.slow_source_after).count();
  f.scrub_period_h = std::chrono::duration<double, std::ratio<3600>>(defaults.scrub_period).count();
  app.add_option("--site", f.site, "site this node belongs to (with --node and --catalog)");
  app.add_option("--node", f.node, "name of this node in the catalog");
  app.add_option("--catalog", f.catalog, "gfcatalogd HOST:PORT to join");
  app.add_option(
      "--catalog-ca", f.catalog_ca,
      "PEM CA of a TLS catalog; the agent presents --tls-cert/--tls-key to it as its identity "
      "(gfca issue node NAME)");
  app.add_option("--advertise", f.advertise,
                 "HOST:PORT other agents reach us at (default: the bound address)");
  app.add_option(
         "--workers", f.workers,
         "replica copies at once, at most (each a coroutine on the --io-threads, not a thread)")
      ->check(CLI::Range(1, replica::agent::kMaxWorkers))
      ->capture_default_str();
  app.add_option("--adapt-in-flight", f.adapt_in_flight,
                 "tune the copies at once from measured goodput, up to --workers (true|false; "
                 "false runs --workers at once)")
      ->capture_default_str();
  app.add_option("--initial-in-flight", f.initial_in_flight,
                 "copies at once a burst of work starts from when adapting, at least (a burst "
                 "starts with 1.3 bandwidth-delay products of the route in flight, 32 MiB where "
                 "unknown)")
      ->check(CLI::Range(1, replica::agent::kMaxWorkers))
      ->capture_default_str();
  app.add_option("--io-threads", f.io_threads,
                 "threads that run the replica copies (all copies share them)")
      ->check(CLI::Range(1, 64))
      ->capture_default_str();
  app.add_option("--session-reuse", f.session_reuse,
                 "keep transfer sessions to source agents open between files (true|false)");
  app.add_option("--lease", f.lease_s, "task lease, seconds (renewed while copying)")
      ->check(CLI::Range(1, 3600));
  app.add_option("--straggler-after", f.straggler_after_s,
                 "seconds a copy may run under a quarter of the other copies' goodput before it is "
                 "given back and planned from another source; 0: never")
      ->check(CLI::Range(0.0, 86400.0))
      ->capture_default_str();
  app.add_option("--slow-source-after", f.slow_source_after_s,
                 "seconds a source node's copies may get under a quarter of the other sources' "
                 "goodput per copy before they are given back, with every copy from it for three "
                 "times as long, and planned from other sources; 0: never")
      ->check(CLI::Range(0.0, 86400.0))
      ->capture_default_str();
  app.add_option("--check-interval", f.check_interval_s,
                 "seconds between stat checks of every replica (missing: lost; other size or "
                 "mtime: corrupt); 0: none")
      ->check(CLI::Range(0.0, 86400.0 * 30))
      ->capture_default_str();
  app.add_option("--scrub-rate", f.scrub_rate,
                 "bytes per second the checksum scrub reads at idle I/O priority (e.g. 32M); 0: "
                 "no scrub")
      ->capture_default_str();
  app.add_option("--scrub-period", f.scrub_period_h,
                 "hours after which a replica's checksum is verified again by the scrub")
      ->check(CLI::Range(0.0, 24.0 * 3650))
      ->capture_default_str();
  app.add_option("--http", f.http,
                 "Serve /metrics, /healthz and /readyz on HOST:PORT (off by default; loopback only "
                 "unless --http-public)");
  app.add_flag("--http-public", f.http_public,
               "Allow --http on a non-loopback address (no authentication yet)");
  const replica::web::HttpServerOptions http_defaults;
  f.http_limits = {http_defaults.max_connections, http_defaults.max_connections_per_client,
                   http_defaults.descriptor_reserve};
  AddHttpLimitFlags(app, f.http_limits);
  app.add_option("--telemetry-interval", f.telemetry_s,
                 "Seconds between the live telemetry batches sent to the catalog's dashboard "
                 "(samples every 0.1 s; 0: none)")
      ->check(CLI::Range(0.0, 60.0))
      ->capture_default_str();
  app.add_option("--provide-cc", f.provide_cc,
                 "Congestion controls to make available at start when the kernel lacks them (e.g. "
                 "highspeed: the kernel's module, else gfrep's BPF implementation; root only). The "
                 "catalog's routes of this site add theirs once it is reached")
      ->delimiter(',');
}

absl::StatusOr<std::vector<std::string>> ReadCatalogPems(const SitedFlags& f) {
  std::vector<std::string> pems(3);
  for (auto [path, what, out] : {std::tuple{&f.catalog_ca, "--catalog-ca", &pems[0]},
                                 std::tuple{&f.tls_cert, "--tls-cert", &pems[1]},
                                 std::tuple{&f.tls_key, "--tls-key", &pems[2]}}) {
    if (path->empty()) continue;
    absl::StatusOr<std::string> pem = ReadPemFile(*path, what);
    if (!pem.ok()) return pem.status();
    *out = *pem;
  }
  return pems;
}

absl::StatusOr<replica::daemon::SitedOptions> SitedOptionsOf(const SitedFlags& f,
                                                             std::shared_ptr<spdlog::logger> log) {
  if (!f.http.empty()) {
    if (absl::Status s = replica::web::CheckHttpListen(f.http, f.http_public); !s.ok()) return s;
  }
  absl::StatusOr<std::uint64_t> buf = ParseSize(f.buffer);
  if (!buf.ok()) return buf.status();
  absl::StatusOr<std::uint64_t> jint = ParseSize(f.journal_interval);
  if (!jint.ok()) return jint.status();
  absl::StatusOr<std::uint64_t> scrub_bytes = ParseSize(f.scrub_rate);
  if (!scrub_bytes.ok())
    return absl::InvalidArgumentError("--scrub-rate: " +
                                      std::string(scrub_bytes.status().message()));
  std::filesystem::path key_path =
      f.key_file.empty() ? transfer::DefaultKeyPath() : std::filesystem::path(f.key_file);
  absl::StatusOr<std::string> key = transfer::LoadOrCreateSharedKey(key_path);
  if (!key.ok()) return key.status();
  absl::StatusOr<std::vector<catalog::Role>> peer_roles = catalog::ParseRoles(f.tls_peers);
  if (!peer_roles.ok())
    return absl::InvalidArgumentError("--tls-peers: " + std::string(peer_roles.status().message()));
  log->info("shared key from {}", key_path.string());

  replica::daemon::SitedOptions o;
  transfer::AgentOptions& a = o.agent;
  a.listen = f.listen;
  a.spool = f.spool;
  a.shared_key = *key;
  a.tls = {f.tls_cert, f.tls_key, f.tls_ca};
  a.require_tls = f.require_tls;
  a.require_mutual_tls = f.require_mutual_tls;
  a.authorize_certificate = [roles = *peer_roles](const std::vector<std::string>& uris) {
    return catalog::AuthorizeTransferPeer(uris, roles);
  };
  a.max_connections = f.max_connections;
  a.max_connections_per_peer = f.max_connections_per_peer;
  a.defaults.route.socket_buffer = *buf;
  a.defaults.journal_interval = std::max<std::uint64_t>(*jint, 1);
  a.defaults.test_corrupt_offset = f.corrupt_offset;
  a.defaults.test_corrupt_times = f.corrupt_times;
  if (f.probe_helper.empty()) {
    std::error_code ec;
    std::filesystem::path self = std::filesystem::read_symlink("/proc/self/exe", ec);
    if (!ec && std::filesystem::exists(self.parent_path() / "gfprobe", ec)) {
      a.probe_helper = self.parent_path() / "gfprobe";
    }
  } else if (f.probe_helper != "none") {
    a.probe_helper = f.probe_helper;
  }
  o.insecure = f.insecure;
  o.provide_cc = f.provide_cc;

  o.site = f.site;
  o.node = f.node;
  o.catalog.address = f.catalog;
  o.catalog.timeout = std::chrono::seconds(10);
  if (!f.catalog_ca.empty()) {
    absl::StatusOr<std::vector<std::string>> pems = ReadCatalogPems(f);
    if (!pems.ok()) return pems.status();
    o.catalog.tls_root_pem = (*pems)[0];
    o.catalog.tls_cert_pem = (*pems)[1];
    o.catalog.tls_key_pem = (*pems)[2];
  }
  o.advertise = f.advertise;
  replica::agent::SiteAgentOptions& so = o.site_agent;
  so.workers = f.workers;
  so.adapt_in_flight = f.adapt_in_flight;
  so.initial_in_flight = f.initial_in_flight;
  so.io_threads = f.io_threads;
  so.reuse_sessions = f.session_reuse;
  so.lease = std::chrono::seconds(f.lease_s);
  so.straggler_after =
      std::chrono::milliseconds(static_cast<std::int64_t>(f.straggler_after_s * 1000));
  so.slow_source_after =
      std::chrono::milliseconds(static_cast<std::int64_t>(f.slow_source_after_s * 1000));
  so.check_interval =
      std::chrono::milliseconds(static_cast<std::int64_t>(f.check_interval_s * 1000));
  so.scrub_rate_bytes = *scrub_bytes;
  so.scrub_period = std::chrono::seconds(static_cast<std::int64_t>(f.scrub_period_h * 3600));
  so.telemetry_interval =
      std::chrono::milliseconds(static_cast<std::int64_t>(f.telemetry_s * 1000));

  o.http.listen = f.http;
  o.http.max_connections = f.http_limits.max_connections;
  o.http.max_connections_per_client = f.http_limits.max_connections_per_client;
  o.http.descriptor_reserve = f.http_limits.fd_reserve;
  o.logger = std::move(log);
  return o;
}

}  // namespace gfrep::tools
