#pragma once

// Catalog is the shared metadata store of a gfrep federation: the namespace (directories
// and files with attributes, checksum and generation), where each file's replicas are and
// in which state, the topology (sites, nodes, routes), replication requests and transfer
// tasks, and an ordered event log. Two implementations: OpenCatalog() (durable storage on
// RocksDB or PostgreSQL; what gfcatalogd serves) and CatalogClient (catalog/client.h, the same
// interface over gRPC).
//
// Roles: the interface is cut by what a component does with it. Five views, read only
// (NamespaceView, ReplicaView, SiteView, WorkView, EventView; together CatalogView, what
// the dashboard and gfpolicy explain take), the writers of each
// concern (NamespaceEditor, ReplicaRegistry, SiteRegistry, WorkQueue, Governance) and
// Monitoring. Catalog is their union: what gfcatalogd serves and CatalogClient speaks. A
// component takes the roles it uses: one interface, or catalog::Roles (a pointer per role)
// when it uses several, so that a test stands a fake in for one role only. Live telemetry
// is not a role: TelemetrySink.
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
//   kAborted            the file changed generation meanwhile (restart the copy), or a
//                       generation to commit was not reserved or is no longer the newest
//   kUnavailable        transport problem (client only): retry with backoff
//   kDataLoss/kInternal storage trouble
//
// Generations and replica records. A file's generation is a small per-inode counter: 0
// for an entry without content, then 1, 2, ... as writers commit. A writer reserves a
// generation first (BeginWrite: the number is never handed out again for that inode),
// stores the bytes under it and then commits exactly that generation (CommitFile); the
// generation only ever grows. Every transition of a replica record is a compare-and-set
// on (state, generation) inside the mutation's single write, so a task (or a lease, or a
// cancel) of an older generation never changes a record written for a newer one:
//   ClaimTask     a task older than the file, or than its node's record, is cancelled
//                 as obsolete; the record is left alone.
//   CompleteTask  pending at the task's generation -> complete (file still at it) or
//                 stale (the file moved on: the bytes are a valid older version).
//   FailTask, lease expiry, AbandonTask, CancelRequest
//                 remove the record only if it is pending at the task's generation.
//   CommitFile    the writer's record -> complete at the new generation (whatever it
//                 was); every other complete record -> stale.
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

// What SetAttributes changes (chmod, chown, chgrp); unset fields stay.
struct AttributeChange {
  std::optional<std::uint32_t> mode;  // 0..01777 (permission bits and the sticky bit)
  std::optional<std::string> owner;   // a user name, or "" for none (admin-owned)
  std::optional<std::string> group;   // a group name, or "" for none
};

// What a writer knows about a file's new content.
struct FileContent {
  std::uint64_t size = 0;
  std::string checksum_algo;
  std::string checksum;
  std::uint32_t mode = 0644;
  std::string owner;
  std::uint64_t generation = 0;  // CommitFile: the generation BeginWrite reserved; 0: a fresh one
  // CommitFile: if non-zero, the path must still be this inode (the one BeginWrite
  // returned), else kAborted: the file was removed or replaced after the write began.
  InodeId inode = 0;
};

// What BeginWrite hands a writer.
struct WriteReservation {
  Attributes attributes;  // the entry now (unchanged by the reservation)
  // Reserved for this writer: greater than every generation committed or reserved before
  // for this inode. Store the bytes under it, then CommitFile with content.generation = it.
  std::uint64_t generation = 0;
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

// The namespace, read: what every reader needs.
class NamespaceView {
 public:
  virtual ~NamespaceView() = default;

  virtual absl::StatusOr<Attributes> Stat(std::string_view path) = 0;

  // Stat of many paths in one call, one result per path (in order). At most kMaxBatchPaths.
  virtual absl::StatusOr<std::vector<absl::StatusOr<Attributes>>> StatMany(
      const std::vector<std::string>& paths) = 0;

  // The entry of an inode (its path is rebuilt with PathOf). kNotFound if gone.
  virtual absl::StatusOr<Attributes> StatInode(InodeId inode) = 0;

