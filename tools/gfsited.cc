// gfsited: a site agent. Serves the files of its spool directory to authenticated peers,
// receives files into it, and performs third-party pulls from other agents.
//   gfsited --listen 127.0.0.1:0 --spool /data/spool

#include <sys/resource.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <csignal>
#include <cstdio>
#include <thread>

#include <fmt/format.h>

#include "catalog/client.h"
#include "catalog/identity.h"
#include "replica/agent/site_agent.h"
#include "replica/core/metrics.h"
#include "replica/web/http_server.h"
#include "tools/internal/catalog_flags.h"
#include "tools/internal/cli.h"
#include "transfer/agent.h"
#include "transfer/auth.h"
#include "transfer/congestion.h"

namespace {
std::string Msg(const absl::Status& s) { return std::string(s.message()); }

// Makes each congestion control in `names` available if it is not (transfer/congestion.h) and
// logs where each comes from; one that cannot be had is a warning (its routes fall back to the
// kernel's default, and every copy reports the algorithm its sockets really used).
void ProvideCongestionControls(const std::vector<std::string>& names, spdlog::logger& log) {
  for (const std::string& name : names) {
    if (name.empty()) continue;
    absl::StatusOr<gfrep::transfer::CongestionControl> cc = gfrep::transfer::EnsureCongestionControl(name);
    if (cc.ok()) {
      log.info("congestion control {}", cc->detail);
    } else {
      log.warn("congestion control {}: unavailable, routes set to it use the kernel's default: {}", name,
               Msg(cc.status()));
    }
  }
}
}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"gfsited: gfrep site agent (serves and receives striped transfers for a spool directory)"};
  gfrep::tools::CommonFlags common;
  gfrep::tools::AddCommonFlags(app, common);
  gfrep::tools::AddLogFileFlags(app, common);
  std::string listen = "127.0.0.1:0";
  std::string spool;
  std::string key_file;
  std::string tls_cert, tls_key, tls_ca;
  bool require_tls = false;
  std::string buffer = "0";
  std::string journal_interval = "256M";
  std::int64_t corrupt_offset = -1;
  int corrupt_times = 1;
  int max_connections = gfrep::transfer::AgentOptions{}.max_connections;
  int max_connections_per_peer = gfrep::transfer::AgentOptions{}.max_connections_per_peer;
  app.add_option("--listen", listen, "address to listen on (HOST:PORT; port 0 picks one)");
  app.add_option("--spool", spool, "spool directory served and written")->required();
  app.add_option("--key-file", key_file, "shared key file (default ~/.gfrep/shared_key, created on first use)");
  app.add_option("--tls-cert", tls_cert, "PEM certificate chain (enables TLS sessions)");
  app.add_option("--tls-key", tls_key, "PEM private key of --tls-cert");
  app.add_option("--tls-ca", tls_ca, "PEM CA: verifies agents we pull from, and client certificates");
  app.add_flag("--require-tls", require_tls, "refuse sessions without TLS on every connection (control and data)");
  bool require_mutual_tls = false;
  app.add_flag("--require-mutual-tls", require_mutual_tls,
               "refuse control connections without a verified client certificate (shared-key "
               "sessions, in clear or inside TLS); data may stay clear");
  bool insecure = false;
  app.add_flag("--insecure", insecure,
               "Listen on a non-loopback address without a certificate set (--tls-cert, --tls-key, "
               "--tls-ca): agents then authenticate each other by the shared key only and nothing is "
               "encrypted. For trusted test networks");
  // Not users: an agent cannot check the namespace's modes, so a user's certificate would
  // read and write replicas the catalog may not let that user see.
  std::string tls_peers = "node,admin";
  app.add_option("--tls-peers", tls_peers,
                 "roles whose client certificates (gfrep://ROLE/NAME) may open sessions here")
      ->capture_default_str();
  app.add_option("--buffer", buffer, "socket buffer for accepted data connections (e.g. 4M; 0 = kernel autotuning)");
  app.add_option("--journal-interval", journal_interval, "make restart markers durable every SIZE received bytes");
  app.add_option("--max-connections", max_connections, "connections served at once; more are closed at once")
      ->check(CLI::Range(1, 1000000));
  app.add_option("--max-connections-per-peer", max_connections_per_peer,
                 "connections served at once from one address (a transfer uses streams + 1)")
      ->check(CLI::Range(1, 1000000));
  std::string probe_helper;
  app.add_option("--probe-helper", probe_helper,
                 "gfprobe executable run for route probes (default: gfprobe beside gfsited; "
                 "'none' refuses probes)");
  app.add_option("--test-corrupt-offset", corrupt_offset, "")->group("");
  app.add_option("--test-corrupt-times", corrupt_times, "")->group("");
  // Catalog role (replica/agent/site_agent.h): join a federation and execute its transfer tasks.
  std::string site, node, catalog_address, advertise;
  int lease_s = 15;
  const gfrep::replica::agent::SiteAgentOptions agent_defaults;
  int workers = agent_defaults.workers;
  int initial_in_flight = agent_defaults.initial_in_flight;
  int io_threads = agent_defaults.io_threads;
  bool adapt_in_flight = agent_defaults.adapt_in_flight;
  bool session_reuse = true;
  app.add_option("--site", site, "site this node belongs to (with --node and --catalog)");
  app.add_option("--node", node, "name of this node in the catalog");
  app.add_option("--catalog", catalog_address, "gfcatalogd HOST:PORT to join");
  std::string catalog_ca;
  app.add_option("--catalog-ca", catalog_ca,
                 "PEM CA of a TLS catalog; the agent presents --tls-cert/--tls-key to it as its identity "
                 "(gfca issue node NAME)");
  app.add_option("--advertise", advertise, "HOST:PORT other agents reach us at (default: the bound address)");
  app.add_option("--workers", workers, "replica copies at once, at most (threads)")
      ->check(CLI::Range(1, 256))
      ->capture_default_str();
  app.add_option("--adapt-in-flight", adapt_in_flight,
                 "tune the copies at once from measured goodput, up to --workers (true|false; "
                 "false runs --workers at once)")
      ->capture_default_str();
  app.add_option("--initial-in-flight", initial_in_flight,
                 "copies at once to start from when adapting")
      ->check(CLI::Range(1, 256))
      ->capture_default_str();
  app.add_option("--io-threads", io_threads,
                 "threads that run the network side of the replica copies (all copies share them)")
      ->check(CLI::Range(1, 64))
      ->capture_default_str();
  app.add_option("--session-reuse", session_reuse,
                 "keep transfer sessions to source agents open between files (true|false)");
  app.add_option("--lease", lease_s, "task lease, seconds (renewed while copying)")->check(CLI::Range(1, 3600));
  double check_interval_s =
      std::chrono::duration<double>(agent_defaults.check_interval).count();
  std::string scrub_rate = "32M";
  double scrub_period_h =
      std::chrono::duration<double, std::ratio<3600>>(agent_defaults.scrub_period).count();
  app.add_option("--check-interval", check_interval_s,
                 "seconds between stat checks of every replica (missing: lost; other size or "
                 "mtime: corrupt); 0: none")
      ->check(CLI::Range(0.0, 86400.0 * 30))
      ->capture_default_str();
  app.add_option("--scrub-rate", scrub_rate,
                 "bytes per second the checksum scrub reads at idle I/O priority (e.g. 32M); 0: "
                 "no scrub")
      ->capture_default_str();
  app.add_option("--scrub-period", scrub_period_h,
                 "hours after which a replica's checksum is verified again by the scrub")
      ->check(CLI::Range(0.0, 24.0 * 3650))
      ->capture_default_str();
  std::string http;
  app.add_option("--http", http,
                 "Serve /metrics, /healthz and /readyz on HOST:PORT (off by default; loopback only "
                 "unless --http-public)");
  bool http_public = false;
  app.add_flag("--http-public", http_public, "Allow --http on a non-loopback address (no authentication yet)");
  const gfrep::replica::web::HttpServerOptions http_defaults;
  gfrep::tools::HttpLimitFlags http_limits{http_defaults.max_connections, http_defaults.max_connections_per_client,
                                           http_defaults.descriptor_reserve};
  gfrep::tools::AddHttpLimitFlags(app, http_limits);
  double telemetry_s = 0.25;
  app.add_option("--telemetry-interval", telemetry_s,
                 "Seconds between the live telemetry batches sent to the catalog's dashboard "
                 "(samples every 0.1 s; 0: none)")
      ->check(CLI::Range(0.0, 60.0))
      ->capture_default_str();
  std::vector<std::string> provide_cc;
  app.add_option("--provide-cc", provide_cc,
                 "Congestion controls to make available at start when the kernel lacks them (e.g. "
                 "highspeed: the kernel's module, else gfrep's BPF implementation; root only). The "
                 "catalog's routes of this site add theirs once it is reached")
      ->delimiter(',');
  CLI11_PARSE(app, argc, argv);
  absl::StatusOr<std::shared_ptr<spdlog::logger>> made_log = gfrep::tools::MakeLoggerOrError("gfsited", common);
  if (!made_log.ok()) return gfrep::tools::Fail("gfsited", Msg(made_log.status()), 2);
  std::shared_ptr<spdlog::logger> log = *made_log;
  if (!http.empty()) {
    if (absl::Status s = gfrep::replica::web::CheckHttpListen(http, http_public); !s.ok()) {
      return gfrep::tools::Fail("gfsited", std::string(s.message()), 2);
    }
  }

  absl::StatusOr<std::uint64_t> buf = gfrep::tools::ParseSize(buffer);
  if (!buf.ok()) return gfrep::tools::Fail("gfsited", Msg(buf.status()));
  absl::StatusOr<std::uint64_t> jint = gfrep::tools::ParseSize(journal_interval);
  if (!jint.ok()) return gfrep::tools::Fail("gfsited", Msg(jint.status()));
  absl::StatusOr<std::uint64_t> scrub_bytes = gfrep::tools::ParseSize(scrub_rate);
  if (!scrub_bytes.ok()) {
    return gfrep::tools::Fail("gfsited", "--scrub-rate: " + Msg(scrub_bytes.status()));
  }
  std::filesystem::path key_path = key_file.empty() ? gfrep::transfer::DefaultKeyPath() : std::filesystem::path(key_file);
  absl::StatusOr<std::string> key = gfrep::transfer::LoadOrCreateSharedKey(key_path);
  if (!key.ok()) return gfrep::tools::Fail("gfsited", Msg(key.status()));

  // Every connection served and every data stream of a copy is a file descriptor: a soft
  // limit of 1024 (the usual default) would make accept fail long before --max-connections.
  if (absl::Status s = gfrep::tools::RaiseOpenFileLimit(static_cast<std::uint64_t>(max_connections) + 4096, *log);
      !s.ok()) {
    log->warn("{}: --max-connections {} may not all be served", s.ToString(), max_connections);
  }

  gfrep::transfer::AgentOptions options;
  options.listen = listen;
  options.spool = spool;
  options.shared_key = *key;
  options.tls = {tls_cert, tls_key, tls_ca};
  options.require_tls = require_tls;
  absl::StatusOr<std::vector<gfrep::catalog::Role>> peer_roles = gfrep::catalog::ParseRoles(tls_peers);
  if (!peer_roles.ok()) return gfrep::tools::Fail("gfsited", "--tls-peers: " + Msg(peer_roles.status()));
  options.authorize_certificate = [roles = *peer_roles](const std::vector<std::string>& uris) {
    return gfrep::catalog::AuthorizeTransferPeer(uris, roles);
  };
  options.max_connections = max_connections;
  options.max_connections_per_peer = max_connections_per_peer;
  options.defaults.route.socket_buffer = *buf;
  options.defaults.journal_interval = std::max<std::uint64_t>(*jint, 1);
  options.defaults.test_corrupt_offset = corrupt_offset;
  options.defaults.test_corrupt_times = corrupt_times;
  options.logger = log;
  if (probe_helper.empty()) {
    std::error_code ec;
    std::filesystem::path self = std::filesystem::read_symlink("/proc/self/exe", ec);
    if (!ec && std::filesystem::exists(self.parent_path() / "gfprobe", ec)) {
      options.probe_helper = self.parent_path() / "gfprobe";
    }
  } else if (probe_helper != "none") {
    options.probe_helper = probe_helper;
  }
  if ((tls_cert.empty()) != (tls_key.empty())) {
    return gfrep::tools::Fail("gfsited", "--tls-cert and --tls-key go together");
  }
  // With a whole certificate set the agent pulls from other agents over mutual TLS (control
  // connection; data joins keyed from that TLS session, encrypted when the route says tls).
  const bool mutual_tls = !tls_cert.empty() && !tls_ca.empty();
  const std::string listen_host = listen.substr(0, listen.rfind(':'));
  if (!mutual_tls && !gfrep::replica::web::IsLoopbackHost(listen_host)) {
    if (!insecure) {
      return gfrep::tools::Fail(
          "gfsited", fmt::format("--listen {}: not a loopback address, and no certificate set to talk mutual TLS "
                                 "with other agents. Give --tls-cert, --tls-key and --tls-ca (gfca init; gfca "
                                 "issue node NAME --host ADDRESS), or --insecure for a trusted network",
                                 listen));
    }
    log->warn("--insecure on {}: agents authenticate each other by the shared key only, nothing is encrypted",
              listen);
  }
  if (require_mutual_tls && !mutual_tls) {
    return gfrep::tools::Fail("gfsited", "--require-mutual-tls needs --tls-cert, --tls-key and --tls-ca");
  }
  options.require_mutual_tls = require_mutual_tls;

  // Signals are taken by a dedicated thread (sigwait) so the server stops cleanly.
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGHUP);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  std::signal(SIGPIPE, SIG_IGN);

  gfrep::transfer::TransferOptions pull_defaults = options.defaults;
  pull_defaults.shared_key = *key;
  pull_defaults.tls_options = options.tls;
  pull_defaults.tls_control = mutual_tls;
  // Before serving, so that the first session's sockets (and the probe helpers this agent
  // starts) find them.
  ProvideCongestionControls(provide_cc, *log);
  auto server = gfrep::transfer::AgentServer::Create(std::move(options));
  if (!server.ok()) return gfrep::tools::Fail("gfsited", Msg(server.status()));
  absl::StatusOr<gfrep::transfer::Endpoint> bound = (*server)->Start();
  if (!bound.ok()) return gfrep::tools::Fail("gfsited", Msg(bound.status()));
  std::printf("listening on %s\n", bound->ToString().c_str());
  std::fflush(stdout);
  log->info("serving spool={} key_file={}", spool, key_path.string());
  if (!tls_cert.empty()) log->info("TLS records: {}", gfrep::transfer::DescribeTlsRecordPath());

  std::unique_ptr<gfrep::catalog::CatalogClient> catalog_client;
  std::unique_ptr<gfrep::replica::agent::SiteAgent> site_agent;
  if (!site.empty() || !node.empty() || !catalog_address.empty()) {
    if (site.empty() || node.empty() || catalog_address.empty()) {
      return gfrep::tools::Fail("gfsited", "--site, --node and --catalog go together");
    }
    gfrep::catalog::ClientOptions co;
    co.address = catalog_address;
    co.timeout = std::chrono::seconds(10);
    if (!catalog_ca.empty()) {
      for (auto [path, what, out] : {std::tuple{&catalog_ca, "--catalog-ca", &co.tls_root_pem},
                                     std::tuple{&tls_cert, "--tls-cert", &co.tls_cert_pem},
                                     std::tuple{&tls_key, "--tls-key", &co.tls_key_pem}}) {
        if (path->empty()) continue;
        absl::StatusOr<std::string> pem = gfrep::tools::ReadPemFile(*path, what);
        if (!pem.ok()) return gfrep::tools::Fail("gfsited", Msg(pem.status()));
        *out = *pem;
      }
    }
    auto client = gfrep::catalog::CatalogClient::Create(co);
    if (!client.ok()) return gfrep::tools::Fail("gfsited", Msg(client.status()));
    catalog_client = std::move(*client);
    gfrep::replica::agent::SiteAgentOptions so;
    so.catalog = catalog_client.get();
    so.site = site;
    so.node = node;
    so.address = advertise.empty() ? bound->ToString() : advertise;
    so.spool = spool;
    so.requires_data_tls = require_tls;
    so.workers = workers;
    so.adapt_in_flight = adapt_in_flight;
    so.initial_in_flight = initial_in_flight;
    so.io_threads = io_threads;
    so.reuse_sessions = session_reuse;
    so.lease = std::chrono::seconds(lease_s);
    so.check_interval = std::chrono::milliseconds(static_cast<std::int64_t>(check_interval_s * 1000));
    so.scrub_rate_bytes = *scrub_bytes;
    so.scrub_period = std::chrono::seconds(static_cast<std::int64_t>(scrub_period_h * 3600));
    so.transfer = pull_defaults;
    so.telemetry_interval = std::chrono::milliseconds(static_cast<std::int64_t>(telemetry_s * 1000));
    so.logger = log;
    auto agent = gfrep::replica::agent::SiteAgent::Create(so);
    if (!agent.ok()) return gfrep::tools::Fail("gfsited", Msg(agent.status()));
    site_agent = std::move(*agent);
  }

  // Started before the site agent registers: registration retries while the catalog is
  // unreachable, and a signal must stop that too.
  // The catalog connection's credentials, read again on SIGHUP (all three or none changes).
  auto reload_catalog = [&, client = catalog_client.get()]() -> absl::Status {
    if (client == nullptr || catalog_ca.empty()) return absl::OkStatus();
    absl::StatusOr<std::string> ca = gfrep::tools::ReadPemFile(catalog_ca, "--catalog-ca");
    if (!ca.ok()) return ca.status();
    std::string cert, key;
    if (!tls_cert.empty()) {
      absl::StatusOr<std::string> c = gfrep::tools::ReadPemFile(tls_cert, "--tls-cert");
      if (!c.ok()) return c.status();
      absl::StatusOr<std::string> k = gfrep::tools::ReadPemFile(tls_key, "--tls-key");
      if (!k.ok()) return k.status();
      cert = *c;
      key = *k;
    }
    return client->ReloadCredentials(*ca, cert, key);
  };
  const bool catalog_tls = catalog_client != nullptr && !catalog_ca.empty();
  std::thread waiter([&set, s = server->get(), agent = site_agent.get(), log, &reload_catalog, catalog_tls] {
    int sig = 0;
    // SIGHUP: read the TLS files again (certificate rotation without a restart).
    while (sigwait(&set, &sig) == 0 && sig == SIGHUP) {
      absl::Status r = s->ReloadTls();
      if (r.ok()) {
        log->info("SIGHUP: TLS certificate, key and CA reloaded; new sessions use them");
      } else {
        log->error("SIGHUP: TLS files not reloaded, the ones in force stay: {}", r.ToString());
      }
      if (absl::Status c = reload_catalog(); !c.ok()) {
        log->error("SIGHUP: the catalog connection's TLS files not reloaded, the ones in force stay: {}",
                   c.ToString());
      } else if (catalog_tls) {
        log->info("SIGHUP: the catalog connection's TLS files reloaded; new calls use them");
      }
    }
    log->info("signal {}: stopping", sig);
    s->Stop();
    if (agent) agent->Stop();
  });
  if (site_agent) {
    absl::Status s = site_agent->Start();
    if (!s.ok() && !absl::IsCancelled(s)) {
      ::kill(::getpid(), SIGTERM);  // wakes the waiter, which stops the server
      waiter.join();
      return gfrep::tools::Fail("gfsited", Msg(s));
    }
    // The congestion controls the catalog's routes of this site name (a route set later is
    // provided by its first copy's sockets, transfer/congestion.h).
    if (absl::StatusOr<std::vector<gfrep::catalog::Route>> routes = catalog_client->ListRoutes(); routes.ok()) {
      std::vector<std::string> names;
      for (const gfrep::catalog::Route& r : *routes) {
        if ((r.src_site == site || r.dst_site == site) && !r.congestion_control.empty() &&
            std::find(names.begin(), names.end(), r.congestion_control) == names.end() &&
            std::find(provide_cc.begin(), provide_cc.end(), r.congestion_control) == provide_cc.end()) {
          names.push_back(r.congestion_control);
        }
      }
      ProvideCongestionControls(names, *log);
    }
  }
  std::unique_ptr<gfrep::replica::web::HttpServer> web;
  if (!http.empty()) {
    gfrep::replica::web::HttpRoutes routes;
    gfrep::replica::web::AddHealthRoutes(routes, [agent = site_agent.get()]() -> absl::Status {
      // Serving copies; with a site agent, also heard by the catalog lately.
      return agent == nullptr ? absl::OkStatus() : agent->Health();
    });
    routes.pages["/metrics"] = [s = server->get(), agent = site_agent.get()](const gfrep::replica::web::HttpRequest&) {
      gfrep::replica::MetricsText m;
      const gfrep::transfer::AgentServer::Stats ts = s->stats();
      m.Counter("gfrep_agent_connections_accepted_total", "Control and data connections accepted",
                static_cast<double>(ts.connections_accepted));
      m.Counter("gfrep_agent_files_on_warm_sessions_total", "Files served over an already open session",
                static_cast<double>(ts.files_on_warm_sessions));
      if (agent != nullptr) AppendMetrics(m, agent->stats());
      return gfrep::replica::web::HttpResponse{200, gfrep::replica::kMetricsContentType, m.text(), {}};
    };
    gfrep::replica::web::HttpServerOptions hopt;
    hopt.listen = http;
    hopt.max_connections = http_limits.max_connections;
    hopt.max_connections_per_client = http_limits.max_connections_per_client;
    hopt.descriptor_reserve = http_limits.fd_reserve;
    hopt.logger = log;
    auto started = gfrep::replica::web::HttpServer::Start(hopt, std::move(routes));
    if (!started.ok()) {
      ::kill(::getpid(), SIGTERM);
      waiter.join();
      return gfrep::tools::Fail("gfsited", Msg(started.status()));
    }
    web = std::move(*started);
    std::printf("metrics on http://%s/metrics\n", web->address().c_str());
    std::fflush(stdout);
  }
  (*server)->Run();
  if (web) web->Stop();
  if (site_agent) site_agent->Stop();
  if (waiter.joinable()) {
    // Run() only returns after Stop(), i.e. after the waiter fired.
    waiter.join();
  }
  return 0;
}
