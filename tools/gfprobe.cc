// gfprobe route SRC DST [--apply]: measures the route between two sites with a probe between
// two of their agents (libiperf), prints the measurement and the recommended route settings
// with their reasons, and with --apply stores both in the catalog's route table.
//
// gfprobe disk DIR [--store NODE]: measures the file system of DIR (read and write rates
// against I/O size and parallel streams, buffered and O_DIRECT), prints the table and the
// recommended write settings, and with --store keeps them in NODE's catalog record.
//
// gfprobe cc [--provide NAME,...] [--hold] [--json]: the congestion controls sockets on this
// host can select and where each comes from; --provide makes the named ones available first
// (the kernel's module, else gfrep's BPF highspeed; root), --hold keeps this process, and so
// its BPF registration, alive until SIGINT/SIGTERM (for iperf3 -C highspeed, ss, benchmarks).
//
// The hidden commands iperf-server and iperf-client are the probe's two ends; a site agent
// (gfsited) runs them as child processes (transfer/internal/probe_service.h).
#include <pthread.h>
#include <signal.h>

#include <fstream>
#include <iostream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "catalog/client.h"
#include "netprobe/disk_probe.h"
#include "netprobe/iperf_probe.h"
#include "netprobe/route_probe.h"
#include "netprobe/route_tuning.h"
#include "tools/internal/catalog_flags.h"
#include "tools/internal/cli.h"
#include "transfer/auth.h"
#include "transfer/congestion.h"

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

// gfprobe disk: 0 measured (and stored with --store), 1 otherwise.
int RunDisk(const char* program, netprobe::DiskProbeOptions probe, const std::string& bytes,
            const std::vector<std::string>& sizes, int streams, bool json, const std::string& store,
            const tools::CatalogFlags& cat) {
  if (!bytes.empty()) {
    absl::StatusOr<std::uint64_t> b = tools::ParseSize(bytes);
    if (!b.ok()) return tools::Fail(program, "--bytes: " + tools::ErrorText(b.status()));
    probe.bytes = *b;
  }
  if (!sizes.empty()) {
    probe.io_sizes.clear();
    for (const std::string& text : sizes) {
      absl::StatusOr<std::uint64_t> s = tools::ParseSize(text);
      if (!s.ok()) return tools::Fail(program, "--sizes: " + tools::ErrorText(s.status()));
      probe.io_sizes.push_back(*s);
    }
  }
  // Connect and look the node up before measuring: a wrong --catalog or node name should not
  // cost a whole probe.
  absl::StatusOr<std::unique_ptr<catalog::CatalogClient>> client =
      absl::FailedPreconditionError("not connected");
  if (!store.empty()) {
    client = tools::ConnectCatalog(cat);
    if (!client.ok()) return tools::Fail(program, tools::ErrorText(client.status()));
    if (absl::StatusOr<catalog::Node> n = (*client)->GetNode(store); !n.ok()) {
      return tools::Fail(program, "--store: " + tools::ErrorText(n.status()));
    }
  }
  absl::StatusOr<netprobe::DiskProbeResult> r = netprobe::ProbeDisk(probe);
  if (!r.ok()) return tools::Fail(program, tools::ErrorText(r.status()));
  absl::StatusOr<netprobe::DiskAdvice> advice = netprobe::RecommendDisk(*r, streams);
  if (!store.empty()) {
    if (!advice.ok()) return tools::Fail(program, tools::ErrorText(advice.status()));
    if (absl::Status s = (*client)->PutNodeDisk(store, advice->profile); !s.ok()) {
      return tools::Fail(program, tools::ErrorText(s));
    }
  }
  if (json) {
    nlohmann::json j = nlohmann::json::parse(netprobe::ToJson(*r, advice));
    j["stored"] = store.empty() ? nlohmann::json(nullptr) : nlohmann::json(store);
    std::cout << j.dump() << "\n";
  } else {
    std::cout << netprobe::FormatTable(*r, advice);
    std::cout << (store.empty() ? "not stored (use --store NODE)\n"
                                : fmt::format("stored in the catalog for node {}\n", store));
  }
  return 0;
}

// gfprobe cc: 0 when every --provide name is available (and, with --hold, after a signal).
int RunCc(const char* program, const std::vector<std::string>& provide, bool hold, bool json) {
  // Blocked before anything else starts a thread, so the wait below takes them.
  sigset_t stop;
  sigemptyset(&stop);
  sigaddset(&stop, SIGINT);
  sigaddset(&stop, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop, nullptr);
  int status = 0;
  nlohmann::json provided = nlohmann::json::array();
  for (const std::string& name : provide) {
    absl::StatusOr<transfer::CongestionControl> c = transfer::EnsureCongestionControl(name);
    if (!c.ok()) {
      std::cerr << program << ": " << name << ": " << c.status().message() << "\n";
      provided.push_back({{"name", name}, {"error", std::string(c.status().message())}});
      status = 1;
      continue;
    }
    provided.push_back({{"name", name}, {"source", std::string(transfer::ToString(c->source))}});
  }
  nlohmann::json available = nlohmann::json::array();
  std::string lines;
  for (const std::string& name : transfer::AvailableCongestionControls()) {
    absl::StatusOr<transfer::CongestionControl> c = transfer::DescribeCongestionControl(name);
    const std::string source = c.ok() ? std::string(transfer::ToString(c->source)) : "unknown";
    available.push_back({{"name", name}, {"source", source}});
    lines += fmt::format("{:<12} {}\n", name, source);
  }
  std::string default_cc;
  std::ifstream("/proc/sys/net/ipv4/tcp_congestion_control") >> default_cc;
  if (json) {
    std::cout << nlohmann::json{{"available", available}, {"default", default_cc}, {"provided", provided}}.dump()
              << "\n";
  } else {
    std::cout << lines << "default: " << default_cc << "\n";
  }
  std::cout.flush();
  if (hold) {
    std::cout << "holding; stop with SIGINT or SIGTERM\n" << std::flush;
    int sig = 0;
    sigwait(&stop, &sig);
  }
  transfer::ReleaseCongestionControls();
  return status;
}

}  // namespace

