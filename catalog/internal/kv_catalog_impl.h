#pragma once

// The KvCatalog class (the Catalog of kv_catalog.h, on a KvStore of kv_store.h) shared by
// the files that implement it, one job each:
//   kv_catalog.cc   opening, helpers, the namespace (entries, writes, rename)
//   kv_replicas.cc  replica records, the event log's writer, topology (sites, nodes, routes)
//   kv_tasks.cc     requests, transfer tasks (claims, leases, commits) and reading events
// Locking and durability: see kv_catalog.h.

#include <array>
#include <chrono>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <fmt/format.h>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "catalog/catalog.h"
#include "catalog/internal/claim_queue.h"
#include "catalog/internal/codec.h"
#include "catalog/internal/kv_catalog.h"
#include "catalog/internal/kv_store.h"

namespace gfrep::catalog::internal {

inline constexpr char kInodeHwmKey[] = "inode_hwm";
inline constexpr char kPoliciesKey[] = "policies";
// The highest request and task ids given out when requests were last purged (a purge may
// remove the newest ones; ids are never given out twice).
inline constexpr char kRequestHwmKey[] = "request_hwm";
inline constexpr char kTaskHwmKey[] = "task_hwm";
inline constexpr char kRevokedTokenPrefix[] = "revoked_token/";  // + id -> expiry (I64 key)
inline constexpr std::uint64_t kInodeBlock = 1u << 16;
inline constexpr std::size_t kNameLockStripes = 512;
inline constexpr std::uint32_t kMaxCopies = 64;
inline constexpr std::uint32_t kMaxParallel = 100000;
inline constexpr std::size_t kMaxLabels = 64;
// Longest lease or retry delay: keeps now + delay (in ns) far from int64 overflow.
inline constexpr std::chrono::milliseconds kMaxDelay = std::chrono::hours(24 * 7);

absl::Status ValidateDelay(std::string_view what, std::chrono::milliseconds d, bool zero_ok);
// At most kMaxLabelBytes, no NUL, valid UTF-8; kInvalidArgument naming `what` otherwise.
absl::Status ValidateLabel(std::string_view what, std::string_view v);
// An error text from outside (an agent, an operator) made storable: at most
// kMaxLabelBytes, and valid UTF-8 so that the task stays readable over gRPC (a file name in
// another encoding keeps its ASCII, the rest is marked).
std::string ErrorText(std::string_view error);
absl::Status ValidateContent(const FileContent& content);

class KvCatalog final : public Catalog {
 public:
  absl::StatusOr<std::map<std::string, std::uint64_t>> StorageStats() override;
  KvCatalog(const CatalogOptions& options, std::unique_ptr<KvStore> store)
      : options_(options), store_(std::move(store)) {
    if (!options_.clock) options_.clock = SystemNowNs;
  }

  absl::Status Init();

  absl::StatusOr<Attributes> Mkdir(std::string_view path, const MkdirOptions& options) override;
  absl::StatusOr<Attributes> CreateFile(std::string_view path,
                                        const FileContent& content) override;
  absl::StatusOr<WriteReservation> BeginWrite(std::string_view path,
                                              const FileContent& content) override;
  absl::StatusOr<Attributes> CommitFile(std::string_view path, const FileContent& content,
                                        std::string_view writer_node,
                                        std::optional<std::uint64_t> expected_generation) override;
  absl::StatusOr<std::vector<Attributes>> CreateFiles(const std::vector<NewFile>& files) override;
  absl::StatusOr<Attributes> Stat(std::string_view path) override;
  absl::StatusOr<std::vector<absl::StatusOr<Attributes>>> StatMany(
      const std::vector<std::string>& paths) override;
  absl::StatusOr<Attributes> StatInode(InodeId inode) override;
  absl::StatusOr<std::string> PathOf(InodeId inode) override;
  absl::StatusOr<std::vector<DirEntry>> List(std::string_view path,
                                             const ListOptions& options) override;
  absl::Status Remove(std::string_view path, bool recursive) override;
  absl::Status Rename(std::string_view from, std::string_view to) override;

  absl::StatusOr<Location> Locate(std::string_view path) override;
  absl::StatusOr<std::vector<Replica>> GetReplicas(InodeId inode) override;
  absl::Status PutReplica(const Replica& replica) override;
  absl::Status RemoveReplica(InodeId inode, std::string_view node) override;
  absl::StatusOr<std::vector<Replica>> ListNodeReplicas(std::string_view node,
                                                        InodeId start_after,
                                                        std::size_t limit) override;

