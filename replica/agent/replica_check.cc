#include "replica/agent/replica_check.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <thread>

#include "replica/core/spool.h"
#include "transfer/checksum.h"

namespace gfrep::replica::agent {
namespace {

namespace fs = std::filesystem;

constexpr std::size_t kPage = 1000;       // replica records per catalog call
constexpr std::size_t kMaxBadKept = 1000;

// Complete records, and unverified ones (the node was dead: checked before they count again).
bool Checkable(const catalog::Replica& r) {
  return r.state == catalog::ReplicaState::kComplete ||
         r.state == catalog::ReplicaState::kUnverified;
}

}  // namespace

ReplicaChecker::ReplicaChecker(ReplicaCheckerOptions options) : options_(std::move(options)) {}

bool ReplicaChecker::Pace(std::size_t bytes) {
  if (Stopping()) return false;
  paced_bytes_ += bytes;
  if (options_.scrub_rate_bytes == 0) return true;
  const auto due = pace_start_ + std::chrono::nanoseconds(static_cast<std::int64_t>(
                                     static_cast<double>(paced_bytes_) * 1e9 /
                                     static_cast<double>(options_.scrub_rate_bytes)));
  while (std::chrono::steady_clock::now() < due) {
    if (Stopping()) return false;
    std::this_thread::sleep_for(std::min<std::chrono::nanoseconds>(
        due - std::chrono::steady_clock::now(), std::chrono::milliseconds(100)));
  }
  return true;
}

void ReplicaChecker::Record(ReplicaFinding f, CheckSummary& summary) {
  summary.checked += 1;
  if (f.checksummed) summary.bytes_read += f.replica.size;
  switch (f.verdict) {
    case ReplicaVerdict::kGood: summary.good += 1; break;
    case ReplicaVerdict::kLost: summary.lost += 1; break;
    case ReplicaVerdict::kCorrupt: summary.corrupt += 1; break;
    case ReplicaVerdict::kSkipped: summary.skipped += 1; break;
  }
  if (f.verdict == ReplicaVerdict::kLost || f.verdict == ReplicaVerdict::kCorrupt) {
    absl::StatusOr<std::string> path = options_.catalog.view->PathOf(f.replica.inode);
    options_.logger->warn("replica of {} (inode {} generation {}) on {} is {}: {}",
                          path.ok() ? *path : "(unknown path)", f.replica.inode,
                          f.replica.generation, f.replica.node,
                          f.verdict == ReplicaVerdict::kLost ? "lost" : "corrupt", f.note);
    if (summary.bad.size() < kMaxBadKept) summary.bad.push_back(f);
  }
  if (std::optional<catalog::ReplicaTransition> t = TransitionFor(f)) queue_.push_back(*t);
}

absl::Status ReplicaChecker::Flush(CheckSummary& summary) {
  std::vector<catalog::ReplicaTransition> items;
  items.swap(queue_);
  if (items.empty() || !options_.report) return absl::OkStatus();
  absl::StatusOr<std::vector<absl::Status>> results =
      options_.catalog.replicas->TransitionReplicas(items);
  if (!results.ok()) return results.status();
  for (std::size_t i = 0; i < results->size() && i < items.size(); ++i) {
    if ((*results)[i].ok()) {
      summary.reported += 1;
    } else {
      // Changed meanwhile (re-copied, removed, a new generation): not ours to judge now.
      options_.logger->debug("report on inode {} at {}: {}", items[i].inode, items[i].node,
                             (*results)[i].ToString());
    }
  }
  return absl::OkStatus();
}

void ReplicaChecker::CheckOne(const catalog::Replica& r, bool checksum, CheckSummary& summary) {
  if (!checksum) {
    Record(CheckReplicaFile(options_.spool, r, nullptr), summary);
    return;
  }
  absl::StatusOr<catalog::Attributes> attrs = options_.catalog.view->StatInode(r.inode);
  if (!attrs.ok()) {
    ReplicaFinding f;
    f.replica = r;
    f.note = attrs.status().ToString();
    Record(std::move(f), summary);
    return;
  }
  Record(CheckReplicaFile(options_.spool, r, &*attrs,
                          [this](std::size_t n) { return Pace(n); }),
         summary);
}

absl::StatusOr<CheckSummary> ReplicaChecker::StatPass() {
  CheckSummary summary;
  catalog::InodeId after = 0;
  while (!Stopping()) {
    absl::StatusOr<std::vector<catalog::Replica>> page =
        options_.catalog.view->ListNodeReplicas(options_.node, after, kPage);
    if (!page.ok()) return page.status();
    for (const catalog::Replica& r : *page) {
      after = r.inode;
      if (Checkable(r)) CheckOne(r, false, summary);
    }
    if (absl::Status s = Flush(summary); !s.ok()) return s;
    if (page->size() < kPage) break;
  }
  return summary;
}

absl::StatusOr<CheckSummary> ReplicaChecker::ScrubPass(bool everything,
                                                       std::chrono::steady_clock::time_point until) {
  CheckSummary summary;
  pace_start_ = std::chrono::steady_clock::now();
  paced_bytes_ = 0;
  const std::int64_t due_ns =
      catalog::SystemNowNs() -
      std::chrono::duration_cast<std::chrono::nanoseconds>(options_.scrub_period).count();
  catalog::InodeId after = 0;
  while (!Stopping()) {
    absl::StatusOr<std::vector<catalog::Replica>> page =
        options_.catalog.view->ListNodeReplicas(options_.node, after, kPage);
    if (!page.ok()) return page.status();
    for (const catalog::Replica& r : *page) {
      if (Stopping()) break;
      if (!Checkable(r)) {
        after = r.inode;
        continue;
      }
      // An unverified record (its node was dead) is always due: it counts again once read.
      if (!everything && r.state == catalog::ReplicaState::kComplete && r.verified_ns > due_ns &&
          r.mtime_ns != 0) {
        after = r.inode;
        continue;
      }
      // Time is up: stop before the next replica (at least one per pass, so that a pass
      // always moves on).
      if (summary.checked > 0 && std::chrono::steady_clock::now() >= until) {
        summary.partial = true;
        break;
      }
      after = r.inode;
      CheckOne(r, true, summary);
      // Report as we go: a long scrub must not sit on what it found.
      if (queue_.size() >= 64 ||
          (!queue_.empty() && queue_.back().to != catalog::ReplicaState::kComplete)) {
        if (absl::Status s = Flush(summary); !s.ok()) return s;
      }
    }
    if (absl::Status s = Flush(summary); !s.ok()) return s;
    if (summary.partial || page->size() < kPage) break;
  }
  if (Stopping()) summary.partial = true;
  return summary;
}

absl::StatusOr<CheckSummary> ReplicaChecker::CheckFiles(const std::vector<catalog::InodeId>& inodes,
                                                        bool checksum) {
  CheckSummary summary;
  pace_start_ = std::chrono::steady_clock::now();
  paced_bytes_ = 0;
  for (catalog::InodeId inode : inodes) {
    if (Stopping()) break;
    absl::StatusOr<std::vector<catalog::Replica>> all = options_.catalog.view->GetReplicas(inode);
    if (!all.ok()) return all.status();
    for (const catalog::Replica& r : *all) {
      if (r.node == options_.node && Checkable(r)) {
        CheckOne(r, checksum, summary);
      }
    }
    if (queue_.size() >= kPage) {
      if (absl::Status s = Flush(summary); !s.ok()) return s;
    }
  }
  if (absl::Status s = Flush(summary); !s.ok()) return s;
  return summary;
}

}  // namespace gfrep::replica::agent