int main(int argc, char** argv) {
  constexpr const char* kProgram = "gfprobe";
  CLI::App app{"gfprobe: measure a route or a disk and recommend its settings"};
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
  route->add_option("--compare-cc", probe.compare_congestion,
                    "Congestion controls to compare, one many-stream run each (e.g. reno,cubic,bbr,highspeed); "
                    "the fastest that really ran becomes the route's")
      ->delimiter(',');
  route->add_flag("--apply", apply, "Store the measurement and the settings in the route table");
  route->add_flag("--json", json, "One JSON object: measurement, settings, reasons");

  netprobe::DiskProbeOptions disk_probe;
  std::string disk_dir, disk_bytes, disk_store;
  std::vector<std::string> disk_sizes;
  int disk_streams = 1;
  bool disk_no_direct = false;
  CLI::App* disk = app.add_subcommand("disk", "Measure a directory's file system and recommend write settings");
  disk->add_option("DIR", disk_dir, "Directory to measure (e.g. the node's spool)")->required();
  disk->add_option("--bytes", disk_bytes, "Bytes per measurement (default 256M)");
  disk->add_option("--sizes", disk_sizes, "I/O sizes at one stream (default 4K,64K,256K,1M,4M,16M)")
      ->delimiter(',');
  disk->add_option("--parallel", disk_probe.parallel, "Stream counts at 1 MiB I/Os (default 1,2,4,8,16)")
      ->delimiter(',')->check(CLI::Range(1, 64));
  disk->add_option("--streams", disk_streams,
                   "Streams the engine writes with: the recommendation considers rows with 1..N")
      ->check(CLI::Range(1, 64))->capture_default_str();
  disk->add_flag("--no-direct", disk_no_direct, "Measure buffered I/O only");
  disk->add_flag("--json", json, "One JSON object: rows, notes, recommendation");
  disk->add_option("--store", disk_store, "Store the recommendation in the catalog for this node");

  std::vector<std::string> cc_provide;
  bool cc_hold = false;
  CLI::App* cc = app.add_subcommand("cc", "List the congestion controls of this host, providing some first");
  cc->add_option("--provide", cc_provide, "Make these available first (e.g. highspeed)")->delimiter(',');
  cc->add_flag("--hold", cc_hold, "Stay running (keeping what was provided) until SIGINT or SIGTERM");
  cc->add_flag("--json", json, "One JSON object");

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
  client->add_option("--cc", client_options.congestion);
  CLI11_PARSE(app, argc, argv);
  auto log = tools::MakeLogger(kProgram, common);

  if (server->parsed()) {
    absl::Status s = netprobe::RunIperfServer(bind, port, timeout);
    if (!s.ok()) return tools::Fail(kProgram, tools::ErrorText(s));
    return 0;
  }
  if (client->parsed()) return HelperClient(client_options, rtt_port);
  if (cc->parsed()) return RunCc(kProgram, cc_provide, cc_hold, json);
  if (disk->parsed()) {
    disk_probe.dir = disk_dir;
    disk_probe.direct = !disk_no_direct;
    return RunDisk(kProgram, disk_probe, disk_bytes, disk_sizes, disk_streams, json, disk_store, cat);
  }

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
    nlohmann::json runs = nlohmann::json::array();
    for (const netprobe::RouteMeasurement::CongestionRun& run : m->congestion_runs) {
      runs.push_back({{"requested", run.requested},
                      {"used", run.result.congestion},
                      {"bps", run.result.bits_per_second},
                      {"retransmits", run.result.retransmits},
                      {"error", run.error}});
    }
    j["congestion_runs"] = runs;
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
    for (const netprobe::RouteMeasurement::CongestionRun& run : m->congestion_runs) {
      if (!run.error.empty()) {
        std::cout << fmt::format("  {:<10} unavailable: {}\n", run.requested, run.error);
        continue;
      }
      std::cout << fmt::format("  {:<10} {:>6.0f} Mbit/s  {:>6} retransmits{}\n", run.requested,
                               run.result.bits_per_second / 1e6, run.result.retransmits,
                               run.result.congestion == run.requested
                                   ? ""
                                   : fmt::format("  (did not take: the sender used {})", run.result.congestion));
    }
    for (const std::string& line : advice.reasons) std::cout << "  " << line << "\n";
    std::cout << (apply ? "applied to the route table\n" : "not applied (use --apply)\n");
  }
  return 0;
}
