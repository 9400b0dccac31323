#pragma once

// Catalogd: gfcatalogd as a library object. It opens the catalog (RocksDB or PostgreSQL),
// serves it over gRPC (catalog::CatalogServer), runs the federation's background work (the
// planner, the repairer, the policy engine: plan/) and, with `http`, the dashboard, /metrics,
// /healthz and /readyz (web/). tools/gfcatalogd.cc parses flags into CatalogdOptions and
// runs one; a test can run one in its own process beside site daemons (sited.h).
//
// The background work runs in one process: this one alone, or, with store.shared, the front
// end that holds the database's leadership (catalog/storage.h HoldLeadership): call
// CheckLeadership() about every 500 ms to take it over within a second of a leader's death.
//
// Thread safety: Stop() from any thread, once the others have returned; the others from the
// owning thread.

#include <spdlog/logger.h>

#include <chrono>
#include <functional>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "catalog/catalog.h"
#include "catalog/catalog_service.h"
#include "replica/core/metrics.h"
#include "replica/plan/planner.h"
#include "replica/plan/policy_engine.h"
#include "replica/plan/repairer.h"
#include "replica/web/dashboard.h"
#include "replica/web/http_server.h"
#include "replica/web/telemetry.h"

namespace gfrep::replica::daemon {

struct CatalogdOptions {
  catalog::CatalogOptions store;  // path (--db), sync, shared
  // The gRPC server: listen address, TLS (PEM text), limits. telemetry_sink and
  // request_in_flight are set by Catalogd when `telemetry` is on; on_denied logs.
  catalog::ServerOptions server;
  // Serving a non-loopback address without mutual TLS is refused unless this is set.
  bool insecure = false;
  // The agents' live telemetry (the dashboard's graphs, gfrep's in-flight bytes).
  bool telemetry = true;

  // The background work; catalog and logger of each are filled in by Start().
  bool planner = true;
  plan::PlannerOptions planner_options;
  bool repair = true;
  plan::RepairerOptions repairer_options;
  bool policies = true;
  plan::PolicyEngineOptions policy_options;  // state_file "": STORE-PATH-policy-state.json
  // A policy file's text (ReadPolicyFile) stored in the catalog at start; source "" for none.
  std::string policy_text;
  std::string policy_source;
  // Seconds without a heartbeat after which a node is down: the planner's, the repairer's
  // and the dashboard's.
  std::chrono::seconds node_timeout{30};
  // Seconds without a heartbeat after which a node is dead (HDFS's dead-node interval): its
  // replicas stop counting and are made again elsewhere (the repairer's). At least
  // node_timeout.
  std::chrono::seconds node_dead_after{600};

  // The dashboard, /metrics, /healthz and /readyz on http.listen ("" for none; needs
  // `telemetry`). The program's own counters go on /metrics through extra_metrics.
  web::HttpServerOptions http;
  std::function<void(MetricsText&)> extra_metrics;

  std::shared_ptr<spdlog::logger> logger;  // REQUIRES non-null
};

// The checks that need nothing opened: kInvalidArgument for options that do not go together
// (dashboard without telemetry, a public address without mutual TLS and without `insecure`,
// a token key without mutual TLS, policies on PostgreSQL without a state file).
absl::Status CheckCatalogdOptions(const CatalogdOptions& options);

// A policy file's text, read and checked (replica/plan/policy.h): kNotFound if unreadable,
// kInvalidArgument naming the file's line for a mistake.
absl::StatusOr<std::string> ReadPolicyFile(const std::string& path);

class Catalogd {
 public:
  // Opens the catalog, starts serving it, stores the policy text, starts the background work
  // (in the leader) and the HTTP server.
  static absl::StatusOr<std::unique_ptr<Catalogd>> Start(CatalogdOptions options);
  ~Catalogd();
  Catalogd(const Catalogd&) = delete;
  Catalogd& operator=(const Catalogd&) = delete;

  std::string address() const { return server_->address(); }
  int port() const { return server_->port(); }
  std::string http_address() const;  // "" without one
  catalog::Catalog& catalog() { return *store_; }

  // With store.shared: takes or checks the leadership and starts or stops the background
  // work to match (an error starting it stops it again). Without: nothing.
  absl::Status CheckLeadership();
  // Stores a policy file's text in the catalog (the policy engine enforces what is stored).
  absl::StatusOr<catalog::PolicyDocument> PutPolicies(const std::string& text,
                                                      const std::string& source);
  // Stops the dashboard, the HTTP server, the background work and the gRPC server, and
  // closes the catalog. Idempotent.
  void Stop();

 private:
  explicit Catalogd(CatalogdOptions options);
  absl::Status Lead();
  absl::Status StartBackground();
  void StopBackground();
  absl::Status StartWeb();

  CatalogdOptions options_;
  std::unique_ptr<catalog::Catalog> store_;
  std::unique_ptr<web::TelemetryHub> hub_;
  std::unique_ptr<catalog::CatalogServer> server_;
  bool leading_ = false;
  std::unique_ptr<plan::Planner> planner_;
  std::unique_ptr<plan::Repairer> repairer_;
  std::unique_ptr<plan::PolicyEngine> policy_engine_;
  std::unique_ptr<web::Dashboard> dashboard_;
  std::unique_ptr<web::HttpServer> web_;
};

}  // namespace gfrep::replica::daemon
