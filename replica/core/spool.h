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

// The old, path-keyed layout (kept only to migrate spools written before the identity
// layout): "/a/b" -> "a/b". kInvalidArgument for invalid paths, the root, or a reserved
// ".gfrep-*" top component.
absl::StatusOr<std::string> LegacySpoolRelativePath(std::string_view catalog_path);

// The catalog route's settings on top of `defaults` (zero fields keep the default).
// route_name becomes "SRC->DST" so that all transfers of a route share its rate cap.
transfer::RouteOptions ToRouteOptions(const catalog::Route& route,
                                      const transfer::RouteOptions& defaults);

// Makes a rename into `dir` (and the creation of `dir` and its parents) durable: fsyncs
// `dir` and each of its ancestors up to and including `spool`. kInvalidArgument if `dir` is
// not `spool` or inside it (lexically), kNotFound if a directory is missing, the errno
// error otherwise.
absl::Status SyncDirectoryChain(const std::filesystem::path& spool,
                                const std::filesystem::path& dir);

// Writes `content` to `path` so that after a crash or a power cut `path` holds its old
// content or the new one, never a mix: a temporary file beside it ("PATH.tmp") written and
// fsynced, renamed over `path`, and the directory fsynced. Errors as errno (a full disk is
// kResourceExhausted).
absl::Status WriteFileDurably(const std::filesystem::path& path, std::string_view content);

// Renames `from` to `to` unless `to` exists (renameat2 RENAME_NOREPLACE): kAlreadyExists
// then, and `from` is left alone. Other errors as errno.
absl::Status RenameNoReplace(const std::filesystem::path& from, const std::filesystem::path& to);

// "algo:hex" as the transfer engine spells a checksum, from catalog attributes.
std::string CatalogChecksum(const catalog::Attributes& attributes);

// Checks that `file` is a regular file of attributes.size bytes whose checksum (with the
// catalog's algorithm) is the catalog's. kDataLoss naming both sums when not, kNotFound if
// missing, kFailedPrecondition for an unknown algorithm or no checksum. Reads the file.
absl::Status VerifyFile(const std::filesystem::path& file, const catalog::Attributes& attributes);

}  // namespace gfrep::replica
