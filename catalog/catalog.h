#pragma once

// Catalog is the shared metadata store of a gfrep federation: the namespace (directories
// and files with attributes, checksum and generation), where each file's replicas are and
// in which state, the topology (sites, nodes, routes), replication requests and transfer
// tasks, and an ordered event log. Two implementations: OpenRocksCatalog() (embedded,
// durable; what gfcatalogd serves) and CatalogClient (catalog/client.h, the same
// interface over gRPC).
//
// Durability: a mutation returns OK only after its single atomic write is durable (WAL
// synced). A mutation that returns an error changed nothing.
//
// Error codes (callers act on them, see STYLE.md rule 8):
//   kInvalidArgument    bad name/path/field (never retry)
//   kNotFound           path, node, site, request or task does not exist
//   kAlreadyExists      the name is taken
//   kFailedPrecondition wrong type (not a directory, is a directory), directory not empty,
//                       rename into own subtree, task not leased by this owner
//   kAborted            the file changed generation meanwhile (restart the copy)
//   kUnavailable        transport problem (client only): retry with backoff
//   kDataLoss/kInternal storage trouble
//
// Thread safety: all methods may be called concurrently from any thread.

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "catalog/types.h"

namespace gfrep::catalog {

struct MkdirOptions {
  bool parents = false;  // like mkdir -p: make missing parents, no error if it exists
  std::uint32_t mode = 0755;
  std::string owner;
};

// What a writer knows about a file's new content.
struct FileContent {
  std::uint64_t size = 0;
  std::string checksum_algo;
  std::string checksum;
  std::uint32_t mode = 0644;
  std::string owner;
};

// One file of a CreateFiles batch.
struct NewFile {
  std::string path;
  FileContent content;
};

struct ListOptions {
  std::string start_after;    // resume a listing after this name ("": from the start)
  std::size_t limit = 100000;  // at most this many entries
};

class Catalog {
 public:
  virtual ~Catalog() = default;

  // --- Namespace -------------------------------------------------------------------

  // Makes a directory. kAlreadyExists if the name is taken (unless options.parents and it
  // is a directory), kNotFound if the parent is missing (unless options.parents),
  // kFailedPrecondition if a parent is a file.
  virtual absl::StatusOr<Attributes> Mkdir(std::string_view path,
                                           const MkdirOptions& options) = 0;

  // Creates an empty file entry (generation 0, no replicas). kAlreadyExists if taken.
  virtual absl::StatusOr<Attributes> CreateFile(std::string_view path,
                                                const FileContent& content) = 0;

  // Records a new generation of a file (creating the entry if missing): sets size and
  // checksum, increments the generation, makes `writer_node`'s replica complete at the new
  // generation (if writer_node is non-empty) and marks every other replica stale, all in
  // one atomic write. kFailedPrecondition if the path is a directory. `expected_generation`
  // (if set) must equal the current one, else kAborted.
  virtual absl::StatusOr<Attributes> CommitFile(
      std::string_view path, const FileContent& content, std::string_view writer_node,
      std::optional<std::uint64_t> expected_generation) = 0;

  // Creates many file entries in one atomic write: all or none (kAlreadyExists names the
  // first taken path; the same path twice in one batch is kInvalidArgument). At most
  // kMaxBatchPaths. For bulk registration; one RPC instead of one per file.
  // The default implementation (for fakes) calls CreateFile in a loop and is not atomic.
  virtual absl::StatusOr<std::vector<Attributes>> CreateFiles(const std::vector<NewFile>& files);

  virtual absl::StatusOr<Attributes> Stat(std::string_view path) = 0;
  // Stat of many paths in one call, one result per path (in order). At most kMaxBatchPaths.
  virtual absl::StatusOr<std::vector<absl::StatusOr<Attributes>>> StatMany(
      const std::vector<std::string>& paths);
  // The entry of an inode (its path is rebuilt with PathOf). kNotFound if gone.
  virtual absl::StatusOr<Attributes> StatInode(InodeId inode) = 0;
  virtual absl::StatusOr<std::string> PathOf(InodeId inode) = 0;

