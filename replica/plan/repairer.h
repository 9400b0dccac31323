#pragma once

// Repairer: makes the copies of lost and corrupt replicas again, without anyone typing.
//
// Agents (replica/agent/replica_check.h), readers and destinations that received bad bytes from a
// source mark a replica record `lost` or `corrupt` in the catalog. The repairer follows the
// catalog's event log for those transitions (and, at start and every `scan_interval`, scans
// every node's records, so nothing is missed while it was down) and, for each file with bad
// replicas of its current generation, creates one replication request (origin kRepair):
//   - destination sites: the sites of the bad replicas; copies: the complete replicas
//     those sites hold now plus one per bad replica, so the planner (replica/plan/planner.h)
//     makes exactly the missing copies there, from the best good source, with its usual
//     retries, limits and explanations; the node that lost the copy is a destination like
//     any other of its site (its record is replaced by the new copy's);
//   - priority kRepairPriority, or kLastCopyPriority when the file is down to one complete
//     replica (ahead of all new replication: one more failure would lose it).
// A bad replica whose site has no live node left (none registered, or none with a heartbeat
// within `node_timeout`) cannot get its copy back there: the file's holders (replica/plan/holds.h:
// the `gfrep -N` requests that named it, the policy rules that cover it) get their counts
// restored elsewhere instead, one request per holder short of copies (in the holder's sites
// that have a live node, or anywhere for a request without sites; a holder whose sites are
// all down waits for the next scan); a file no holder wants gets its copy anywhere.
// When the request is done, bad records still left (the copy went to another node of the
// site) move to `deleting`, so their nodes drop what remains; bad records of an older
// generation move there at once. A file without any complete replica left cannot be
// repaired: it is logged (error) and looked at again at the next scan.
//
// Dead nodes (HDFS's dead DataNodes): a node silent for longer than `node_dead_after` is dead.
// Each step marks its complete replicas `unverified` (catalog/types.h: never served, not
// counted) and repairs them as above: the copies come back on the site's other live nodes,
// or the holders' counts elsewhere. Nothing is marked while the node is only suspect (silent
// past `node_timeout`, not yet dead). A repaired unverified record stays, noted
// kRemadeNote: if the node comes back, its agent checks its replicas (stat, then checksum at
// the scrub's pace; replica/agent/replica_check.h) and a good one is complete again (noted
// kRecheckedNote), a damaged one is dropped.
//
// Drain (gfnode drain: catalog::NodeMode::kDraining): every complete replica of a draining
// node that is not dead is repaired as a bad one while it stays a source and does not count
// (the planner and the catalog's request counters leave it out too); once its copy is made
// again elsewhere, or the holders have their counts without it, it moves to `deleting`, so
// that the node ends holding nothing and `gfnode rm` takes it.
//
// The holders' desired state comes first: a file whose holders (replica/plan/holds.h) all
// have their counts among its complete replicas gets no copy made again; its bad records are
// dropped, and a copy that came back from a dead node beyond the counts is trimmed (moved to
// `deleting`), never below a holder's count and never the last complete one. A file no
// holder wants keeps such a copy (the count it had is not known).
//
// At most one repair request per file is open at a time (found again after a restart
// from the active requests of origin kRepair); copies of the file found bad while it
// runs get the next request once it is done. A failed repair request is tried again at the
// next scan.
//
// Threading: Step() is synchronous; Start() runs it on an own thread, woken by the event
// log (long poll) or every `scan_interval`; Stop() joins.

#include <spdlog/logger.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "catalog/catalog.h"
#include "catalog/event_cursor.h"
#include "replica/plan/holds.h"
#include "replica/plan/policy.h"