  virtual absl::StatusOr<std::string> PathOf(InodeId inode) = 0;

  // Children of a directory in name (byte) order. kFailedPrecondition if a file.
  virtual absl::StatusOr<std::vector<DirEntry>> List(std::string_view path,
                                                     const ListOptions& options) = 0;
};

// Where each file's replicas are, read.
class ReplicaView {
 public:
  virtual ~ReplicaView() = default;

  virtual absl::StatusOr<Location> Locate(std::string_view path) = 0;

  virtual absl::StatusOr<std::vector<Replica>> GetReplicas(InodeId inode) = 0;

  // The replicas a node holds, via the (node, inode) index, in inode order.
  virtual absl::StatusOr<std::vector<Replica>> ListNodeReplicas(std::string_view node,
                                                                InodeId start_after,
                                                                std::size_t limit) = 0;
};

// The topology (sites, nodes, routes), read.
class SiteView {
 public:
  virtual ~SiteView() = default;

  virtual absl::StatusOr<std::vector<Site>> ListSites() = 0;

  virtual absl::StatusOr<Node> GetNode(std::string_view name) = 0;

  // All nodes, or those of one site.
  virtual absl::StatusOr<std::vector<Node>> ListNodes(std::string_view site) = 0;

  virtual absl::StatusOr<Route> GetRoute(std::string_view src_site, std::string_view dst_site) = 0;

  virtual absl::StatusOr<std::vector<Route>> ListRoutes() = 0;
};

// Replication requests and transfer tasks, read.
class WorkView {
 public:
  virtual ~WorkView() = default;

  virtual absl::StatusOr<Request> GetRequest(std::uint64_t id) = 0;

  // Newest first; `any_state` false filters by `state`.
  virtual absl::StatusOr<std::vector<Request>> ListRequests(bool any_state, RequestState state,
                                                            std::size_t limit) = 0;

  // A request's files (RequestFile) in id order, as `filter` selects: kNotFound for an
  // unknown request. A request the planner has not expanded yet has none.
  virtual absl::StatusOr<std::vector<RequestFile>> ListRequestFiles(
      std::uint64_t request_id, const RequestFileFilter& filter) = 0;

  virtual absl::StatusOr<Task> GetTask(std::uint64_t id) = 0;

  virtual absl::StatusOr<std::vector<Task>> ListTasks(const TaskFilter& filter) = 0;
};

// The event log, read (catalog/event_cursor.h follows it).
class EventView {
 public:
  virtual ~EventView() = default;

  // Events with seq > after_seq, oldest first, at most `max`. If none exist yet, waits up
  // to `wait` for one (long poll; an empty result after the wait is not an error).
  // The log keeps a bounded history; the oldest kept seq is returned by FirstEventSeq.
  virtual absl::StatusOr<std::vector<Event>> ReadEvents(std::uint64_t after_seq, std::size_t max,
                                                        std::chrono::milliseconds wait) = 0;

  // The seq of the newest event so far (0 if none): start Watch from here for "new only".
  virtual absl::StatusOr<std::uint64_t> LastEventSeq() = 0;
};

// Everything a reader may ask, nothing it may change: the dashboard, gfpolicy explain. A
// test fake of a reader implements this and nothing more.
class CatalogView : public NamespaceView,
                    public ReplicaView,
                    public SiteView,
                    public WorkView,
                    public EventView {
 public:
  ~CatalogView() override = default;

  // The stored policy document (version 0 and no text before the first put).
  virtual absl::StatusOr<PolicyDocument> GetPolicies() = 0;
};

// The namespace, written: writers (gfreg, gfmkdir, gfmv, gfrm, gfchmod) and gfcatalogd.
class NamespaceEditor {
 public:
  virtual ~NamespaceEditor() = default;

  // Makes a directory. kAlreadyExists if the name is taken (unless options.parents and it
  // is a directory), kNotFound if the parent is missing (unless options.parents),
  // kFailedPrecondition if a parent is a file.
  virtual absl::StatusOr<Attributes> Mkdir(std::string_view path,
                                           const MkdirOptions& options) = 0;