  // Children of a directory in name (byte) order. kFailedPrecondition if a file.
  virtual absl::StatusOr<std::vector<DirEntry>> List(std::string_view path,
                                                     const ListOptions& options) = 0;

  // Removes a file or an empty directory; with `recursive` a whole subtree. Replicas of
  // removed files move to kDeleting (their nodes unlink and then call RemoveReplica).
  // kFailedPrecondition for a non-empty directory without `recursive`, or the root.
  virtual absl::Status Remove(std::string_view path, bool recursive) = 0;

  // Renames `from` to `to` (which must not exist; its parent must). kFailedPrecondition
  // when moving a directory into its own subtree, or the root.
  virtual absl::Status Rename(std::string_view from, std::string_view to) = 0;

  // --- Replicas --------------------------------------------------------------------

  virtual absl::StatusOr<Location> Locate(std::string_view path) = 0;
  virtual absl::StatusOr<std::vector<Replica>> GetReplicas(InodeId inode) = 0;

  // Creates or replaces the replica (replica.inode, replica.node). kNotFound if the inode
  // or node does not exist. Setting kComplete requires replica.generation to equal the
  // file's current generation (kAborted otherwise: the file changed meanwhile).
  virtual absl::Status PutReplica(const Replica& replica) = 0;

  // Forgets a replica record (after the node deleted the bytes). OK if absent.
  virtual absl::Status RemoveReplica(InodeId inode, std::string_view node) = 0;

  // The replicas a node holds, via the (node, inode) index, in inode order.
  virtual absl::StatusOr<std::vector<Replica>> ListNodeReplicas(std::string_view node,
                                                                InodeId start_after,
                                                                std::size_t limit) = 0;

  // --- Topology --------------------------------------------------------------------

  virtual absl::Status PutSite(const Site& site) = 0;
  // kFailedPrecondition if nodes still belong to it.
  virtual absl::Status RemoveSite(std::string_view name) = 0;
  virtual absl::StatusOr<std::vector<Site>> ListSites() = 0;

  // Registers or updates a node (its site must exist). Sets last_heartbeat_ns.
  virtual absl::Status RegisterNode(const Node& node) = 0;
  virtual absl::Status RemoveNode(std::string_view name) = 0;
  virtual absl::StatusOr<Node> GetNode(std::string_view name) = 0;
  // All nodes, or those of one site.
  virtual absl::StatusOr<std::vector<Node>> ListNodes(std::string_view site) = 0;
  // kNotFound if the node was never registered.
  virtual absl::Status SendHeartbeat(const Heartbeat& heartbeat) = 0;

  // Creates or replaces the route src_site -> dst_site (both sites must exist).
  virtual absl::Status PutRoute(const Route& route) = 0;
  virtual absl::Status RemoveRoute(std::string_view src_site, std::string_view dst_site) = 0;
  virtual absl::StatusOr<Route> GetRoute(std::string_view src_site,
                                         std::string_view dst_site) = 0;
  virtual absl::StatusOr<std::vector<Route>> ListRoutes() = 0;

  // --- Requests and tasks ----------------------------------------------------------

  // Stores a request (state kQueued) and returns it with its id. Paths are validated
  // (syntax only; the planner reports missing files).
  virtual absl::StatusOr<Request> CreateRequest(const RequestSpec& spec) = 0;
  virtual absl::StatusOr<Request> GetRequest(std::uint64_t id) = 0;
  // Newest first; `any_state` false filters by `state`.
  virtual absl::StatusOr<std::vector<Request>> ListRequests(bool any_state, RequestState state,
                                                            std::size_t limit) = 0;
  virtual absl::StatusOr<Request> UpdateRequest(const RequestUpdate& update) = 0;

