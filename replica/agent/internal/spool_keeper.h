#pragma once

// SpoolKeeper keeps a node's spool in step with the catalog's replica records (the
// identity layout of replica/core/spool.h): it unlinks the bytes of replicas the catalog marks
// deleting, collects files under .gfrep-data that no record vouches for, and migrates a
// spool of the old path-keyed layout once.
//
// What a record vouches for: the record (inode I, this node) at generation G, in any state
// but kDeleting, keeps "<spool>/.gfrep-data/I/G". Files of I with a lower generation are
// superseded and removed. A file with no record (a gfreg upload whose commit failed, a
// copy whose task failed after its rename) is removed once it is older than
// `orphan_grace`; younger ones may be uploads waiting for their CommitFile. A file of an
// inode the catalog no longer has is removed at once.
//
// Thread safety: one caller at a time (the site agent's sweep thread). Blocking: catalog
// calls, directory scans, checksums (migration only).

#include <spdlog/logger.h>

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "catalog/catalog.h"

namespace gfrep::replica::agent::internal {

struct SpoolKeeperOptions {
  // Uses view and replicas. REQUIRES: those non-null, outliving the keeper.
  catalog::Roles catalog;
  std::string node;
  std::filesystem::path spool;
  // Unrecorded files younger than this (by the later of mtime and ctime) are kept.
  std::chrono::milliseconds orphan_grace{std::chrono::hours(1)};
  // Polled between items; true ends a pass early (OK, partial).
  std::function<bool()> stopping;
  // REQUIRES: non-null.
  std::shared_ptr<spdlog::logger> logger;
};

class SpoolKeeper {
 public:
  explicit SpoolKeeper(SpoolKeeperOptions options);

  // Moves the replicas of a spool written with the old path-keyed layout to their identity
  // names, once (then writes "<spool>/.gfrep-layout"). A complete replica is moved only if
  // its bytes match the catalog's checksum (else its record becomes kCorrupt: never
  // served); stale ones are moved as they are; bytes of deleting ones are unlinked (via the
  // old spool index). Files nothing vouches for are left where they are, with a log line.
  absl::Status MigrateLegacyLayout();

  // One pass over the node's replica records: for each kDeleting one, unlinks its bytes
  // (generations up to the record's) and calls RemoveReplica. Returns how many.
  absl::StatusOr<std::uint64_t> SweepDeleting();

  // One pass over .gfrep-data: removes the files no record vouches for (see above).
  // Returns how many files were removed.
  absl::StatusOr<std::uint64_t> CollectGarbage();

  // A file under .gfrep-data that no record vouches for ("dark data").
  struct DarkFile {
    std::filesystem::path file;
    std::string why;   // "no replica record", "its file was removed", "superseded by ..."
    bool due = false;  // CollectGarbage removes it (else it is younger than orphan_grace)
  };
  // What CollectGarbage would remove now and what it keeps for the grace period; changes
  // nothing.
  absl::StatusOr<std::vector<DarkFile>> FindGarbage();

 private:
  bool Stopping() const { return options_.stopping && options_.stopping(); }
  // Calls `found` for every file no record vouches for.
  absl::Status ScanGarbage(const std::function<void(const DarkFile&)>& found);

  SpoolKeeperOptions options_;
};

}  // namespace gfrep::replica::agent::internal
