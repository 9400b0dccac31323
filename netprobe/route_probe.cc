#include "netprobe/route_probe.h"

#include <chrono>
#include <thread>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "transfer/client.h"

namespace gfrep::netprobe {

namespace {

using Json = nlohmann::json;

absl::StatusOr<catalog::Node> PickNode(catalog::Catalog& cat, const std::string& site,
                                       const std::string& name) {
  absl::StatusOr<std::vector<catalog::Node>> nodes = cat.ListNodes(site);
  if (!nodes.ok()) return nodes.status();
  for (const catalog::Node& n : *nodes) {
    if (name.empty() || n.name == name) return n;
  }
  if (name.empty()) return absl::NotFoundError(fmt::format("site {} has no nodes", site));
  return absl::NotFoundError(fmt::format("no node {} at site {}", name, site));
}

absl::StatusOr<ProbeReport> OneRun(const transfer::Endpoint& src, const transfer::Endpoint& dst,
                                   int streams, const RouteProbeOptions& o, const std::string& congestion = "") {
  // The source agent is busy until its previous server helper has been reaped.
  absl::StatusOr<std::uint16_t> port = absl::UnavailableError("not tried");
  for (int attempt = 0; attempt < 25; ++attempt) {
    if (attempt > 0) std::this_thread::sleep_for(std::chrono::milliseconds(200));
    port = transfer::StartProbeServer(src, o.seconds + o.omit_seconds + 10, o.transfer, congestion);
    if (!absl::IsUnavailable(port.status())) break;
  }
  if (!port.ok()) {
    return absl::Status(port.status().code(), fmt::format("probe server at {}: {}", src.ToString(), std::string(port.status().message())));
  }
  transfer::ProbeRunRequest run;
  run.host = src.host;
  run.port = *port;
  run.rtt_port = src.port;
  run.streams = streams;
  run.seconds = o.seconds;
  run.omit_seconds = o.omit_seconds;
  run.congestion = congestion;
  absl::StatusOr<std::string> text = transfer::RunProbe(dst, run, o.transfer);
  if (!text.ok()) {
    return absl::Status(text.status().code(), fmt::format("probe at {}: {}", dst.ToString(), std::string(text.status().message())));
  }
  return ProbeReportFromJson(*text);
}

}  // namespace

absl::StatusOr<RouteMeasurement> ProbeRoute(catalog::Catalog& cat, const std::string& src_site,
                                            const std::string& dst_site, const RouteProbeOptions& o) {
  if (o.streams < 1 || o.streams > 64) return absl::InvalidArgumentError("streams must be 1..64");
  if (o.seconds < 1 || o.seconds > 60) return absl::InvalidArgumentError("seconds must be 1..60");
  if (o.omit_seconds < 0 || o.omit_seconds > 10) return absl::InvalidArgumentError("omit must be 0..10 s");
  absl::StatusOr<catalog::Node> src = PickNode(cat, src_site, o.src_node);
  if (!src.ok()) return src.status();
  absl::StatusOr<catalog::Node> dst = PickNode(cat, dst_site, o.dst_node);
  if (!dst.ok()) return dst.status();
  absl::StatusOr<transfer::Endpoint> src_ep = transfer::ParseEndpoint(src->address);
  absl::StatusOr<transfer::Endpoint> dst_ep = transfer::ParseEndpoint(dst->address);
  if (!src_ep.ok() || !dst_ep.ok()) return absl::FailedPreconditionError("a node has a bad address");
  absl::StatusOr<ProbeReport> one = OneRun(*src_ep, *dst_ep, 1, o);
  if (!one.ok()) return one.status();
  absl::StatusOr<ProbeReport> many = OneRun(*src_ep, *dst_ep, o.streams, o);
  if (!many.ok()) return many.status();
  RouteMeasurement m;
  m.src_site = src_site;
  m.dst_site = dst_site;
  m.rtt_ms = std::min(one->rtt_ms, many->rtt_ms);
  m.one = one->iperf;
  m.many = many->iperf;
  m.max_socket_buffer = many->max_socket_buffer;
  for (const std::string& cc : o.compare_congestion) {
    absl::StatusOr<ProbeReport> run = OneRun(*src_ep, *dst_ep, o.streams, o, cc);
    if (absl::IsNotFound(run.status()) || absl::IsFailedPrecondition(run.status()) ||
        absl::IsInvalidArgument(run.status())) {
      // The source cannot have this one (no such algorithm, no privileges for BPF): a row
      // that says so, and the others still compete.
      m.congestion_runs.push_back({cc, IperfResult{}, std::string(run.status().message())});
      continue;
    }
    if (!run.ok()) {
      return absl::Status(run.status().code(),
                          fmt::format("congestion control {}: {}", cc, std::string(run.status().message())));
    }
    m.rtt_ms = std::min(m.rtt_ms, run->rtt_ms);
    m.congestion_runs.push_back({cc, run->iperf, ""});
  }
  m.measured_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(
                      std::chrono::system_clock::now().time_since_epoch())
                      .count();
  return m;
}

std::string ToJson(const ProbeReport& r) {
  Json j = Json::parse(ToJson(r.iperf));
  j["rtt_ms"] = r.rtt_ms;
  j["max_socket_buffer"] = r.max_socket_buffer;
  return j.dump();
}

absl::StatusOr<ProbeReport> ProbeReportFromJson(const std::string& text) {
  ProbeReport r;
  absl::StatusOr<IperfResult> iperf = IperfResultFromJson(text);
  if (!iperf.ok()) return iperf.status();
  r.iperf = *iperf;
  Json j = Json::parse(text, nullptr, false);
  if (!j.contains("rtt_ms") || !j["rtt_ms"].is_number() || !j.contains("max_socket_buffer") ||
      !j["max_socket_buffer"].is_number_unsigned()) {
    return absl::InvalidArgumentError("malformed probe result: no rtt_ms / max_socket_buffer");
  }
  r.rtt_ms = j["rtt_ms"].get<double>();
  r.max_socket_buffer = j["max_socket_buffer"].get<std::uint64_t>();
  if (r.rtt_ms <= 0) return absl::InvalidArgumentError("malformed probe result: rtt_ms");
  return r;
}

}  // namespace gfrep::netprobe