  absl::Status PutSite(const Site& site) override;
  absl::Status RemoveSite(std::string_view name) override;
  absl::StatusOr<std::vector<Site>> ListSites() override;
  absl::Status RegisterNode(const Node& node) override;
  absl::Status PutNodeDisk(std::string_view node, const DiskProfile& disk) override;
  absl::Status SetNodeMode(std::string_view node, NodeMode mode) override;
  absl::Status RemoveNode(std::string_view name) override;
  absl::StatusOr<Node> GetNode(std::string_view name) override;
  absl::StatusOr<std::vector<Node>> ListNodes(std::string_view site) override;
  absl::Status SendHeartbeat(const Heartbeat& heartbeat) override;
  absl::Status PutRoute(const Route& route) override;
  absl::Status RemoveRoute(std::string_view src_site, std::string_view dst_site) override;
  absl::StatusOr<Route> GetRoute(std::string_view src_site, std::string_view dst_site) override;
  absl::StatusOr<std::vector<Route>> ListRoutes() override;

  absl::StatusOr<Request> CreateRequest(const RequestSpec& spec) override;
  absl::StatusOr<Request> GetRequest(std::uint64_t id) override;
  absl::StatusOr<std::vector<Request>> ListRequests(bool any_state, RequestState state,
                                                    std::size_t limit) override;
  absl::StatusOr<Request> UpdateRequest(const RequestUpdate& update) override;
  absl::StatusOr<Request> AddRequestFiles(std::uint64_t request_id,
                                          const std::vector<RequestFileInput>& files,
                                          bool last) override;
  absl::StatusOr<RequestFile> SettleRequestFile(std::uint64_t request_id, std::uint64_t file_id,
                                                RequestFileState state,
                                                std::string_view reason) override;
  absl::StatusOr<std::vector<RequestFile>> ListRequestFiles(
      std::uint64_t request_id, const RequestFileFilter& filter) override;
  absl::StatusOr<std::vector<Task>> CreateTasks(const std::vector<TaskSpec>& specs) override;
  absl::StatusOr<Task> GetTask(std::uint64_t id) override;
  absl::StatusOr<std::vector<Task>> ListTasks(const TaskFilter& filter) override;
  absl::StatusOr<Task> ClaimTask(std::string_view node, std::string_view owner,
                                 std::chrono::milliseconds lease) override;
  absl::StatusOr<std::vector<Task>> ClaimTasks(std::string_view node,
                                               const std::vector<std::string>& owners,
                                               std::chrono::milliseconds lease,
                                               std::chrono::milliseconds wait) override;
  absl::StatusOr<std::vector<absl::Status>> RenewLeases(const std::vector<LeaseRenewal>& items,
                                                        std::chrono::milliseconds lease) override;
  absl::StatusOr<Task> YieldTask(std::uint64_t id, std::string_view owner,
                                 std::string_view reason) override;
  absl::StatusOr<Task> RenewLease(std::uint64_t id, std::string_view owner,
                                  std::chrono::milliseconds lease) override;
  absl::StatusOr<std::vector<absl::Status>> TransitionReplicas(
      const std::vector<ReplicaTransition>& items) override;
  absl::StatusOr<Task> CompleteTask(std::uint64_t id, std::string_view owner) override;
  absl::StatusOr<std::vector<absl::StatusOr<Task>>> CompleteTasks(
      const std::vector<TaskCompletion>& items) override;
  absl::StatusOr<Task> FailTask(std::uint64_t id, std::string_view owner, std::string_view error,
                                bool retryable, std::chrono::milliseconds retry_after) override;
  absl::StatusOr<std::size_t> ExpireLeases() override;
  absl::StatusOr<Task> AbandonTask(std::uint64_t id, std::string_view reason) override;
  absl::Status CancelRequest(std::uint64_t id) override;

  absl::StatusOr<PolicyDocument> GetPolicies() override;
  absl::StatusOr<PolicyDocument> PutPolicies(std::string_view text, std::string_view source,
                                             std::optional<std::uint64_t> expected_version) override;

  absl::StatusOr<std::vector<Event>> ReadEvents(std::uint64_t after_seq, std::size_t max,
                                                std::chrono::milliseconds wait) override;
  absl::StatusOr<std::uint64_t> LastEventSeq() override;
  absl::StatusOr<std::size_t> PurgeFinishedRequests(std::int64_t finished_before_ns, std::size_t max) override;
  absl::Status RecordAudit(std::string_view who, std::string_view what, std::string_view detail) override;
  absl::StatusOr<Attributes> SetAttributes(std::string_view path, const AttributeChange& change) override;
  absl::Status RevokeToken(std::string_view id, std::int64_t expires_unix) override;
  absl::StatusOr<std::vector<std::pair<std::string, std::int64_t>>> RevokedTokens() override;