  // Creates tasks atomically (all or none). Each path must be a file; the task records its
  // inode, current generation and size. Both nodes must exist.
  virtual absl::StatusOr<std::vector<Task>> CreateTasks(const std::vector<TaskSpec>& specs) = 0;
  virtual absl::StatusOr<Task> GetTask(std::uint64_t id) = 0;
  virtual absl::StatusOr<std::vector<Task>> ListTasks(const TaskFilter& filter) = 0;

  // Leases the best claimable task whose destination is `node`: queued with
  // next_attempt_ns <= now, or leased with an expired lease (that attempt counts as
  // failed: "lease expired"). Highest priority first, then oldest. Increments attempts,
  // sets lease_owner = owner, lease_expiry = now + lease, and puts a kPending replica
  // on the destination node. kNotFound when nothing is claimable now.
  virtual absl::StatusOr<Task> ClaimTask(std::string_view node, std::string_view owner,
                                         std::chrono::milliseconds lease) = 0;

  // Extends a lease. kFailedPrecondition if the task is not leased by `owner` (lease lost).
  virtual absl::StatusOr<Task> RenewLease(std::uint64_t id, std::string_view owner,
                                          std::chrono::milliseconds lease) = 0;

  // Finishes a leased task: its destination replica becomes kComplete at the task's
  // generation (verified_ns = now), the task kDone, in one write. kAborted if the file's
  // generation changed since the task was made (the replica is marked stale, the task
  // failed for good: the planner makes a new one). kFailedPrecondition if not the owner.
  virtual absl::StatusOr<Task> CompleteTask(std::uint64_t id, std::string_view owner) = 0;

  // Records a failed attempt. If `retryable` and attempts < max_attempts the task goes
  // back to kQueued with next_attempt_ns = now + retry_after, else kFailed. The pending
  // replica is dropped. kFailedPrecondition if not the owner.
  virtual absl::StatusOr<Task> FailTask(std::uint64_t id, std::string_view owner,
                                        std::string_view error, bool retryable,
                                        std::chrono::milliseconds retry_after) = 0;

  // Cancels every non-terminal task of a request and marks the request kCancelled.
  virtual absl::Status CancelRequest(std::uint64_t id) = 0;

  // --- Events ----------------------------------------------------------------------

  // Events with seq > after_seq, oldest first, at most `max`. If none exist yet, waits up
  // to `wait` for one (long poll; an empty result after the wait is not an error).
  // The log keeps a bounded history; the oldest kept seq is returned by FirstEventSeq.
  virtual absl::StatusOr<std::vector<Event>> ReadEvents(std::uint64_t after_seq, std::size_t max,
                                                        std::chrono::milliseconds wait) = 0;
  // The seq of the newest event so far (0 if none): start Watch from here for "new only".
  virtual absl::StatusOr<std::uint64_t> LastEventSeq() = 0;
};

// Where the clock comes from (tests inject a fake one). Returns Unix time in ns.
using Clock = std::function<std::int64_t()>;
std::int64_t SystemNowNs();

struct CatalogOptions {
  // Database directory (created if missing).
  std::string path;
  // Sync the WAL before acknowledging each mutation. Turn off only for bulk loads in
  // benchmarks/tests whose durability does not matter.
  bool sync = true;
  // Events kept in the log (older ones are trimmed).
  std::uint64_t event_retention = 200000;
  // Block cache for namespace reads, bytes.
  std::size_t block_cache_bytes = 256u << 20;
  // Null: SystemNowNs.
  Clock clock;
  // Test-only fault seam: if set, called before every RocksDB write; a non-OK result is
  // returned instead of writing (as a failed write would be). Null in production.
  std::function<absl::Status(std::string_view what)> write_fault;
};

// Opens (creating if missing) a RocksDB-backed catalog at options.path.
absl::StatusOr<std::unique_ptr<Catalog>> OpenRocksCatalog(const CatalogOptions& options);

}  // namespace gfrep::catalog
