#pragma once

// Planner: turns replication requests into transfer tasks. It only plans; the catalog
// follows each request's files and ends the request (catalog::RequestFile).
//
// Expansion, once per request: the request's paths are walked (-r) and its files listed in
// the catalog in one write (Catalog::AddRequestFiles); a path that names nothing (or a
// directory without -r) is a failed file at once. A restarted planner finds the request
// expanded and never walks it again.
//
// Each Step() then reads the active requests (queued or running) and, of each, the files the
// catalog wants copied (RequestFileState::kWanted, an index: cheap however many files have
// settled), and for each compares the wanted number of complete current replicas (`copies`,
// counted in the destination sites when `-D` was given) with what exists plus what is in
// flight. Missing copies become new tasks: destinations from PlaceReplicas(), each with the
// best source for that destination from SelectSource(); creating them opens the file in the
// catalog (wanted -> copying). A file that already has its copies, or cannot get them (no
// live destination with room, no source), is settled by the planner
// (Catalog::SettleRequestFile); every other verdict is the catalog's, in the same write as
// the task change: a file is done when its last task settles with the copies there, failed
// when a copy gave up after max_attempts from a source that still holds it, and wanted
// again otherwise (abandoned, obsolete, the file changed generation). The write that
// settles a request's last file ends the request (done, or failed with a summary) and moves
// its counters: the planner writes no counters.
//
// Spreading and limits: tasks are created only while the destination node has fewer than
// `max_open_tasks_per_node` open (queued or leased) tasks and the route (source site ->
// destination site) has fewer than its `max_concurrent_tasks` (route table; 0 = no
// limit). Busyness of planned tasks feeds back into placement and source choice, so the
// files of one request spread over all node pairs that can carry them. Requests are
// served in priority order (then oldest first). `-j` (RequestSpec::parallel) caps the open
// tasks of one request.
//
// Dead destinations: each step first expires every run-out lease in the catalog
// (Catalog::ExpireLeases; a node that died would never claim again, and only its own
// claims expired its leases), then abandons (Catalog::AbandonTask, "destination node X is
// down") every open task whose destination is not live: unregistered, or silent for longer
// than `heartbeat_timeout`, the same rule placement uses. An abandoned task is not a failed
// attempt of the file; the catalog wants the file again and it is planned in the same step,
// onto a live node (of the requested sites).
//
// Threading: Step() is synchronous (blocking catalog calls). Start() runs Step() on an
// own thread whenever catalog events arrive (long poll) or every `interval`; Stop() joins.

#include <spdlog/logger.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "catalog/catalog.h"
#include "replica/core/retry.h"
#include "replica/core/selection.h"

namespace gfrep::replica::plan {

struct PlannerOptions {
  // The catalog to plan in: uses view and work. REQUIRES: those non-null, outliving the planner.
  catalog::Roles catalog;
  // Unix ns; null: catalog::SystemNowNs.
  catalog::Clock clock;
  // Nodes silent for longer are not used as sources or destinations, and their open tasks
  // (as destination) are abandoned and planned elsewhere.
  std::chrono::milliseconds heartbeat_timeout{30000};
  // Open tasks per destination node (keeps the agent's queue fed without planning
  // thousands of files ahead). A site agent's worker holds a task while it copies, its agent
  // claims up to one more per worker ahead, and finished ones hold theirs until the catalog
  // commit returns: with 16 workers, 16 starved them (13 copies in flight on average on
  // lfn-1g), hence 64. A node whose agent reports its workers (Node::workers) gets at least 4
  // per worker.
  int max_open_tasks_per_node = 64;
  // Attempts per task (passed to TaskSpec::max_attempts).
  std::uint32_t max_attempts = 5;
  // Finished requests (and their tasks) are forgotten this long after they finished
  // (Catalog::PurgeFinishedRequests, checked every `purge_interval` by Start()'s loop);
  // zero keeps them forever.
  std::chrono::seconds finished_request_retention{7 * 24 * 3600};
  std::chrono::milliseconds purge_interval{600000};
  // Longest wait between two steps when nothing happens (Start()).
  std::chrono::milliseconds interval{1000};
  // Null: spdlog::default_logger().
  std::shared_ptr<spdlog::logger> logger;
};

absl::Status Validate(const PlannerOptions& options);

// One copy the planner would make (dry run) or made.
struct PlannedCopy {
  std::string path;
  std::uint64_t size = 0;
  std::string src_node;
  std::string src_site;
  std::string dst_node;
  std::string dst_site;
  // Its share of the route's stream budget (route_budget.h); 0: the route's own streams.
  std::uint32_t streams = 0;
};

struct FileFailure {
  std::string path;
  std::string error;
};

// What Preview() reports for a request spec (gfrep -n).
struct PlanPreview {
  std::vector<PlannedCopy> copies;      // to be made
  std::vector<std::string> satisfied;   // files that already have their copies
  std::vector<FileFailure> failures;    // files that cannot be replicated
};

class Planner {
 public:
  static absl::StatusOr<std::unique_ptr<Planner>> Create(PlannerOptions options);
  ~Planner();

  // One reconciliation pass over all active requests.
  absl::Status Step();

  // What planning `spec` now would do, without writing anything.
  absl::StatusOr<PlanPreview> Preview(const catalog::RequestSpec& spec);

  // Runs Step() on a background thread until Stop().
  void Start();
  void Stop();

 private:
  explicit Planner(PlannerOptions options);
  std::int64_t Now() const;
  // The request's files: the paths it names, directories walked (-r); an entry with an error
  // for a path that names nothing to copy. kInvalidArgument past kMaxBatchPaths files.
  absl::StatusOr<std::vector<catalog::RequestFileInput>> Expand(const catalog::RequestSpec& spec);
  // Expands `r` into the catalog (AddRequestFiles), or fails it (too many files); returns
  // the request as written.
  absl::StatusOr<catalog::Request> ExpandInCatalog(const catalog::Request& r)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(step_mu_);
  void Loop();
  // Forgets old finished requests when `purge_interval` has passed since the last time.
  void PurgeIfDue();

  // Constant after construction.
  PlannerOptions options_;
  std::shared_ptr<spdlog::logger> log_;

  // Used by Step() only (one caller at a time).
  absl::Mutex step_mu_;
  // Since when this planner has been stepping without a stall:
  // heartbeats are judged only a full heartbeat_timeout later, so that a restarted
  // gfcatalogd, or one that was itself stalled (the machine frozen, the process stopped:
  // no heartbeat could arrive meanwhile), does not take every node for dead before the
  // nodes had a chance to report. Reset when two steps are more than half a heartbeat
  // timeout apart.
  std::int64_t first_step_ns_ ABSL_GUARDED_BY(step_mu_) = 0;
  std::int64_t last_step_ns_ ABSL_GUARDED_BY(step_mu_) = 0;

  std::atomic<bool> stop_{false};
  std::thread thread_;
  std::chrono::steady_clock::time_point last_purge_{};  // Loop's thread only
};

}  // namespace gfrep::replica::plan
