#pragma once

// SharedCatalog: the KvCatalog of one front end among several on one shared store
// (gfcatalogd --shared; a PostgreSQL database opened shared, pg_store.h).
//
// KvCatalog's rules assume that it alone writes its store: its locks (work_mu_, the name
// stripes) are held across the reads a mutation decides on and the Write, and it keeps the
// marks it hands ids from in memory (event seq, request and task ids, the inode block, the
// claim queue). Here every mutation first takes the store's write lock (KvStore::LockWrites,
// serializing the writers of every front end) and then re-reads those marks (KvCatalog::
// Resync), so it decides on the database as the last writer, whichever process that was,
// left it. Reads go straight to KvCatalog: they see every committed write.
//
// Other front ends' writes wake this one's waiters (ReadEvents' long poll) through
// KvStore::WatchWrites (LISTEN/NOTIFY on PostgreSQL).
//
// Cost: mutations of all front ends are serialized, each with a lock, an unlock and five
// reads more; reads are not serialized (whether more front ends give more reads depends on
// the cores behind them and the database's: tests/bench/RESULTS.md, "Several front ends").
//
// Thread safety: as Catalog (any thread).

#include <memory>

#include "catalog/internal/kv_catalog_impl.h"

namespace gfrep::catalog::internal {

class SharedCatalog final : public Catalog {
 public:
  // REQUIRES: inner's store is shared (KvStore::shared()).
  explicit SharedCatalog(std::unique_ptr<KvCatalog> inner);
  ~SharedCatalog() override;

  KvCatalog& inner() { return *inner_; }

