#include "replica/agent/fsck.h"

#include <fmt/format.h>

#include "replica/agent/internal/spool_keeper.h"
#include "replica/core/walk.h"

namespace gfrep::replica::agent {

absl::StatusOr<FsckReport> RunFsck(const FsckOptions& options) {
  const catalog::Roles& cat = options.catalog;
  absl::StatusOr<catalog::Node> node = cat.view->GetNode(options.node);
  if (!node.ok()) return node.status();
  const std::filesystem::path spool =
      options.spool.empty() ? std::filesystem::path(node->spool) : options.spool;
  if (spool.empty()) {
    return absl::FailedPreconditionError(
        fmt::format("node {} registered no spool: name it with --spool", options.node));
  }
  ReplicaCheckerOptions o;
  o.catalog = cat;
  o.node = options.node;
  o.spool = spool;
  o.scrub_rate_bytes = options.rate_bytes;
  o.report = options.repair;
  o.logger = options.logger;
  ReplicaChecker checker(o);
  FsckReport report;
  if (!options.paths.empty()) {
    std::vector<catalog::InodeId> inodes;
    for (const std::string& p : options.paths) {
      if (absl::Status s = CollectInodes(*cat.view, p, options.recursive, inodes); !s.ok())
        return s;
    }
    absl::StatusOr<CheckSummary> s = checker.CheckFiles(inodes, options.checksum);
    if (!s.ok()) return s.status();
    report.replicas = std::move(*s);
    return report;
  }
  absl::StatusOr<CheckSummary> s =
      options.checksum ? checker.ScrubPass(/*everything=*/true) : checker.StatPass();
  if (!s.ok()) return s.status();
  report.replicas = std::move(*s);

  internal::SpoolKeeperOptions k;
  k.catalog = cat;
  k.node = options.node;
  k.spool = spool;
  k.orphan_grace = options.orphan_grace;
  k.logger = options.logger;
  internal::SpoolKeeper keeper(k);
  absl::StatusOr<std::vector<internal::SpoolKeeper::DarkFile>> dark = keeper.FindGarbage();
  if (!dark.ok()) return dark.status();
  for (const auto& d : *dark) report.dark.push_back({d.file, d.why, d.due});
  if (options.repair) {
    absl::StatusOr<std::uint64_t> removed = keeper.CollectGarbage();
    if (!removed.ok()) return removed.status();
    report.dark_removed = *removed;
  }
  return report;
}

}  // namespace gfrep::replica::agent
