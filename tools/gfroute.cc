// gfroute set SRC DST [settings] | get SRC DST | list [--json] | rm SRC DST:
// transfer settings and measurements of the routes between sites.
#include <iostream>

#include <fmt/format.h>

#include "catalog/client.h"
#include "tools/internal/catalog_flags.h"
#include "tools/internal/cli.h"

namespace {

void PrintRoute(const gfrep::catalog::Route& r) {
  std::cout << fmt::format(
      "{} -> {}: streams={} sockbuf={} stripe={} stream_rate={} route_rate={} cc={} "
      "max_tasks={} total_streams={} rtt_ms={:.1f} bw={} data_tls={}\n",
      r.src_site, r.dst_site, r.streams, r.socket_buffer_bytes, r.stripe_unit_bytes,
      r.stream_rate_bps, r.route_rate_bps, r.congestion_control.empty() ? "-" : r.congestion_control,
      r.max_concurrent_tasks, r.total_streams, r.rtt_ms, r.bandwidth_bps, r.data_tls ? "on" : "off");
  const gfrep::catalog::RouteObserved& o = r.observed;
  if (o.at_ns != 0) {
    // What the copies themselves showed (site agents' heartbeats).
    std::cout << fmt::format(
        "    learnt from copies: rtt_ms={:.1f} srtt_ms={:.1f} loss={:.4f}% peak={:.0f} Mbit/s "
        "copied={} bytes cc_used={}{}\n",
        o.rtt_ms, o.srtt_ms, o.loss * 100, static_cast<double>(o.peak_bps) / 1e6, o.bytes,
        o.congestion.empty() ? "-" : o.congestion,
        !o.congestion.empty() && !r.congestion_control.empty() && o.congestion != r.congestion_control
            ? fmt::format(" (the route says {}: it did not take)", r.congestion_control)
            : "");
  }
}

}  // namespace

int main(int argc, char** argv) {
  using namespace gfrep;
  constexpr const char* kProgram = "gfroute";
  CLI::App app{"gfroute: per-route transfer settings (streams, buffers, rate caps, cc)"};
  tools::CommonFlags common;
  tools::CatalogFlags cat;
  tools::AddCommonFlags(app, common);
  tools::AddCatalogFlags(app, cat);
  app.require_subcommand(1);
  app.fallthrough();  // --catalog also after the subcommand
  std::vector<std::string> ends;
  bool json = false;
  std::uint32_t streams = 0, max_tasks = 0, total_streams = 0;
  std::string sockbuf = "0", stripe = "0", stream_rate = "0", route_rate = "0", bandwidth = "0";
  std::string cc;
  std::string data_tls = "off";
  double rtt_ms = 0;
  CLI::App* set = app.add_subcommand("set", "Create or replace the route SRC -> DST");
  set->add_option("SITES", ends, "SRC DST")->required()->expected(2);
  set->add_option("--streams", streams, "Parallel TCP streams per file copy (0: engine default)");
  set->add_option("--total-streams", total_streams,
                  "Stream budget of the whole route, shared by all its copies (0: none)");
  set->add_option("--socket-buffer", sockbuf, "SO_SNDBUF/SO_RCVBUF, e.g. 16M (0: autotune)");
  set->add_option("--stripe-unit", stripe, "Block size handed to a stream, e.g. 4M");
  set->add_option("--stream-rate", stream_rate, "Per-stream pacing cap, e.g. 100M (bit/s)");
  set->add_option("--route-rate", route_rate, "Cap shared by the whole route, e.g. 900M");
  set->add_option("--cc", cc, "Congestion control: cubic, bbr, highspeed, ...");
  set->add_option("--max-tasks", max_tasks, "Concurrent file copies on this route (0: no limit)");
  set->add_option("--rtt-ms", rtt_ms, "Measured round-trip time");
  set->add_option("--bandwidth", bandwidth, "Measured bandwidth, e.g. 950M (bit/s)");
  set->add_option("--data-tls", data_tls,
                  "Encrypt the copies' data connections on this route (TLS), not only their "
                  "control connections")
      ->check(CLI::IsMember({"on", "off"}))
      ->capture_default_str();
  CLI::App* get = app.add_subcommand("get", "Show one route");
  get->add_option("SITES", ends, "SRC DST")->required()->expected(2);
  get->add_flag("--json", json, "JSON object");
  CLI::App* list = app.add_subcommand("list", "List routes");
  list->add_flag("--json", json, "JSON array");
  CLI::App* rm = app.add_subcommand("rm", "Remove the route SRC -> DST");
  rm->add_option("SITES", ends, "SRC DST")->required()->expected(2);
  CLI11_PARSE(app, argc, argv);
  tools::MakeLogger(kProgram, common);
  auto client = tools::ConnectCatalog(cat);
  if (!client.ok()) return tools::Fail(kProgram, tools::ErrorText(client.status()));
  if (set->parsed()) {
    catalog::Route r;
    r.src_site = ends[0];
    r.dst_site = ends[1];
    r.streams = streams;
    r.max_concurrent_tasks = max_tasks;
    r.total_streams = total_streams;
    r.congestion_control = cc;
    r.data_tls = data_tls == "on";
    r.rtt_ms = rtt_ms;
    for (auto [text, out, rate] :
         {std::tuple<std::string*, std::uint64_t*, bool>{&sockbuf, &r.socket_buffer_bytes, false},
          {&stripe, &r.stripe_unit_bytes, false},
          {&stream_rate, &r.stream_rate_bps, true},
          {&route_rate, &r.route_rate_bps, true},
          {&bandwidth, &r.bandwidth_bps, true}}) {
      absl::StatusOr<std::uint64_t> v = rate ? tools::ParseRate(*text) : tools::ParseSize(*text);
      if (!v.ok()) return tools::Fail(kProgram, std::string(v.status().message()));
      *out = *v;
    }
    if (absl::Status s = (*client)->PutRoute(r); !s.ok()) {
      return tools::Fail(kProgram, tools::ErrorText(s));
    }
  } else if (get->parsed()) {
    absl::StatusOr<catalog::Route> r = (*client)->GetRoute(ends[0], ends[1]);
    if (!r.ok()) return tools::Fail(kProgram, tools::ErrorText(r.status()));
    if (json) {
      std::cout << tools::ToJson(*r).dump() << "\n";
    } else {
      PrintRoute(*r);
    }
  } else if (list->parsed()) {
    absl::StatusOr<std::vector<catalog::Route>> routes = (*client)->ListRoutes();
    if (!routes.ok()) return tools::Fail(kProgram, tools::ErrorText(routes.status()));
    if (json) {
      nlohmann::json j = nlohmann::json::array();
      for (const catalog::Route& r : *routes) j.push_back(tools::ToJson(r));
      std::cout << j.dump() << "\n";
    } else {
      for (const catalog::Route& r : *routes) PrintRoute(r);
    }
  } else if (rm->parsed()) {
    if (absl::Status s = (*client)->RemoveRoute(ends[0], ends[1]); !s.ok()) {
      return tools::Fail(kProgram, tools::ErrorText(s));
    }
  }
  return 0;
}
