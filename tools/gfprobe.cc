// gfprobe route SRC DST [--apply]: measures the route between two sites with a probe between
// two of their agents (libiperf), prints the measurement and the recommended route settings
// with their reasons, and with --apply stores both in the catalog's route table.
//
// The hidden commands iperf-server and iperf-client are the probe's two ends; a site agent
// (gfsited) runs them as child processes (transfer/internal/probe_service.h).
#include <iostream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "catalog/client.h"
#include "netprobe/iperf_probe.h"
#include "netprobe/route_probe.h"
#include "netprobe/route_tuning.h"
#include "tools/internal/catalog_flags.h"
#include "tools/internal/cli.h"
#include "transfer/auth.h"

namespace {

using namespace gfrep;

// The iperf-client helper: one JSON object on stdout, {"error": ...} and exit 1 on failure.
int HelperClient(const netprobe::IperfClientOptions& o, int rtt_port) {
  auto fail = [](const absl::Status& s) {
    std::cout << nlohmann::json{{"error", std::string(s.message())}}.dump() << "\n";
    return 1;
  };
  absl::StatusOr<double> rtt = netprobe::MeasureConnectRtt(o.host, rtt_port, 5);
  if (!rtt.ok()) return fail(rtt.status());
  netprobe::IperfClientOptions run = o;
  const std::uint64_t kernel_max = netprobe::KernelMaxSocketBuffer();
  if (run.window == 0 && kernel_max > 0) run.window = std::min<std::uint64_t>(kernel_max, 64ull << 20);
  absl::StatusOr<netprobe::IperfResult> r = netprobe::RunIperfClient(run);
  if (!r.ok()) return fail(r.status());
  netprobe::ProbeReport report{*r, *rtt, kernel_max};
  std::cout << netprobe::ToJson(report) << "\n";
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  constexpr const char* kProgram = "gfprobe";
  CLI::App app{"gfprobe: measure a route between two sites and recommend its settings"};
  tools::CommonFlags common;
  tools::CatalogFlags cat;
  tools::AddCommonFlags(app, common);
  tools::AddCatalogFlags(app, cat);
  app.require_subcommand(1);
  app.fallthrough();  // --catalog and --log-level also after the subcommand

  std::vector<std::string> sites;
  netprobe::RouteProbeOptions probe;
  std::string key_file;
  bool apply = false, json = false;
  CLI::App* route = app.add_subcommand("route", "Measure SRC -> DST and recommend settings");
  route->add_option("SITES", sites, "SRC DST")->required()->expected(2);
  route->add_option("--src-node", probe.src_node, "Node of SRC that serves the probe (default: first)");
  route->add_option("--dst-node", probe.dst_node, "Node of DST that measures (default: first)");
  route->add_option("--streams", probe.streams, "Streams of the many-stream run")
      ->check(CLI::Range(1, 64))->capture_default_str();
  route->add_option("--seconds", probe.seconds, "Measured seconds per run")
      ->check(CLI::Range(1, 60))->capture_default_str();
  route->add_option("--omit", probe.omit_seconds, "Seconds of slow start left out per run")
      ->check(CLI::Range(0, 10))->capture_default_str();
  route->add_option("--key-file", key_file, "Shared key file (default ~/.gfrep/shared_key)");
  route->add_flag("--apply", apply, "Store the measurement and the settings in the route table");
  route->add_flag("--json", json, "One JSON object: measurement, settings, reasons");

  std::string bind, host;
  int port = 0, timeout = 60, rtt_port = 0;
  netprobe::IperfClientOptions client_options;
  CLI::App* server = app.add_subcommand("iperf-server", "(for gfsited) serve one iperf3 test");
  server->group("");
  server->add_option("--bind", bind)->required();
  server->add_option("--port", port)->required()->check(CLI::Range(1, 65535));
  server->add_option("--timeout", timeout)->check(CLI::Range(1, 3600));
  CLI::App* client = app.add_subcommand("iperf-client", "(for gfsited) measure against a server");
  client->group("");
  client->add_option("--host", client_options.host)->required();
  client->add_option("--port", client_options.port)->required()->check(CLI::Range(1, 65535));
  client->add_option("--rtt-port", rtt_port)->required()->check(CLI::Range(1, 65535));
  client->add_option("--streams", client_options.streams)->check(CLI::Range(1, 64));
  client->add_option("--seconds", client_options.seconds)->check(CLI::Range(1, 60));
  client->add_option("--omit", client_options.omit_seconds)->check(CLI::Range(0, 10));
  client->add_option("--window", client_options.window);
  CLI11_PARSE(app, argc, argv);
  auto log = tools::MakeLogger(kProgram, common);

  if (server->parsed()) {
    absl::Status s = netprobe::RunIperfServer(bind, port, timeout);
    if (!s.ok()) return tools::Fail(kProgram, tools::ErrorText(s));
    return 0;
  }
  if (client->parsed()) return HelperClient(client_options, rtt_port);

  auto catalog = tools::ConnectCatalog(cat);
  if (!catalog.ok()) return tools::Fail(kProgram, tools::ErrorText(catalog.status()));
  std::filesystem::path key_path =
      key_file.empty() ? transfer::DefaultKeyPath() : std::filesystem::path(key_file);
  absl::StatusOr<std::string> key = transfer::LoadOrCreateSharedKey(key_path);
  if (!key.ok()) return tools::Fail(kProgram, tools::ErrorText(key.status()));
  probe.transfer.shared_key = *key;
  probe.transfer.logger = log;
  absl::StatusOr<netprobe::RouteMeasurement> m = netprobe::ProbeRoute(**catalog, sites[0], sites[1], probe);
  if (!m.ok()) return tools::Fail(kProgram, tools::ErrorText(m.status()));
  netprobe::RouteAdvice advice = netprobe::Advise(*m);
  if (apply) {
    // Explicit settings an operator made with gfroute set stay; the probe fills the rest.
    absl::StatusOr<catalog::Route> old = (*catalog)->GetRoute(sites[0], sites[1]);
    if (!old.ok() && !absl::IsNotFound(old.status())) return tools::Fail(kProgram, tools::ErrorText(old.status()));
    catalog::Route r = advice.route;
    if (old.ok()) {
      if (old->max_concurrent_tasks > 0) r.max_concurrent_tasks = old->max_concurrent_tasks;
      if (old->stream_rate_bps > 0) r.stream_rate_bps = old->stream_rate_bps;
    }
    if (absl::Status s = (*catalog)->PutRoute(r); !s.ok()) return tools::Fail(kProgram, tools::ErrorText(s));
  }
  const catalog::Route& r = advice.route;
  if (json) {
    nlohmann::json j = tools::ToJson(r);
    j["one_stream_bps"] = m->one.bits_per_second;
    j["many_streams_bps"] = m->many.bits_per_second;
    j["many_streams"] = m->many.streams;
    j["retransmits"] = m->many.retransmits;
    j["reasons"] = advice.reasons;
    j["applied"] = apply;
    std::cout << j.dump() << "\n";
  } else {
    std::cout << fmt::format("route {} -> {}: rtt {:.2f} ms, bandwidth {:.0f} Mbit/s\n", r.src_site, r.dst_site,
                             r.rtt_ms, static_cast<double>(r.bandwidth_bps) / 1e6);
    std::cout << fmt::format("recommended: --streams {} --total-streams {} --socket-buffer {} --stripe-unit {} "
                             "--route-rate {} --cc {}\n",
                             r.streams, r.total_streams, r.socket_buffer_bytes, r.stripe_unit_bytes,
                             r.route_rate_bps, r.congestion_control.empty() ? "default" : r.congestion_control);
    for (const std::string& line : advice.reasons) std::cout << "  " << line << "\n";
    std::cout << (apply ? "applied to the route table\n" : "not applied (use --apply)\n");
  }
  return 0;
}
