#pragma once

// gfcatalogd's flags and what they make: replica::daemon::CatalogdOptions (tools/gfcatalogd.cc
// runs it). Kept apart from the main so that the main only parses, starts and waits.

#include <spdlog/logger.h>

#include <CLI/CLI.hpp>
#include <cstddef>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "replica/daemon/catalogd.h"
#include "tools/internal/cli.h"

namespace gfrep::tools {

struct CatalogdFlags {
  std::string db;
  bool shared = false;
  std::string listen = "127.0.0.1:7400";
  std::string tls_cert, tls_key, tls_client_ca;
  bool insecure = false;
  std::size_t open_requests_per_user = 1000;
  std::size_t long_polls_per_identity = 64;
  std::string token_key;
  int max_message_mib = 64;
  double handshake_timeout_s = 10;
  int fd_reserve = 64;
  double listener_watchdog_s = 10;
  int max_streams = 0;
  std::string grpc_memory = "2G";
  HttpLimitFlags http_limits;
  bool test_no_accept_guard = false;
  int tls_reload_s = 60;
  double max_calls_per_identity = 5000;
  int workers = 64;
  bool no_sync = false;
  bool no_planner = false;
  int node_timeout_s = 30;
  int node_dead_after_s = 600;
  int open_per_node = 0;
  double keep_finished_days = 7;
  bool no_repair = false;
  double repair_scan_s = 600;
  std::string policies, policy_state;
  bool no_policies = false;
  double removed_rule_grace_s = 3600;
  double release_interval_s = 60;
  std::string http;
  bool http_public = false;
  bool no_telemetry = false;
};

// Adds gfcatalogd's flags to `app`, with their defaults in `flags`.
void AddCatalogdFlags(CLI::App& app, CatalogdFlags& flags);

// The daemon's options from parsed flags: sizes parsed, TLS files and the token key read, the
// policy file read and checked, and every check that needs nothing opened
// (replica::daemon::CheckCatalogdOptions). kInvalidArgument (or the file's kNotFound) naming
// the flag.
absl::StatusOr<replica::daemon::CatalogdOptions> CatalogdOptionsOf(
    const CatalogdFlags& flags, std::shared_ptr<spdlog::logger> log);

}  // namespace gfrep::tools
