#include "catalog/internal/rocks_catalog.h"

#include <rocksdb/cache.h>
#include <rocksdb/db.h>
#include <rocksdb/filter_policy.h>
#include <rocksdb/options.h>
#include <rocksdb/snapshot.h>
#include <rocksdb/table.h>
#include <rocksdb/write_batch.h>

#include <algorithm>
#include <functional>
#include <limits>
#include <map>
#include <optional>
#include <set>

#include <fmt/format.h>

#include "absl/base/thread_annotations.h"
#include "absl/time/time.h"
#include "catalog/internal/codec.h"
#include "catalog/internal/rocks_status.h"

namespace gfrep::catalog {
namespace internal {
namespace {

enum Cf : int {
  kDefault = 0,  // meta: inode id high-water mark
  kDentries,
  kInodes,
  kReplicas,
  kNodeReplicas,
  kSites,
  kNodes,
  kRoutes,
  kRequests,
  kTasks,
  kNodeTasks,
  kRequestTasks,
  kEvents,
  kNumCf
};

const char* const kCfNames[kNumCf] = {
    "default", "dentries", "inodes",   "replicas",  "node_replicas", "sites",  "nodes",
    "routes",  "requests", "tasks",    "node_tasks", "request_tasks", "events"};

constexpr char kInodeHwmKey[] = "inode_hwm";
constexpr std::uint64_t kInodeBlock = 1u << 16;
constexpr std::size_t kNameLockStripes = 512;
constexpr std::uint32_t kMaxCopies = 64;
constexpr std::uint32_t kMaxParallel = 100000;
constexpr std::size_t kMaxLabels = 64;
// Longest lease or retry delay: keeps now + delay (in ns) far from int64 overflow.
constexpr std::chrono::milliseconds kMaxDelay = std::chrono::hours(24 * 7);

absl::Status ValidateDelay(std::string_view what, std::chrono::milliseconds d, bool zero_ok) {
  if (d.count() < 0 || (!zero_ok && d.count() == 0)) {
    return absl::InvalidArgumentError(fmt::format("{} must be positive", what));
  }
  if (d > kMaxDelay) {
    return absl::InvalidArgumentError(
        fmt::format("{} must be at most {} ms", what, kMaxDelay.count()));
  }
  return absl::OkStatus();
}

std::string_view View(const rocksdb::Slice& s) { return {s.data(), s.size()}; }
rocksdb::Slice Sl(std::string_view s) { return {s.data(), s.size()}; }

absl::Status ValidateLabel(std::string_view what, std::string_view v) {
  if (v.size() > kMaxLabelBytes) {
    return absl::InvalidArgumentError(fmt::format("{} longer than {} bytes", what, kMaxLabelBytes));
  }
  if (v.find('\0') != std::string_view::npos) {
    return absl::InvalidArgumentError(fmt::format("{} contains a NUL byte", what));
  }
  if (!IsValidUtf8(v)) return absl::InvalidArgumentError(fmt::format("{} is not valid UTF-8", what));
  return absl::OkStatus();
}

// An error text from outside (an agent, an operator) made storable: at most
// kMaxLabelBytes, and valid UTF-8 so that the task stays readable over gRPC (a file name in
// another encoding keeps its ASCII, the rest is marked).
std::string ErrorText(std::string_view error) {
  std::string out(TruncateUtf8(error, kMaxLabelBytes));
  if (!IsValidUtf8(out)) {
    for (char& c : out) {
      if (static_cast<unsigned char>(c) >= 0x80) c = '?';
    }
  }
  return out;
}

absl::Status ValidateContent(const FileContent& content) {
  for (auto [what, v] : {std::pair<std::string_view, std::string_view>{"owner", content.owner},
                         {"checksum algorithm", content.checksum_algo},
                         {"checksum", content.checksum}}) {
    if (absl::Status s = ValidateLabel(what, v); !s.ok()) return s;
  }
  return absl::OkStatus();
}

class RocksCatalog final : public Catalog {
 public:
  RocksCatalog(const CatalogOptions& options, rocksdb::DB* db,
               std::vector<rocksdb::ColumnFamilyHandle*> cfs)
      : options_(options), db_(db), cfs_(std::move(cfs)) {
    if (!options_.clock) options_.clock = SystemNowNs;
    write_options_.sync = options_.sync;
  }

  ~RocksCatalog() override {
    for (auto* h : cfs_) {
      (void)db_->DestroyColumnFamilyHandle(h);  // ignored: shutting down
    }
    (void)db_->Close();  // ignored: nothing left to do with an error here
    delete db_;
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
  absl::StatusOr<std::vector<Task>> CreateTasks(const std::vector<TaskSpec>& specs) override;
  absl::StatusOr<Task> GetTask(std::uint64_t id) override;
  absl::StatusOr<std::vector<Task>> ListTasks(const TaskFilter& filter) override;
  absl::StatusOr<Task> ClaimTask(std::string_view node, std::string_view owner,
                                 std::chrono::milliseconds lease) override;
  absl::StatusOr<std::vector<Task>> ClaimTasks(std::string_view node,
                                               const std::vector<std::string>& owners,
                                               std::chrono::milliseconds lease) override;
  absl::StatusOr<Task> RenewLease(std::uint64_t id, std::string_view owner,
                                  std::chrono::milliseconds lease) override;
  absl::StatusOr<Task> CompleteTask(std::uint64_t id, std::string_view owner) override;
  absl::StatusOr<std::vector<absl::StatusOr<Task>>> CompleteTasks(
      const std::vector<TaskCompletion>& items) override;
  absl::StatusOr<Task> FailTask(std::uint64_t id, std::string_view owner, std::string_view error,
                                bool retryable, std::chrono::milliseconds retry_after) override;
  absl::StatusOr<std::size_t> ExpireLeases() override;
  absl::StatusOr<Task> AbandonTask(std::uint64_t id, std::string_view reason) override;
  absl::Status CancelRequest(std::uint64_t id) override;

  absl::StatusOr<std::vector<Event>> ReadEvents(std::uint64_t after_seq, std::size_t max,
                                                std::chrono::milliseconds wait) override;
  absl::StatusOr<std::uint64_t> LastEventSeq() override;

  absl::StatusOr<std::string> Property(std::string_view name) {
    std::string value;
    if (!db_->GetProperty(Sl(name), &value)) {
      return absl::NotFoundError(fmt::format("no RocksDB property {}", name));
    }
    return value;
  }

 private:
  rocksdb::ColumnFamilyHandle* cf(Cf c) const { return cfs_[c]; }
  std::int64_t Now() const { return options_.clock(); }

  absl::Status Write(rocksdb::WriteBatch* batch, std::string_view what) {
    if (options_.write_fault) {
      if (absl::Status s = options_.write_fault(what); !s.ok()) return s;
    }
    return FromRocks(db_->Write(write_options_, batch), what);
  }

  // Holds work_mu_. Events numbered by AddEvent count only once their batch is written
  // (WriteLocked); on release, seqs taken for a batch that failed or was never written
  // (an error return) are given back, before any waiter can look, so a failed mutation
  // leaves no gap and wakes no ReadEvents/Watch waiter.
  class ABSL_SCOPED_LOCKABLE WorkLock {
   public:
    explicit WorkLock(RocksCatalog* c) ABSL_EXCLUSIVE_LOCK_FUNCTION(c->work_mu_) : c_(c) {
      c_->work_mu_.Lock();
    }
    ~WorkLock() ABSL_UNLOCK_FUNCTION() {
      c_->last_seq_ = c_->committed_seq_;
      c_->work_mu_.Unlock();
    }
    WorkLock(const WorkLock&) = delete;
    WorkLock& operator=(const WorkLock&) = delete;

   private:
    RocksCatalog* c_;
  };

  // Write for batches built under a WorkLock: commits the seqs its events took.
  absl::Status WriteLocked(rocksdb::WriteBatch* batch, std::string_view what)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(work_mu_) {
    absl::Status s = Write(batch, what);
    if (s.ok()) committed_seq_ = last_seq_;
    return s;
  }

  // Reads one value. kNotFound (with `what` in the message) when absent.
  absl::StatusOr<std::string> Get(Cf c, std::string_view key, std::string_view what,
                                  const rocksdb::ReadOptions& ro = rocksdb::ReadOptions()) {
    std::string value;
    rocksdb::Status s = db_->Get(ro, cf(c), Sl(key), &value);
    if (s.IsNotFound()) return absl::NotFoundError(fmt::format("{}: not found", what));
    if (!s.ok()) return FromRocks(s, what);
    return value;
  }

  // Calls fn(key, value) for keys with `prefix` starting at `start` (>= prefix) until fn
  // returns false.
  absl::Status Scan(Cf c, std::string_view prefix, std::string_view start,
                    const std::function<bool(std::string_view, std::string_view)>& fn) {
    rocksdb::ReadOptions ro;
    std::string upper = PrefixSuccessor(prefix);
    rocksdb::Slice upper_slice(upper);
    if (!upper.empty()) ro.iterate_upper_bound = &upper_slice;
    std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(ro, cf(c)));
    for (it->Seek(Sl(start.empty() ? prefix : start)); it->Valid(); it->Next()) {
      if (!fn(View(it->key()), View(it->value()))) break;
    }
    return FromRocks(it->status(), "scan");
  }

