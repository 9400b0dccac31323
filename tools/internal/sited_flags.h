#pragma once

// gfsited's flags and what they make: replica::daemon::SitedOptions (tools/gfsited.cc runs
// it). Kept apart from the main so that the main only parses, starts and waits.

#include <spdlog/logger.h>

#include <CLI/CLI.hpp>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "replica/daemon/sited.h"
#include "tools/internal/cli.h"

namespace gfrep::tools {

struct SitedFlags {
  std::string listen = "127.0.0.1:0";
  std::string spool;
  std::string key_file;  // empty: transfer::DefaultKeyPath()
  std::string tls_cert, tls_key, tls_ca;
  bool require_tls = false;
  bool require_mutual_tls = false;
  bool insecure = false;
  std::string tls_peers = "node,admin";
  std::string buffer = "0";
  std::string journal_interval = "256M";
  std::int64_t corrupt_offset = -1;
  int corrupt_times = 1;
  int max_connections = 0;
  int max_connections_per_peer = 0;
  std::string probe_helper;
  std::string site, node, catalog, catalog_ca, advertise;
  int lease_s = 15;
  int workers = 0;
  int initial_in_flight = 0;
  int io_threads = 0;
  bool adapt_in_flight = false;
  bool session_reuse = true;
  double check_interval_s = 0;
  double straggler_after_s = 0;
  double slow_source_after_s = 0;
  std::string scrub_rate = "32M";
  double scrub_period_h = 0;
  std::string http;
  bool http_public = false;
  HttpLimitFlags http_limits;
  double telemetry_s = 0.25;
  std::vector<std::string> provide_cc;
};

// Adds gfsited's flags to `app`, with their defaults in `flags`.
void AddSitedFlags(CLI::App& app, SitedFlags& flags);

// The daemon's options from parsed flags: sizes parsed, the shared key loaded (created on
// first use), the catalog's PEM files read. kInvalidArgument naming the flag.
absl::StatusOr<replica::daemon::SitedOptions> SitedOptionsOf(const SitedFlags& flags,
                                                             std::shared_ptr<spdlog::logger> log);

// The catalog connection's PEM files read again (SIGHUP): CA, certificate, key ("" for the
// ones not given).
absl::StatusOr<std::vector<std::string>> ReadCatalogPems(const SitedFlags& flags);

}  // namespace gfrep::tools
