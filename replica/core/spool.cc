#include "replica/core/spool.h"

#include <fcntl.h>
#include <stdio.h>
#include <fmt/format.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "transfer/checksum.h"
#include "transfer/errno_status.h"
#include "transfer/spool_names.h"

namespace gfrep::replica {

std::filesystem::path ReplicaFile(const std::filesystem::path& spool, catalog::InodeId inode,
                                  std::uint64_t generation) {
  return spool / transfer::ReplicaRelativePath(inode, generation);
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

namespace {

absl::Status SyncDirectory(const std::filesystem::path& dir) {
  int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return transfer::ErrnoStatus(errno, fmt::format("open directory {}", dir.string()));
  int rc = ::fsync(fd);
  int err = errno;
  ::close(fd);
  if (rc != 0) return transfer::ErrnoStatus(err, fmt::format("fsync {}", dir.string()));
  return absl::OkStatus();
}

}  // namespace

absl::Status SyncDirectoryChain(const std::filesystem::path& spool,
                                const std::filesystem::path& dir) {
  std::filesystem::path root = spool.lexically_normal();
  std::filesystem::path cur = dir.lexically_normal();
  if (!root.empty() && !root.has_filename()) root = root.parent_path();  // "a/" -> "a"
  if (!cur.empty() && !cur.has_filename()) cur = cur.parent_path();
  std::filesystem::path rel = cur.lexically_relative(root);
  if (root.empty() || rel.empty() || *rel.begin() == "..") {
    return absl::InvalidArgumentError(
        fmt::format("{} is not inside the spool {}", dir.string(), spool.string()));
  }
  while (true) {
    if (absl::Status s = SyncDirectory(cur); !s.ok()) return s;
    if (cur == root) return absl::OkStatus();
    cur = cur.parent_path();
  }
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

absl::Status WriteFileDurably(const std::filesystem::path& path, std::string_view content) {
  std::filesystem::path tmp = path;
  tmp += ".tmp";
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return transfer::ErrnoStatus(errno, fmt::format("create {}", tmp.string()));
  const ssize_t n = ::write(fd, content.data(), content.size());
  int err = n < 0 ? errno : ENOSPC;  // a short write: the disk is full
  bool ok = n == static_cast<ssize_t>(content.size());
  if (ok && ::fsync(fd) != 0) {
    err = errno;
    ok = false;
  }
  ::close(fd);
  if (!ok) return transfer::ErrnoStatus(err, fmt::format("write {}", tmp.string()));
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    return transfer::ErrnoStatus(errno, fmt::format("rename {} -> {}", tmp.string(), path.string()));
  }
  const std::filesystem::path dir = path.has_parent_path() ? path.parent_path() : std::filesystem::path(".");
  return SyncDirectory(dir);
}

absl::Status RenameNoReplace(const std::filesystem::path& from, const std::filesystem::path& to) {
  if (::renameat2(AT_FDCWD, from.c_str(), AT_FDCWD, to.c_str(), RENAME_NOREPLACE) == 0) {
    return absl::OkStatus();
  }
  return transfer::ErrnoStatus(errno, fmt::format("rename {} -> {}", from.string(), to.string()));
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