  absl::StatusOr<std::string> Property(std::string_view name) { return store_->Property(name); }
  KvStore& store() { return *store_; }

  // Shared stores: wakes this front end's waiters when another one writes (until destroyed).
  // Called once, after Init.
  void WatchOtherFrontEnds();

 private:
  // ClaimTasks without the wait: what is claimable now.
  absl::StatusOr<std::vector<Task>> ClaimNow(std::string_view node,
                                             const std::vector<std::string>& owners,
                                             std::chrono::milliseconds lease);

  // The write gate (kv_catalog.h): opened first by every mutation, held to its end.
  // Re-entrant on one thread: a mutation made of others (ClaimTask of ClaimTasks) opens it
  // once.
  class WriteGate {
   public:
    explicit WriteGate(KvCatalog* catalog);
    ~WriteGate();
    WriteGate(const WriteGate&) = delete;
    WriteGate& operator=(const WriteGate&) = delete;
    // Not OK: the lock or the marks could not be had; the mutation returns this and
    // changes nothing.
    const absl::Status& status() const { return status_; }

   private:
    std::unique_ptr<KvWriteLock> lock_;
    bool outer_ = false;
    absl::Status status_;
  };

  // Shared stores: re-reads the marks other processes may have moved (event seq, request
  // and task ids) and forgets the claim queues. Called by the write gate, under the store's
  // write lock.
  absl::Status Resync();
  // Another process wrote: re-reads the event seq (waking ReadEvents' waiters). Errors are
  // left for the next call that needs the marks.
  void OnExternalWrite();

  std::int64_t Now() const { return options_.clock(); }

  absl::Status Write(KvBatch* batch, std::string_view what) {
    if (options_.write_fault) {
      if (absl::Status s = options_.write_fault(what); !s.ok()) return s;
    }
    return store_->Write(*batch, options_.sync, what);
  }

  // Holds work_mu_. Events numbered by AddEvent count only once their batch is written
  // (WriteLocked); on release, seqs taken for a batch that failed or was never written
  // (an error return) are given back, before any waiter can look, so a failed mutation
  // leaves no gap and wakes no ReadEvents/Watch waiter.
  class ABSL_SCOPED_LOCKABLE WorkLock {
   public:
    explicit WorkLock(KvCatalog* c) ABSL_EXCLUSIVE_LOCK_FUNCTION(c->work_mu_) : c_(c) {
      c_->work_mu_.Lock();
    }
    ~WorkLock() ABSL_UNLOCK_FUNCTION() {
      c_->last_seq_ = c_->committed_seq_;
      c_->claim_queue_.DiscardStaged();  // notes of a batch never written
      c_->staged_ = {};
      c_->work_mu_.Unlock();
    }
    WorkLock(const WorkLock&) = delete;
    WorkLock& operator=(const WorkLock&) = delete;

   private:
    KvCatalog* c_;
  };

  // Write for batches built under a WorkLock: commits the seqs its events took.
  //
  // A failed write may still have been applied (PostgreSQL: the connection broke after
  // COMMIT was sent; the reply was lost). Its request, task and event ids must then not be
  // handed out again (the next write would overwrite what it committed), so the marks are
  // read again from the store at once; if that fails too, the next write under the lock
  // re-reads them and fails (kUnavailable: retry), as its ids were taken from marks that may
  // be stale.
  absl::Status WriteLocked(KvBatch* batch, std::string_view what)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(work_mu_) {
    if (marks_unknown_) {
      absl::Status reload = ReloadMarksLocked();
      claim_queue_.Reset();
      return absl::UnavailableError(fmt::format(
          "{}: not written: the outcome of an earlier write is unknown ({}); retry", what,
          reload.ok() ? "the catalog has re-read its ids" : std::string(reload.message())));
    }
    absl::Status s = Write(batch, what);
    staged_ = {};  // written: the store has them; failed: read them again
    if (s.ok()) {
      committed_seq_ = last_seq_;
      claim_queue_.Commit();
    } else {
      claim_queue_.Reset();  // whether the batch is on disk is unknown: read it again
      if (!ReloadMarksLocked().ok()) marks_unknown_ = true;
    }
    return s;
  }

  // Reads the highest event seq, request id and task id from the store (never lowering what
  // is in memory). Clears marks_unknown_ on success.
  absl::Status ReloadMarksLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(work_mu_);

