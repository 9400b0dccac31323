#include "replica/client/writer.h"

#include <fmt/format.h>

#include <system_error>

#include "replica/core/placement.h"
#include "replica/core/retry.h"
#include "transfer/spool_names.h"

namespace gfrep::replica::client {
namespace {

absl::StatusOr<catalog::Node> ChooseNode(const catalog::Roles& catalog, std::uint64_t size,
                                         const StoreOptions& options) {
  if (!options.node.empty()) {
    absl::StatusOr<catalog::Node> n = catalog.view->GetNode(options.node);
    if (!n.ok()) return n.status();
    if (!options.site.empty() && n->site != options.site) {
      return absl::InvalidArgumentError(
          fmt::format("node {} is in site {}, not {}", options.node, n->site, options.site));
    }
    return n;
  }
  Topology topology;
  absl::StatusOr<std::vector<catalog::Node>> nodes = catalog.view->ListNodes(options.site);
  if (!nodes.ok()) return nodes.status();
  topology.nodes = std::move(*nodes);
  PlacementRequest place;
  place.file_size = size;
  LivenessOptions live;
  live.now_ns = catalog::SystemNowNs();
  std::vector<catalog::Node> best = PlaceReplicas(place, topology, live);
  if (best.empty()) {
    return absl::FailedPreconditionError(
        options.site.empty()
            ? "no live node with enough free space"
            : fmt::format("no live node with enough free space in site {}", options.site));
  }
  return best.front();
}

}  // namespace

absl::StatusOr<StoreResult> Store(const catalog::Roles& catalog, const std::filesystem::path& local,
                                  std::string_view path, const StoreOptions& options) {
  absl::StatusOr<std::vector<std::string>> parts = catalog::SplitPath(path);
  if (!parts.ok()) return parts.status();
  if (parts->empty()) return absl::InvalidArgumentError("cannot store a file at /");
  std::error_code ec;
  std::uint64_t size = std::filesystem::file_size(local, ec);
  if (ec) {
    return absl::NotFoundError(fmt::format("{}: {}", local.string(), ec.message()));
  }
  StoreResult out;
  absl::StatusOr<catalog::Node> node = ChooseNode(catalog, size, options);
  if (!node.ok()) return node.status();
  out.node = *node;
  absl::StatusOr<transfer::Endpoint> endpoint = transfer::ParseEndpoint(node->address);
  if (!endpoint.ok()) return endpoint.status();

  if (parts->size() > 1) {
    parts->pop_back();
    catalog::MkdirOptions m;
    m.parents = true;
    if (absl::StatusOr<catalog::Attributes> d = catalog.names->Mkdir(catalog::JoinPath(*parts), m);
        !d.ok()) {
      return d.status();
    }
  }
  catalog::FileContent content;
  content.owner = options.owner;
  content.mode = options.mode;
  absl::StatusOr<catalog::WriteReservation> reserved = catalog.names->BeginWrite(path, content);
  if (!reserved.ok()) return reserved.status();
  const catalog::InodeId inode = reserved->attributes.inode;
  const std::uint64_t generation = reserved->generation;

  transfer::TransferOptions upload = options.transfer;
  if (node->requires_data_tls) {
    // The agent refuses clear data: the whole session in TLS, with our certificate.
    if (upload.tls_options.ca.empty()) {
      return absl::FailedPreconditionError(fmt::format(
          "node {} accepts only TLS sessions (gfsited --require-tls): give a certificate of "
          "its CA (gfreg --tls-ca/--cert/--key, or GFREP_CATALOG_CA, GFREP_CERT, GFREP_KEY)",
          node->name));
    }
    upload.tls = true;
  }
  absl::StatusOr<transfer::TransferStats> stats =
      transfer::Push(local, *endpoint, transfer::ReplicaRelativePath(inode, generation), upload);
  if (!stats.ok()) {
    return absl::Status(stats.status().code(),
                        fmt::format("upload to {} ({}): {}", node->name, node->address,
                                    std::string(stats.status().message())));
  }
  out.upload = *stats;
  std::size_t colon = stats->checksum.find(':');
  if (colon == std::string::npos) {
    return absl::InternalError(fmt::format("agent reported checksum '{}'", stats->checksum));
  }
  content.size = stats->bytes;
  content.checksum_algo = stats->checksum.substr(0, colon);
  content.checksum = stats->checksum.substr(colon + 1);
  content.generation = generation;
  content.inode = inode;
  absl::StatusOr<catalog::Attributes> committed =
      catalog.names->CommitFile(path, content, node->name, std::nullopt);
  if (!committed.ok() && IsRetryableCall(committed.status())) {
    // The answer may have been lost after the commit: the generation tells.
    absl::StatusOr<catalog::Attributes> now = catalog.view->Stat(path);
    if (now.ok() && now->inode == inode && now->generation == generation) committed = now;
  }
  if (!committed.ok()) return committed.status();
  out.attributes = *committed;
  return out;
}

}  // namespace gfrep::replica::client