  // Creates an empty file entry (generation 0, no replicas). kAlreadyExists if taken.
  virtual absl::StatusOr<Attributes> CreateFile(std::string_view path,
                                                const FileContent& content) = 0;

  // Creates the file entry if missing (as CreateFile does, with content's mode and owner,
  // generation 0, no replicas) and durably reserves a new generation for it (content's
  // size and checksum are ignored). Readers see no change. kFailedPrecondition if the path
  // is a directory, kNotFound if the parent is missing.
  virtual absl::StatusOr<WriteReservation> BeginWrite(std::string_view path,
                                                      const FileContent& content) = 0;

  // Records a new generation of a file (creating the entry if missing): sets size and
  // checksum and the generation, makes `writer_node`'s replica complete at the new
  // generation (whatever that record was, if writer_node is non-empty) and marks every
  // other complete replica stale, all in one atomic write. The new generation is
  // content.generation if non-zero: it must have been reserved for this inode by
  // BeginWrite and be greater than the current one, else kAborted ("generation N was
  // committed meanwhile" / "not reserved") and nothing changes. With 0 it is one more than
  // every generation committed or reserved so far. kFailedPrecondition if the path is a
  // directory. `expected_generation` (if set) must equal the current one, else kAborted.
  virtual absl::StatusOr<Attributes> CommitFile(
      std::string_view path, const FileContent& content, std::string_view writer_node,
      std::optional<std::uint64_t> expected_generation) = 0;

  // Creates many file entries in one atomic write: all or none (kAlreadyExists names the
  // first taken path; the same path twice in one batch is kInvalidArgument). At most
  // kMaxBatchPaths. For bulk registration; one RPC instead of one per file.
  virtual absl::StatusOr<std::vector<Attributes>> CreateFiles(
      const std::vector<NewFile>& files) = 0;

  // Removes a file or an empty directory; with `recursive` a whole subtree. Replicas of
  // removed files move to kDeleting (their nodes unlink and then call RemoveReplica).
  // kFailedPrecondition for a non-empty directory without `recursive`, or the root.
  virtual absl::Status Remove(std::string_view path, bool recursive) = 0;

  // Renames `from` to `to` (which must not exist; its parent must). kFailedPrecondition
  // when moving a directory into its own subtree, or the root. Atomic with respect to every
  // other method: StatInode and CompleteTask never see the inode without a name.
  virtual absl::Status Rename(std::string_view from, std::string_view to) = 0;

  // Changes an entry's mode, owner or group (the root's too) and returns the entry.
  // kInvalidArgument for a mode above 01777 or a bad name. Who may do it is the server's
  // business (catalog/permissions.h).
  virtual absl::StatusOr<Attributes> SetAttributes(std::string_view path,
                                                   const AttributeChange& change) = 0;
};

// Replica records, written: site agents (checks, scrub, deletes), readers that refuse a
// replica, the repairer.
class ReplicaRegistry {
 public:
  virtual ~ReplicaRegistry() = default;

  // Creates or replaces the replica (replica.inode, replica.node). kNotFound if the inode
  // or node does not exist. Setting kComplete requires replica.generation to equal the
  // file's current generation (kAborted otherwise: the file changed meanwhile).
  virtual absl::Status PutReplica(const Replica& replica) = 0;

  // Forgets a replica record (after the node deleted the bytes). OK if absent.
  virtual absl::Status RemoveReplica(InodeId inode, std::string_view node) = 0;

  // Compare-and-set transitions of replica records (see ReplicaTransition for the ones
  // allowed), in one atomic write: one result per item, in order. OK: applied. kAborted: the
  // record is not in `from` at `generation` (changed meanwhile; nothing done for it).
  // kNotFound: no such record. kInvalidArgument: a transition not allowed (or a second change
  // of a record changed earlier in the same call). kFailedPrecondition: complete -> deleting of the
  // last complete replica. How agents report what their checks found, readers a replica they
  // refused, and the repairer drops bad records once the copy is made again. At most kMaxBatchPaths
  // items.
  virtual absl::StatusOr<std::vector<absl::Status>> TransitionReplicas(
      const std::vector<ReplicaTransition>& items) = 0;
};

// The topology, written: gfsite, gfroute, the site agents' registration and heartbeats.
class SiteRegistry {
 public:
  virtual ~SiteRegistry() = default;

