#pragma once

// SiteAgent is the catalog role of gfsited: it registers its node, sends heartbeats (free
// space of the spool, 1-minute load, active transfers), claims the transfer tasks planned
// for its node with a lease (renewed while copying), pulls each file from the source
// node's agent with transfer::AsyncPull using the route's settings from the catalog,
// verifies the copy against the catalog's checksum of the task's generation, moves it into
// place and only then calls CompleteTask (the catalog makes the replica complete
// durably). Any failure is recorded with FailTask and its reason; retryable ones
// (replica/core/retry.h) come back after an exponential backoff, up to the task's attempts.
//
// Files on disk (see replica/core/spool.h): replicas by identity, "<spool>/.gfrep-data/<inode>/
// <generation>". A copy is pulled (from the source's file of the same name) straight to
// that name, with its partial data and restart markers in "<spool>/.gfrep-tmp/task-<id>/"
// (so a re-claimed task resumes where the previous attempt stopped, also across agent
// restarts); the engine checks it against the catalog's checksum and size and installs it
// create-only and durably (TransferOptions::expected_checksum; a file already there is
// verified and kept if it matches: an earlier attempt got that far), and only then
// CompleteTask is called. The name is unique to (inode, generation), so a late copy
// of an older generation can never overwrite newer bytes; the catalog's generation checks
// in CompleteTask decide whether the copy becomes the node's replica. At Start(), temporary
// files (and staging files older versions left) of tasks that are no longer open for this node are
// removed, and a spool of the old path-keyed layout is migrated (internal/spool_keeper.h).
//
// Leases: every claim has its own lease owner ("<agent owner>#<n>"), so when a lease runs
// out (a catalog outage or a pause longer than the lease) and the task is claimed again,
// even by another worker of this agent, the old attempt's renewal fails and it is
// cancelled: one task, one live attempt. The engine's lock on the partial file makes a
// second attempt wait its turn (it fails as retryable) rather than share the file.
//
// Deletion and garbage: the sweep (every `sweep_interval`, and at once when the catalog
// marks one of the node's replicas deleting) unlinks the bytes of the node's kDeleting
// replicas and calls RemoveReplica; every `gc_interval` it also removes files under
// .gfrep-data that no replica record vouches for (superseded generations, uploads whose
// commit failed, after `orphan_grace`).
//
// Catalog restarts: every loop treats kUnavailable as "try again shortly"; the gRPC
// channel reconnects by itself; a heartbeat answered kNotFound re-registers the node.
//
// The copy pipeline (site_agent_copy.cc): a claim thread keeps up to ClaimAhead(copies
// allowed at once) tasks claimed ahead (a ClaimTasks call leases many at once, in one
// catalog write, whenever the ready ones fall to half of that and the catalog has more);
// each claimed task carries the file's checksum, so a copy needs no catalog call of its own.
// While fewer copies run than are allowed, the next ready task is started as a coroutine on
// the one of `io_threads` I/O threads that runs the fewest, which runs its pull: no thread
// per copy. The
// copy's blocking steps (reading the catalog's route and node, verifying a file already in
// place, syncing the replica's directories, reporting a bad source, failing the task) go to a
// small pool of threads and the coroutine resumes on its I/O thread. Finished copies wait in a
// queue that a committer drains with one CompleteTasks call for all that wait (the lease stays
// renewed until the catalog answered; at most 4 x workers copies wait). So a small file costs
// a fraction of a catalog round trip instead of three (claim, stat, complete). Each I/O
// thread keeps the sessions to source agents open between files (transfer::SessionCache):
// the next file from the same source starts with one request on warm, authenticated
// connections instead of a new connection setup and slow start. Tasks still ready at Stop()
// are given back (FailTask, retryable, no backoff).
//
// Routes learnt from the copies (route_learner.h): each copy's received bytes and its
// sender's TCP figures (least and smoothed RTT, bytes re-sent) go into a RouteLearner; each
// heartbeat carries one observation per route that moved something, which the catalog folds
// into Route::observed (source selection ranks unmeasured routes by that RTT), and the
// tuner of the copies at once takes the same figures as its congestion signals.
//
// Threading: Start() launches a heartbeat thread, a lease-renewal thread, an event
// watcher, a sweep thread, a claim thread, 2 committer threads, `io_threads` I/O threads, a
// pool of kBlockingThreads for the copies' blocking steps and (adapt_in_flight) a tuning
// thread: the same count for 1 copy at once or 256. A copy is cancelled (lease lost, Stop())
// through an asio cancellation signal emitted on its I/O thread, never by stopping the
// io_context, so the engine's work on its blocking pool always completes. Stop() (any
// thread) cancels running copies (their tasks are failed as retryable so another attempt
// resumes them), waits for them to end, joins the threads and then the I/O threads.

