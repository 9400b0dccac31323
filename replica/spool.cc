#include "replica/spool.h"

#include <fmt/format.h>

namespace gfrep::replica {

absl::StatusOr<std::string> SpoolRelativePath(std::string_view catalog_path) {
  absl::StatusOr<std::vector<std::string>> parts = catalog::SplitPath(catalog_path);
  if (!parts.ok()) return parts.status();
  if (parts->empty()) return absl::InvalidArgumentError("the root has no replica");
  if (parts->front().rfind(".gfrep-", 0) == 0) {
    return absl::InvalidArgumentError(
        fmt::format("{}: top-level names starting with .gfrep- are reserved", catalog_path));
  }
  std::string out;
  for (const std::string& p : *parts) {
    if (!out.empty()) out += '/';
    out += p;
  }
  return out;
}

absl::StatusOr<std::filesystem::path> ReplicaPath(const std::filesystem::path& spool,
                                                  std::string_view catalog_path) {
  absl::StatusOr<std::string> rel = SpoolRelativePath(catalog_path);
  if (!rel.ok()) return rel.status();
  return spool / *rel;
}

transfer::RouteOptions ToRouteOptions(const catalog::Route& route,
                                      const transfer::RouteOptions& defaults) {
  transfer::RouteOptions o = defaults;
  if (route.streams > 0) {
    o.streams = static_cast<int>(std::min<std::uint32_t>(route.streams, transfer::kMaxStreams));
  }
  if (route.stripe_unit_bytes > 0) {
    o.stripe_unit = std::clamp(route.stripe_unit_bytes, transfer::kMinStripeUnit,
                               transfer::kMaxStripeUnit);
  }
  if (route.socket_buffer_bytes > 0) o.socket_buffer = route.socket_buffer_bytes;
  if (!route.congestion_control.empty()) o.congestion = route.congestion_control;
  if (route.stream_rate_bps > 0) o.stream_rate_bps = route.stream_rate_bps;
  if (route.route_rate_bps > 0) o.route_rate_bps = route.route_rate_bps;
  if (!route.src_site.empty() || !route.dst_site.empty()) {
    o.route_name = fmt::format("{}->{}", route.src_site, route.dst_site);
  }
  return o;
}

std::string CatalogChecksum(const catalog::Attributes& attributes) {
  if (attributes.checksum.empty()) return "";
  return fmt::format("{}:{}", attributes.checksum_algo, attributes.checksum);
}

}  // namespace gfrep::replica