  absl::StatusOr<std::map<std::string, std::uint64_t>> StorageStats() override {
    return inner_->StorageStats();
  }
  absl::StatusOr<Attributes> Mkdir(std::string_view path, const MkdirOptions& options) override {
    return Locked([&] { return inner_->Mkdir(path, options); });
  }
  absl::StatusOr<Attributes> CreateFile(std::string_view path,
                                        const FileContent& content) override {
    return Locked([&] { return inner_->CreateFile(path, content); });
  }
  absl::StatusOr<WriteReservation> BeginWrite(std::string_view path,
                                              const FileContent& content) override {
    return Locked([&] { return inner_->BeginWrite(path, content); });
  }
  absl::StatusOr<Attributes> CommitFile(std::string_view path, const FileContent& content,
                                        std::string_view writer_node,
                                        std::optional<std::uint64_t> expected_generation) override {
    return Locked(
        [&] { return inner_->CommitFile(path, content, writer_node, expected_generation); });
  }
  absl::StatusOr<std::vector<Attributes>> CreateFiles(const std::vector<NewFile>& files) override {
    return Locked([&] { return inner_->CreateFiles(files); });
  }
  absl::StatusOr<Attributes> Stat(std::string_view path) override { return inner_->Stat(path); }
  absl::StatusOr<std::vector<absl::StatusOr<Attributes>>> StatMany(
      const std::vector<std::string>& paths) override {
    return inner_->StatMany(paths);
  }
  absl::StatusOr<Attributes> StatInode(InodeId inode) override { return inner_->StatInode(inode); }
  absl::StatusOr<std::string> PathOf(InodeId inode) override { return inner_->PathOf(inode); }
  absl::StatusOr<std::vector<DirEntry>> List(std::string_view path,
                                             const ListOptions& options) override {
    return inner_->List(path, options);
  }
  absl::Status Remove(std::string_view path, bool recursive) override {
    return Locked([&] { return inner_->Remove(path, recursive); });
  }
  absl::Status Rename(std::string_view from, std::string_view to) override {
    return Locked([&] { return inner_->Rename(from, to); });
  }
  absl::StatusOr<Location> Locate(std::string_view path) override { return inner_->Locate(path); }
  absl::StatusOr<std::vector<Replica>> GetReplicas(InodeId inode) override {
    return inner_->GetReplicas(inode);
  }
  absl::Status PutReplica(const Replica& replica) override {
    return Locked([&] { return inner_->PutReplica(replica); });
  }
  absl::Status RemoveReplica(InodeId inode, std::string_view node) override {
    return Locked([&] { return inner_->RemoveReplica(inode, node); });
  }
  absl::StatusOr<std::vector<Replica>> ListNodeReplicas(std::string_view node, InodeId start_after,
                                                        std::size_t limit) override {
    return inner_->ListNodeReplicas(node, start_after, limit);
  }
  absl::Status PutSite(const Site& site) override {
    return Locked([&] { return inner_->PutSite(site); });
  }
  absl::Status RemoveSite(std::string_view name) override {
    return Locked([&] { return inner_->RemoveSite(name); });
  }
  absl::StatusOr<std::vector<Site>> ListSites() override { return inner_->ListSites(); }
  absl::Status RegisterNode(const Node& node) override {
    return Locked([&] { return inner_->RegisterNode(node); });
  }
  absl::Status PutNodeDisk(std::string_view node, const DiskProfile& disk) override {
    return Locked([&] { return inner_->PutNodeDisk(node, disk); });
  }
  absl::Status RemoveNode(std::string_view name) override {
    return Locked([&] { return inner_->RemoveNode(name); });
  }
  absl::StatusOr<Node> GetNode(std::string_view name) override { return inner_->GetNode(name); }
  absl::StatusOr<std::vector<Node>> ListNodes(std::string_view site) override {
    return inner_->ListNodes(site);
  }
  absl::Status SendHeartbeat(const Heartbeat& heartbeat) override {
    return Locked([&] { return inner_->SendHeartbeat(heartbeat); });
  }
  absl::Status PutRoute(const Route& route) override {
    return Locked([&] { return inner_->PutRoute(route); });
  }
  absl::Status RemoveRoute(std::string_view src_site, std::string_view dst_site) override {
    return Locked([&] { return inner_->RemoveRoute(src_site, dst_site); });
  }
  absl::StatusOr<Route> GetRoute(std::string_view src_site, std::string_view dst_site) override {
    return inner_->GetRoute(src_site, dst_site);
  }
  absl::StatusOr<std::vector<Route>> ListRoutes() override { return inner_->ListRoutes(); }
  absl::StatusOr<Request> CreateRequest(const RequestSpec& spec) override {
    return Locked([&] { return inner_->CreateRequest(spec); });
  }
  absl::StatusOr<Request> GetRequest(std::uint64_t id) override { return inner_->GetRequest(id); }
  absl::StatusOr<std::vector<Request>> ListRequests(bool any_state, RequestState state,
                                                    std::size_t limit) override {
    return inner_->ListRequests(any_state, state, limit);
  }
  absl::StatusOr<Request> UpdateRequest(const RequestUpdate& update) override {
    return Locked([&] { return inner_->UpdateRequest(update); });
  }
  absl::StatusOr<std::vector<Task>> CreateTasks(const std::vector<TaskSpec>& specs) override {
    return Locked([&] { return inner_->CreateTasks(specs); });
  }
  absl::StatusOr<Task> GetTask(std::uint64_t id) override { return inner_->GetTask(id); }
  absl::StatusOr<std::vector<Task>> ListTasks(const TaskFilter& filter) override {
    return inner_->ListTasks(filter);
  }
  absl::StatusOr<Task> ClaimTask(std::string_view node, std::string_view owner,
                                 std::chrono::milliseconds lease) override {
    return Locked([&] { return inner_->ClaimTask(node, owner, lease); });
  }
  absl::StatusOr<std::vector<Task>> ClaimTasks(std::string_view node,
                                               const std::vector<std::string>& owners,
                                               std::chrono::milliseconds lease) override {
    return Locked([&] { return inner_->ClaimTasks(node, owners, lease); });
  }
  absl::StatusOr<Task> RenewLease(std::uint64_t id, std::string_view owner,
                                  std::chrono::milliseconds lease) override {
    return Locked([&] { return inner_->RenewLease(id, owner, lease); });
  }
  absl::StatusOr<std::vector<absl::Status>> TransitionReplicas(
      const std::vector<ReplicaTransition>& items) override {
    return Locked([&] { return inner_->TransitionReplicas(items); });
  }
  absl::StatusOr<Task> CompleteTask(std::uint64_t id, std::string_view owner) override {
    return Locked([&] { return inner_->CompleteTask(id, owner); });
  }
  absl::StatusOr<std::vector<absl::StatusOr<Task>>> CompleteTasks(
      const std::vector<TaskCompletion>& items) override {
    return Locked([&] { return inner_->CompleteTasks(items); });
  }
  absl::StatusOr<Task> FailTask(std::uint64_t id, std::string_view owner, std::string_view error,
                                bool retryable, std::chrono::milliseconds retry_after) override {
    return Locked([&] { return inner_->FailTask(id, owner, error, retryable, retry_after); });
  }
  absl::StatusOr<std::size_t> ExpireLeases() override {
    return Locked([&] { return inner_->ExpireLeases(); });
  }
  absl::StatusOr<Task> AbandonTask(std::uint64_t id, std::string_view reason) override {
    return Locked([&] { return inner_->AbandonTask(id, reason); });
  }
  absl::Status CancelRequest(std::uint64_t id) override {
    return Locked([&] { return inner_->CancelRequest(id); });
  }
  absl::StatusOr<PolicyDocument> GetPolicies() override { return inner_->GetPolicies(); }
  absl::StatusOr<PolicyDocument> PutPolicies(
      std::string_view text, std::string_view source,
      std::optional<std::uint64_t> expected_version) override {
    return Locked([&] { return inner_->PutPolicies(text, source, expected_version); });
  }
  absl::StatusOr<std::vector<Event>> ReadEvents(std::uint64_t after_seq, std::size_t max,
                                                std::chrono::milliseconds wait) override {
    return inner_->ReadEvents(after_seq, max, wait);
  }
  absl::StatusOr<std::uint64_t> LastEventSeq() override { return inner_->LastEventSeq(); }
  absl::StatusOr<std::size_t> PurgeFinishedRequests(std::int64_t finished_before_ns,
                                                    std::size_t max) override {
    return Locked([&] { return inner_->PurgeFinishedRequests(finished_before_ns, max); });
  }
  absl::Status RecordAudit(std::string_view who, std::string_view what,
                           std::string_view detail) override {
    return Locked([&] { return inner_->RecordAudit(who, what, detail); });
  }
  absl::StatusOr<Attributes> SetAttributes(std::string_view path,
                                           const AttributeChange& change) override {
    return Locked([&] { return inner_->SetAttributes(path, change); });
  }
  absl::Status RevokeToken(std::string_view id, std::int64_t expires_unix) override {
    return Locked([&] { return inner_->RevokeToken(id, expires_unix); });
  }
  absl::StatusOr<std::vector<std::pair<std::string, std::int64_t>>> RevokedTokens() override {
    return inner_->RevokedTokens();
  }

 private:
  // Runs f (a KvCatalog mutation) under the write lock, on freshly read marks.
  template <typename F>
  auto Locked(F f) -> decltype(f()) {
    absl::StatusOr<std::unique_ptr<KvWriteLock>> lock = inner_->store().LockWrites();
    if (!lock.ok()) return lock.status();
    if (absl::Status s = inner_->Resync(); !s.ok()) return s;
    return f();
  }

  std::unique_ptr<KvCatalog> inner_;
  std::unique_ptr<KvWatch> watch_;  // destroyed first: it calls into inner_
};

}  // namespace gfrep::catalog::internal