  virtual absl::Status PutSite(const Site& site) = 0;

  // kFailedPrecondition if nodes still belong to it.
  virtual absl::Status RemoveSite(std::string_view name) = 0;

  // Registers or updates a node (its site must exist). Sets last_heartbeat_ns. `node.disk`
  // is ignored: the stored disk profile stays (PutNodeDisk sets it).
  virtual absl::Status RegisterNode(const Node& node) = 0;

  // Stores the node's disk profile (`gfprobe disk --store`), replacing the previous one.
  // kNotFound if the node is not registered; kInvalidArgument from Validate(disk).
  virtual absl::Status PutNodeDisk(std::string_view node, const DiskProfile& disk) = 0;

  // Sets the node's mode (gfnode mode, gfnode drain). kNotFound if it is not registered.
  virtual absl::Status SetNodeMode(std::string_view node, NodeMode mode) = 0;

  virtual absl::Status RemoveNode(std::string_view name) = 0;

  // kNotFound if the node was never registered. The heartbeat's route observations are
  // folded into Route::observed of each route from their source site into the node's site
  // (a route without a record gets one), in the same write; an observation out of bounds
  // is kInvalidArgument (Validate(RouteObservation)) and nothing is written.
  virtual absl::Status SendHeartbeat(const Heartbeat& heartbeat) = 0;

  // Creates or replaces the route src_site -> dst_site (both sites must exist). Its
  // `observed` part is not taken from `route`: the stored one stays.
  virtual absl::Status PutRoute(const Route& route) = 0;

  virtual absl::Status RemoveRoute(std::string_view src_site, std::string_view dst_site) = 0;
};

// Requests and tasks, written: gfrep and the policy engine ask, the planner plans, the
// site agents claim, renew, complete and fail.
class WorkQueue {
 public:
  virtual ~WorkQueue() = default;

  // Stores a request (state kQueued) and returns it with its id. Paths are validated
  // (syntax only; the planner reports missing files).
  virtual absl::StatusOr<Request> CreateRequest(const RequestSpec& spec) = 0;

  virtual absl::StatusOr<Request> UpdateRequest(const RequestUpdate& update) = 0;

  // The planner's expansion of a queued or running request: adds its files (RequestFile), a
  // part at a time (at most kMaxBatchPaths files per call; a path already listed is skipped)
  // and moves the totals; `last` marks the request expanded. Files already settled (errors)
  // count as failed at once. kFailedPrecondition for a finished request or one already
  // expanded. A request whose every file is settled when `last` comes ends in this write.
  // Returns the request as written.
  virtual absl::StatusOr<Request> AddRequestFiles(std::uint64_t request_id,
                                                  const std::vector<RequestFileInput>& files,
                                                  bool last) = 0;

  // The planner's verdict on a wanted file it needs no task for: `state` done (it has its
  // copies) or failed (with `reason`: no live destination can take it, ...). Moves the
  // counters and ends the request if it was the last file, in one write.
  // kFailedPrecondition unless the file is wanted (a task opened or settled it meanwhile).
  virtual absl::StatusOr<RequestFile> SettleRequestFile(std::uint64_t request_id,
                                                        std::uint64_t file_id,
                                                        RequestFileState state,
                                                        std::string_view reason) = 0;

  // Forgets finished requests (done, failed, cancelled) last changed before
  // `finished_before_ns`, with their tasks: at most `max` requests, oldest first; returns how
  // many. A request with an open task stays. Ids are never given out twice, also after a
  // restart (the high-water marks are stored with the purge). One event (kind request,
  // state "purged") per request. gfcatalogd's own housekeeping: CatalogClient answers
  // kUnimplemented.
  virtual absl::StatusOr<std::size_t> PurgeFinishedRequests(std::int64_t finished_before_ns,
                                                            std::size_t max) = 0;

