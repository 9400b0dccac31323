#pragma once

// Where replicas live on a node: the replica of catalog path "/a/b" is the file
// "<spool>/a/b". Agents keep their own work files under "<spool>/.gfrep-*" (temporary
// parts, restart markers, staged copies awaiting verification); catalog names starting
// with ".gfrep-" at the top level are therefore refused by the replica tools.
//
// Thread safety: pure functions.

#include <filesystem>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "catalog/types.h"
#include "transfer/options.h"

namespace gfrep::replica {

// "/a/b" -> "a/b" (the path relative to a spool, as transfer agents expect it).
// kInvalidArgument for invalid paths, the root, or a reserved ".gfrep-*" top component.
absl::StatusOr<std::string> SpoolRelativePath(std::string_view catalog_path);

// <spool>/<relative path>.
absl::StatusOr<std::filesystem::path> ReplicaPath(const std::filesystem::path& spool,
                                                  std::string_view catalog_path);

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

// "algo:hex" as the transfer engine spells a checksum, from catalog attributes.
std::string CatalogChecksum(const catalog::Attributes& attributes);

}  // namespace gfrep::replica
