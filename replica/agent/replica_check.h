#pragma once

// Consistency checks of a node's replicas against the catalog (Gfarm's replica_check and
// gfsck): is the file of each complete replica record still there, of its size, untouched
// since it was committed, and do its bytes still match the catalog's checksum?
//
//   - A stat check (cheap, every replica, every minute by default): the identity file
//     "<spool>/.gfrep-data/<inode>/<generation>" must exist (else the record becomes
//     `lost`), be a regular file of the record's size, and carry the mtime the node recorded
//     when the replica became complete (Replica::mtime_ns; a file written since, even with
//     its size kept, is `corrupt`).
//   - A scrub (expensive, bounded): re-reads replicas not verified within `scrub_period` at
//     `scrub_rate` bytes per second and compares their checksum with the catalog's; a
//     mismatch is `corrupt`, a match re-stamps the record (verified_ns, and the mtime if the
//     record had none, e.g. an upload's replica).
// Records `unverified` (the node was declared dead while its replicas were complete) are
// checked the same way, and count again only once a scrub has read them (always due): the
// node's first passes after it comes back re-admit its good replicas and report the others.
// What a check finds is reported with Catalog::TransitionReplicas (compare-and-set: a record
// that changed meanwhile, say removed or re-copied, is left alone). Bad replicas are never
// served (replica/client/reader.h, selection.h); replica/plan/repairer.h makes their copies again.
//
// Thread safety: a ReplicaChecker is used by one thread at a time. Blocking: catalog calls
// and file reads.

#include <spdlog/logger.h>

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "catalog/catalog.h"
#include "replica/core/replica_file.h"

namespace gfrep::replica::agent {

// Counts of one pass.
struct CheckSummary {
  std::uint64_t checked = 0;     // complete (and unverified) replicas looked at
  std::uint64_t good = 0;
  std::uint64_t lost = 0;
  std::uint64_t corrupt = 0;
  std::uint64_t skipped = 0;
  std::uint64_t reported = 0;    // transitions the catalog applied
  std::uint64_t bytes_read = 0;  // by checksum passes
  std::vector<ReplicaFinding> bad;  // lost and corrupt ones (at most 1,000 kept)
  bool partial = false;             // ended early (stopping, or a scrub's time was up)
};

struct ReplicaCheckerOptions {
  // Uses view and replicas. REQUIRES: those non-null, outliving the checker.
  catalog::Roles catalog;
  std::string node;
  std::filesystem::path spool;
  // Scrub: bytes per second read (0: unlimited), and how old a verification may get before
  // the replica is read again.
  std::uint64_t scrub_rate_bytes = 32ull << 20;
  std::chrono::seconds scrub_period{std::chrono::hours(24 * 7)};
  // false: find and count only, report nothing (gfsck without --repair).
  bool report = true;
  // Polled between replicas and chunks; true ends a pass at once (its summary is partial).
  std::function<bool()> stopping;
  // REQUIRES: non-null.
  std::shared_ptr<spdlog::logger> logger;
};

class ReplicaChecker {
 public:
  explicit ReplicaChecker(ReplicaCheckerOptions options);

  // Stat check of every complete replica record of the node.
  absl::StatusOr<CheckSummary> StatPass();

  // Checksum check of the complete replicas last verified before now - scrub_period (all of
  // them with `everything`, and those with no mtime stamp), paced at scrub_rate_bytes. Once
  // `until` has passed it ends before the next replica (partial; at least one is read).
  absl::StatusOr<CheckSummary> ScrubPass(
      bool everything = false,
      std::chrono::steady_clock::time_point until = std::chrono::steady_clock::time_point::max());

  // Checks this node's replicas of the given files (stat, and checksum if `checksum`).
  absl::StatusOr<CheckSummary> CheckFiles(const std::vector<catalog::InodeId>& inodes,
                                          bool checksum);

 private:
  bool Stopping() const { return options_.stopping && options_.stopping(); }
  // Pacing for one checksum pass: sleeps so that reads stay at scrub_rate_bytes.
  bool Pace(std::size_t bytes);
  // Records `f` in `summary` and queues its transition; Flush() sends the queue.
  void Record(ReplicaFinding f, CheckSummary& summary);
  absl::Status Flush(CheckSummary& summary);
  // Checks one record (looks up the file's attributes for a checksum pass).
  void CheckOne(const catalog::Replica& r, bool checksum, CheckSummary& summary);

  ReplicaCheckerOptions options_;
  std::vector<catalog::ReplicaTransition> queue_;
  std::chrono::steady_clock::time_point pace_start_{};
  std::uint64_t paced_bytes_ = 0;
};

}  // namespace gfrep::replica::agent