  // Creates tasks atomically (all or none). Each path must be a file; the task records its
  // inode, current generation and size. Both nodes must exist. A task of an expanded request
  // opens its file there (RequestFile: wanted -> copying) and a queued request runs, in the
  // same write.
  virtual absl::StatusOr<std::vector<Task>> CreateTasks(const std::vector<TaskSpec>& specs) = 0;

  // Leases the best claimable task whose destination is `node`: queued with
  // next_attempt_ns <= now, or leased with an expired lease (that attempt counts as
  // failed: "lease expired"). Highest priority first, then oldest. Increments attempts,
  // sets lease_owner = owner, lease_expiry = now + lease, and puts a kPending replica of
  // the task's generation on the destination node (a complete one of that generation is
  // kept). A claimable task older than the file's generation, or than the node's record,
  // or whose file is gone, is obsolete: it ends kCancelled ("obsolete: file is at
  // generation N"), its record is not touched, and the claim moves on to the next one.
  // kNotFound when nothing is claimable now.
  virtual absl::StatusOr<Task> ClaimTask(std::string_view node, std::string_view owner,
                                         std::chrono::milliseconds lease) = 0;

  // Claims up to owners.size() tasks for `node` in one atomic write, in ClaimTask's order
  // (highest priority, then oldest): the i-th task returned is leased by owners[i], each
  // exactly as ClaimTask would lease it, and carries the file's checksum (Task::checksum).
  // Fewer (or none: an empty list, not an error) when fewer are claimable. Owners must be
  // distinct and at most kMaxBatchPaths. One call instead of one per task: a site agent
  // fills all its idle workers with one catalog round trip.
  // With none claimable and `wait` > 0, a long poll: waits up to `wait` for an event that
  // queues a task for `node` (QueuesTaskFor) and claims then, so that a distant agent's
  // claim is answered as its work is queued, not a round trip after the event that says so.
  // Still empty after the wait (a task whose backoff ends makes no event).
  virtual absl::StatusOr<std::vector<Task>> ClaimTasks(std::string_view node,
                                                       const std::vector<std::string>& owners,
                                                       std::chrono::milliseconds lease,
                                                       std::chrono::milliseconds wait) = 0;

  // Extends a lease. kFailedPrecondition if the task is not leased by `owner` (lease lost).
  virtual absl::StatusOr<Task> RenewLease(std::uint64_t id, std::string_view owner,
                                          std::chrono::milliseconds lease) = 0;

  // RenewLease for many tasks in one call and one durable write (an agent renews every lease
  // it holds each lease/3: hundreds with 256 copies at once and the tasks claimed ahead). One
  // result per item, in order, each what RenewLease would have said of it. At most
  // kMaxBatchPaths items.
  virtual absl::StatusOr<std::vector<absl::Status>> RenewLeases(
      const std::vector<LeaseRenewal>& items, std::chrono::milliseconds lease) = 0;

  // Finishes a leased task: its destination replica, if pending at the task's generation,
  // becomes kComplete (verified_ns = now) and the task kDone, in one write (a record
  // already complete at that generation is kept). kAborted if the file's generation
  // changed since the task was made: the task fails for good (the planner makes a new
  // one) and the record, only if pending at the task's generation, becomes kStale; a
  // record of another generation or state is never touched. kAborted too if the record is
  // no longer this task's (removed or replaced meanwhile): the task is then kCancelled and
  // planned again. kFailedPrecondition if not the owner.
  virtual absl::StatusOr<Task> CompleteTask(std::uint64_t id, std::string_view owner) = 0;

  // CompleteTask for many tasks in one call: one result per item, in order, each exactly
  // what CompleteTask would have returned for it (an item's error does not affect the
  // others). The changes are made with as few durable writes as possible (one, unless two
  // items concern the same file). At most kMaxBatchPaths items; the same task twice is
  // kInvalidArgument for the second.
  virtual absl::StatusOr<std::vector<absl::StatusOr<Task>>> CompleteTasks(
      const std::vector<TaskCompletion>& items) = 0;

