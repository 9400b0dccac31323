#include "replica/core/route_budget.h"

#include <algorithm>

namespace gfrep::replica {

std::uint32_t StreamsWanted(const catalog::Route& r, std::uint64_t size) {
  const std::uint64_t per_copy = r.streams > 0 ? r.streams : kDefaultCopyStreams;
  const std::uint64_t by_size = std::max<std::uint64_t>(1, (size + kBytesPerStream - 1) / kBytesPerStream);
  return static_cast<std::uint32_t>(std::min(per_copy, by_size));
}

void RouteLoad::Add(const Key& route, const std::string& src_node, std::uint32_t streams) {
  Load& l = load_[route];
  l.streams += streams;
  l.tasks += 1;
  l.tasks_from[src_node] += 1;
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

}  // namespace gfrep::replica