  absl::StatusOr<Attributes> Root() { return GetDentry(0, ""); }
  absl::StatusOr<Attributes> GetDentry(InodeId parent, std::string_view name,
                                       const rocksdb::ReadOptions& ro = rocksdb::ReadOptions()) {
    absl::StatusOr<std::string> v = Get(kDentries, DentryKey(parent, name), name, ro);
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

  void AddEvent(rocksdb::WriteBatch& batch, EventKind kind, std::uint64_t id,
                std::string_view node, std::string_view state, std::string_view detail)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(work_mu_);
  void PutReplicaLocked(rocksdb::WriteBatch& batch, const Replica& r, std::string_view detail)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(work_mu_);
  void DeleteReplicaLocked(rocksdb::WriteBatch& batch, InodeId inode, std::string_view node)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(work_mu_);
  void PutTaskLocked(rocksdb::WriteBatch& batch, const Task& t)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(work_mu_);
  // Deletes the replica (inode, node) if it is kPending at `generation` (the placeholder
  // of an attempt at that generation); any other record is left alone.
  absl::Status DropPendingReplicaLocked(rocksdb::WriteBatch& batch, InodeId inode,
                                        std::string_view node, std::uint64_t generation)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(work_mu_);
  // The record (inode, node), or nullopt if there is none.
  absl::StatusOr<std::optional<Replica>> FindReplica(InodeId inode, std::string_view node);
  // The highest generation reserved for `inode` by BeginWrite (0: none recorded).
  absl::StatusOr<std::uint64_t> ReservedGeneration(InodeId inode);
  // A lease that ran out: a failed attempt, back to kQueued (or kFailed when out of
  // attempts), its pending replica dropped.
  absl::Status ExpireLeaseLocked(rocksdb::WriteBatch& batch, Task& t, std::int64_t now)
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
  absl::Status CompleteLeasedLocked(rocksdb::WriteBatch& batch, Task& t, absl::Status& outcome)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(work_mu_);
  absl::StatusOr<Task> LeasedTask(std::uint64_t id, std::string_view owner)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(work_mu_);
  absl::Status MarkSubtreeDeleted(rocksdb::WriteBatch& batch, const Attributes& a,
                                  std::size_t& count) ABSL_EXCLUSIVE_LOCKS_REQUIRED(work_mu_);

  // Constant after construction.
  CatalogOptions options_;
  rocksdb::DB* db_;
  std::vector<rocksdb::ColumnFamilyHandle*> cfs_;
  rocksdb::WriteOptions write_options_;

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
  std::uint64_t last_task_ ABSL_GUARDED_BY(work_mu_) = 0;
  // Per node, no open task of it has a lower id (ids only grow; a task that finished never
  // opens again). Absent: scan from the start.
  std::map<std::string, std::uint64_t, std::less<>> first_open_task_ ABSL_GUARDED_BY(work_mu_);
};

absl::StatusOr<std::uint64_t> LastU64Key(rocksdb::DB* db, rocksdb::ColumnFamilyHandle* h) {
  std::unique_ptr<rocksdb::Iterator> it(db->NewIterator(rocksdb::ReadOptions(), h));
  it->SeekToLast();
  if (!it->Valid()) {
    if (absl::Status s = FromRocks(it->status(), "seek last"); !s.ok()) return s;
    return 0;
  }
  return GetBigEndian64(View(it->key()));
}

absl::Status RocksCatalog::Init() {
  absl::StatusOr<Attributes> root = Root();
  if (absl::IsNotFound(root.status())) {
    Attributes a;
    a.inode = kRootInode;
    a.type = FileType::kDirectory;
    a.mode = 0755;
    a.mtime_ns = Now();
    rocksdb::WriteBatch batch;
    batch.Put(cf(kDentries), DentryKey(0, ""), EncodeAttributes(a));
    batch.Put(cf(kInodes), U64Key(kRootInode), EncodeInodeRef(0, ""));
    batch.Put(cf(kDefault), kInodeHwmKey, U64Key(kRootInode + 1));
    if (absl::Status s = Write(&batch, "create root"); !s.ok()) return s;
  } else if (!root.ok()) {
    return root.status();
  }
  absl::StatusOr<std::string> hwm = Get(kDefault, kInodeHwmKey, "inode high-water mark");
  if (!hwm.ok()) return hwm.status();
  absl::StatusOr<std::uint64_t> h = GetBigEndian64(*hwm);
  if (!h.ok()) return h.status();
  absl::StatusOr<std::uint64_t> seq = LastU64Key(db_, cf(kEvents));
  absl::StatusOr<std::uint64_t> req = LastU64Key(db_, cf(kRequests));
  absl::StatusOr<std::uint64_t> task = LastU64Key(db_, cf(kTasks));
  if (!seq.ok()) return seq.status();
  if (!req.ok()) return req.status();
  if (!task.ok()) return task.status();
  {
    absl::MutexLock l(&id_mu_);
    next_inode_ = inode_hwm_ = *h;  // the first allocation persists a fresh block
  }
  absl::MutexLock l(&work_mu_);
  last_seq_ = *seq;
  committed_seq_ = *seq;
  last_request_ = *req;
  last_task_ = *task;
  return absl::OkStatus();
}

absl::StatusOr<InodeId> RocksCatalog::AllocateInode() {
  absl::MutexLock l(&id_mu_);
  if (next_inode_ >= inode_hwm_) {
    // Persist the end of a new block before handing out ids from it, so ids are never
    // reused after a crash even though creates commit out of order.
    std::uint64_t hwm = next_inode_ + kInodeBlock;
    rocksdb::WriteBatch batch;
    batch.Put(cf(kDefault), kInodeHwmKey, U64Key(hwm));
    rocksdb::WriteOptions wo;
    wo.sync = true;
    if (absl::Status s = FromRocks(db_->Write(wo, &batch), "persist inode block"); !s.ok()) {
      return s;
    }
    inode_hwm_ = hwm;
  }
  return next_inode_++;
}

absl::StatusOr<Attributes> RocksCatalog::Resolve(const std::vector<std::string>& parts,
                                                 std::size_t count) {
  absl::StatusOr<Attributes> cur = Root();
  for (std::size_t i = 0; i < count && cur.ok(); ++i) {
    if (cur->type != FileType::kDirectory) {
      std::vector<std::string> prefix(parts.begin(), parts.begin() + i);
      return absl::FailedPreconditionError(
          fmt::format("{}: not a directory", JoinPath(prefix)));
    }
    cur = GetDentry(cur->inode, parts[i]);
    if (absl::IsNotFound(cur.status())) {
      std::vector<std::string> prefix(parts.begin(), parts.begin() + i + 1);
      return absl::NotFoundError(fmt::format("{}: no such file or directory", JoinPath(prefix)));
    }
  }
  return cur;
}

absl::StatusOr<Attributes> RocksCatalog::CreateEntry(const Attributes& parent,
                                                     const std::string& name, FileType type,
                                                     const FileContent& content, bool exist_ok) {
  absl::MutexLock l(&NameLock(parent.inode, name));
  absl::StatusOr<Attributes> existing = GetDentry(parent.inode, name);
  if (existing.ok()) {
    if (exist_ok && existing->type == FileType::kDirectory) return existing;
    return absl::AlreadyExistsError(fmt::format("{}: already exists", name));
  }
  if (!absl::IsNotFound(existing.status())) return existing.status();
  absl::StatusOr<InodeId> id = AllocateInode();
  if (!id.ok()) return id.status();
  Attributes a;
  a.inode = *id;
  a.parent = parent.inode;
  a.name = name;
  a.type = type;
  a.mode = content.mode;
  a.owner = content.owner;
  a.mtime_ns = Now();
  if (type == FileType::kFile) {
    a.size = content.size;
    a.checksum_algo = content.checksum_algo;
    a.checksum = content.checksum;
  }
  rocksdb::WriteBatch batch;
  batch.Put(cf(kDentries), DentryKey(parent.inode, name), EncodeAttributes(a));
  batch.Put(cf(kInodes), U64Key(a.inode), EncodeInodeRef(parent.inode, name));
  if (absl::Status s = Write(&batch, "create entry"); !s.ok()) return s;
  return a;
}

absl::StatusOr<Attributes> RocksCatalog::Mkdir(std::string_view path,
                                               const MkdirOptions& options) {
  absl::StatusOr<std::vector<std::string>> parts = SplitPath(path);
  if (!parts.ok()) return parts.status();
  if (absl::Status s = ValidateLabel("owner", options.owner); !s.ok()) return s;
  absl::ReaderMutexLock tree(&tree_mu_);
  FileContent content;
  content.mode = options.mode;
  content.owner = options.owner;
  if (parts->empty()) {
    if (options.parents) return Root();
    return absl::AlreadyExistsError("/: already exists");
  }
  if (!options.parents) {
    absl::StatusOr<Attributes> parent = Resolve(*parts, parts->size() - 1);
    if (!parent.ok()) return parent.status();
    if (parent->type != FileType::kDirectory) {
      return absl::FailedPreconditionError(fmt::format("{}: parent is not a directory", path));
    }
    absl::StatusOr<Attributes> a =
        CreateEntry(*parent, parts->back(), FileType::kDirectory, content, false);
    if (absl::IsAlreadyExists(a.status())) {
      return absl::AlreadyExistsError(fmt::format("{}: already exists", path));
    }
    return a;
  }
  absl::StatusOr<Attributes> cur = Root();
  for (std::size_t i = 0; i < parts->size() && cur.ok(); ++i) {
    if (cur->type != FileType::kDirectory) {
      return absl::FailedPreconditionError(fmt::format(
          "{}: not a directory",
          JoinPath(std::vector<std::string>(parts->begin(), parts->begin() + i))));
    }
    absl::StatusOr<Attributes> next = GetDentry(cur->inode, (*parts)[i]);
    if (absl::IsNotFound(next.status())) {
      next = CreateEntry(*cur, (*parts)[i], FileType::kDirectory, content, true);
    }
    if (absl::IsAlreadyExists(next.status())) {
      return absl::FailedPreconditionError(fmt::format(
          "{}: exists and is not a directory",
          JoinPath(std::vector<std::string>(parts->begin(), parts->begin() + i + 1))));
    }
    cur = std::move(next);
  }
  if (cur.ok() && cur->type != FileType::kDirectory) {
    return absl::FailedPreconditionError(fmt::format("{}: exists and is not a directory", path));
  }
  return cur;
}

absl::StatusOr<Attributes> RocksCatalog::CreateFile(std::string_view path,
                                                    const FileContent& content) {
  absl::StatusOr<std::vector<std::string>> parts = SplitPath(path);
  if (!parts.ok()) return parts.status();
  if (parts->empty()) return absl::AlreadyExistsError("/: already exists");
  if (absl::Status s = ValidateContent(content); !s.ok()) return s;
  absl::ReaderMutexLock tree(&tree_mu_);
  absl::StatusOr<Attributes> parent = Resolve(*parts, parts->size() - 1);
  if (!parent.ok()) return parent.status();
  if (parent->type != FileType::kDirectory) {
    return absl::FailedPreconditionError(fmt::format("{}: parent is not a directory", path));
  }
  absl::StatusOr<Attributes> a = CreateEntry(*parent, parts->back(), FileType::kFile, content, false);
  if (absl::IsAlreadyExists(a.status())) {
    return absl::AlreadyExistsError(fmt::format("{}: already exists", path));
  }
  return a;
}

absl::StatusOr<std::vector<Attributes>> RocksCatalog::CreateFiles(
    const std::vector<NewFile>& files) {
  if (files.size() > kMaxBatchPaths) {
    return absl::InvalidArgumentError(fmt::format("more than {} files", kMaxBatchPaths));
  }
  std::vector<std::vector<std::string>> parts;
  parts.reserve(files.size());
  for (const NewFile& f : files) {
    absl::StatusOr<std::vector<std::string>> p = SplitPath(f.path);
    if (!p.ok()) return p.status();
    if (p->empty()) return absl::AlreadyExistsError("/: already exists");
    if (absl::Status s = ValidateContent(f.content); !s.ok()) return s;
    parts.push_back(std::move(*p));
  }
  absl::ReaderMutexLock tree(&tree_mu_);
  // Parents, resolved once per distinct directory.
  std::map<std::vector<std::string>, Attributes> parents;
  std::vector<const Attributes*> parent_of(files.size());
  for (std::size_t i = 0; i < files.size(); ++i) {
    std::vector<std::string> dir(parts[i].begin(), parts[i].end() - 1);
    auto it = parents.find(dir);
    if (it == parents.end()) {
      absl::StatusOr<Attributes> p = Resolve(dir, dir.size());
      if (!p.ok()) return p.status();
      if (p->type != FileType::kDirectory) {
        return absl::FailedPreconditionError(fmt::format("{}: not a directory", JoinPath(dir)));
      }
      it = parents.emplace(std::move(dir), std::move(*p)).first;
    }
    parent_of[i] = &it->second;
  }
  // Name locks in a fixed (address) order, each once, so batches cannot deadlock.
  std::set<absl::Mutex*> locks;
  for (std::size_t i = 0; i < files.size(); ++i) {
    locks.insert(&NameLock(parent_of[i]->inode, parts[i].back()));
  }
  for (absl::Mutex* m : locks) m->Lock();
  struct Unlock {
    std::set<absl::Mutex*>& locks;
    ~Unlock() {
      for (auto it = locks.rbegin(); it != locks.rend(); ++it) (*it)->Unlock();
    }
  } unlock{locks};
  std::set<std::pair<InodeId, std::string_view>> seen;
  rocksdb::WriteBatch batch;
  std::vector<Attributes> out;
  out.reserve(files.size());
  std::int64_t now = Now();
  for (std::size_t i = 0; i < files.size(); ++i) {
    const std::string& name = parts[i].back();
    InodeId parent = parent_of[i]->inode;
    if (!seen.emplace(parent, name).second) {
      return absl::InvalidArgumentError(fmt::format("{}: twice in one batch", files[i].path));
    }
    std::string ignored;
    rocksdb::Status s = db_->Get(rocksdb::ReadOptions(), cf(kDentries), DentryKey(parent, name), &ignored);
    if (s.ok()) return absl::AlreadyExistsError(fmt::format("{}: already exists", files[i].path));
    if (!s.IsNotFound()) return FromRocks(s, "create files");
    absl::StatusOr<InodeId> id = AllocateInode();
    if (!id.ok()) return id.status();
    Attributes a;
    a.inode = *id;
    a.parent = parent;
    a.name = name;
    a.type = FileType::kFile;
    a.mode = files[i].content.mode;
    a.owner = files[i].content.owner;
    a.mtime_ns = now;
    a.size = files[i].content.size;
    a.checksum_algo = files[i].content.checksum_algo;
    a.checksum = files[i].content.checksum;
    batch.Put(cf(kDentries), DentryKey(parent, name), EncodeAttributes(a));
    batch.Put(cf(kInodes), U64Key(a.inode), EncodeInodeRef(parent, name));
    out.push_back(std::move(a));
  }
  if (absl::Status s = Write(&batch, "create files"); !s.ok()) return s;
  return out;
}

absl::StatusOr<std::uint64_t> RocksCatalog::ReservedGeneration(InodeId inode) {
  absl::StatusOr<std::string> v =
      Get(kDefault, ReservedGenerationKey(inode), "reserved generation");
  if (absl::IsNotFound(v.status())) return 0;
  if (!v.ok()) return v.status();
  return GetBigEndian64(*v);
}

absl::StatusOr<WriteReservation> RocksCatalog::BeginWrite(std::string_view path,
                                                          const FileContent& content) {
  absl::StatusOr<std::vector<std::string>> parts = SplitPath(path);
  if (!parts.ok()) return parts.status();
  if (parts->empty()) return absl::FailedPreconditionError("/: is a directory");
  if (absl::Status s = ValidateContent(content); !s.ok()) return s;
  absl::ReaderMutexLock tree(&tree_mu_);
  absl::StatusOr<Attributes> parent = Resolve(*parts, parts->size() - 1);
  if (!parent.ok()) return parent.status();
  if (parent->type != FileType::kDirectory) {
    return absl::FailedPreconditionError(fmt::format("{}: parent is not a directory", path));
  }
  const std::string& name = parts->back();
  // The name lock orders this against CommitFile and creates of the same path.
  absl::MutexLock name_lock(&NameLock(parent->inode, name));
  absl::StatusOr<Attributes> existing = GetDentry(parent->inode, name);
  rocksdb::WriteBatch batch;
  WriteReservation out;
  Attributes& a = out.attributes;
  std::uint64_t reserved = 0;
  if (existing.ok()) {
    if (existing->type == FileType::kDirectory) {
      return absl::FailedPreconditionError(fmt::format("{}: is a directory", path));
    }
    a = *existing;
    absl::StatusOr<std::uint64_t> mark = ReservedGeneration(a.inode);
    if (!mark.ok()) return mark.status();
    reserved = *mark;
  } else if (absl::IsNotFound(existing.status())) {
    absl::StatusOr<InodeId> id = AllocateInode();
    if (!id.ok()) return id.status();
    a.inode = *id;
    a.parent = parent->inode;
    a.name = name;
    a.type = FileType::kFile;
    a.mode = content.mode;
    a.owner = content.owner;
    a.mtime_ns = Now();
    batch.Put(cf(kDentries), DentryKey(a.parent, a.name), EncodeAttributes(a));
    batch.Put(cf(kInodes), U64Key(a.inode), EncodeInodeRef(a.parent, a.name));
  } else {
    return existing.status();
  }
  out.generation = std::max(a.generation, reserved) + 1;
  batch.Put(cf(kDefault), ReservedGenerationKey(a.inode), U64Key(out.generation));
  if (absl::Status s = Write(&batch, "begin write"); !s.ok()) return s;
  return out;
}

absl::StatusOr<Attributes> RocksCatalog::CommitFile(
    std::string_view path, const FileContent& content, std::string_view writer_node,
    std::optional<std::uint64_t> expected_generation) {
  absl::StatusOr<std::vector<std::string>> parts = SplitPath(path);
  if (!parts.ok()) return parts.status();
  if (parts->empty()) return absl::FailedPreconditionError("/: is a directory");
  if (absl::Status s = ValidateContent(content); !s.ok()) return s;
  if (!writer_node.empty()) {
    if (absl::Status s = ValidateName(writer_node); !s.ok()) return s;
  }
  absl::ReaderMutexLock tree(&tree_mu_);
  absl::StatusOr<Attributes> parent = Resolve(*parts, parts->size() - 1);
  if (!parent.ok()) return parent.status();
  if (parent->type != FileType::kDirectory) {
    return absl::FailedPreconditionError(fmt::format("{}: parent is not a directory", path));
  }
  const std::string& name = parts->back();
  absl::MutexLock name_lock(&NameLock(parent->inode, name));
  absl::StatusOr<Attributes> existing = GetDentry(parent->inode, name);
  Attributes a;
  if (existing.ok()) {
    if (existing->type == FileType::kDirectory) {
      return absl::FailedPreconditionError(fmt::format("{}: is a directory", path));
    }
    a = *existing;
  } else if (absl::IsNotFound(existing.status())) {
    absl::StatusOr<InodeId> id = AllocateInode();
    if (!id.ok()) return id.status();
    a.inode = *id;
    a.parent = parent->inode;
    a.name = name;
    a.type = FileType::kFile;
  } else {
    return existing.status();
  }
  if (expected_generation.has_value() && *expected_generation != a.generation) {
    return absl::AbortedError(fmt::format("{}: generation is {}, expected {}", path,
                                          a.generation, *expected_generation));
  }
  if (content.inode != 0 && (!existing.ok() || a.inode != content.inode)) {
    return absl::AbortedError(fmt::format(
        "{}: the file this write began on (inode {}) was removed or replaced meanwhile", path,
        content.inode));
  }
  std::uint64_t reserved = 0;
  if (existing.ok()) {
    absl::StatusOr<std::uint64_t> mark = ReservedGeneration(a.inode);
    if (!mark.ok()) return mark.status();
    reserved = *mark;
  }
  const std::uint64_t high = std::max(a.generation, reserved);
  if (content.generation != 0) {
    if (content.generation <= a.generation) {
      return absl::AbortedError(
          fmt::format("{}: generation {} was committed meanwhile (this write reserved {})", path,
                      a.generation, content.generation));
    }
    if (content.generation > high) {
      return absl::AbortedError(
          fmt::format("{}: generation {} was not reserved (BeginWrite reserved up to {})", path,
                      content.generation, high));
    }
    a.generation = content.generation;
  } else {
    a.generation = high + 1;
  }
  a.size = content.size;
  a.checksum_algo = content.checksum_algo;
  a.checksum = content.checksum;
  a.mode = content.mode;
  if (!content.owner.empty()) a.owner = content.owner;
  a.mtime_ns = Now();

  WorkLock work(this);
  if (!writer_node.empty()) {
    if (absl::StatusOr<std::string> n = Get(kNodes, writer_node, fmt::format("node {}", writer_node));
        !n.ok()) {
      return n.status();
    }
  }
  rocksdb::WriteBatch batch;
  batch.Put(cf(kDentries), DentryKey(a.parent, a.name), EncodeAttributes(a));
  batch.Put(cf(kInodes), U64Key(a.inode), EncodeInodeRef(a.parent, a.name));
  if (reserved != 0 && a.generation >= reserved) {
    // The generation itself is the mark now (generations only grow).
    batch.Delete(cf(kDefault), ReservedGenerationKey(a.inode));
  }
  absl::StatusOr<std::vector<Replica>> replicas = GetReplicas(a.inode);
  if (!replicas.ok()) return replicas.status();
  for (Replica r : *replicas) {
    if (r.node == writer_node) continue;
    // Pending records belong to copies in flight: CompleteTask turns them stale (their
    // generation is older) and FailTask drops them, each checking its own generation.
    if (r.state == ReplicaState::kComplete) {
      r.state = ReplicaState::kStale;
      PutReplicaLocked(batch, r, fmt::format("{} generation {}", path, a.generation));
    }
  }
  if (!writer_node.empty()) {
    Replica w;
    w.inode = a.inode;
    w.node = std::string(writer_node);
    w.state = ReplicaState::kComplete;
    w.generation = a.generation;
    w.size = a.size;
    w.verified_ns = a.mtime_ns;
    PutReplicaLocked(batch, w, path);
  }
  if (absl::Status s = WriteLocked(&batch, "commit file"); !s.ok()) return s;
  return a;
}

absl::StatusOr<Attributes> RocksCatalog::Stat(std::string_view path) { return ResolvePath(path); }

absl::StatusOr<Attributes> RocksCatalog::StatInode(InodeId inode) {
  // Two reads of one snapshot: a rename committing between them must not make the inode
  // look removed (its old name gone, the reverse record not yet read).
  rocksdb::ManagedSnapshot snapshot(db_);
  rocksdb::ReadOptions ro;
  ro.snapshot = snapshot.snapshot();
  absl::StatusOr<std::string> ref = Get(kInodes, U64Key(inode), fmt::format("inode {}", inode), ro);
  if (!ref.ok()) return ref.status();
  absl::StatusOr<std::pair<InodeId, std::string>> pn = DecodeInodeRef(*ref);
  if (!pn.ok()) return pn.status();
  return GetDentry(pn->first, pn->second, ro);
}

absl::StatusOr<std::string> RocksCatalog::PathOf(InodeId inode) {
  std::vector<std::string> parts;
  InodeId cur = inode;
  rocksdb::ManagedSnapshot snapshot(db_);  // one consistent chain while renames go on
  rocksdb::ReadOptions ro;
  ro.snapshot = snapshot.snapshot();
  // Bounded: a path has at most kMaxPathBytes/2 components.
  for (std::size_t depth = 0; cur != kRootInode; ++depth) {
    if (depth > kMaxPathBytes) return absl::DataLossError("inode chain too long (cycle?)");
    absl::StatusOr<std::string> ref = Get(kInodes, U64Key(cur), fmt::format("inode {}", cur), ro);
    if (!ref.ok()) return ref.status();
    absl::StatusOr<std::pair<InodeId, std::string>> pn = DecodeInodeRef(*ref);
    if (!pn.ok()) return pn.status();
    parts.push_back(pn->second);
    cur = pn->first;
  }
  std::reverse(parts.begin(), parts.end());
  return JoinPath(parts);
}

absl::StatusOr<std::vector<DirEntry>> RocksCatalog::List(std::string_view path,
                                                         const ListOptions& options) {
  absl::StatusOr<Attributes> dir = ResolvePath(path);
  if (!dir.ok()) return dir.status();
  if (dir->type != FileType::kDirectory) {
    return absl::FailedPreconditionError(fmt::format("{}: not a directory", path));
  }
  std::vector<DirEntry> out;
  std::string prefix = DentryPrefix(dir->inode);
  std::string start = options.start_after.empty() ? prefix
                                                  : DentryKey(dir->inode, options.start_after);
  absl::Status decode_status;
  absl::Status s = Scan(kDentries, prefix, start, [&](std::string_view key, std::string_view v) {
    std::string_view name = key.substr(8);
    if (!options.start_after.empty() && name == options.start_after) return true;
    if (out.size() >= options.limit) return false;
    absl::StatusOr<Attributes> a = DecodeAttributes(v);
    if (!a.ok()) {
      decode_status = a.status();
      return false;
    }
    out.push_back(DirEntry{std::string(name), std::move(*a)});
    return true;
  });
  if (!s.ok()) return s;
  if (!decode_status.ok()) return decode_status;
  return out;
}

absl::Status RocksCatalog::MarkSubtreeDeleted(rocksdb::WriteBatch& batch, const Attributes& a,
                                              std::size_t& count) {
  ++count;
  batch.Delete(cf(kDentries), DentryKey(a.parent, a.name));
  batch.Delete(cf(kInodes), U64Key(a.inode));
  if (a.type == FileType::kFile) {
    batch.Delete(cf(kDefault), ReservedGenerationKey(a.inode));
    absl::StatusOr<std::vector<Replica>> replicas = GetReplicas(a.inode);
    if (!replicas.ok()) return replicas.status();
    for (Replica r : *replicas) {
      r.state = ReplicaState::kDeleting;
      PutReplicaLocked(batch, r, a.name);
    }
    return absl::OkStatus();
  }
  std::vector<Attributes> children;
  absl::Status decode_status;
  absl::Status s = Scan(kDentries, DentryPrefix(a.inode), "", [&](std::string_view, std::string_view v) {
    absl::StatusOr<Attributes> c = DecodeAttributes(v);
    if (!c.ok()) {
      decode_status = c.status();
      return false;
    }
    children.push_back(std::move(*c));
    return true;
  });
  if (!s.ok()) return s;
  if (!decode_status.ok()) return decode_status;
  for (const Attributes& c : children) {
    if (absl::Status cs = MarkSubtreeDeleted(batch, c, count); !cs.ok()) return cs;
  }
  return absl::OkStatus();
}

absl::Status RocksCatalog::Remove(std::string_view path, bool recursive) {
  absl::StatusOr<std::vector<std::string>> parts = SplitPath(path);
  if (!parts.ok()) return parts.status();
  if (parts->empty()) return absl::FailedPreconditionError("/: cannot remove the root");
  absl::WriterMutexLock tree(&tree_mu_);
  absl::StatusOr<Attributes> a = Resolve(*parts, parts->size());
  if (!a.ok()) return a.status();
  if (a->type == FileType::kDirectory && !recursive) {
    bool empty = true;
    absl::Status s = Scan(kDentries, DentryPrefix(a->inode), "",
                          [&](std::string_view, std::string_view) {
                            empty = false;
                            return false;
                          });
    if (!s.ok()) return s;
    if (!empty) {
      return absl::FailedPreconditionError(fmt::format("{}: directory not empty", path));
    }
  }
  // Replica events are numbered under work_mu_, held across the write so that the log
  // stays in commit order.
  WorkLock work(this);
  rocksdb::WriteBatch batch;
  std::size_t count = 0;
  if (absl::Status s = MarkSubtreeDeleted(batch, *a, count); !s.ok()) return s;
  return WriteLocked(&batch, "remove");
}

absl::Status RocksCatalog::Rename(std::string_view from, std::string_view to) {
  absl::StatusOr<std::vector<std::string>> src = SplitPath(from);
  if (!src.ok()) return src.status();
  absl::StatusOr<std::vector<std::string>> dst = SplitPath(to);
  if (!dst.ok()) return dst.status();
  if (src->empty()) return absl::FailedPreconditionError("/: cannot rename the root");
  if (dst->empty()) return absl::AlreadyExistsError("/: already exists");
  absl::WriterMutexLock tree(&tree_mu_);
  // Also the task/replica lock: CompleteTask and ClaimTask read a file's entry by inode
  // under it and must see it either before or after the rename, never half-way.
  WorkLock work(this);
  absl::StatusOr<Attributes> a = Resolve(*src, src->size());
  if (!a.ok()) return a.status();
  absl::StatusOr<Attributes> dparent = Resolve(*dst, dst->size() - 1);
  if (!dparent.ok()) return dparent.status();
  if (dparent->type != FileType::kDirectory) {
    return absl::FailedPreconditionError(fmt::format("{}: parent is not a directory", to));
  }
  absl::StatusOr<Attributes> existing = GetDentry(dparent->inode, dst->back());
  if (existing.ok()) return absl::AlreadyExistsError(fmt::format("{}: already exists", to));
  if (!absl::IsNotFound(existing.status())) return existing.status();
  if (a->type == FileType::kDirectory) {
    // Refuse moving a directory below itself: walk up from the new parent to the root.
    for (InodeId cur = dparent->inode; cur != 0;) {
      if (cur == a->inode) {
        return absl::FailedPreconditionError(
            fmt::format("cannot move {} into its own subtree {}", from, to));
      }
      if (cur == kRootInode) break;
      absl::StatusOr<std::string> ref = Get(kInodes, U64Key(cur), "inode");
      if (!ref.ok()) return ref.status();
      absl::StatusOr<std::pair<InodeId, std::string>> pn = DecodeInodeRef(*ref);
      if (!pn.ok()) return pn.status();
      cur = pn->first;
    }
  }
  Attributes moved = *a;
  moved.parent = dparent->inode;
  moved.name = dst->back();
  rocksdb::WriteBatch batch;
  batch.Delete(cf(kDentries), DentryKey(a->parent, a->name));
  batch.Put(cf(kDentries), DentryKey(moved.parent, moved.name), EncodeAttributes(moved));
  batch.Put(cf(kInodes), U64Key(moved.inode), EncodeInodeRef(moved.parent, moved.name));
  return WriteLocked(&batch, "rename");
}

absl::StatusOr<Location> RocksCatalog::Locate(std::string_view path) {
  absl::StatusOr<Attributes> a = ResolvePath(path);
  if (!a.ok()) return a.status();
  Location loc;
  loc.path = std::string(path);
  loc.attributes = *a;
  if (a->type == FileType::kFile) {
    absl::StatusOr<std::vector<Replica>> r = GetReplicas(a->inode);
    if (!r.ok()) return r.status();
    loc.replicas = std::move(*r);
  }
  return loc;
}

absl::StatusOr<std::vector<Replica>> RocksCatalog::GetReplicas(InodeId inode) {
  std::vector<Replica> out;
  absl::Status decode_status;
  absl::Status s = Scan(kReplicas, U64Key(inode), "", [&](std::string_view, std::string_view v) {
    absl::StatusOr<Replica> r = DecodeReplica(v);
    if (!r.ok()) {
      decode_status = r.status();
      return false;
    }
    out.push_back(std::move(*r));
    return true;
  });
  if (!s.ok()) return s;
  if (!decode_status.ok()) return decode_status;
  return out;
}

void RocksCatalog::AddEvent(rocksdb::WriteBatch& batch, EventKind kind, std::uint64_t id,
                            std::string_view node, std::string_view state,
                            std::string_view detail) {
  Event e;
  e.seq = ++last_seq_;
  e.kind = kind;
  e.time_ns = Now();
  e.id = id;
  e.node = std::string(node);
  e.state = std::string(state);
  e.detail = std::string(TruncateUtf8(detail, kMaxPathBytes));
  batch.Put(cf(kEvents), U64Key(e.seq), EncodeEvent(e));
  if (e.seq % 1024 == 0 && e.seq > options_.event_retention) {
    batch.DeleteRange(cf(kEvents), U64Key(0), U64Key(e.seq - options_.event_retention));
  }
}

void RocksCatalog::PutReplicaLocked(rocksdb::WriteBatch& batch, const Replica& in,
                                    std::string_view detail) {
  Replica r = in;
  r.updated_ns = Now();
  batch.Put(cf(kReplicas), ReplicaKey(r.inode, r.node), EncodeReplica(r));
  batch.Put(cf(kNodeReplicas), NodeReplicaKey(r.node, r.inode), "");
  AddEvent(batch, EventKind::kReplica, r.inode, r.node, ToString(r.state), detail);
}

void RocksCatalog::DeleteReplicaLocked(rocksdb::WriteBatch& batch, InodeId inode,
                                       std::string_view node) {
  batch.Delete(cf(kReplicas), ReplicaKey(inode, node));
  batch.Delete(cf(kNodeReplicas), NodeReplicaKey(node, inode));
  AddEvent(batch, EventKind::kReplica, inode, node, "removed", "");
}

absl::StatusOr<std::optional<Replica>> RocksCatalog::FindReplica(InodeId inode,
                                                                 std::string_view node) {
  absl::StatusOr<std::string> v = Get(kReplicas, ReplicaKey(inode, node), "replica");
  if (absl::IsNotFound(v.status())) return std::optional<Replica>();
  if (!v.ok()) return v.status();
  absl::StatusOr<Replica> r = DecodeReplica(*v);
  if (!r.ok()) return r.status();
  return std::optional<Replica>(std::move(*r));
}

absl::Status RocksCatalog::DropPendingReplicaLocked(rocksdb::WriteBatch& batch, InodeId inode,
                                                    std::string_view node,
                                                    std::uint64_t generation) {
  absl::StatusOr<std::optional<Replica>> r = FindReplica(inode, node);
  if (!r.ok()) return r.status();
  if (r->has_value() && (*r)->state == ReplicaState::kPending && (*r)->generation == generation) {
    DeleteReplicaLocked(batch, inode, node);
  }
  return absl::OkStatus();
}

absl::Status RocksCatalog::PutReplica(const Replica& replica) {
  if (absl::Status s = ValidateName(replica.node); !s.ok()) return s;
  WorkLock work(this);
  absl::StatusOr<Attributes> a = StatInode(replica.inode);
  if (!a.ok()) return a.status();
  if (a->type != FileType::kFile) {
    return absl::FailedPreconditionError(fmt::format("inode {} is a directory", replica.inode));
  }
  if (absl::StatusOr<std::string> n = Get(kNodes, replica.node, fmt::format("node {}", replica.node));
      !n.ok()) {
    return n.status();
  }
  if (replica.state == ReplicaState::kComplete && replica.generation != a->generation) {
    return absl::AbortedError(fmt::format("{}: generation is {}, replica holds {}", a->name,
                                          a->generation, replica.generation));
  }
  rocksdb::WriteBatch batch;
  PutReplicaLocked(batch, replica, a->name);
  return WriteLocked(&batch, "put replica");
}

absl::Status RocksCatalog::RemoveReplica(InodeId inode, std::string_view node) {
  if (absl::Status s = ValidateName(node); !s.ok()) return s;
  WorkLock work(this);
  absl::StatusOr<std::string> existing = Get(kReplicas, ReplicaKey(inode, node), "replica");
  if (absl::IsNotFound(existing.status())) return absl::OkStatus();
  if (!existing.ok()) return existing.status();
  rocksdb::WriteBatch batch;
  DeleteReplicaLocked(batch, inode, node);
  return WriteLocked(&batch, "remove replica");
}

absl::StatusOr<std::vector<Replica>> RocksCatalog::ListNodeReplicas(std::string_view node,
                                                                    InodeId start_after,
                                                                    std::size_t limit) {
  if (absl::Status s = ValidateName(node); !s.ok()) return s;
  std::vector<InodeId> inodes;
  std::string prefix = NodePrefix(node);
  absl::Status s = Scan(kNodeReplicas, prefix, NodeReplicaKey(node, start_after + 1),
                        [&](std::string_view key, std::string_view) {
                          if (inodes.size() >= limit) return false;
                          absl::StatusOr<std::uint64_t> id = GetBigEndian64(key, prefix.size());
                          if (id.ok()) inodes.push_back(*id);
                          return true;
                        });
  if (!s.ok()) return s;
  std::vector<Replica> out;
  for (InodeId id : inodes) {
    absl::StatusOr<std::string> v = Get(kReplicas, ReplicaKey(id, node), "replica");
    if (absl::IsNotFound(v.status())) continue;  // removed since the scan
    if (!v.ok()) return v.status();
    absl::StatusOr<Replica> r = DecodeReplica(*v);
    if (!r.ok()) return r.status();
    out.push_back(std::move(*r));
  }
  return out;
}

absl::Status RocksCatalog::PutSite(const Site& site) {
  if (absl::Status s = ValidateName(site.name); !s.ok()) return s;
  if (site.labels.size() > kMaxLabels) return absl::InvalidArgumentError("too many labels");
  for (const auto& [k, v] : site.labels) {
    if (absl::Status s = ValidateName(k); !s.ok()) {
      return absl::InvalidArgumentError(fmt::format("bad label key: {}", std::string(s.message())));
    }
    if (absl::Status s = ValidateLabel("label value", v); !s.ok()) return s;
  }
  WorkLock work(this);
  rocksdb::WriteBatch batch;
  batch.Put(cf(kSites), site.name, EncodeSite(site));
  return WriteLocked(&batch, "put site");
}

absl::Status RocksCatalog::RemoveSite(std::string_view name) {
  if (absl::Status s = ValidateName(name); !s.ok()) return s;
  WorkLock work(this);
  if (absl::StatusOr<std::string> v = Get(kSites, name, fmt::format("site {}", name)); !v.ok()) {
    return v.status();
  }
  absl::StatusOr<std::vector<Node>> nodes = ListNodes(name);
  if (!nodes.ok()) return nodes.status();
  if (!nodes->empty()) {
    return absl::FailedPreconditionError(
        fmt::format("site {} still has {} node(s)", name, nodes->size()));
  }
  rocksdb::WriteBatch batch;
  batch.Delete(cf(kSites), Sl(name));
  absl::StatusOr<std::vector<Route>> routes = ListRoutes();
  if (!routes.ok()) return routes.status();
  for (const Route& r : *routes) {
    if (r.src_site == name || r.dst_site == name) {
      batch.Delete(cf(kRoutes), RouteKey(r.src_site, r.dst_site));
    }
  }
  return WriteLocked(&batch, "remove site");
}

template <typename T>
absl::StatusOr<std::vector<T>> ScanAll(
    const std::function<absl::Status(const std::function<bool(std::string_view, std::string_view)>&)>&
        scan,
    absl::StatusOr<T> (*decode)(std::string_view), const std::function<bool(const T&)>& keep) {
  std::vector<T> out;
  absl::Status decode_status;
  absl::Status s = scan([&](std::string_view, std::string_view v) {
    absl::StatusOr<T> x = decode(v);
    if (!x.ok()) {
      decode_status = x.status();
      return false;
    }
    if (keep(*x)) out.push_back(std::move(*x));
    return true;
  });
  if (!s.ok()) return s;
  if (!decode_status.ok()) return decode_status;
  return out;
}

absl::StatusOr<std::vector<Site>> RocksCatalog::ListSites() {
  return ScanAll<Site>([&](const auto& fn) { return Scan(kSites, "", "", fn); }, DecodeSite,
                       [](const Site&) { return true; });
}

absl::Status RocksCatalog::RegisterNode(const Node& node) {
  if (absl::Status s = ValidateName(node.name); !s.ok()) return s;
  if (absl::Status s = ValidateName(node.site); !s.ok()) return s;
  for (auto [what, v] : {std::pair<std::string_view, std::string_view>{"address", node.address},
                         {"spool", node.spool}}) {
    if (absl::Status s = ValidateLabel(what, v); !s.ok()) return s;
  }
  WorkLock work(this);
  if (absl::StatusOr<std::string> v = Get(kSites, node.site, fmt::format("site {}", node.site));
      !v.ok()) {
    return v.status();
  }
  Node n = node;
  n.last_heartbeat_ns = Now();
  rocksdb::WriteBatch batch;
  batch.Put(cf(kNodes), n.name, EncodeNode(n));
  AddEvent(batch, EventKind::kNode, 0, n.name, "registered", n.address);
  return WriteLocked(&batch, "register node");
}

absl::Status RocksCatalog::RemoveNode(std::string_view name) {
  if (absl::Status s = ValidateName(name); !s.ok()) return s;
  WorkLock work(this);
  if (absl::StatusOr<std::string> v = Get(kNodes, name, fmt::format("node {}", name)); !v.ok()) {
    return v.status();
  }
  rocksdb::WriteBatch batch;
  batch.Delete(cf(kNodes), Sl(name));
  AddEvent(batch, EventKind::kNode, 0, name, "removed", "");
  return WriteLocked(&batch, "remove node");
}

absl::StatusOr<Node> RocksCatalog::GetNode(std::string_view name) {
  if (absl::Status s = ValidateName(name); !s.ok()) return s;
  absl::StatusOr<std::string> v = Get(kNodes, name, fmt::format("node {}", name));
  if (!v.ok()) return v.status();
  return DecodeNode(*v);
}

absl::StatusOr<std::vector<Node>> RocksCatalog::ListNodes(std::string_view site) {
  std::string s(site);
  return ScanAll<Node>([&](const auto& fn) { return Scan(kNodes, "", "", fn); }, DecodeNode,
                       [&](const Node& n) { return s.empty() || n.site == s; });
}

absl::Status RocksCatalog::SendHeartbeat(const Heartbeat& hb) {
  if (absl::Status s = ValidateName(hb.node); !s.ok()) return s;
  WorkLock work(this);
  absl::StatusOr<Node> n = GetNode(hb.node);
  if (!n.ok()) return n.status();
  n->free_bytes = hb.free_bytes;
  n->load = hb.load;
  n->active_transfers = hb.active_transfers;
  n->last_heartbeat_ns = Now();
  rocksdb::WriteBatch batch;
  batch.Put(cf(kNodes), n->name, EncodeNode(*n));
  return WriteLocked(&batch, "heartbeat");
}

absl::Status RocksCatalog::PutRoute(const Route& route) {
  if (absl::Status s = ValidateName(route.src_site); !s.ok()) return s;
  if (absl::Status s = ValidateName(route.dst_site); !s.ok()) return s;
  if (absl::Status s = ValidateLabel("congestion control", route.congestion_control); !s.ok()) {
    return s;
  }
  if (route.streams > 4096) return absl::InvalidArgumentError("streams must be <= 4096");
  if (route.total_streams > 65536) return absl::InvalidArgumentError("total_streams must be <= 65536");
  WorkLock work(this);
  for (const std::string& site : {route.src_site, route.dst_site}) {
    if (absl::StatusOr<std::string> v = Get(kSites, site, fmt::format("site {}", site)); !v.ok()) {
      return v.status();
    }
  }
  rocksdb::WriteBatch batch;
  batch.Put(cf(kRoutes), RouteKey(route.src_site, route.dst_site), EncodeRoute(route));
  return WriteLocked(&batch, "put route");
}

absl::Status RocksCatalog::RemoveRoute(std::string_view src, std::string_view dst) {
  WorkLock work(this);
  if (absl::StatusOr<Route> r = GetRoute(src, dst); !r.ok()) return r.status();
  rocksdb::WriteBatch batch;
  batch.Delete(cf(kRoutes), RouteKey(src, dst));
  return WriteLocked(&batch, "remove route");
}

absl::StatusOr<Route> RocksCatalog::GetRoute(std::string_view src, std::string_view dst) {
  if (absl::Status s = ValidateName(src); !s.ok()) return s;
  if (absl::Status s = ValidateName(dst); !s.ok()) return s;
  absl::StatusOr<std::string> v = Get(kRoutes, RouteKey(src, dst), fmt::format("route {} -> {}", src, dst));
  if (!v.ok()) return v.status();
  return DecodeRoute(*v);
}

absl::StatusOr<std::vector<Route>> RocksCatalog::ListRoutes() {
  return ScanAll<Route>([&](const auto& fn) { return Scan(kRoutes, "", "", fn); }, DecodeRoute,
                        [](const Route&) { return true; });
}

absl::StatusOr<Request> RocksCatalog::CreateRequest(const RequestSpec& spec) {
  if (spec.paths.empty()) return absl::InvalidArgumentError("request without paths");
  if (spec.paths.size() > kMaxBatchPaths) {
    return absl::InvalidArgumentError(fmt::format("more than {} paths", kMaxBatchPaths));
  }
  for (const std::string& p : spec.paths) {
    if (absl::StatusOr<std::vector<std::string>> parts = SplitPath(p); !parts.ok()) {
      return parts.status();
    }
  }
  if (spec.copies < 1 || spec.copies > kMaxCopies) {
    return absl::InvalidArgumentError(fmt::format("copies must be 1..{}", kMaxCopies));
  }
  if (spec.parallel > kMaxParallel) {
    return absl::InvalidArgumentError(fmt::format("parallel must be 0..{}", kMaxParallel));
  }
  if (!spec.src_site.empty()) {
    if (absl::Status s = ValidateName(spec.src_site); !s.ok()) return s;
  }
  if (spec.dst_sites.size() > kMaxLabels) return absl::InvalidArgumentError("too many sites");
  for (const std::string& d : spec.dst_sites) {
    if (absl::Status s = ValidateName(d); !s.ok()) return s;
  }
  if (absl::Status s = ValidateLabel("owner", spec.owner); !s.ok()) return s;
  WorkLock work(this);
  Request r;
  r.id = last_request_ + 1;
  r.spec = spec;
  r.created_ns = r.updated_ns = Now();
  rocksdb::WriteBatch batch;
  batch.Put(cf(kRequests), U64Key(r.id), EncodeRequest(r));
  AddEvent(batch, EventKind::kRequest, r.id, "", ToString(r.state), "");
  if (absl::Status s = WriteLocked(&batch, "create request"); !s.ok()) return s;
  last_request_ = r.id;
  return r;
}

absl::StatusOr<Request> RocksCatalog::GetRequest(std::uint64_t id) {
  absl::StatusOr<std::string> v = Get(kRequests, U64Key(id), fmt::format("request {}", id));
  if (!v.ok()) return v.status();
  return DecodeRequest(*v);
}

absl::StatusOr<std::vector<Request>> RocksCatalog::ListRequests(bool any_state,
                                                                RequestState state,
                                                                std::size_t limit) {
  std::vector<Request> out;
  std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(rocksdb::ReadOptions(), cf(kRequests)));
  for (it->SeekToLast(); it->Valid() && out.size() < limit; it->Prev()) {
    absl::StatusOr<Request> r = DecodeRequest(View(it->value()));
    if (!r.ok()) return r.status();
    if (any_state || r->state == state) out.push_back(std::move(*r));
  }
  if (absl::Status s = FromRocks(it->status(), "list requests"); !s.ok()) return s;
  return out;
}

bool IsFinal(RequestState s) {
  return s == RequestState::kDone || s == RequestState::kFailed || s == RequestState::kCancelled;
}

absl::StatusOr<Request> RocksCatalog::UpdateRequest(const RequestUpdate& u) {
  if (absl::Status s = ValidateLabel("error", u.error); !s.ok()) return s;
  WorkLock work(this);
  absl::StatusOr<Request> r = GetRequest(u.id);
  if (!r.ok()) return r.status();
  bool state_changed = false;
  if (u.set_state) {
    state_changed = r->state != u.state;
    // done/failed/cancelled are final (the planner only plans queued/running requests and
    // never reopens one): a planner that read the request before a cancel must not revive it.
    if (state_changed && IsFinal(r->state)) {
      return absl::FailedPreconditionError(fmt::format(
          "request {} is {}: cannot set it to {}", r->id, ToString(r->state), ToString(u.state)));
    }
    r->state = u.state;
    r->error = u.error;
  }
  if (u.set_counters) {
    r->files_total = u.files_total;
    r->files_done = u.files_done;
    r->files_failed = u.files_failed;
    r->bytes_total = u.bytes_total;
    r->bytes_done = u.bytes_done;
  }
  r->updated_ns = Now();
  rocksdb::WriteBatch batch;
  batch.Put(cf(kRequests), U64Key(r->id), EncodeRequest(*r));
  if (state_changed || u.set_counters) {
    AddEvent(batch, EventKind::kRequest, r->id, "", ToString(r->state),
             fmt::format("files {}/{} failed {}", r->files_done, r->files_total, r->files_failed));
  }
  if (absl::Status s = WriteLocked(&batch, "update request"); !s.ok()) return s;
  return r;
}

void RocksCatalog::PutTaskLocked(rocksdb::WriteBatch& batch, const Task& t) {
  batch.Put(cf(kTasks), U64Key(t.id), EncodeTask(t));
  bool open = t.state == TaskState::kQueued || t.state == TaskState::kLeased;
  if (open) {
    batch.Put(cf(kNodeTasks), NodeTaskKey(t.spec.dst_node, t.id), "");
  } else {
    batch.Delete(cf(kNodeTasks), NodeTaskKey(t.spec.dst_node, t.id));
  }
  AddEvent(batch, EventKind::kTask, t.id, t.spec.dst_node, ToString(t.state),
           t.state == TaskState::kFailed || t.state == TaskState::kQueued ? t.last_error
                                                                          : t.spec.path);
}

absl::StatusOr<std::vector<Task>> RocksCatalog::CreateTasks(const std::vector<TaskSpec>& specs) {
  if (specs.size() > kMaxBatchPaths) {
    return absl::InvalidArgumentError(fmt::format("more than {} tasks", kMaxBatchPaths));
  }
  std::vector<Task> out;
  out.reserve(specs.size());
  WorkLock work(this);
  std::set<std::string> nodes_ok;
  std::set<std::uint64_t> requests_ok;
  rocksdb::WriteBatch batch;
  std::uint64_t id = last_task_;
  std::int64_t now = Now();
  for (const TaskSpec& spec : specs) {
    for (const std::string& n : {spec.src_node, spec.dst_node}) {
      if (nodes_ok.count(n)) continue;
      if (absl::Status s = ValidateName(n); !s.ok()) return s;
      if (absl::StatusOr<std::string> v = Get(kNodes, n, fmt::format("node {}", n)); !v.ok()) {
        return v.status();
      }
      nodes_ok.insert(n);
    }
    if (spec.src_node == spec.dst_node) {
      return absl::InvalidArgumentError(fmt::format("{}: source and destination are both {}",
                                                    spec.path, spec.src_node));
    }
    if (spec.max_attempts < 1 || spec.max_attempts > 1000) {
      return absl::InvalidArgumentError("max_attempts must be 1..1000");
    }
    if (spec.request_id != 0 && !requests_ok.count(spec.request_id)) {
      absl::StatusOr<Request> r = GetRequest(spec.request_id);
      if (!r.ok()) return r.status();
      if (r->state == RequestState::kCancelled) {
        return absl::FailedPreconditionError(
            fmt::format("request {} is cancelled: no new tasks", spec.request_id));
      }
      requests_ok.insert(spec.request_id);
    }
    absl::StatusOr<Attributes> a = ResolvePath(spec.path);
    if (!a.ok()) return a.status();
    if (a->type != FileType::kFile) {
      return absl::FailedPreconditionError(fmt::format("{}: is a directory", spec.path));
    }
    Task t;
    t.id = ++id;
    t.spec = spec;
    t.inode = a->inode;
    t.generation = a->generation;
    t.size = a->size;
    t.next_attempt_ns = spec.not_before_ns;
    t.created_ns = t.updated_ns = now;
    PutTaskLocked(batch, t);
    if (spec.request_id != 0) {
      batch.Put(cf(kRequestTasks), RequestTaskKey(spec.request_id, t.id), "");
    }
    out.push_back(std::move(t));
  }
  if (absl::Status s = WriteLocked(&batch, "create tasks"); !s.ok()) return s;
  last_task_ = id;
  return out;
}

absl::StatusOr<Task> RocksCatalog::GetTask(std::uint64_t id) {
  absl::StatusOr<std::string> v = Get(kTasks, U64Key(id), fmt::format("task {}", id));
  if (!v.ok()) return v.status();
  return DecodeTask(*v);
}

absl::StatusOr<std::vector<Task>> RocksCatalog::ListTasks(const TaskFilter& f) {
  std::vector<std::uint64_t> ids;
  bool use_ids = false;
  if (f.open_only) {
    // node_tasks holds exactly the open tasks, by destination node.
    use_ids = true;
    absl::Status s = Scan(kNodeTasks, f.dst_node.empty() ? std::string() : NodePrefix(f.dst_node), "",
                          [&](std::string_view key, std::string_view) {
                            if (key.size() < 8) return true;
                            if (absl::StatusOr<std::uint64_t> id = GetBigEndian64(key, key.size() - 8);
                                id.ok()) {
                              ids.push_back(*id);
                            }
                            return true;
                          });
    if (!s.ok()) return s;
  } else if (f.request_id != 0) {
    use_ids = true;
    std::string prefix = U64Key(f.request_id);
    absl::Status s = Scan(kRequestTasks, prefix, "", [&](std::string_view key, std::string_view) {
      if (absl::StatusOr<std::uint64_t> id = GetBigEndian64(key, 8); id.ok()) ids.push_back(*id);
      return true;
    });
    if (!s.ok()) return s;
  } else if (!f.dst_node.empty() &&
             (!f.any_state && (f.state == TaskState::kQueued || f.state == TaskState::kLeased))) {
    use_ids = true;
    std::string prefix = NodePrefix(f.dst_node);
    absl::Status s = Scan(kNodeTasks, prefix, "", [&](std::string_view key, std::string_view) {
      if (absl::StatusOr<std::uint64_t> id = GetBigEndian64(key, prefix.size()); id.ok()) {
        ids.push_back(*id);
      }
      return true;
    });
    if (!s.ok()) return s;
  }
  auto keep = [&](const Task& t) {
    return (f.any_state || t.state == f.state) &&
           (!f.open_only || t.state == TaskState::kQueued || t.state == TaskState::kLeased) &&
           (f.dst_node.empty() || t.spec.dst_node == f.dst_node) &&
           (f.request_id == 0 || t.spec.request_id == f.request_id);
  };
  std::vector<Task> out;
  if (use_ids) {
    for (std::uint64_t id : ids) {
      if (out.size() >= f.limit) break;
      absl::StatusOr<Task> t = GetTask(id);
      if (!t.ok()) return t.status();
      if (keep(*t)) out.push_back(std::move(*t));
    }
    return out;
  }
  absl::Status decode_status;
  absl::Status s = Scan(kTasks, "", "", [&](std::string_view, std::string_view v) {
    if (out.size() >= f.limit) return false;
    absl::StatusOr<Task> t = DecodeTask(v);
    if (!t.ok()) {
      decode_status = t.status();
      return false;
    }
    if (keep(*t)) out.push_back(std::move(*t));
    return true;
  });
  if (!s.ok()) return s;
  if (!decode_status.ok()) return decode_status;
  return out;
}

absl::StatusOr<Task> RocksCatalog::ClaimTask(std::string_view node, std::string_view owner,
                                             std::chrono::milliseconds lease) {
  std::vector<std::string> owners;
  owners.emplace_back(owner);
  absl::StatusOr<std::vector<Task>> claimed = ClaimTasks(node, owners, lease);
  if (!claimed.ok()) return claimed.status();
  if (claimed->empty()) {
    return absl::NotFoundError(fmt::format("no claimable task for node {}", node));
  }
  return std::move(claimed->front());
}

absl::StatusOr<std::vector<std::uint64_t>> RocksCatalog::OpenTaskIdsLocked(std::string_view node) {
  std::vector<std::uint64_t> ids;
  std::string prefix = NodePrefix(node);
  auto hint = first_open_task_.find(node);
  std::string start = NodeTaskKey(node, hint == first_open_task_.end() ? 0 : hint->second);
  absl::Status s = Scan(kNodeTasks, prefix, start, [&](std::string_view key, std::string_view) {
    if (absl::StatusOr<std::uint64_t> id = GetBigEndian64(key, prefix.size()); id.ok()) {
      ids.push_back(*id);
    }
    return true;
  });
  if (!s.ok()) return s;
  // Below the lowest open id only finished tasks remain; with none open, every task made
  // from now on has a higher id than any made so far.
  first_open_task_[std::string(node)] = ids.empty() ? last_task_ + 1 : ids.front();
  return ids;
}

absl::StatusOr<std::vector<Task>> RocksCatalog::ClaimTasks(std::string_view node,
                                                           const std::vector<std::string>& owners,
                                                           std::chrono::milliseconds lease) {
  if (absl::Status s = ValidateName(node); !s.ok()) return s;
  if (owners.size() > kMaxBatchPaths) {
    return absl::InvalidArgumentError(fmt::format("more than {} owners", kMaxBatchPaths));
  }
  std::set<std::string_view> distinct;
  for (const std::string& owner : owners) {
    if (owner.empty()) return absl::InvalidArgumentError("empty lease owner");
    if (absl::Status s = ValidateLabel("owner", owner); !s.ok()) return s;
    if (!distinct.insert(owner).second) {
      return absl::InvalidArgumentError(fmt::format("lease owner {} given twice", owner));
    }
  }
  if (absl::Status s = ValidateDelay("lease", lease, false); !s.ok()) return s;
  std::vector<Task> claimed;
  if (owners.empty()) return claimed;
  WorkLock work(this);
  std::int64_t now = Now();
  absl::StatusOr<std::vector<std::uint64_t>> ids = OpenTaskIdsLocked(node);
  if (!ids.ok()) return ids.status();
  rocksdb::WriteBatch batch;
  std::vector<Task> ready;
  for (std::uint64_t id : *ids) {
    absl::StatusOr<Task> t = GetTask(id);
    if (!t.ok()) return t.status();
    if (t->state == TaskState::kLeased && t->lease_expiry_ns <= now) {
      if (absl::Status es = ExpireLeaseLocked(batch, *t, now); !es.ok()) return es;
    }
    if (t->state == TaskState::kQueued && t->next_attempt_ns <= now) {
      ready.push_back(std::move(*t));
    }
  }
  std::sort(ready.begin(), ready.end(), [](const Task& a, const Task& b) {
    return a.spec.priority != b.spec.priority ? a.spec.priority > b.spec.priority : a.id < b.id;
  });
  // Reads do not see this batch: a second task of a file already claimed here waits for the
  // next claim, which sees the first one's replica record.
  std::set<InodeId> inodes;
  for (Task& t : ready) {
    if (claimed.size() == owners.size()) break;
    if (inodes.count(t.inode) > 0) continue;
    Attributes attrs;
    absl::StatusOr<std::string> obsolete = ObsoleteReason(t, &attrs);
    if (!obsolete.ok()) return obsolete.status();
    if (!obsolete->empty()) {
      // Claiming it would put a pending record of an old generation over a newer one.
      t.state = TaskState::kCancelled;
      t.last_error = std::move(*obsolete);
      t.updated_ns = now;
      PutTaskLocked(batch, t);
      continue;
    }
    inodes.insert(t.inode);
    t.state = TaskState::kLeased;
    t.attempts += 1;
    t.lease_owner = owners[claimed.size()];
    t.lease_expiry_ns = now + std::chrono::duration_cast<std::chrono::nanoseconds>(lease).count();
    t.updated_ns = now;
    PutTaskLocked(batch, t);
    absl::StatusOr<std::optional<Replica>> existing = FindReplica(t.inode, node);
    if (!existing.ok()) return existing.status();
    // ObsoleteReason made sure an existing record is not newer than the task.
    bool keep_existing = existing->has_value() && (*existing)->state == ReplicaState::kComplete &&
                         (*existing)->generation == t.generation;
    if (!keep_existing) {
      Replica r;
      r.inode = t.inode;
      r.node = std::string(node);
      r.state = ReplicaState::kPending;
      r.generation = t.generation;
      r.size = t.size;
      PutReplicaLocked(batch, r, t.spec.path);
    }
    // Not obsolete: the file is at the task's generation, so this is that generation's sum.
    t.checksum_algo = attrs.checksum_algo;
    t.checksum = attrs.checksum;
    claimed.push_back(t);
  }
  if (batch.Count() > 0) {
    if (absl::Status ws = WriteLocked(&batch, claimed.empty() ? "expire leases" : "claim tasks");
        !ws.ok()) {
      return ws;
    }
  }
  return claimed;
}

absl::Status RocksCatalog::ExpireLeaseLocked(rocksdb::WriteBatch& batch, Task& t,
                                             std::int64_t now) {
  // The owner died or lost contact: that attempt failed.
  if (absl::Status s = DropPendingReplicaLocked(batch, t.inode, t.spec.dst_node, t.generation);
      !s.ok()) {
    return s;
  }
  t.last_error = fmt::format("lease of {} expired", t.lease_owner);
  t.lease_owner.clear();
  t.updated_ns = now;
  t.state = t.attempts >= t.spec.max_attempts ? TaskState::kFailed : TaskState::kQueued;
  t.next_attempt_ns = now;
  PutTaskLocked(batch, t);
  return absl::OkStatus();
}

absl::StatusOr<std::string> RocksCatalog::ObsoleteReason(const Task& t, Attributes* attrs) {
  absl::StatusOr<Attributes> a = StatInode(t.inode);
  if (absl::IsNotFound(a.status())) return std::string("obsolete: file was removed");
  if (!a.ok()) return a.status();
  if (attrs != nullptr) *attrs = *a;
  if (a->generation > t.generation) {
    return fmt::format("obsolete: file is at generation {}", a->generation);
  }
  absl::StatusOr<std::optional<Replica>> r = FindReplica(t.inode, t.spec.dst_node);
  if (!r.ok()) return r.status();
  if (r->has_value() && (*r)->generation > t.generation) {
    return fmt::format("obsolete: {} holds generation {}", t.spec.dst_node, (*r)->generation);
  }
  return std::string();
}

absl::StatusOr<std::size_t> RocksCatalog::ExpireLeases() {
  WorkLock work(this);
  std::int64_t now = Now();
  std::vector<std::uint64_t> ids;
  // node_tasks holds the open tasks of every node: the leased ones are among them.
  absl::Status s = Scan(kNodeTasks, "", "", [&](std::string_view key, std::string_view) {
    if (key.size() < 8) return true;
    if (absl::StatusOr<std::uint64_t> id = GetBigEndian64(key, key.size() - 8); id.ok()) {
      ids.push_back(*id);
    }
    return true;
  });
  if (!s.ok()) return s;
  rocksdb::WriteBatch batch;
  std::size_t expired = 0;
  for (std::uint64_t id : ids) {
    absl::StatusOr<Task> t = GetTask(id);
    if (!t.ok()) return t.status();
    if (t->state != TaskState::kLeased || t->lease_expiry_ns > now) continue;
    if (absl::Status es = ExpireLeaseLocked(batch, *t, now); !es.ok()) return es;
    ++expired;
  }
  if (expired > 0) {
    if (absl::Status ws = WriteLocked(&batch, "expire leases"); !ws.ok()) return ws;
  }
  return expired;
}

absl::StatusOr<Task> RocksCatalog::AbandonTask(std::uint64_t id, std::string_view reason) {
  WorkLock work(this);
  absl::StatusOr<Task> t = GetTask(id);
  if (!t.ok()) return t.status();
  if (t->state != TaskState::kQueued && t->state != TaskState::kLeased) return t;
  rocksdb::WriteBatch batch;
  if (t->state == TaskState::kLeased) {
    // Its owner can no longer complete or fail it, so nobody else would drop its record.
    if (absl::Status s = DropPendingReplicaLocked(batch, t->inode, t->spec.dst_node, t->generation);
        !s.ok()) {
      return s;
    }
  }
  t->state = TaskState::kCancelled;
  t->last_error = ErrorText(reason);
  t->lease_owner.clear();
  t->updated_ns = Now();
  PutTaskLocked(batch, *t);
  if (absl::Status s = WriteLocked(&batch, "abandon task"); !s.ok()) return s;
  return t;
}

absl::StatusOr<Task> RocksCatalog::LeasedTask(std::uint64_t id, std::string_view owner) {
  absl::StatusOr<Task> t = GetTask(id);
  if (!t.ok()) return t.status();
  if (t->state != TaskState::kLeased || t->lease_owner != owner) {
    return absl::FailedPreconditionError(fmt::format(
        "task {} is {} (owner '{}'), not leased by '{}'", id, ToString(t->state),
        t->lease_owner, owner));
  }
  return t;
}

absl::StatusOr<Task> RocksCatalog::RenewLease(std::uint64_t id, std::string_view owner,
                                              std::chrono::milliseconds lease) {
  if (absl::Status s = ValidateDelay("lease", lease, false); !s.ok()) return s;
  WorkLock work(this);
  absl::StatusOr<Task> t = LeasedTask(id, owner);
  if (!t.ok()) return t.status();
  std::int64_t now = Now();
  t->lease_expiry_ns = now + std::chrono::duration_cast<std::chrono::nanoseconds>(lease).count();
  t->updated_ns = now;
  rocksdb::WriteBatch batch;
  // No event: renewals are frequent and change nothing a watcher acts on.
  batch.Put(cf(kTasks), U64Key(t->id), EncodeTask(*t));
  if (absl::Status s = WriteLocked(&batch, "renew lease"); !s.ok()) return s;
  return t;
}

absl::StatusOr<Task> RocksCatalog::CompleteTask(std::uint64_t id, std::string_view owner) {
  WorkLock work(this);
  absl::StatusOr<Task> t = LeasedTask(id, owner);
  if (!t.ok()) return t.status();
  rocksdb::WriteBatch batch;
  absl::Status outcome;
  if (absl::Status s = CompleteLeasedLocked(batch, *t, outcome); !s.ok()) return s;
  if (absl::Status s = WriteLocked(&batch, "complete task"); !s.ok()) return s;
  if (!outcome.ok()) return outcome;
  return t;
}

absl::StatusOr<std::vector<absl::StatusOr<Task>>> RocksCatalog::CompleteTasks(
    const std::vector<TaskCompletion>& items) {
  if (items.size() > kMaxBatchPaths) {
    return absl::InvalidArgumentError(fmt::format("more than {} tasks", kMaxBatchPaths));
  }
  std::vector<absl::StatusOr<Task>> out(items.size(), absl::UnknownError("not completed"));
  std::vector<absl::Status> outcome(items.size());
  WorkLock work(this);
  rocksdb::WriteBatch batch;
  std::vector<std::size_t> in_batch;  // items whose changes `batch` holds
  std::set<InodeId> inodes;           // their files
  auto write = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(work_mu_) {
    if (in_batch.empty()) return;
    absl::Status s = WriteLocked(&batch, "complete tasks");
    // A failed write changed nothing: its events' seqs are given back at once, so that a
    // later write of this call leaves no gap.
    if (!s.ok()) last_seq_ = committed_seq_;
    for (std::size_t i : in_batch) {
      if (!s.ok()) {
        out[i] = s;
      } else if (!outcome[i].ok()) {
        out[i] = outcome[i];
      }
    }
    batch.Clear();
    in_batch.clear();
    inodes.clear();
  };
  std::set<std::uint64_t> seen;
  for (std::size_t i = 0; i < items.size(); ++i) {
    if (!seen.insert(items[i].id).second) {
      out[i] = absl::InvalidArgumentError(fmt::format("task {} given twice", items[i].id));
      continue;
    }
    absl::StatusOr<Task> t = LeasedTask(items[i].id, items[i].owner);
    if (!t.ok()) {
      out[i] = t.status();
      continue;
    }
    // Reads do not see `batch`: a second task of the same file waits for the first's write.
    if (inodes.count(t->inode) > 0) write();
    if (absl::Status s = CompleteLeasedLocked(batch, *t, outcome[i]); !s.ok()) {
      out[i] = s;
      continue;
    }
    inodes.insert(t->inode);
    in_batch.push_back(i);
    out[i] = std::move(*t);
  }
  write();
  return out;
}

absl::Status RocksCatalog::CompleteLeasedLocked(rocksdb::WriteBatch& batch, Task& t,
                                                absl::Status& outcome) {
  std::int64_t now = Now();
  absl::StatusOr<Attributes> a = StatInode(t.inode);
  if (!a.ok() && !absl::IsNotFound(a.status())) return a.status();
  absl::StatusOr<std::optional<Replica>> existing = FindReplica(t.inode, t.spec.dst_node);
  if (!existing.ok()) return existing.status();
  const std::optional<Replica>& rec = *existing;
  // Only the record this task's claim made may change: pending at the task's generation.
  const bool ours =
      rec.has_value() && rec->state == ReplicaState::kPending && rec->generation == t.generation;
  Replica r;
  if (rec.has_value()) r = *rec;
  t.lease_owner.clear();
  t.updated_ns = now;
  outcome = absl::OkStatus();
  if (!a.ok()) {
    if (ours) {
      r.state = ReplicaState::kDeleting;
      PutReplicaLocked(batch, r, t.spec.path);
    }
    t.state = TaskState::kFailed;
    t.last_error = "file was removed during the copy";
  } else if (a->generation != t.generation) {
    if (ours) {
      r.state = ReplicaState::kStale;  // valid bytes of an older generation
      PutReplicaLocked(batch, r, t.spec.path);
    }
    t.state = TaskState::kFailed;
    t.last_error = fmt::format("file changed to generation {} during the copy", a->generation);
  } else if (ours) {
    r.state = ReplicaState::kComplete;
    r.size = t.size;
    r.verified_ns = now;
    PutReplicaLocked(batch, r, t.spec.path);
    t.state = TaskState::kDone;
  } else if (rec.has_value() && rec->state == ReplicaState::kComplete &&
             rec->generation == t.generation) {
    t.state = TaskState::kDone;  // the claim kept a complete record of this generation
  } else {
    // Removed or replaced by someone else meanwhile: not this task's record to change.
    // Cancelled, not failed, so that the planner copies the file again.
    t.state = TaskState::kCancelled;
    t.last_error =
        rec.has_value()
            ? fmt::format("replica record of {} changed during the copy (now {} generation {})",
                          t.spec.dst_node, ToString(rec->state), rec->generation)
            : fmt::format("replica record of {} was removed during the copy", t.spec.dst_node);
  }
  if (t.state != TaskState::kDone) {
    outcome = absl::AbortedError(fmt::format("task {}: {}", t.id, t.last_error));
  }
  PutTaskLocked(batch, t);
  return absl::OkStatus();
}

absl::StatusOr<Task> RocksCatalog::FailTask(std::uint64_t id, std::string_view owner,
                                            std::string_view error, bool retryable,
                                            std::chrono::milliseconds retry_after) {
  if (absl::Status s = ValidateDelay("retry delay", retry_after, true); !s.ok()) return s;
  WorkLock work(this);
  absl::StatusOr<Task> t = LeasedTask(id, owner);
  if (!t.ok()) return t.status();
  std::int64_t now = Now();
  t->last_error = ErrorText(error);
  t->lease_owner.clear();
  t->updated_ns = now;
  if (retryable && t->attempts < t->spec.max_attempts) {
    t->state = TaskState::kQueued;
    t->next_attempt_ns =
        now + std::chrono::duration_cast<std::chrono::nanoseconds>(retry_after).count();
  } else {
    t->state = TaskState::kFailed;
  }
  rocksdb::WriteBatch batch;
  if (absl::Status s = DropPendingReplicaLocked(batch, t->inode, t->spec.dst_node, t->generation);
      !s.ok()) {
    return s;
  }
  PutTaskLocked(batch, *t);
  if (absl::Status s = WriteLocked(&batch, "fail task"); !s.ok()) return s;
  return t;
}

absl::Status RocksCatalog::CancelRequest(std::uint64_t id) {
  TaskFilter f;
  f.request_id = id;
  f.limit = std::numeric_limits<std::size_t>::max();
  WorkLock work(this);
  absl::StatusOr<Request> r = GetRequest(id);
  if (!r.ok()) return r.status();
  absl::StatusOr<std::vector<Task>> tasks = ListTasks(f);
  if (!tasks.ok()) return tasks.status();
  std::int64_t now = Now();
  rocksdb::WriteBatch batch;
  for (Task& t : *tasks) {
    if (t.state != TaskState::kQueued && t.state != TaskState::kLeased) continue;
    if (t.state == TaskState::kLeased) {
      // The owner loses its lease and cannot complete or fail the task any more, so the
      // pending replica its claim made is dropped here (as FailTask would).
      if (absl::Status s = DropPendingReplicaLocked(batch, t.inode, t.spec.dst_node, t.generation);
          !s.ok()) {
        return s;
      }
    }
    t.state = TaskState::kCancelled;
    t.lease_owner.clear();
    t.updated_ns = now;
    PutTaskLocked(batch, t);
  }
  r->state = RequestState::kCancelled;
  r->updated_ns = now;
  batch.Put(cf(kRequests), U64Key(id), EncodeRequest(*r));
  AddEvent(batch, EventKind::kRequest, id, "", ToString(r->state), "");
  return WriteLocked(&batch, "cancel request");
}

absl::StatusOr<std::vector<Event>> RocksCatalog::ReadEvents(std::uint64_t after_seq,
                                                            std::size_t max,
                                                            std::chrono::milliseconds wait) {
  auto read = [&]() -> absl::StatusOr<std::vector<Event>> {
    std::vector<Event> out;
    absl::Status decode_status;
    absl::Status s = Scan(kEvents, "", U64Key(after_seq + 1), [&](std::string_view, std::string_view v) {
      if (out.size() >= max) return false;
      absl::StatusOr<Event> e = DecodeEvent(v);
      if (!e.ok()) {
        decode_status = e.status();
        return false;
      }
      out.push_back(std::move(*e));
      return true;
    });
    if (!s.ok()) return s;
    if (!decode_status.ok()) return decode_status;
    return out;
  };
  if (max == 0) return std::vector<Event>{};
  absl::StatusOr<std::vector<Event>> events = read();
  if (!events.ok() || !events->empty() || wait.count() <= 0) return events;
  {
    absl::MutexLock l(&work_mu_);
    auto newer = [this, after_seq]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(work_mu_) {
      return last_seq_ > after_seq;
    };
    work_mu_.AwaitWithTimeout(absl::Condition(&newer), absl::FromChrono(wait));
  }
  return read();
}

absl::StatusOr<std::uint64_t> RocksCatalog::LastEventSeq() {
  absl::MutexLock l(&work_mu_);
  return last_seq_;
}

}  // namespace

absl::StatusOr<std::string> GetDbProperty(Catalog& catalog, std::string_view property) {
  auto* rocks = dynamic_cast<RocksCatalog*>(&catalog);
  if (rocks == nullptr) return absl::InvalidArgumentError("not a RocksDB catalog");
  return rocks->Property(property);
}

absl::StatusOr<std::unique_ptr<Catalog>> OpenRocks(const CatalogOptions& options) {
  if (options.path.empty()) return absl::InvalidArgumentError("catalog path is empty");
  rocksdb::Options db_options;
  db_options.create_if_missing = true;
  db_options.create_missing_column_families = true;
  db_options.IncreaseParallelism(2);
  db_options.max_open_files = 512;
  rocksdb::BlockBasedTableOptions table;
  table.block_cache = rocksdb::NewLRUCache(options.block_cache_bytes);
  table.filter_policy.reset(rocksdb::NewBloomFilterPolicy(10));
  rocksdb::ColumnFamilyOptions cf_options(db_options);
  cf_options.table_factory.reset(rocksdb::NewBlockBasedTableFactory(table));
  std::vector<rocksdb::ColumnFamilyDescriptor> descriptors;
  for (const char* name : kCfNames) descriptors.emplace_back(name, cf_options);
  rocksdb::DB* db = nullptr;
  std::vector<rocksdb::ColumnFamilyHandle*> handles;
  rocksdb::Status s = rocksdb::DB::Open(rocksdb::DBOptions(db_options), options.path,
                                        descriptors, &handles, &db);
  if (!s.ok()) return FromRocks(s, fmt::format("open catalog {}", options.path));
  auto catalog = std::make_unique<RocksCatalog>(options, db, std::move(handles));
  if (absl::Status init = catalog->Init(); !init.ok()) return init;
  return std::unique_ptr<Catalog>(std::move(catalog));
}

}  // namespace internal

absl::StatusOr<std::unique_ptr<Catalog>> OpenRocksCatalog(const CatalogOptions& options) {
  return internal::OpenRocks(options);
}

}  // namespace gfrep::catalog
