#include "replica/daemon/sited.h"

#include <fmt/format.h>

#include <algorithm>
#include <utility>

#include "replica/core/heap.h"
#include "replica/core/metrics.h"
#include "transfer/congestion.h"

namespace gfrep::replica::daemon {
namespace {

// Makes each congestion control in `names` available if it is not (transfer/congestion.h) and
// logs where each comes from; one that cannot be had is a warning (its routes fall back to the
// kernel's default, and every copy reports the algorithm its sockets really used).
void ProvideCongestionControls(const std::vector<std::string>& names, spdlog::logger& log) {
  for (const std::string& name : names) {
    if (name.empty()) continue;
    absl::StatusOr<transfer::CongestionControl> cc = transfer::EnsureCongestionControl(name);
    if (cc.ok()) {
      log.info("congestion control {}", cc->detail);
    } else {
      log.warn("congestion control {}: unavailable, routes set to it use the kernel's default: {}",
               name, std::string(cc.status().message()));
    }
  }
}

}  // namespace

Sited::Sited(SitedOptions options) : options_(std::move(options)) {}

Sited::~Sited() { Stop(); }

absl::StatusOr<std::unique_ptr<Sited>> Sited::Create(SitedOptions options) {
  if (options.logger == nullptr) return absl::InvalidArgumentError("Sited: no logger");
  spdlog::logger& log = *options.logger;
  transfer::AgentOptions& ao = options.agent;
  if (ao.tls.cert.empty() != ao.tls.key.empty()) {
    return absl::InvalidArgumentError("--tls-cert and --tls-key go together");
  }
  // With a whole certificate set the agent pulls from other agents over mutual TLS (control
  // connection; data joins keyed from that TLS session, encrypted when the route says tls).
  const bool mutual_tls = !ao.tls.cert.empty() && !ao.tls.ca.empty();
  const std::string listen_host = ao.listen.substr(0, ao.listen.rfind(':'));
  if (!mutual_tls && !web::IsLoopbackHost(listen_host)) {
    if (!options.insecure) {
      return absl::InvalidArgumentError(fmt::format(
          "--listen {}: not a loopback address, and no certificate set to talk mutual TLS with "
          "other agents. Give --tls-cert, --tls-key and --tls-ca (gfca init; gfca issue node NAME "
          "--host ADDRESS), or --insecure for a trusted network",
          ao.listen));
    }
    log.warn(
        "--insecure on {}: agents authenticate each other by the shared key only, nothing is "
        "encrypted",
        ao.listen);
  }
  if (ao.require_mutual_tls && !mutual_tls) {
    return absl::InvalidArgumentError(
        "--require-mutual-tls needs --tls-cert, --tls-key and --tls-ca");
  }
  const bool joins =
      !options.site.empty() || !options.node.empty() || !options.catalog.address.empty();
  if (joins && (options.site.empty() || options.node.empty() || options.catalog.address.empty())) {
    return absl::InvalidArgumentError("--site, --node and --catalog go together");
  }
  ao.logger = options.logger;
  options.http.logger = options.logger;

  auto self = std::unique_ptr<Sited>(new Sited(std::move(options)));
  SitedOptions& o = self->options_;
  transfer::TransferOptions pulls = o.agent.defaults;
  pulls.shared_key = o.agent.shared_key;
  pulls.tls_options = o.agent.tls;
  pulls.tls_control = mutual_tls;
  // Before serving, so that the first session's sockets (and the probe helpers this agent
  // starts) find them.
  ProvideCongestionControls(o.provide_cc, log);
  absl::StatusOr<std::unique_ptr<transfer::AgentServer>> server =
      transfer::AgentServer::Create(o.agent);
  if (!server.ok()) return server.status();
  self->server_ = std::move(*server);
  absl::StatusOr<transfer::Endpoint> bound = self->server_->Start();
  if (!bound.ok()) return bound.status();
  self->bound_ = *bound;
  log.info("serving spool={}", o.agent.spool.string());
  if (!o.agent.tls.cert.empty()) log.info("TLS records: {}", transfer::DescribeTlsRecordPath());

  if (joins) {
    absl::StatusOr<std::unique_ptr<catalog::CatalogClient>> client =
        catalog::CatalogClient::Create(o.catalog);
    if (!client.ok()) return client.status();
    self->catalog_ = std::move(*client);
    agent::SiteAgentOptions so = o.site_agent;
    so.catalog = self->catalog_.get();
    so.telemetry = self->catalog_.get();
    so.site = o.site;
    so.node = o.node;
    so.address = o.advertise.empty() ? bound->ToString() : o.advertise;
    so.spool = o.agent.spool;
    so.requires_data_tls = o.agent.require_tls;
    so.transfer = pulls;
    so.logger = o.logger;
    absl::StatusOr<std::unique_ptr<agent::SiteAgent>> made = agent::SiteAgent::Create(so);
    if (!made.ok()) return made.status();
    self->site_agent_ = std::move(*made);
  }
  return self;
}

absl::Status Sited::Start() {
  spdlog::logger& log = *options_.logger;
  if (site_agent_ != nullptr) {
    if (absl::Status s = site_agent_->Start(); !s.ok()) return s;
    // The congestion controls the catalog's routes of this site name (a route set later is
    // provided by its first copy's sockets, transfer/congestion.h).
    if (absl::StatusOr<std::vector<catalog::Route>> routes = catalog_->ListRoutes(); routes.ok()) {
      std::vector<std::string> names;
      const std::vector<std::string>& given = options_.provide_cc;
      for (const catalog::Route& r : *routes) {
        if ((r.src_site == options_.site || r.dst_site == options_.site) &&
            !r.congestion_control.empty() &&
            std::find(names.begin(), names.end(), r.congestion_control) == names.end() &&
            std::find(given.begin(), given.end(), r.congestion_control) == given.end()) {
          names.push_back(r.congestion_control);
        }
      }
      ProvideCongestionControls(names, log);
    }
  }
  if (options_.http.listen.empty()) return absl::OkStatus();
  web::HttpRoutes routes;
  web::AddHealthRoutes(routes, [a = site_agent_.get()]() -> absl::Status {
    // Serving copies; with a site agent, also heard by the catalog lately.
    return a == nullptr ? absl::OkStatus() : a->Health();
  });
  routes.pages["/metrics"] = [s = server_.get(), a = site_agent_.get()](const web::HttpRequest&) {
    MetricsText m;
    const transfer::AgentServer::Stats ts = s->stats();
    m.Counter("gfrep_agent_connections_accepted_total", "Control and data connections accepted",
              static_cast<double>(ts.connections_accepted));
    m.Counter("gfrep_agent_files_on_warm_sessions_total",
              "Files served over an already open session",
              static_cast<double>(ts.files_on_warm_sessions));
    if (a != nullptr) agent::AppendMetrics(m, a->stats());
    AppendHeapMetrics(m);
    return web::HttpResponse{200, kMetricsContentType, m.text(), {}};
  };
  absl::StatusOr<std::unique_ptr<web::HttpServer>> started =
      web::HttpServer::Start(options_.http, std::move(routes));
  if (!started.ok()) return started.status();
  web_ = std::move(*started);
  return absl::OkStatus();
}

std::string Sited::http_address() const { return web_ == nullptr ? "" : web_->address(); }

void Sited::Run() {
  server_->Run();
  if (web_) web_->Stop();
  if (site_agent_) site_agent_->Stop();
}

void Sited::Stop() {
  if (server_) server_->Stop();
  if (site_agent_) site_agent_->Stop();
}

absl::Status Sited::ReloadTls() { return server_->ReloadTls(); }

absl::Status Sited::ReloadCatalogCredentials(const std::string& ca_pem, const std::string& cert_pem,
                                             const std::string& key_pem) {
  if (catalog_ == nullptr) return absl::OkStatus();
  return catalog_->ReloadCredentials(ca_pem, cert_pem, key_pem);
}

bool Sited::catalog_tls() const {
  return catalog_ != nullptr && !options_.catalog.tls_root_pem.empty();
}

}  // namespace gfrep::replica::daemon
