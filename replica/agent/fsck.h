#pragma once

// gfsck (Gfarm's name): an on-demand consistency check of one node's spool against the
// catalog, run on that node. Per node (every replica record of the node, and every file in
// its spool that no record vouches for, "dark data") or per path (the node's replicas of
// those files). Report-only by default: nothing changes; with `repair` what is found is
// reported to the catalog (lost, corrupt: gfcatalogd's repairer then makes the copies again,
// replica/plan/repairer.h) and dark files past their grace period are removed.
//
// Thread safety: a function; blocking (catalog calls, file reads).

#include <spdlog/logger.h>

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "catalog/catalog.h"
#include "replica/agent/replica_check.h"

namespace gfrep::replica::agent {

struct FsckOptions {
  // Uses view and replicas. REQUIRES: those non-null.
  catalog::Roles catalog;
  std::string node;
  // Empty: the spool the node registered.
  std::filesystem::path spool;
  // Empty: the whole node (and its dark files). Else these files (directories: with
  // `recursive`, every file below).
  std::vector<std::string> paths;
  bool recursive = false;
  // Read every replica and compare its checksum (else size and mtime stamp only).
  bool checksum = false;
  // Bytes per second for checksum reads (0: unlimited).
  std::uint64_t rate_bytes = 0;
  // Report to the catalog and remove dark files past `orphan_grace`; false changes nothing.
  bool repair = false;
  std::chrono::milliseconds orphan_grace{std::chrono::hours(1)};
  // REQUIRES: non-null.
  std::shared_ptr<spdlog::logger> logger;
};

struct DarkFile {
  std::filesystem::path file;
  std::string why;
  bool due = false;  // older than the grace period: removed by the agent (and by --repair)
};

struct FsckReport {
  CheckSummary replicas;
  std::vector<DarkFile> dark;     // whole-node checks only
  std::uint64_t dark_removed = 0;  // with repair
};

// kNotFound for an unknown node or path, kInvalidArgument for a directory without
// `recursive`.
absl::StatusOr<FsckReport> RunFsck(const FsckOptions& options);

}  // namespace gfrep::replica::agent
