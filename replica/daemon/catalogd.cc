#include "replica/daemon/catalogd.h"

#include <fmt/format.h>

#include <fstream>
#include <map>
#include <sstream>
#include <utility>

#include "catalog/storage.h"
#include "replica/core/heap.h"
#include "replica/plan/policy.h"

namespace gfrep::replica::daemon {

absl::Status CheckCatalogdOptions(const CatalogdOptions& o) {
  if (o.logger == nullptr) return absl::InvalidArgumentError("Catalogd: no logger");
  if (!o.http.listen.empty() && !o.telemetry) {
    return absl::InvalidArgumentError("--http needs the telemetry: drop --no-telemetry");
  }
  if (o.node_dead_after < o.node_timeout) {
    return absl::InvalidArgumentError(fmt::format(
        "--node-dead-after {} s is shorter than --node-timeout {} s: a node is suspect (silent "
        "past the timeout) before it is dead",
        o.node_dead_after.count(), o.node_timeout.count()));
  }
  if (catalog::IsPostgresLocation(o.store.path) && o.policies &&
      o.policy_options.state_file.empty()) {
    return absl::InvalidArgumentError(
        "--db on PostgreSQL needs --policy-state FILE (or --no-policies)");
  }
  if (o.server.tls_client_ca_pem.empty()) {
    if (!o.server.token_key.empty()) {
      return absl::InvalidArgumentError("--token-key needs mutual TLS (--tls-client-ca)");
    }
    const std::string host = o.server.listen.substr(0, o.server.listen.rfind(':'));
    if (!web::IsLoopbackHost(host) && !o.insecure) {
      return absl::InvalidArgumentError(fmt::format(
          "--listen {}: not a loopback address, and no mutual TLS: anyone who reaches the port "
          "could delete the namespace. Give --tls-cert, --tls-key and --tls-client-ca (gfca "
          "init; gfca issue catalog NAME --host ADDRESS), or --insecure for a trusted test network",
          o.server.listen));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> ReadPolicyFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(fmt::format("{}: cannot read", path));
  std::stringstream text;
  text << in.rdbuf();
  absl::StatusOr<std::vector<plan::PolicyRule>> rules = plan::ParsePolicies(text.str(), path);
  if (!rules.ok()) return rules.status();
  return text.str();
}

Catalogd::Catalogd(CatalogdOptions options) : options_(std::move(options)) {}

Catalogd::~Catalogd() { Stop(); }

absl::StatusOr<std::unique_ptr<Catalogd>> Catalogd::Start(CatalogdOptions options) {
  if (absl::Status s = CheckCatalogdOptions(options); !s.ok()) return s;
  auto self = std::unique_ptr<Catalogd>(new Catalogd(std::move(options)));
  CatalogdOptions& o = self->options_;
  spdlog::logger& log = *o.logger;
  absl::StatusOr<std::unique_ptr<catalog::Catalog>> store = catalog::OpenCatalog(o.store);
  if (!store.ok()) return store.status();
  self->store_ = std::move(*store);

  // Live telemetry from the agents, for the dashboard and /metrics (web/telemetry.h); it also
  // gives gfrep the bytes its running copies received.
  if (o.telemetry) {
    self->hub_ = std::make_unique<web::TelemetryHub>();
    o.server.telemetry_sink = [hub = self->hub_.get()](const catalog::TelemetryBatch& b) {
      return hub->Add(b);
    };
    o.server.request_in_flight = [hub = self->hub_.get()](std::uint64_t id) {
      return hub->InFlightBytes(id);
    };
  }
  if (!o.server.tls_client_ca_pem.empty()) {
    o.server.on_denied = [log = o.logger](const absl::Status& s) {
      log->warn("refused: {}", std::string(s.message()));
    };
  } else {
    log.warn("UNAUTHENTICATED catalog: every caller may do everything (no --tls-client-ca){}",
             o.insecure ? "; --insecure on a non-loopback address" : "");
  }
  o.server.node_timeout = o.node_timeout;
  o.server.node_dead_after = o.node_dead_after;
  // Other front ends revoke tokens too: their revocations are read within a second.
  if (o.store.shared) o.server.revocation_refresh = std::chrono::seconds(1);
  absl::StatusOr<std::unique_ptr<catalog::CatalogServer>> server =
      catalog::CatalogServer::Start(*self->store_, o.server);
  if (!server.ok()) return server.status();
  self->server_ = std::move(*server);
  log.info("serving db={} listen={} tls={} sync={}", catalog::DescribeStorage(*self->store_),
           self->server_->address(), !o.server.tls_cert_pem.empty(), o.store.sync);

  if (!o.policy_source.empty()) {
    absl::StatusOr<catalog::PolicyDocument> put = self->PutPolicies(o.policy_text, o.policy_source);
    if (!put.ok()) return put.status();
  }
  if (absl::Status s = self->Lead(); !s.ok()) return s;
  if (o.store.shared && !self->leading_) log.info("follower: another front end runs the planner");
  if (absl::Status s = self->StartWeb(); !s.ok()) return s;
  return self;
}

absl::StatusOr<catalog::PolicyDocument> Catalogd::PutPolicies(const std::string& text,
                                                              const std::string& source) {
  return store_->PutPolicies(text, source, std::nullopt);
}

absl::Status Catalogd::StartBackground() {
  const CatalogdOptions& o = options_;
  if (o.planner) {
    plan::PlannerOptions po = o.planner_options;
    po.catalog = store_.get();
    po.logger = o.logger;
    po.heartbeat_timeout = o.node_timeout;
    absl::StatusOr<std::unique_ptr<plan::Planner>> p = plan::Planner::Create(po);
    if (!p.ok()) return p.status();
    planner_ = std::move(*p);
    planner_->Start();
  }
  if (o.repair) {
    plan::RepairerOptions ro = o.repairer_options;
    ro.catalog = store_.get();
    ro.logger = o.logger;
    ro.node_timeout = o.node_timeout;
    ro.node_dead_after = o.node_dead_after;
    repairer_ = std::make_unique<plan::Repairer>(ro);
    repairer_->Start();
  }
  if (o.policies) {
    plan::PolicyEngineOptions pe = o.policy_options;
    pe.catalog = store_.get();
    pe.logger = o.logger;
    if (pe.state_file.empty()) pe.state_file = o.store.path + "-policy-state.json";
    policy_engine_ = std::make_unique<plan::PolicyEngine>(pe);
    policy_engine_->Start();
  }
  return absl::OkStatus();
}

void Catalogd::StopBackground() {
  if (policy_engine_) policy_engine_->Stop();
  if (repairer_) repairer_->Stop();
  if (planner_) planner_->Stop();
  policy_engine_.reset();
  repairer_.reset();
  planner_.reset();
}

absl::Status Catalogd::Lead() {
  const bool now = catalog::HoldLeadership(*store_);
  if (now == leading_) return absl::OkStatus();
  leading_ = now;
  if (!now) {
    options_.logger->warn("leadership lost: the planner, repairer and policy engine stop here");
    StopBackground();
    return absl::OkStatus();
  }
  if (options_.store.shared)
    options_.logger->info("leader: the planner, repairer and policy engine run here");
  return StartBackground();
}

absl::Status Catalogd::CheckLeadership() {
  if (!options_.store.shared) return absl::OkStatus();
  absl::Status s = Lead();
  if (!s.ok()) {
    StopBackground();
    leading_ = false;
  }
  return s;
}

absl::Status Catalogd::StartWeb() {
  const CatalogdOptions& o = options_;
  if (o.http.listen.empty()) return absl::OkStatus();
  web::DashboardOptions dopt;
  dopt.catalog = store_.get();
  dopt.hub = hub_.get();
  dopt.node_timeout = o.node_timeout;
  dopt.logger = o.logger;
  dashboard_ = std::make_unique<web::Dashboard>(dopt);
  web::HttpRoutes routes;
  dashboard_->AddRoutes(routes);
  web::AddHealthRoutes(routes, [cat = store_.get()]() -> absl::Status {
    absl::StatusOr<std::uint64_t> seq = cat->LastEventSeq();  // the database answers
    return seq.ok() ? absl::OkStatus() : seq.status();
  });
  routes.pages["/metrics"] = [d = dashboard_.get(), srv = server_.get(), cat = store_.get(),
                              extra = o.extra_metrics](const web::HttpRequest&) {
    MetricsText m;
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
      m.Sample("gfrep_catalog_rpc_duration_seconds_count", {{"method", name}},
               static_cast<double>(h.count));
    }
    m.Counter("gfrep_catalog_denied_calls_total",
              "Catalog calls refused by authorization (PERMISSION_DENIED)",
              static_cast<double>(srv->denied_calls()));
    if (extra) extra(m);
    m.Counter("gfrep_catalog_rate_limited_calls_total",
              "Catalog calls refused for being over their identity's rate (RESOURCE_EXHAUSTED)",
              static_cast<double>(srv->rate_limited_calls()));
    m.Family("gfrep_catalog_rpc_errors_total", "counter",
             "Catalog RPCs that ended with a status other than OK");
    for (const auto& [method, h] : rpcs) {
      m.Sample("gfrep_catalog_rpc_errors_total", {{"method", method.substr(method.rfind('/') + 1)}},
               static_cast<double>(h.errors));
    }
    if (absl::StatusOr<std::map<std::string, std::uint64_t>> st = cat->StorageStats(); st.ok()) {
      for (const auto& [name, v] : *st) {
        m.Gauge("gfrep_catalog_rocksdb_" + name,
                fmt::format("RocksDB {} (all column families)", name), static_cast<double>(v));
      }
    }
    AppendHeapMetrics(m);
    return web::HttpResponse{200, kMetricsContentType, m.text(), {}};
  };
  web::HttpServerOptions hopt = o.http;
  hopt.logger = o.logger;
  absl::StatusOr<std::unique_ptr<web::HttpServer>> started =
      web::HttpServer::Start(hopt, std::move(routes));
  if (!started.ok()) return started.status();
  web_ = std::move(*started);
  dashboard_->Start();
  o.logger->info("dashboard on http://{}/ (/metrics, /healthz, /readyz)", web_->address());
  return absl::OkStatus();
}

std::string Catalogd::http_address() const { return web_ == nullptr ? "" : web_->address(); }

void Catalogd::Stop() {
  if (dashboard_) dashboard_->Stop();  // first: it holds the pages' connections
  if (web_) web_->Stop();
  StopBackground();
  if (server_) server_->Shutdown();
  dashboard_.reset();
  web_.reset();
  server_.reset();
  store_.reset();
}

}  // namespace gfrep::replica::daemon
