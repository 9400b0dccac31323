#include "netprobe/route_tuning.h"

#include <algorithm>
#include <bit>
#include <cmath>

#include <fmt/format.h>

namespace gfrep::netprobe {

namespace {

constexpr std::uint64_t kRouteMiB = 1024 * 1024;
// Below this BDP the kernel's default autotuning (up to 4-6 MiB per socket) fills the route.
constexpr double kAutotuneBdp = 2.0 * kRouteMiB;

std::string Mbit(double bps) { return fmt::format("{:.0f} Mbit/s", bps / 1e6); }
std::string MiB(double bytes) { return fmt::format("{:.1f} MiB", bytes / kRouteMiB); }

// Rates within this share of each other are a tie (one run's noise on a shared machine).
constexpr double kCongestionTie = 0.02;

struct MeasuredCongestion {
  std::string name;     // the winner; empty: no compared run ran as asked
  std::string figures;  // "cubic 880 Mbit/s, 12 retransmits; highspeed did not take (reno); ..."
  double bps = 0;
};

MeasuredCongestion BestCongestion(const RouteMeasurement& m) {
  MeasuredCongestion best;
  const IperfResult* winner = nullptr;
  std::vector<std::string> parts;
  for (const RouteMeasurement::CongestionRun& run : m.congestion_runs) {
    const IperfResult& r = run.result;
    if (!run.error.empty()) {
      parts.push_back(fmt::format("{} unavailable at the source: {}", run.requested, run.error));
      continue;
    }
    if (r.congestion != run.requested) {
      parts.push_back(fmt::format("{} did not take (the sender used {})", run.requested,
                                  r.congestion.empty() ? "an unknown one" : r.congestion));
      continue;
    }
    parts.push_back(fmt::format("{} {}, {} retransmits", run.requested, Mbit(r.bits_per_second), r.retransmits));
    const bool faster = winner == nullptr || r.bits_per_second > winner->bits_per_second * (1 + kCongestionTie);
    const bool tie_but_cleaner = winner != nullptr &&
                                 r.bits_per_second >= winner->bits_per_second * (1 - kCongestionTie) &&
                                 r.retransmits < winner->retransmits;
    if (faster || tie_but_cleaner) {
      winner = &r;
      best.name = run.requested;
    }
  }
  if (winner != nullptr) best.bps = winner->bits_per_second;
  for (const std::string& p : parts) best.figures += (best.figures.empty() ? "" : "; ") + p;
  return best;
}

}  // namespace

RouteAdvice Advise(const RouteMeasurement& m) {
  RouteAdvice a;
  catalog::Route& r = a.route;
  r.src_site = m.src_site;
  r.dst_site = m.dst_site;
  r.rtt_ms = m.rtt_ms;
  r.measured_ns = m.measured_ns;
  const double rate = std::max({m.one.bits_per_second, m.many.bits_per_second, BestCongestion(m).bps});
  r.bandwidth_bps = static_cast<std::uint64_t>(rate);
  const double bdp = rate / 8 * m.rtt_ms / 1000;
  a.reasons.push_back(fmt::format(
      "measured: RTT {:.1f} ms; {} with 1 stream, {} with {} ({} retransmits); BDP {}", m.rtt_ms,
      Mbit(m.one.bits_per_second), Mbit(m.many.bits_per_second), m.many.streams,
      m.many.retransmits, MiB(bdp)));

  int streams = 2;
  if (m.one.bits_per_second < 0.9 * rate && m.one.bits_per_second > 0) {
    streams = static_cast<int>(std::ceil(1.25 * rate / m.one.bits_per_second));
  }
  streams = std::clamp(streams, 2, 16);
  std::uint64_t buffer = std::max<std::uint64_t>(kRouteMiB, static_cast<std::uint64_t>(2 * bdp / streams));
  std::string buffer_note;
  if (bdp < kAutotuneBdp) {
    buffer = 0;
  } else if (m.max_socket_buffer > 0 && buffer > m.max_socket_buffer) {
    const int more = static_cast<int>(std::ceil(2 * bdp / static_cast<double>(m.max_socket_buffer)));
    buffer_note = fmt::format("; the kernel grants only {} per socket (raise net.core.rmem_max and "
                              "wmem_max to {} for fewer streams)",
                              MiB(static_cast<double>(m.max_socket_buffer)), buffer);
    streams = std::clamp(std::max(streams, more), 2, 64);
    buffer = m.max_socket_buffer;
  }
  r.streams = static_cast<std::uint32_t>(streams);
  r.socket_buffer_bytes = buffer;
  a.reasons.push_back(fmt::format(
      "streams per copy {}: {}", streams,
      m.one.bits_per_second >= 0.9 * rate
          ? "one stream reaches the route, a second keeps it full while the other recovers from a loss"
          : fmt::format("one stream reaches {} of the route", Mbit(m.one.bits_per_second))));
  if (buffer == 0) {
    a.reasons.push_back(fmt::format("socket buffer: the kernel's autotuning (a BDP under {} needs no more)",
                                    MiB(static_cast<double>(kAutotuneBdp))));
  } else {
    a.reasons.push_back(fmt::format("socket buffer {} per stream: 2 x BDP / {} streams{}",
                                    MiB(static_cast<double>(buffer)), streams, buffer_note));
  }
  r.total_streams = static_cast<std::uint32_t>(std::clamp(32 * streams, 64, 128));
  a.reasons.push_back(fmt::format(
      "route stream budget {}: {} copies at full width (files in flight hide each file's round "
      "trips; about half of the open ones move bytes at a time), or as many small files as streams",
      r.total_streams, r.total_streams / static_cast<std::uint32_t>(streams)));
  r.route_rate_bps = static_cast<std::uint64_t>(kPaceFraction * rate);
  a.reasons.push_back(fmt::format("route rate {}: {:.0f} % of the measured rate, shared by all source nodes",
                                  Mbit(static_cast<double>(r.route_rate_bps)), kPaceFraction * 100));
  std::uint64_t stripe = std::bit_floor(std::max<std::uint64_t>(1, static_cast<std::uint64_t>(bdp / streams / 4)));
  stripe = std::clamp<std::uint64_t>(stripe, kRouteMiB, 16 * kRouteMiB);
  r.stripe_unit_bytes = stripe;
  a.reasons.push_back(fmt::format("stripe unit {}: about a quarter of a stream's share of the BDP", MiB(static_cast<double>(stripe))));
  r.congestion_control = m.many.congestion;
  if (const MeasuredCongestion best = BestCongestion(m); !best.name.empty()) {
    r.congestion_control = best.name;
    a.reasons.push_back(fmt::format("congestion control {}: the fastest of the algorithms compared ({})",
                                    best.name, best.figures));
  } else if (!m.congestion_runs.empty()) {
    a.reasons.push_back(fmt::format("congestion control {}: none of the algorithms compared ran as asked ({})",
                                    r.congestion_control.empty() ? "default" : r.congestion_control, best.figures));
  } else if (!r.congestion_control.empty()) {
    a.reasons.push_back(fmt::format("congestion control {}: what the measurement ran with", r.congestion_control));
  }
  return a;
}

}  // namespace gfrep::netprobe