#include <spdlog/logger.h>

#include <atomic>
#include <boost/asio/awaitable.hpp>
#include <chrono>
#include <cstdint>
#include <deque>
#include <filesystem>
#include <future>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "catalog/catalog.h"
#include "replica/agent/copy_meter.h"
#include "replica/agent/in_flight.h"
#include "replica/agent/route_learner.h"
#include "replica/core/metrics.h"
#include "replica/core/retry.h"
#include "transfer/client.h"
#include "transfer/durable_file.h"
#include "transfer/options.h"

namespace boost::asio {
class io_context;
class thread_pool;
}  // namespace boost::asio

namespace gfrep::replica::agent {
namespace internal {
class SpoolKeeper;
}

// The most copies at once an agent runs (SiteAgentOptions::workers, gfsited --workers).
inline constexpr int kMaxWorkers = 1024;

struct SiteAgentOptions {
  // Uses view, work, replicas and sites (usually all one catalog::CatalogClient).
  // REQUIRES: those non-null, outliving the agent.
  catalog::Roles catalog;
  std::string site;
  std::string node;
  // host:port other agents reach this node's transfer agent at.
  std::string address;
  // The transfer agent's spool directory.
  std::filesystem::path spool;
  // This node's agent refuses data connections in clear (gfsited --require-tls): said in its
  // catalog record, so that whoever pulls from it encrypts.
  bool requires_data_tls = false;
  // Create the site in the catalog if it does not exist yet.
  bool create_site = true;
  // Copies at once, at most (coroutines, not threads; also registered as Node::workers,
  // which sizes the planner's window for this node). 1..kMaxWorkers.
  int workers = 512;
  // Tune the copies at once from measured goodput (in_flight.h) between 1 and `workers`
  // every `tune_period`, starting each burst of work (tasks claimed by an idle agent) from
  // enough copies to keep 1.3 bandwidth-delay products in flight, at least
  // `initial_in_flight`; false runs `workers` at once.
  bool adapt_in_flight = true;
  int initial_in_flight = 4;
  // Bytes a burst starts with in flight where the route's bandwidth-delay product is not
  // known (0: start every burst at initial_in_flight): 1.3 BDP of a 1 Gbit/s, 200 ms route.
  std::uint64_t start_in_flight_bytes = 32 << 20;
  std::chrono::milliseconds tune_period{1000};
  // Keep transfer sessions to source agents open between files (see Pipelining above);
  // false opens a new session per file (for comparison).
  bool reuse_sessions = true;
  // With reuse_sessions: pipelined files (transfer::SessionCache::SetPipelining). Each I/O
  // thread keeps at most its share of the copies at once as sessions to one source; twice
  // as many copies run, and a copy that finds no idle session sends its get ahead on a
  // session in use, so the next file's bytes follow the last one's without a round trip.
  bool pipeline_files = true;
  // Threads that run the copies (1..64); a copy goes to the one that runs the fewest, and
  // each keeps the warm sessions of its copies.
  int io_threads = 2;
  // Lease per claim; renewed every lease/3 while copying.
  std::chrono::milliseconds lease{15000};
  std::chrono::milliseconds heartbeat_interval{2000};
  // Claim attempts when idle and no event arrived (tasks whose backoff ended make none).
  std::chrono::milliseconds poll_interval{1000};
  // Deletion sweep period (also woken by "deleting" replica events).
  std::chrono::milliseconds sweep_interval{10000};
  // Garbage collection of unrecorded files under .gfrep-data (also once at start).
  std::chrono::milliseconds gc_interval{600000};
  // Unrecorded replica files younger than this are kept (uploads awaiting their commit).
  std::chrono::milliseconds orphan_grace{3600000};
  // Consistency checks (replica/agent/replica_check.h): a stat check of every complete replica
  // this often (0: none), and a checksum scrub at scrub_rate_bytes per second (0: none, at
  // idle I/O priority) that re-reads a replica once its last verification is older than
  // scrub_period. What they find is reported to the catalog (lost, corrupt).
  std::chrono::milliseconds check_interval{60000};
  std::uint64_t scrub_rate_bytes = 32ull << 20;
  std::chrono::seconds scrub_period{std::chrono::hours(24 * 7)};
  // Live telemetry for the dashboard (replica/web/telemetry.h): the running copies' received
  // bytes sampled every 100 ms, sent to `telemetry` this often (0: never). A catalog server
  // without a dashboard answers kUnimplemented: the agent then stops sending.
  std::chrono::milliseconds telemetry_interval{250};
  // Usually the CatalogClient (the catalog server's Telemetry service); null: none sent.
  // Outlives the agent.
  catalog::TelemetrySink* telemetry = nullptr;
  // Stragglers (straggler.h): a copy whose goodput over `straggler_after` stays under
  // `straggler_fraction` of the median of the other copies is given back to the catalog
  // (YieldTask), which plans the file again from another replica, and cancelled; with no
  // other replica the catalog refuses and the copy goes on. 0: never.
  std::chrono::milliseconds straggler_after{30000};
  double straggler_fraction = 0.25;
  // Slow sources (slow_source.h): a source node whose copies' goodput per copy over
  // `slow_source_after` stays under `straggler_fraction` of the median of the other sources'
  // has its running copies given back, and every copy from it that would start in the next
  // three windows; then it is judged afresh. Shorter than straggler_after: it judges many
  // copies at once, not one. 0: never.
  std::chrono::milliseconds slow_source_after{10000};
  // How long a source node's address and a route, looked up in the catalog, are used
  // before they are asked again; they are refreshed ahead of the copies every half of it.
  std::chrono::milliseconds lookup_ttl{10000};
  RetryOptions retry;
  // Engine settings for pulls (shared key, TLS, checksum, timeouts); route fields are the
  // defaults that the catalog's route table overrides.
  transfer::TransferOptions transfer;
  // Null: spdlog::default_logger().
  std::shared_ptr<spdlog::logger> logger;
};

absl::Status Validate(const SiteAgentOptions& options);

// Tasks the claim thread keeps claimed ahead for `workers` copies at once: as many again (at
// most 128 more), claiming again when half are left. A claim is a catalog round trip (across
// the WAN for a remote catalog); with only `workers` ahead, small files used them up before
// the next claim answered and every other copy waited one round trip for its task.
std::size_t ClaimAhead(int workers);

struct SiteAgentStats {
  std::uint64_t tasks_done = 0;
  std::uint64_t tasks_failed = 0;  // attempts that failed
  std::uint64_t bytes_received = 0;
  std::uint64_t replicas_deleted = 0;  // unlinked (or already gone) and removed from the catalog
  std::uint64_t leases_lost = 0;       // attempts cancelled because their lease was lost
  std::uint64_t stragglers = 0;        // copies given back as too slow (YieldTask)
  std::uint64_t slow_sources = 0;      // source nodes judged slow (SlowSourceWatch)
  std::uint64_t slow_source_yields = 0;  // copies and claims given back for a slow source
  std::uint64_t garbage_files = 0;     // unrecorded files removed from .gfrep-data
  std::uint64_t pulls_on_new_sessions = 0;   // copies that opened a transfer session
  std::uint64_t pulls_on_warm_sessions = 0;  // copies that reused an open one
  std::uint64_t claim_calls = 0;     // ClaimTasks calls that leased at least one task
  std::uint64_t complete_calls = 0;  // CompleteTasks calls (each commits a batch)
  std::uint64_t replicas_checked = 0;  // by stat checks and scrubs
  std::uint64_t replicas_lost = 0;     // found missing (reported lost)
  std::uint64_t replicas_corrupt = 0;  // found damaged (reported corrupt), sources included
  std::uint64_t scrub_bytes = 0;       // read by scrubs
  int in_flight_limit = 0;           // copies allowed at once now (adapt_in_flight)
  int peak_in_flight = 0;            // most copies that ran at once
  // From the node's disk profile (0: none): how the copies it receives write and flush.
  std::uint64_t disk_write_io_size = 0;
  std::uint64_t disk_flush_interval = 0;
};

// gfsited's /metrics: the agent's counters in Prometheus text.
void AppendMetrics(MetricsText& m, const SiteAgentStats& stats);

class SiteAgent {
 public:
  static absl::StatusOr<std::unique_ptr<SiteAgent>> Create(SiteAgentOptions options);
  ~SiteAgent();

