#pragma once

// SiteAgent is the catalog role of gfsited: it registers its node, sends heartbeats (free
// space of the spool, 1-minute load, active transfers), claims the transfer tasks planned
// for its node with a lease (renewed while copying), pulls each file from the source
// node's agent with transfer::AsyncPull using the route's settings from the catalog,
// verifies the copy against the catalog's checksum of the task's generation, moves it into
// place and only then calls CompleteTask (the catalog makes the replica complete
// durably). Any failure is recorded with FailTask and its reason; retryable ones
// (replica/retry.h) come back after an exponential backoff, up to the task's attempts.
//
// Files on disk (see replica/spool.h): a copy is pulled into
// "<spool>/.gfrep-staging/task-<id>" with its partial data and restart markers in
// "<spool>/.gfrep-tmp/task-<id>/" (so a re-claimed task resumes where the previous attempt
// stopped, also across agent restarts), checked, then renamed to "<spool>/<path>". At
// Start(), staging and temporary files of tasks that are no longer open for this node are
// removed.
//
// Deletion: a removed file's inode has no path in the catalog any more, so the agent keeps
// a spool index "<spool>/.gfrep-index/<inode>" holding the replica's spool-relative path.
// It is written when a copy is moved into place and, by the sweep, for every other replica
// of the node that is not indexed yet (PathOf, e.g. files stored by gfreg). The sweep (every
// `sweep_interval`, and at once when the catalog marks one of the node's replicas deleting)
// pages through ListNodeReplicas, and for each replica in state kDeleting unlinks the
// indexed spool file (a missing one is fine), calls RemoveReplica and drops the index entry.
// A deleting replica without an index entry (removed before any sweep saw it) has unknown
// bytes: its record is removed and a warning logged.
//
// Catalog restarts: every loop treats kUnavailable as "try again shortly"; the gRPC
// channel reconnects by itself; a heartbeat answered kNotFound re-registers the node.
//
// Threading: Start() launches a heartbeat thread, a lease-renewal thread, an event
// watcher and `workers` copy threads; each copy runs its own io_context on its worker
// thread. Stop() (any thread) cancels running copies (their tasks are failed as retryable
// so another attempt resumes them) and joins everything.

#include <spdlog/logger.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "catalog/catalog.h"
#include "replica/retry.h"
#include "transfer/options.h"

namespace boost::asio {
class io_context;
}

namespace gfrep::replica {

struct SiteAgentOptions {
  // REQUIRES: non-null, outlives the agent (usually a catalog::CatalogClient).
  catalog::Catalog* catalog = nullptr;
  std::string site;
  std::string node;
  // host:port other agents reach this node's transfer agent at.
  std::string address;
  // The transfer agent's spool directory.
  std::filesystem::path spool;
  // Create the site in the catalog if it does not exist yet.
  bool create_site = true;
  // Parallel copies.
  int workers = 4;
  // Lease per claim; renewed every lease/3 while copying.
  std::chrono::milliseconds lease{15000};
  std::chrono::milliseconds heartbeat_interval{2000};
  // Claim attempts when idle and no event arrived (tasks whose backoff ended make none).
  std::chrono::milliseconds poll_interval{1000};
  // Deletion sweep / indexing period (also woken by "deleting" replica events).
  std::chrono::milliseconds sweep_interval{10000};
  RetryOptions retry;
  // Engine settings for pulls (shared key, TLS, checksum, timeouts); route fields are the
  // defaults that the catalog's route table overrides.
  transfer::TransferOptions transfer;
  // Null: spdlog::default_logger().
  std::shared_ptr<spdlog::logger> logger;
};

absl::Status Validate(const SiteAgentOptions& options);

struct SiteAgentStats {
  std::uint64_t tasks_done = 0;
  std::uint64_t tasks_failed = 0;  // attempts that failed
  std::uint64_t bytes_received = 0;
  std::uint64_t replicas_deleted = 0;  // unlinked (or already gone) and removed from the catalog
};

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

  // The lease owner name this incarnation uses ("<node>/<pid>-<random>").
  const std::string& owner() const { return owner_; }
  int active_transfers() const { return active_.load(); }
  SiteAgentStats stats() const;

 private:
  explicit SiteAgent(SiteAgentOptions options);
  absl::Status Register();
  void CleanTemporaryFiles();
  void HeartbeatLoop();
  void RenewLoop();
  void WatchLoop();
  void WorkerLoop();
  void SweepLoop();
  // One pass over the node's replicas: index new ones, delete those in state kDeleting.
  absl::Status Sweep();
  std::filesystem::path IndexPath(catalog::InodeId inode) const;
  absl::Status WriteIndex(catalog::InodeId inode, const std::string& relative_path);
  void Execute(const catalog::Task& task);
  absl::Status Copy(const catalog::Task& task, boost::asio::io_context& io,
                    std::uint64_t& bytes_received);
  catalog::Heartbeat MakeHeartbeat() const;
  // Source node and route lookups, cached for `kLookupTtl` (each is a catalog round trip,
  // i.e. one WAN RTT per small file otherwise). A failed copy drops the node's entry.
  absl::StatusOr<catalog::Node> LookupNode(const std::string& name);
  absl::StatusOr<catalog::Route> LookupRoute(const std::string& src_site);
  void SleepFor(std::chrono::milliseconds d);

  // Constant after construction.
  SiteAgentOptions options_;
  std::shared_ptr<spdlog::logger> log_;
  std::string owner_;

  std::mutex stop_mu_;  // serialises Stop()
  std::atomic<bool> stop_{false};
  std::atomic<int> active_{0};
  std::vector<std::thread> threads_;

  mutable std::mutex mu_;
  std::condition_variable wake_;                      // guarded by mu_
  std::uint64_t wake_generation_ = 0;                 // guarded by mu_
  bool sweep_wanted_ = false;                         // guarded by mu_
  // Serialises moving copies into place with the sweep's "is this path reused?" check
  // and unlink. Never held with mu_.
  std::mutex spool_mu_;
  std::map<std::uint64_t, boost::asio::io_context*> running_;  // task -> io, guarded by mu_
  std::map<std::uint64_t, bool> lease_lost_;          // guarded by mu_
  SiteAgentStats stats_;                              // guarded by mu_
  using Stamp = std::chrono::steady_clock::time_point;
  std::map<std::string, std::pair<catalog::Node, Stamp>> node_cache_;    // guarded by mu_
  std::map<std::string, std::pair<catalog::Route, Stamp>> route_cache_;  // guarded by mu_
};

}  // namespace gfrep::replica