namespace gfrep::replica::plan {

inline constexpr std::int32_t kRepairPriority = 1000;
inline constexpr std::int32_t kLastCopyPriority = 2000;
static_assert(kRepairPriority > catalog::kMaxUserRequestPriority,
              "a user's request must never outrank a repair");
inline constexpr const char* kRepairOwner = "repair";

struct RepairerOptions {
  // Uses view, work and replicas. REQUIRES: those non-null, outliving the repairer.
  catalog::Roles catalog;
  // Full scan of every node's replica records this often (and at start).
  std::chrono::milliseconds scan_interval{std::chrono::minutes(10)};
  // A node without a heartbeat for this long is down (as the planner's --node-timeout).
  std::chrono::milliseconds node_timeout{std::chrono::seconds(30)};
  // ...and for this long, dead: its replicas are unverified and made again elsewhere
  // (gfcatalogd --node-dead-after). At least node_timeout.
  std::chrono::milliseconds node_dead_after{std::chrono::minutes(10)};
  // Unix ns; null: catalog::SystemNowNs.
  catalog::Clock clock;
  // Null: spdlog::default_logger().
  std::shared_ptr<spdlog::logger> logger;
};

// What one step did.
struct RepairStepSummary {
  std::uint64_t requests_created = 0;
  std::uint64_t records_dropped = 0;  // bad records moved to deleting
  std::uint64_t unrepairable = 0;     // files with bad replicas and no complete one
  std::uint64_t replicas_unverified = 0;  // complete replicas of dead nodes marked
  std::uint64_t trimmed = 0;              // copies back from a dead node beyond the counts
  std::uint64_t drained = 0;              // draining nodes' copies dropped, made elsewhere
};

class Repairer {
 public:
  explicit Repairer(RepairerOptions options);
  ~Repairer();

  // Reads the events since the last step (a full scan on the first step and when due) and
  // acts on every file with bad replicas.
  absl::StatusOr<RepairStepSummary> Step();

  void Start();
  void Stop();

 private:
  struct Open {
    std::vector<std::uint64_t> request_ids;
    std::uint64_t generation = 0;
    std::set<std::string> bad_nodes;
  };
  absl::Status Recover();
  absl::Status Scan(std::set<catalog::InodeId>& out);
  absl::Status Consider(catalog::InodeId inode, RepairStepSummary& summary);
  absl::Status Finish(catalog::InodeId inode, Open& open, RepairStepSummary& summary);
  // Marks the complete replicas of nodes dead now unverified, and finds those of draining
  // nodes (a node's records are walked once per death or drain, again on a `rescan`); adds
  // the files to make again to `out`.
  absl::Status WalkNodes(bool rescan, std::set<catalog::InodeId>& out, RepairStepSummary& summary);
  // What the holders of `inode` (at `path`) want now.
  absl::StatusOr<std::vector<Want>> HolderWants(catalog::InodeId inode, const std::string& path,
                                                const std::vector<catalog::Site>& sites);
  // The holders have their counts among `good`: drops the `bad` records (an unverified one is
  // noted kRemadeNote), and trims the `rejoined` copies they do not need.
  absl::Status Settle(const std::string& path, const std::vector<const catalog::Replica*>& bad,
                      const std::vector<const catalog::Replica*>& rejoined, const std::vector<Want>& wants,
                      std::set<std::string> good, const std::map<std::string, std::string>& site_of,
                      RepairStepSummary& summary);
  // Requests restoring the `wants` (none: the copies that were there) elsewhere (kept in
  // `open`).
  absl::Status RestoreHolders(const std::string& path, std::vector<Want> wants,
                              const std::set<std::string>& live_sites, const std::set<std::string>& good,
                              const std::map<std::string, std::string>& site_of, std::int32_t priority,
                              Open& open, RepairStepSummary& summary);
  // The policy document's rules, re-read when its version changed.
  absl::Status LoadRules();
  void Loop();

  RepairerOptions options_;
  std::shared_ptr<spdlog::logger> log_;

  // Step() state (one caller at a time).
  bool recovered_ = false;
  std::optional<catalog::EventCursor> events_;  // set by Recover()
  std::chrono::steady_clock::time_point last_scan_{};
  bool scanned_ = false;
  std::map<catalog::InodeId, Open> open_;  // files with a repair request in flight
  std::map<std::string, std::int64_t> dead_;  // dead nodes walked: their last heartbeat then
  std::set<std::string> draining_;            // draining nodes walked
  std::vector<catalog::Node> nodes_;          // this step's nodes
  // A complete replica of a draining node: made again elsewhere, then dropped.
  bool Leaving(const catalog::Replica& r) const {
    return r.state == catalog::ReplicaState::kComplete && draining_.count(r.node) > 0;
  }
  HoldIndex holds_;
  std::vector<PolicyRule> rules_;
  std::uint64_t rules_version_ = 0;

  std::atomic<bool> stop_{false};  // set under wake_mu_, so that Loop's wait ends at once
  absl::Mutex wake_mu_;
  std::thread thread_;
};

}  // namespace gfrep::replica::plan