  // Cleans abandoned temporary files, registers the node (retrying while the catalog is
  // unreachable, until Stop()), and starts the threads. Returns the registration error if
  // it is not a transient one (kInvalidArgument, kNotFound site when !create_site, ...),
  // kCancelled if Stop() was called meanwhile.
  absl::Status Start();
  // Thread-safe, also while another thread is in Start() (which then returns kCancelled
  // within one catalog call); returns once every agent thread has ended.
  void Stop();

  // The lease owner prefix of this incarnation ("<node>/<pid>-<random>"); each claim's
  // owner is "<owner>#<n>".
  const std::string& owner() const { return owner_; }
  int active_transfers() const { return active_.load(); }
  SiteAgentStats stats() const;
  // OK once registered and while heartbeats reach the catalog (gfsited's /readyz).
  absl::Status Health() const;

 private:
  explicit SiteAgent(SiteAgentOptions options);
  absl::Status Register();
  void CleanTemporaryFiles();
  void HeartbeatLoop();
  void RenewLoop();
  void WatchLoop();
  // Claims tasks in batches (one ClaimTasks call for many), keeping up to
  // ClaimAhead(copies allowed at once) of them ready; see "The copy pipeline" above.
  void ClaimLoop();
  // Commits finished copies in batches (one CompleteTasks call for all that wait).
  void CompleteLoop();
  // Gives tasks claimed but never started back to the catalog (retryable, no backoff).
  struct Claimed;
  void GiveBack(std::deque<Claimed> tasks);
  void SweepLoop();
  // Stat checks every check_interval, scrubbing in between (replica_check.h).
  void CheckLoop();
  // Samples the copies' counters every 100 ms and sends them every telemetry_interval.
  void TelemetryLoop();
  // Every second (at most a quarter of either window): the running copies' received bytes
  // to a StragglerWatch and a SlowSourceWatch; a straggler's task is given back (YieldTask)
  // and, if the catalog took it, its copy cancelled. A slow source's running copies are given
  // back alike, and so is every copy from it that would start in the next three
  // slow_source_after.
  void StragglerLoop();
  // Gives task `id`'s running copy back to the catalog for `reason` (YieldTask) and cancels it
  // if the catalog took it; false if it ended or the catalog kept it (no other replica).
  bool GiveBackRunning(std::uint64_t id, const std::string& reason, bool slow_source);
  // Why copies from `node` are given back before they start ("": they are not).
  std::string SlowSourceReason(const std::string& node) ABSL_LOCKS_EXCLUDED(mu_);
  // Reports the copy's source replica corrupt (its bytes did not match the catalog).
  void ReportBadSource(const catalog::Task& task, const std::string& note);
  // Every tune_period: goodput and whether the limit held copies back -> InFlightLimit.
  void TuneLoop();
  // Copies allowed at once now.
  // Copies that may run now: the tuned copies at once, twice that with pipeline_files (a copy
  // waiting ahead on a session does not move bytes yet).
  int LimitLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Tells each I/O thread's session cache its share of the copies at once (pipeline_files).
  void ShareSessionsLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Copies at once to start a burst of work with: BurstStartCopies (replica/core/route_budget.h)
  // for the route in the lookup cache (start_in_flight_bytes where it is not there), between
  // initial_in_flight and workers.
  int BurstStartLocked(const std::vector<catalog::Task>& tasks) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The route in the lookup cache from `src_node`'s site to this one (null: not there).
  const catalog::Route* CachedRouteLocked(const std::string& src_node) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The most copies TuneLoop's probes may reach (InFlightSample::ceiling), from the copies
  // started since the last call (their mean size, the last one's route and share); the last
  // ceiling when none started.
  int ProbeCeilingLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The copy pipeline (site_agent_copy.cc). An I/O thread of the copies (io_threads of them).
  struct CopyIo;
  struct Running;
  // What a copy needs before its pull (PlanCopy), and what it brings (CopyResult).
  struct PullPlan;
  struct CopyResult {
    std::uint64_t bytes = 0;
    std::int64_t mtime_ns = 0;  // of the replica file, recorded by the commit
  };
  // Starts the I/O threads and the blocking pool (Start), and ends them once no copy runs
  // (Stop).
  void StartCopyThreads() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void StopCopyThreads();
  // Starts ready tasks as copies while fewer run than are allowed and there is room for
  // their commits; wakes the claim loop when the ready ones fall to half of ClaimAhead.
  // Each is taken from the source with the fewest copies running (NextReadyLocked).
  void LaunchLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The ready task to start next: among the first kSpreadLookahead, the first whose source
  // node runs the fewest copies now (the front when all come from one source).
  std::deque<Claimed>::iterator NextReadyLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // One claimed attempt, a coroutine on its I/O thread: copy, then queue its commit or fail
  // the task as `claimed.owner`.
  boost::asio::awaitable<void> RunCopy(Claimed claimed, std::shared_ptr<Running> run);
  boost::asio::awaitable<absl::Status> Copy(const catalog::Task& task, Running& run,
                                            CopyResult& out);
  // On the blocking pool: checks the catalog's record, finds an earlier attempt's replica in
  // place, looks up the source and the route, decides the pull's settings.
  absl::StatusOr<PullPlan> PlanCopy(const catalog::Task& task, CopyResult& out);
  // On the blocking pool: what the pull's outcome means for the task.
  absl::Status FinishCopy(const catalog::Task& task, const Running& run, const PullPlan& plan,
                          absl::StatusOr<transfer::TransferStats> pulled, CopyResult& out);
  // On the blocking pool: FailTask with the reason, retryable or not, with its backoff.
  void FailAttempt(const catalog::Task& task, const std::string& owner, const absl::Status& result);
  // Asks a running copy to stop (from any thread; REQUIRES mu_ held).
  static void CancelLocked(Running& run);
  catalog::Heartbeat MakeHeartbeat() const;
  // Source node and route lookups, cached for `lookup_ttl` (each is a catalog round trip,
  // i.e. one WAN RTT per small file otherwise). A failed copy drops the node's entry.
  absl::StatusOr<catalog::Node> LookupNode(const std::string& name);
  absl::StatusOr<catalog::Route> LookupRoute(const std::string& src_site);
  // Keeps those caches fresh ahead of the copies: every node once at start (a source's
  // first copy needs no node lookup), then each node a copy used lately and every route into
  // this site (one listing), every half `lookup_ttl` (a copy every 10 s waited two catalog
  // round trips before its pull; the first copy from a site waited for its route).
  void LookupLoop();
  // True if `all_nodes` and the listing succeeded.
  bool RefreshLookups(bool all_nodes);
  void SleepFor(std::chrono::milliseconds d);
  // The absl deadline of a steady-clock time (the condition variables wait by absl time).
  static absl::Time DeadlineOf(std::chrono::steady_clock::time_point t);

