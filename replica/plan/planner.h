#pragma once

// Planner: turns replication requests into transfer tasks and follows them to the end.
//
// It reconciles instead of remembering: each Step() reads the active requests (queued or
// running), their tasks and the files' replicas from the catalog, and for every file
// compares the wanted number of complete current replicas (`copies`, counted in the
// destination sites when `-D` was given) with what exists plus what is in flight. Missing
// copies become new tasks: destinations from PlaceReplicas(), each with the best source
// for that destination from SelectSource(). Because all state is in the catalog, a
// restarted planner continues where the previous one stopped.
//
// Spreading and limits: tasks are created only while the destination node has fewer than
// `max_open_tasks_per_node` open (queued or leased) tasks and the route (source site ->
// destination site) has fewer than its `max_concurrent_tasks` (route table; 0 = no
// limit). Busyness of planned tasks feeds back into placement and source choice, so the
// files of one request spread over all node pairs that can carry them. Requests are
// served in priority order (then oldest first).
//
// Retries are per task, in the catalog: the agent fails an attempt with FailTask and a
// backoff delay (replica/core/retry.h); after max_attempts the task is kFailed with its last
// error, and the planner marks the file failed with that reason (it does not re-plan a
// failure of the same generation). A task that failed because the file changed generation
// is ignored and the file is planned again. Files the request names that do not exist
// (or directories without -r) fail at once. A request ends kDone when every file has its
// copies, kFailed (with a summary of up to a few failed paths and reasons) when every
// file has finished and some failed. Counters (files/bytes total/done/failed) are
// updated whenever they change.
//
// `-j` (RequestSpec::parallel) caps the open tasks of one request.
//
// Dead destinations: each step first expires every run-out lease in the catalog
// (Catalog::ExpireLeases; a node that died would never claim again, and only its own
// claims expired its leases), then abandons (Catalog::AbandonTask, "destination node X is
// down") every open task whose destination is not live: unregistered, or silent for longer
// than `heartbeat_timeout`, the same rule placement uses. An abandoned task is not a failed
// attempt of the file; the file is planned again in the same step, onto a live node (of the
// requested sites).
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
  // A request's files, and what earlier steps learned about them. A step looks up (Locate)
  // only the files not known done, and of those only until the windows are full (a step runs
  // after every finished copy: it must not cost a lookup per file of a large request). Every
  // `kFullSweep` a step looks at all of them again (a done file whose replica went stale
  // meanwhile is planned again then).
  struct FileList {
    std::vector<std::string> files;
    std::vector<std::uint64_t> sizes;  // as listed; corrected by each lookup
    std::vector<bool> done;            // had its copies at its last lookup
    std::vector<FileFailure> failures;
    std::int64_t last_full_ns = 0;     // when a step last looked at every file
  };
  // A request's tasks as the planner last saw them. Loaded whole once (and every
  // kFullSweep); then each step refreshes only what can have changed: the open tasks, from
  // the catalog's open-task index, and a task that left it (finished), read once. Listing
  // every task of a 10,000-file request in every step made a step cost O(files) and the
  // request O(files^2).
  struct TaskView {
    std::map<std::uint64_t, catalog::Task> tasks;  // id -> task
    std::map<std::string, std::vector<std::uint64_t>> by_path;
    bool loaded = false;
    std::int64_t loaded_ns = 0;
    void Put(catalog::Task t);
  };
  // Brings views_ of the `active` requests up to date with `open` (every open task).
  absl::Status RefreshViews(const std::vector<catalog::Request>& active,
                            const std::vector<catalog::Task>& open)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(step_mu_);
  explicit Planner(PlannerOptions options);
  std::int64_t Now() const;
  absl::StatusOr<FileList> Expand(const catalog::RequestSpec& spec);
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
  std::map<std::uint64_t, FileList> expanded_ ABSL_GUARDED_BY(step_mu_);  // request id -> files
  std::map<std::uint64_t, TaskView> views_ ABSL_GUARDED_BY(step_mu_);     // request id -> tasks

  std::atomic<bool> stop_{false};
  std::thread thread_;
  std::chrono::steady_clock::time_point last_purge_{};  // Loop's thread only
};

}  // namespace gfrep::replica::plan