  // Gives a leased task back because its copy is too slow from its source (a straggler, the
  // destination's verdict, with `reason`): the task ends kCancelled (not a failed attempt,
  // last_error = reason), its pending replica is dropped, and its request's file records the
  // source in RequestFile::slow_sources and is wanted again, so that the planner copies it
  // from another replica (the same source only if no other is left). A task without a
  // request is cancelled the same way. kFailedPrecondition if not the owner, or if the file
  // has no complete replica of the task's generation on a node other than the task's source,
  // its destination and the sources named slow already (then nothing changes: the copy goes
  // on).
  virtual absl::StatusOr<Task> YieldTask(std::uint64_t id, std::string_view owner,
                                         std::string_view reason) = 0;

  // Records a failed attempt. If `retryable` and attempts < max_attempts the task goes
  // back to kQueued with next_attempt_ns = now + retry_after, else kFailed. The pending
  // replica of the task's generation is dropped. kFailedPrecondition if not the owner.
  virtual absl::StatusOr<Task> FailTask(std::uint64_t id, std::string_view owner,
                                        std::string_view error, bool retryable,
                                        std::chrono::milliseconds retry_after) = 0;

  // Expires every lease, of every node, whose expiry has passed (catalog clock): each
  // counts as a failed attempt ("lease of X expired"): back to kQueued, claimable at once,
  // or kFailed when out of attempts; its pending replica is dropped. ClaimTask does the
  // same lazily for its node. Returns how many leases expired (0: nothing was written).
  virtual absl::StatusOr<std::size_t> ExpireLeases() = 0;

  // Ends an open (queued or leased) task without its owner, e.g. because its destination
  // node is down: kCancelled with last_error = reason (not a failed attempt), the pending
  // replica of a leased one dropped. A task already done, failed or cancelled is returned
  // unchanged. kNotFound if there is no such task.
  virtual absl::StatusOr<Task> AbandonTask(std::uint64_t id, std::string_view reason) = 0;

  // Cancels every non-terminal task of a request and marks the request kCancelled.
  virtual absl::Status CancelRequest(std::uint64_t id) = 0;
};

// Policies, revoked tokens (catalog/token.h) and the audit trail, written: admins and
// gfcatalogd.
class Governance {
 public:
  virtual ~Governance() = default;

  // Replaces the policy document (version + 1) and returns it. `expected_version`, if set,
  // must be the stored version (kAborted otherwise: someone else changed it meanwhile).
  // kInvalidArgument for more than kMaxPolicyBytes or text/source that is not UTF-8.
  virtual absl::StatusOr<PolicyDocument> PutPolicies(
      std::string_view text, std::string_view source,
      std::optional<std::uint64_t> expected_version) = 0;

  // Records that the token `id` is revoked; kept until `expires_unix` (after that the token
  // is refused as expired anyway: the next RevokeToken deletes the record). Durable before
  // it returns.
  virtual absl::Status RevokeToken(std::string_view id, std::int64_t expires_unix) = 0;

  // Every revoked token still recorded: id -> its expiry (Unix seconds). What gfcatalogd
  // loads: CatalogClient answers kUnimplemented.
  virtual absl::StatusOr<std::vector<std::pair<std::string, std::int64_t>>> RevokedTokens() = 0;

  // Appends an audit event (EventKind::kAudit: node = `who`, state = `what`, detail =
  // `detail`), durable like any other. What gfcatalogd records: CatalogClient answers
  // kUnimplemented.
  virtual absl::Status RecordAudit(std::string_view who, std::string_view what,
                                   std::string_view detail) = 0;
};

// Figures about the catalog that are not catalog state.
class Monitoring {
 public:
  virtual ~Monitoring() = default;