  // Constant after construction.
  SiteAgentOptions options_;
  std::shared_ptr<spdlog::logger> log_;
  std::string owner_;
  std::unique_ptr<internal::SpoolKeeper> keeper_;
  // The spool's directories whose names are on disk (each chain synced once per process).
  transfer::DurableDirectories durable_dirs_;
  CopyMeter meter_;
  std::atomic<std::int64_t> last_heartbeat_ok_ns_{0};
  // From this node's disk profile in the catalog (gfprobe disk --store; 0: none): the write
  // size and the journal flush interval of the copies this agent receives. Read at Register
  // and again every minute by the heartbeat loop.
  void LoadDiskProfile();
  std::atomic<std::uint64_t> disk_write_io_size_{0};
  std::atomic<std::uint64_t> disk_flush_interval_{0};
  std::int64_t disk_checked_ns_ = 0;  // heartbeat thread only

  absl::Mutex stop_mu_;  // serialises Stop()
  std::atomic<bool> stop_{false};
  std::atomic<int> active_{0};
  std::vector<std::thread> threads_;
  // Created by Start(), stopped by Stop() after every copy has ended (guarded by mu_ while
  // they change; the copies use their entry without the lock).
  std::vector<std::unique_ptr<CopyIo>> copy_io_;
  std::unique_ptr<boost::asio::thread_pool> blocking_;

