#pragma once

// Where replicas live on a node: by identity, never by path. The bytes of generation G of
// inode I are the file "<spool>/.gfrep-data/<I>/<G>" (transfer::ReplicaRelativePath), as
// Gfarm's gfsd stores files by inode and generation. Consequences:
//   - a rename (gfmv) is a catalog-only operation: no byte moves, every node still finds
//     the replica under the same name;
//   - a new generation is a new file, so an older copy (a late task, a crashed upload)
//     can never overwrite newer bytes, and a file stored at a reused path has a new inode,
//     so its bytes never share a name with the removed file's;
//   - the catalog's replica record (inode, node, generation, state) says exactly which
//     file is the replica; anything else under .gfrep-data is garbage to collect.
// Agents keep their own work files under "<spool>/.gfrep-*" (staged copies awaiting
// verification, partial files and restart markers); the transfer agent refuses every
// other ".gfrep-*" name over the network. "<spool>/.gfrep-layout" holds "2" once a spool
// of the earlier path-keyed layout was migrated to this one (SiteAgent::Start).
//
// Thread safety: pure functions.

#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "catalog/types.h"
#include "transfer/options.h"

namespace gfrep::replica {

// <spool>/.gfrep-data/<inode>/<generation>.
std::filesystem::path ReplicaFile(const std::filesystem::path& spool, catalog::InodeId inode,
                                  std::uint64_t generation);

// A copy's partial file and restart markers, kept for a resume while its task is open:
// "<spool>/.gfrep-tmp/task-<id>" (SiteAgent removes those of tasks no longer open).
inline constexpr std::string_view kCopyTmpDir = ".gfrep-tmp";
std::filesystem::path CopyTmpDir(const std::filesystem::path& spool, std::uint64_t task_id);

// The old, path-keyed layout (kept only to migrate spools written before the identity
// layout): "/a/b" -> "a/b". kInvalidArgument for invalid paths, the root, or a reserved
// ".gfrep-*" top component.
absl::StatusOr<std::string> LegacySpoolRelativePath(std::string_view catalog_path);

// The catalog route's settings on top of `defaults` (zero fields keep the default).
// route_name becomes "SRC->DST" so that all transfers of a route share its rate cap.
transfer::RouteOptions ToRouteOptions(const catalog::Route& route,
                                      const transfer::RouteOptions& defaults);

// "algo:hex" as the transfer engine spells a checksum, from catalog attributes.
std::string CatalogChecksum(const catalog::Attributes& attributes);

// Checks that `file` is a regular file of attributes.size bytes whose checksum (with the
// catalog's algorithm) is the catalog's. kDataLoss naming both sums when not, kNotFound if
// missing, kFailedPrecondition for an unknown algorithm or no checksum. Reads the file.
absl::Status VerifyFile(const std::filesystem::path& file, const catalog::Attributes& attributes);

}  // namespace gfrep::replica