  // Figures of the storage engine worth watching (RocksDB: keys, SST and memtable bytes,
  // pending compaction), name -> value, for gfcatalogd's /metrics. kUnimplemented where there
  // are none (CatalogClient).
  virtual absl::StatusOr<std::map<std::string, std::uint64_t>> StorageStats() = 0;
};

// Where a site agent's live copy figures go (the dashboard's graphs): the Telemetry service
// on the catalog's server (CatalogClient), or a test's sink. Not a catalog role: nothing is
// stored. kUnimplemented from a server without a dashboard.
class TelemetrySink {
 public:
  virtual ~TelemetrySink() = default;
  virtual absl::Status Publish(const TelemetryBatch& batch) = 0;
};

// The whole catalog: every role. What gfcatalogd serves and CatalogClient speaks; a
// component takes the roles it uses (the read path never receives the namespace's writers).
class Catalog : public CatalogView,
                public NamespaceEditor,
                public ReplicaRegistry,
                public SiteRegistry,
                public WorkQueue,
                public Governance,
                public Monitoring {
 public:
  ~Catalog() override = default;
};

// A catalog's roles, one pointer each: what a component that uses several roles takes (its
// header says which it uses), so that a test can stand a fake in for one role and keep the
// others real. Made from a Catalog, every pointer is that catalog; default: all null.
struct Roles {
  Roles() = default;
  // Implicit: a whole catalog is each of its roles.
  Roles(Catalog* catalog)  // NOLINT(google-explicit-constructor)
      : view(catalog),
        names(catalog),
        replicas(catalog),
        sites(catalog),
        work(catalog),
        governance(catalog),
        monitoring(catalog) {}
  Roles(Catalog& catalog) : Roles(&catalog) {}  // NOLINT(google-explicit-constructor)

  CatalogView* view = nullptr;
  NamespaceEditor* names = nullptr;
  ReplicaRegistry* replicas = nullptr;
  SiteRegistry* sites = nullptr;
  WorkQueue* work = nullptr;
  Governance* governance = nullptr;
  Monitoring* monitoring = nullptr;
};

// Where the clock comes from (tests inject a fake one). Returns Unix time in ns.
using Clock = std::function<std::int64_t()>;
std::int64_t SystemNowNs();

struct CatalogOptions {
  // Where the catalog is stored: a RocksDB directory (created if missing), or a PostgreSQL
  // database: "postgresql://user@host:port/dbname?..." or "postgresql:" followed by libpq's
  // key=value text (e.g. "postgresql:host=/run/postgresql dbname=gfrep"). See OpenCatalog.
  std::string path;
  // Sync the WAL before acknowledging each mutation. Turn off only for bulk loads in
  // benchmarks/tests whose durability does not matter.
  bool sync = true;
  // Events kept in the log (older ones are trimmed).
  std::uint64_t event_retention = 200000;
  // RocksDB only: block cache for namespace reads, bytes.
  std::size_t block_cache_bytes = 256u << 20;
  // Null: SystemNowNs.
  Clock clock;
  // PostgreSQL only: this process is one of several front ends serving the database
  // (gfcatalogd --shared; the write gate of internal/kv_catalog.h). Mutations are serialized across
  // the front ends by a lock in the database; reads are not. kInvalidArgument for RocksDB.
  bool shared = false;
  // Test-only fault seam: if set, called before every storage write; a non-OK result is
  // returned instead of writing (as a failed write would be). Null in production.
  std::function<absl::Status(std::string_view what)> write_fault;
};

// Opens the catalog stored at options.path: a PostgreSQL database when the path is a
// PostgreSQL address (its schema created or migrated at open; kFailedPrecondition when the
// database's schema is newer than this program or another catalog process serves it), else
// a RocksDB directory (created if missing). Same rules, same codes on both
// (internal/kv_catalog.h).
absl::StatusOr<std::unique_ptr<Catalog>> OpenCatalog(const CatalogOptions& options);

// OpenCatalog for a RocksDB directory only (kInvalidArgument for a PostgreSQL address).
absl::StatusOr<std::unique_ptr<Catalog>> OpenRocksCatalog(const CatalogOptions& options);

}  // namespace gfrep::catalog