  mutable absl::Mutex mu_;
  // Each waits with mu_: wake_ for stop, sleeps and the sweep; the others for one loop's
  // work, so that a finished copy or a claimed task wakes one thread, not every thread.
  absl::CondVar wake_;
  absl::CondVar claim_wake_;     // the claim loop: tasks queued, room for more
  absl::CondVar complete_wake_;  // completers: a copy waits for its commit
  absl::CondVar copies_ended_;   // Stop(): the last running copy ended
  absl::CondVar check_wake_;     // CheckLoop: only Stop() wakes it early
  std::uint64_t wake_generation_ ABSL_GUARDED_BY(mu_) = 0;
  bool sweep_wanted_ ABSL_GUARDED_BY(mu_) = false;
  std::atomic<std::uint64_t> claims_{0};
  std::atomic<bool> warned_stream_cap_{false};
  // Claim owner -> its attempt (shared with the copy's coroutine).
  std::map<std::string, std::shared_ptr<Running>> running_ ABSL_GUARDED_BY(mu_);
  // Copies in place and verified, waiting for their CompleteTask.
  struct Completion {
    catalog::Task task;
    std::string owner;
    std::uint64_t bytes = 0;
    std::int64_t mtime_ns = 0;
  };
  std::deque<Completion> completions_ ABSL_GUARDED_BY(mu_);
  // Owner -> task id, being committed.
  std::map<std::string, std::uint64_t> completing_ ABSL_GUARDED_BY(mu_);
  // Claimed, not started yet, oldest first (renewed meanwhile; given back at Stop()).
  struct Claimed {
    catalog::Task task;
    std::string owner;
  };
  std::deque<Claimed> ready_ ABSL_GUARDED_BY(mu_);
  // Source nodes judged slow (StragglerLoop): until when, and why.
  struct SlowSource {
    std::chrono::steady_clock::time_point until;
    std::string reason;
  };
  std::map<std::string, SlowSource> slow_sources_ ABSL_GUARDED_BY(mu_);
  // Bytes received from each source node by its copies, ever (a counter per node).
  std::map<std::string, std::shared_ptr<std::atomic<std::uint64_t>>> source_bytes_
      ABSL_GUARDED_BY(mu_);
  int copying_ ABSL_GUARDED_BY(mu_) = 0;             // copies started and not ended
  // The copies running from each source node (LaunchLocked spreads new copies over them).
  std::map<std::string, int> copying_from_ ABSL_GUARDED_BY(mu_);
  int in_flight_limit_ ABSL_GUARDED_BY(mu_) = 0;     // see TuneLoop
  bool limit_binding_ ABSL_GUARDED_BY(mu_) = false;  // a ready task waited for the limit
  // The copies LaunchLocked started since the last ProbeCeilingLocked: how many, their bytes,
  // the last one's source node and part of the route.
  struct Started {
    int copies = 0;
    double bytes = 0;
    std::string src_node;
    std::uint32_t share_ppm = 0;
  };
  Started started_ ABSL_GUARDED_BY(mu_);
  int probe_ceiling_ ABSL_GUARDED_BY(mu_) = 0;  // the last one (0: none yet)
  // The tuner of in_flight_limit_ (adapt_in_flight): updated by TuneLoop, restarted by the
  // claim loop when work comes to an idle agent (BurstStartLocked).
  std::optional<InFlightLimit> tuner_ ABSL_GUARDED_BY(mu_);
  // Bytes received by running copies so far (their progress reports): the goodput TuneLoop
  // measures, also for large files that finish seldom.
  std::atomic<std::uint64_t> live_bytes_{0};
  // What the copies teach of their routes: sent with heartbeats, and TuneLoop's congestion
  // signals (thread-safe on its own).
  RouteLearner learner_;
  SiteAgentStats stats_ ABSL_GUARDED_BY(mu_);
  using Stamp = std::chrono::steady_clock::time_point;
  template <typename T>
  struct Cached {
    T value;
    Stamp fetched;
    Stamp used;  // by a copy's lookup: refreshed by LookupLoop while recent
  };
  std::map<std::string, Cached<catalog::Node>> node_cache_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, Cached<catalog::Route>> route_cache_ ABSL_GUARDED_BY(mu_);
  // Bumped each time WatchLoop drops route_cache_ (a route event, or events it may have
  // missed): a route read from the catalog before the bump is not cached after it.
  std::uint64_t route_epoch_ ABSL_GUARDED_BY(mu_) = 0;
  // Where WatchLoop starts reading the event log: the log's end when Start() ran, before
  // the first listing of the routes, so that no route change falls between the two.
  std::uint64_t watch_from_ = 0;
};

}  // namespace gfrep::replica::agent