  // Reads one value. kNotFound (with `what` in the message) when absent.
  absl::StatusOr<std::string> Get(Table t, std::string_view key, std::string_view what,
                                  const KvSnapshot* snapshot = nullptr) {
    return store_->Get(t, key, what, snapshot);
  }

  // Calls fn(key, value) for keys with `prefix` starting at `start` (>= prefix) until fn
  // returns false.
  absl::Status Scan(Table t, std::string_view prefix, std::string_view start, const KvScanFn& fn,
                    const KvSnapshot* snapshot = nullptr) {
    return store_->Scan(t, prefix, start, fn, snapshot);
  }

  absl::StatusOr<Attributes> Root() { return GetDentry(0, ""); }
  absl::StatusOr<Attributes> GetDentry(InodeId parent, std::string_view name,
                                       const KvSnapshot* snapshot = nullptr) {
    absl::StatusOr<std::string> v = Get(kDentries, DentryKey(parent, name), name, snapshot);
    if (!v.ok()) return v.status();
    return DecodeAttributes(*v);
  }
  // Resolves components; kNotFound / kFailedPrecondition name the failing prefix.
  absl::StatusOr<Attributes> Resolve(const std::vector<std::string>& parts, std::size_t count);
  absl::StatusOr<Attributes> ResolvePath(std::string_view path) {
    absl::StatusOr<std::vector<std::string>> parts = SplitPath(path);
    if (!parts.ok()) return parts.status();
    return Resolve(*parts, parts->size());
  }

  absl::StatusOr<InodeId> AllocateInode();
  absl::Mutex& NameLock(InodeId parent, std::string_view name) {
    std::size_t h = std::hash<std::string_view>()(name) ^ (parent * 0x9e3779b97f4a7c15ull);
    return name_locks_[h % kNameLockStripes];
  }
  // Creates (parent, name). With exist_ok, an existing directory is returned as is.
  absl::StatusOr<Attributes> CreateEntry(const Attributes& parent, const std::string& name,
                                         FileType type, const FileContent& content,
                                         bool exist_ok);

  void AddEvent(KvBatch& batch, EventKind kind, std::uint64_t id,
                std::string_view node, std::string_view state, std::string_view detail)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(work_mu_);
  void PutReplicaLocked(KvBatch& batch, const Replica& r, std::string_view detail)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(work_mu_);
  void DeleteReplicaLocked(KvBatch& batch, InodeId inode, std::string_view node)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(work_mu_);
  void PutTaskLocked(KvBatch& batch, const Task& t)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(work_mu_);
  // Deletes the replica (inode, node) if it is kPending at `generation` (the placeholder
  // of an attempt at that generation); any other record is left alone.
  absl::Status DropPendingReplicaLocked(KvBatch& batch, InodeId inode,
                                        std::string_view node, std::uint64_t generation)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(work_mu_);
  // The record (inode, node), or nullopt if there is none.
  absl::StatusOr<std::optional<Replica>> FindReplica(InodeId inode, std::string_view node);
  // The highest generation reserved for `inode` by BeginWrite (0: none recorded).
  absl::StatusOr<std::uint64_t> ReservedGeneration(InodeId inode);
  // A lease that ran out: a failed attempt, back to kQueued (or kFailed when out of
  // attempts), its pending replica dropped.
  absl::Status ExpireLeaseLocked(KvBatch& batch, Task& t, std::int64_t now)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(work_mu_);
  // Why a claimable task can no longer do anything useful ("" if it can): its file is gone
  // or at a newer generation, or the destination's record is newer.
  // `attrs`, if non-null, receives the file's entry when it exists.
  absl::StatusOr<std::string> ObsoleteReason(const Task& t, Attributes* attrs = nullptr)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(work_mu_);
  // The ids of `node`'s open tasks (the node_tasks index), from the remembered lowest one on:
  // finished tasks leave deletion markers below it that a scan from the node's first key
  // would step over, one by one, on every claim.
  absl::StatusOr<std::vector<std::uint64_t>> OpenTaskIdsLocked(std::string_view node)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(work_mu_);
  // Adds the completion of the leased task `t` to `batch` (t becomes what it will be once
  // written); `outcome` is what CompleteTask reports then: OK or kAborted. An error return
  // added nothing.
  absl::Status CompleteLeasedLocked(KvBatch& batch, Task& t, std::int64_t mtime_ns,
                                    absl::Status& outcome)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(work_mu_);
  absl::StatusOr<Task> LeasedTask(std::uint64_t id, std::string_view owner)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(work_mu_);

