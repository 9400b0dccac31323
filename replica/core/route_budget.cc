#include "replica/core/route_budget.h"

#include <algorithm>
#include <cmath>

namespace gfrep::replica {

std::uint32_t StreamsWanted(const catalog::Route& r, std::uint64_t size) {
  const std::uint64_t per_copy = r.streams > 0 ? r.streams : kDefaultCopyStreams;
  const std::uint64_t by_size = std::max<std::uint64_t>(1, (size + kBytesPerStream - 1) / kBytesPerStream);
  return static_cast<std::uint32_t>(std::min(per_copy, by_size));
}

void RouteLoad::Add(const Key& route, const std::string& src_node, const std::string& dst_node,
                    std::uint32_t streams) {
  Load& l = load_[route];
  l.streams += streams;
  l.tasks += 1;
  l.tasks_from[src_node] += 1;
  l.tasks_to[dst_node] += 1;
}

std::uint32_t RouteLoad::DstSharePpm(const Key& route, const std::string& dst_node) const {
  auto it = load_.find(route);
  if (it == load_.end() || it->second.tasks == 0) return catalog::kWholeRoutePpm;
  auto to = it->second.tasks_to.find(dst_node);
  const int mine = to == it->second.tasks_to.end() ? 1 : std::max(1, to->second);
  return static_cast<std::uint32_t>(std::min<std::uint64_t>(
      catalog::kWholeRoutePpm,
      std::uint64_t{catalog::kWholeRoutePpm} * static_cast<std::uint64_t>(mine) /
          static_cast<std::uint64_t>(it->second.tasks)));
}

RouteLoad::Share RouteLoad::StreamShare(const catalog::Route& r, std::uint64_t size) const {
  if (r.total_streams == 0) return {};
  const std::uint64_t used = streams({r.src_site, r.dst_site});
  if (used >= r.total_streams) return {false, 0};
  const std::uint64_t left = r.total_streams - used;
  return {true, static_cast<std::uint32_t>(std::min<std::uint64_t>(StreamsWanted(r, size), left))};
}

std::uint64_t RouteLoad::RateShare(const catalog::Route& r, const std::string& src_node) const {
  if (r.route_rate_bps == 0) return 0;
  auto it = load_.find({r.src_site, r.dst_site});
  if (it == load_.end() || it->second.tasks == 0) return r.route_rate_bps;
  const int all = it->second.tasks;
  auto from = it->second.tasks_from.find(src_node);
  const int mine = from == it->second.tasks_from.end() ? 1 : std::max(1, from->second);
  // No overflow: rates are below 2^44 bit/s and task counts below 2^19.
  return std::max<std::uint64_t>(1, r.route_rate_bps * static_cast<std::uint64_t>(mine) /
                                        static_cast<std::uint64_t>(all));
}

std::uint64_t RouteLoad::streams(const Key& route) const {
  auto it = load_.find(route);
  return it == load_.end() ? 0 : it->second.streams;
}

int RouteLoad::tasks(const Key& route) const {
  auto it = load_.find(route);
  return it == load_.end() ? 0 : it->second.tasks;
}

int RouteShareCopies(const catalog::Route* route, std::uint64_t default_in_flight_bytes,
                     std::uint32_t share_ppm, double mean_size, int min_copies, int max_copies) {
  constexpr double kBdps = 1.3;
  double target = static_cast<double>(default_in_flight_bytes);
  if (route != nullptr) {
    const double rtt_ms = route->rtt_ms > 0 ? route->rtt_ms : route->observed.rtt_ms;
    const double bps = static_cast<double>(route->bandwidth_bps > 0 ? route->bandwidth_bps
                                                                    : route->observed.peak_bps);
    if (rtt_ms > 0 && bps > 0) target = kBdps * rtt_ms / 1000 * bps / 8;
  }
  const std::uint32_t ppm = std::min(share_ppm, catalog::kWholeRoutePpm);
  if (ppm > 0) {
    target *= static_cast<double>(ppm) / catalog::kWholeRoutePpm;
  }
  target = std::clamp(target, 1e6, 1e9);
  const double copies = std::ceil(target / std::max(1.0, mean_size));
  return static_cast<int>(
      std::clamp(copies, static_cast<double>(min_copies), static_cast<double>(max_copies)));
}

int BurstStartCopies(const catalog::Route* route, const std::vector<catalog::Task>& tasks,
                     std::uint64_t default_in_flight_bytes, int min_copies, int max_copies) {
  double bytes = 0;
  for (const catalog::Task& t : tasks) bytes += static_cast<double>(t.size);
  return RouteShareCopies(route, default_in_flight_bytes, tasks.front().spec.dst_share_ppm,
                          bytes / static_cast<double>(tasks.size()), min_copies, max_copies);
}

}  // namespace gfrep::replica
