#include "replica/core/spool.h"

#include <fmt/format.h>

#include "transfer/checksum.h"
#include "transfer/spool_names.h"

namespace gfrep::replica {

std::filesystem::path ReplicaFile(const std::filesystem::path& spool, catalog::InodeId inode,
                                  std::uint64_t generation) {
  return spool / transfer::ReplicaRelativePath(inode, generation);
}

std::filesystem::path CopyTmpDir(const std::filesystem::path& spool, std::uint64_t task_id) {
  return spool / kCopyTmpDir / ("task-" + std::to_string(task_id));
}

absl::StatusOr<std::string> LegacySpoolRelativePath(std::string_view catalog_path) {
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

absl::Status VerifyFile(const std::filesystem::path& file, const catalog::Attributes& attributes) {
  if (attributes.checksum.empty()) {
    return absl::FailedPreconditionError("the catalog has no checksum for this file");
  }
  absl::StatusOr<transfer::ChecksumAlgorithm> algo =
      transfer::ParseChecksumAlgorithm(attributes.checksum_algo);
  if (!algo.ok()) {
    return absl::FailedPreconditionError(
        fmt::format("unknown checksum algorithm '{}' in the catalog", attributes.checksum_algo));
  }
  std::error_code ec;
  auto status = std::filesystem::symlink_status(file, ec);
  if (ec || !std::filesystem::exists(status)) {
    return absl::NotFoundError(fmt::format("{}: no such file", file.string()));
  }
  if (!std::filesystem::is_regular_file(status)) {
    return absl::DataLossError(fmt::format("{}: not a regular file", file.string()));
  }
  std::uint64_t size = std::filesystem::file_size(file, ec);
  if (ec || size != attributes.size) {
    return absl::DataLossError(fmt::format("{}: {} bytes, the catalog says {}", file.string(),
                                           ec ? 0 : size, attributes.size));
  }
  absl::StatusOr<std::string> sum = transfer::ComputeFileChecksum(file, *algo);
  if (!sum.ok()) return sum.status();
  std::string expected = CatalogChecksum(attributes);
  if (*sum != expected) {
    return absl::DataLossError(
        fmt::format("{}: checksum {}, the catalog says {}", file.string(), *sum, expected));
  }
  return absl::OkStatus();
}

std::string CatalogChecksum(const catalog::Attributes& attributes) {
  if (attributes.checksum.empty()) return "";
  return fmt::format("{}:{}", attributes.checksum_algo, attributes.checksum);
}

}  // namespace gfrep::replica