  // Requests and request files (kv_request_files.cc). Reads do not see the batch being
  // built, so the records a batch changes are kept in staged_ until it is written: a second
  // task of the same request in one batch moves the counters the first one moved.
  //
  // The request `id` as the batch will leave it (kNotFound if there is none).
  absl::StatusOr<Request*> StagedRequestLocked(std::uint64_t id)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(work_mu_);
  // The request file (request, file) as the batch will leave it; null if there is none.
  absl::StatusOr<RequestFile*> StagedFileLocked(std::uint64_t request, std::uint64_t file)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(work_mu_);
  void PutRequestLocked(KvBatch& batch, const Request& r) ABSL_EXCLUSIVE_LOCKS_REQUIRED(work_mu_);
  void PutRequestFileLocked(KvBatch& batch, const RequestFile& f)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(work_mu_);
  // Moves file `f` of `r` to done or failed, the counters with it, and ends `r` when this
  // was its last unsettled file and it is expanded.
  absl::Status SettleFileLocked(KvBatch& batch, Request& r, RequestFile& f, RequestFileState to,
                                std::string reason) ABSL_EXCLUSIVE_LOCKS_REQUIRED(work_mu_);
  // Complete current replicas of `inode` on nodes of r's destination sites (any site if it
  // names none), counting `also_node` as one if it is not among them.
  absl::StatusOr<int> CopiesForLocked(const Request& r, const Attributes& file,
                                      std::string_view also_node)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(work_mu_);
  // CreateTasks made task `t`: its request file opens (wanted -> copying), its request runs.
  absl::Status TaskOpenedLocked(KvBatch& batch, const Task& t)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(work_mu_);
  // Open task `t` has just become done, failed or cancelled (as the batch will write it):
  // its request file follows (see RequestFile). `file`: the file's attributes (or kNotFound)
  // when the caller has just read them (null: read here).
  absl::Status TaskSettledLocked(KvBatch& batch, const Task& t,
                                 const absl::StatusOr<Attributes>* file = nullptr)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(work_mu_);
  // Open task `t` was given back as a straggler (YieldTask): its file records the source as
  // slow, then follows as for any settled task.
  absl::Status TaskYieldedLocked(KvBatch& batch, const Task& t)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(work_mu_);
  // An attempt of open task `t` failed and it was queued again: its file counts the attempt.
  absl::Status TaskRetriedLocked(KvBatch& batch, const Task& t)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(work_mu_);
  absl::Status MarkSubtreeDeleted(KvBatch& batch, const Attributes& a,
                                  std::size_t& count) ABSL_EXCLUSIVE_LOCKS_REQUIRED(work_mu_);

  // Constant after construction.
  CatalogOptions options_;
  std::unique_ptr<KvStore> store_;

  absl::Mutex tree_mu_;
  std::array<absl::Mutex, kNameLockStripes> name_locks_;

  absl::Mutex id_mu_;
  InodeId next_inode_ ABSL_GUARDED_BY(id_mu_) = kRootInode + 1;
  InodeId inode_hwm_ ABSL_GUARDED_BY(id_mu_) = kRootInode + 1;

  absl::Mutex work_mu_;
  std::uint64_t last_seq_ ABSL_GUARDED_BY(work_mu_) = 0;
  // Seq of the last event whose batch was written (== last_seq_ whenever work_mu_ is free).
  std::uint64_t committed_seq_ ABSL_GUARDED_BY(work_mu_) = 0;
  std::uint64_t last_request_ ABSL_GUARDED_BY(work_mu_) = 0;
  // A write failed and the marks could not be read again since (WriteLocked).
  bool marks_unknown_ ABSL_GUARDED_BY(work_mu_) = false;
  std::uint64_t last_task_ ABSL_GUARDED_BY(work_mu_) = 0;
  // Per node, no open task of it has a lower id (ids only grow; a task that finished never
  // opens again). Absent: scan from the start.
  std::map<std::string, std::uint64_t, std::less<>> first_open_task_ ABSL_GUARDED_BY(work_mu_);
  // Claim order of each node's open tasks (hints; see claim_queue.h).
  ClaimQueue claim_queue_ ABSL_GUARDED_BY(work_mu_);
  // Requests and request files changed by the batch being built (cleared when it is written
  // and when the lock is released).
  struct Staged {
    std::map<std::uint64_t, Request> requests;
    std::map<std::pair<std::uint64_t, std::uint64_t>, std::optional<RequestFile>> files;
  };
  Staged staged_ ABSL_GUARDED_BY(work_mu_);

  // Shared stores: other front ends' writes (WatchOtherFrontEnds). Declared last: destroyed
  // first, as its callback uses the members above.
  std::unique_ptr<KvWatch> watch_;
};

}  // namespace gfrep::catalog::internal
