#pragma once

// Sited: gfsited as a library object. It serves a spool to authenticated peers and receives
// files into it (transfer::AgentServer); with a catalog it also joins a federation as one
// node of a site and runs its copies (agent::SiteAgent); with `http` it serves /metrics,
// /healthz and /readyz (web::HttpServer). tools/gfsited.cc parses flags into SitedOptions and
// runs one; a test can run several in one process.
//
// Lifetime: Create() binds the transfer agent's port (serving starts with Run()); Start()
// registers the site agent (retrying while the catalog is unreachable, until Stop()) and
// starts the HTTP server; Run() serves until Stop(). Stop() may be called from any thread,
// also during Start() (which then returns kCancelled), and more than once.
//
// Thread safety: Stop(), ReloadTls() and ReloadCatalogCredentials() from any thread; the
// others from the owning thread.

#include <spdlog/logger.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "catalog/client.h"
#include "replica/agent/site_agent.h"
#include "replica/web/http_server.h"
#include "transfer/agent.h"
#include "transfer/url.h"

namespace gfrep::replica::daemon {

struct SitedOptions {
  // The transfer agent: listen address, spool, shared key, TLS files, connection limits, the
  // defaults of the copies it serves. Its logger is `logger`.
  transfer::AgentOptions agent;
  // Listening on a non-loopback address without mutual TLS (certificate, key and CA) is
  // refused unless this is set: agents then authenticate each other by the shared key only.
  bool insecure = false;
  // Congestion controls to make available before serving (transfer/congestion.h); the ones
  // the catalog's routes of this site name are added once the catalog is reached.
  std::vector<std::string> provide_cc;

  // The catalog role: all of `site`, `node` and `catalog.address`, or none.
  std::string site;
  std::string node;
  catalog::ClientOptions catalog;
  std::string advertise;  // HOST:PORT other agents reach this one at (default: the bound address)
  // The site agent's settings. catalog, site, node, address, spool, requires_data_tls,
  // transfer (the pulls' TLS and key follow `agent`) and logger are filled in by Create().
  agent::SiteAgentOptions site_agent;

  // /metrics, /healthz and /readyz on http.listen (empty: none). The logger is `logger`.
  web::HttpServerOptions http;

  std::shared_ptr<spdlog::logger> logger;  // REQUIRES non-null
};

class Sited {
 public:
  // Checks the options, makes the congestion controls asked for available, and binds the
  // transfer agent's port. kInvalidArgument for options that do not go together.
  static absl::StatusOr<std::unique_ptr<Sited>> Create(SitedOptions options);
  ~Sited();
  Sited(const Sited&) = delete;
  Sited& operator=(const Sited&) = delete;

  // The transfer agent's address.
  const transfer::Endpoint& bound() const { return bound_; }
  // Registers the site agent and starts its threads (none without a catalog), then the HTTP
  // server. The registration's error, or kCancelled after Stop().
  absl::Status Start();
  // The HTTP server's address ("" without one; after Start()).
  std::string http_address() const;
  // Serves until Stop(); then stops the HTTP server and the site agent.
  void Run();
  void Stop();
  // New TLS sessions use the files of options.agent.tls read again.
  absl::Status ReloadTls();
  // The catalog connection's credentials (PEM text; OK and nothing done without a catalog).
  absl::Status ReloadCatalogCredentials(const std::string& ca_pem, const std::string& cert_pem,
                                        const std::string& key_pem);
  // Whether there is a site agent with a TLS catalog connection.
  bool catalog_tls() const;

 private:
  explicit Sited(SitedOptions options);

  SitedOptions options_;
  std::unique_ptr<transfer::AgentServer> server_;
  transfer::Endpoint bound_;
  std::unique_ptr<catalog::CatalogClient> catalog_;
  std::unique_ptr<agent::SiteAgent> site_agent_;
  std::unique_ptr<web::HttpServer> web_;
};

}  // namespace gfrep::replica::daemon
