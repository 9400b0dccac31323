#pragma once

// Decorators of one catalog role each: they forward every call to a real catalog, except
// those a test hooks (to fail a commit, lose a lease renewal, put a cancel between a
// planner's listing and its writes, count lookups, ...). A test gives the component under
// test catalog::Roles with one role replaced by a decorator. Test-only.

#include <atomic>
#include <chrono>
#include <functional>
#include <optional>
#include <utility>

#include "catalog/catalog.h"

namespace gfrep::replica::testing {

// The read roles (CatalogView), counting and delaying.
class FaultyView : public catalog::CatalogView {
 public:
  explicit FaultyView(catalog::CatalogView* inner) : c_(inner) {}

  // Called before StatInode is forwarded.
  std::function<void(catalog::InodeId inode)> before_stat_inode;
  // Calls of Locate so far (the planner's per-file lookups).
  std::atomic<std::uint64_t> locates{0};
  // Tasks read so far: each GetTask, and each task a ListTasks returned.
  std::atomic<std::uint64_t> tasks_read{0};
  // Calls of Stat and List so far (the planner's walks of a request's paths).
  std::atomic<std::uint64_t> walks{0};
  // Calls of GetNode and GetRoute (one node or route each), and of ListNodes and ListRoutes.
  std::atomic<std::uint64_t> node_gets{0};
  std::atomic<std::uint64_t> route_gets{0};
  std::atomic<std::uint64_t> node_lists{0};
  std::atomic<std::uint64_t> route_lists{0};
  // Called after ListRoutes was answered, before the answer goes back.
  std::function<void()> after_list_routes;

  using A = catalog::Attributes;
  absl::StatusOr<A> Stat(std::string_view p) override {
    ++walks;
    return c_->Stat(p);
  }
  absl::StatusOr<std::vector<absl::StatusOr<A>>> StatMany(
      const std::vector<std::string>& paths) override {
    return c_->StatMany(paths);
  }
  absl::StatusOr<A> StatInode(catalog::InodeId i) override {
    if (before_stat_inode) before_stat_inode(i);
    return c_->StatInode(i);
  }
  absl::StatusOr<std::string> PathOf(catalog::InodeId i) override { return c_->PathOf(i); }
  absl::StatusOr<std::vector<catalog::DirEntry>> List(std::string_view p,
                                                      const catalog::ListOptions& o) override {
    ++walks;
    return c_->List(p, o);
  }
  absl::StatusOr<catalog::Location> Locate(std::string_view p) override {
    ++locates;
    return c_->Locate(p);
  }
  absl::StatusOr<std::vector<catalog::Replica>> GetReplicas(catalog::InodeId i) override {
    return c_->GetReplicas(i);
  }
  absl::StatusOr<std::vector<catalog::Replica>> ListNodeReplicas(std::string_view n,
                                                                 catalog::InodeId a,
                                                                 std::size_t l) override {
    return c_->ListNodeReplicas(n, a, l);
  }
  absl::StatusOr<std::vector<catalog::Site>> ListSites() override { return c_->ListSites(); }
  absl::StatusOr<catalog::Node> GetNode(std::string_view n) override {
    ++node_gets;
    return c_->GetNode(n);
  }
  absl::StatusOr<std::vector<catalog::Node>> ListNodes(std::string_view s) override {
    ++node_lists;
    return c_->ListNodes(s);
  }
  absl::StatusOr<catalog::Route> GetRoute(std::string_view s, std::string_view d) override {
    ++route_gets;
    return c_->GetRoute(s, d);
  }
  absl::StatusOr<std::vector<catalog::Route>> ListRoutes() override {
    ++route_lists;
    absl::StatusOr<std::vector<catalog::Route>> routes = c_->ListRoutes();
    if (after_list_routes) after_list_routes();
    return routes;
  }
  absl::StatusOr<catalog::Request> GetRequest(std::uint64_t id) override {
    return c_->GetRequest(id);
  }
  absl::StatusOr<std::vector<catalog::Request>> ListRequests(bool a, catalog::RequestState s,
                                                             std::size_t l) override {
    return c_->ListRequests(a, s, l);
  }
  absl::StatusOr<catalog::Task> GetTask(std::uint64_t id) override {
    ++tasks_read;
    return c_->GetTask(id);
  }
  absl::StatusOr<std::vector<catalog::RequestFile>> ListRequestFiles(
      std::uint64_t r, const catalog::RequestFileFilter& f) override {
    return c_->ListRequestFiles(r, f);
  }
  absl::StatusOr<std::vector<catalog::Task>> ListTasks(const catalog::TaskFilter& f) override {
    absl::StatusOr<std::vector<catalog::Task>> tasks = c_->ListTasks(f);
    if (tasks.ok()) tasks_read += tasks->size();
    return tasks;
  }
  absl::StatusOr<std::vector<catalog::Event>> ReadEvents(std::uint64_t a, std::size_t m,
                                                         std::chrono::milliseconds w) override {
    return c_->ReadEvents(a, m, w);
  }
  absl::StatusOr<std::uint64_t> LastEventSeq() override { return c_->LastEventSeq(); }
  absl::StatusOr<catalog::PolicyDocument> GetPolicies() override { return c_->GetPolicies(); }

 private:
  catalog::CatalogView* c_;
};

// The work queue, with a lost renewal, a write before the next CreateTasks, a slow commit.
class FaultyWorkQueue : public catalog::WorkQueue {
 public:
  explicit FaultyWorkQueue(catalog::WorkQueue* inner) : c_(inner) {}

  // If set and returning a status, RenewLease (and RenewLeases, for that item) returns it
  // instead of calling on.
  std::function<std::optional<absl::Status>(std::uint64_t task)> on_renew;
  // Runs once, before the next CreateTasks is forwarded.
  std::function<void()> before_create_tasks;
  // Called before CompleteTasks is forwarded (to count calls, or to sleep like a distant
  // catalog).
  std::function<void(std::size_t items)> before_complete_tasks;
  // Called when a ClaimTasks call was answered: when it was made, the wait it asked for, and
  // how many tasks it claimed.
  std::function<void(std::chrono::steady_clock::time_point made, std::chrono::milliseconds wait,
                     std::size_t claimed)>
      after_claim_tasks;

  absl::StatusOr<catalog::Request> CreateRequest(const catalog::RequestSpec& s) override {
    return c_->CreateRequest(s);
  }
  absl::StatusOr<catalog::Request> UpdateRequest(const catalog::RequestUpdate& u) override {
    return c_->UpdateRequest(u);
  }
  absl::StatusOr<std::size_t> PurgeFinishedRequests(std::int64_t b, std::size_t m) override {
    return c_->PurgeFinishedRequests(b, m);
  }
  absl::StatusOr<catalog::Request> AddRequestFiles(std::uint64_t r,
                                                   const std::vector<catalog::RequestFileInput>& f,
                                                   bool last) override {
    return c_->AddRequestFiles(r, f, last);
  }
  absl::StatusOr<catalog::RequestFile> SettleRequestFile(std::uint64_t r, std::uint64_t f,
                                                         catalog::RequestFileState s,
                                                         std::string_view why) override {
    return c_->SettleRequestFile(r, f, s, why);
  }
  absl::StatusOr<std::vector<catalog::Task>> CreateTasks(
      const std::vector<catalog::TaskSpec>& s) override {
    if (before_create_tasks) std::exchange(before_create_tasks, nullptr)();
    return c_->CreateTasks(s);
  }
  absl::StatusOr<catalog::Task> ClaimTask(std::string_view n, std::string_view o,
                                          std::chrono::milliseconds l) override {
    return c_->ClaimTask(n, o, l);
  }
  absl::StatusOr<std::vector<catalog::Task>> ClaimTasks(std::string_view n,
                                                        const std::vector<std::string>& o,
                                                        std::chrono::milliseconds l,
                                                        std::chrono::milliseconds w) override {
    const auto made = std::chrono::steady_clock::now();
    absl::StatusOr<std::vector<catalog::Task>> claimed = c_->ClaimTasks(n, o, l, w);
    if (after_claim_tasks) after_claim_tasks(made, w, claimed.ok() ? claimed->size() : 0);
    return claimed;
  }
  absl::StatusOr<catalog::Task> RenewLease(std::uint64_t id, std::string_view o,
                                           std::chrono::milliseconds l) override {
    if (on_renew) {
      if (std::optional<absl::Status> s = on_renew(id)) return *s;
    }
    return c_->RenewLease(id, o, l);
  }
  absl::StatusOr<std::vector<absl::Status>> RenewLeases(
      const std::vector<catalog::LeaseRenewal>& items, std::chrono::milliseconds l) override {
    renew_calls += 1;
    std::vector<catalog::LeaseRenewal> passed;
    std::vector<std::optional<absl::Status>> faults;
    for (const catalog::LeaseRenewal& r : items) {
      faults.push_back(on_renew ? on_renew(r.id) : std::nullopt);
      if (!faults.back()) passed.push_back(r);
    }
    absl::StatusOr<std::vector<absl::Status>> renewed = c_->RenewLeases(passed, l);
    if (!renewed.ok()) return renewed;
    std::vector<absl::Status> out;
    std::size_t next = 0;
    for (std::optional<absl::Status>& f : faults) out.push_back(f ? *f : (*renewed)[next++]);
    return out;
  }
  std::atomic<int> renew_calls{0};  // RenewLeases calls
  absl::StatusOr<catalog::Task> CompleteTask(std::uint64_t id, std::string_view o) override {
    return c_->CompleteTask(id, o);
  }
  absl::StatusOr<std::vector<absl::StatusOr<catalog::Task>>> CompleteTasks(
      const std::vector<catalog::TaskCompletion>& items) override {
    if (before_complete_tasks) before_complete_tasks(items.size());
    return c_->CompleteTasks(items);
  }
  absl::StatusOr<catalog::Task> FailTask(std::uint64_t id, std::string_view o, std::string_view e,
                                         bool r, std::chrono::milliseconds a) override {
    return c_->FailTask(id, o, e, r, a);
  }
  absl::StatusOr<catalog::Task> YieldTask(std::uint64_t id, std::string_view o,
                                          std::string_view why) override {
    return c_->YieldTask(id, o, why);
  }
  absl::StatusOr<std::size_t> ExpireLeases() override { return c_->ExpireLeases(); }
  absl::StatusOr<catalog::Task> AbandonTask(std::uint64_t id, std::string_view why) override {
    return c_->AbandonTask(id, why);
  }
  absl::Status CancelRequest(std::uint64_t id) override { return c_->CancelRequest(id); }

 private:
  catalog::WorkQueue* c_;
};

// The namespace's writers, with a failing commit.
class FaultyEditor : public catalog::NamespaceEditor {
 public:
  explicit FaultyEditor(catalog::NamespaceEditor* inner) : c_(inner) {}

  // If set and returning a status, CommitFile returns it instead of calling on.
  std::function<std::optional<absl::Status>(std::string_view path)> on_commit;

  using A = catalog::Attributes;
  absl::StatusOr<A> Mkdir(std::string_view p, const catalog::MkdirOptions& o) override {
    return c_->Mkdir(p, o);
  }
  absl::StatusOr<A> CreateFile(std::string_view p, const catalog::FileContent& f) override {
    return c_->CreateFile(p, f);
  }
  absl::StatusOr<catalog::WriteReservation> BeginWrite(std::string_view p,
                                                       const catalog::FileContent& f) override {
    return c_->BeginWrite(p, f);
  }
  absl::StatusOr<A> CommitFile(std::string_view p, const catalog::FileContent& f,
                               std::string_view w, std::optional<std::uint64_t> g) override {
    if (on_commit) {
      if (std::optional<absl::Status> s = on_commit(p)) return *s;
    }
    return c_->CommitFile(p, f, w, g);
  }
  absl::StatusOr<std::vector<A>> CreateFiles(const std::vector<catalog::NewFile>& f) override {
    return c_->CreateFiles(f);
  }
  absl::Status Remove(std::string_view p, bool r) override { return c_->Remove(p, r); }
  absl::Status Rename(std::string_view f, std::string_view t) override { return c_->Rename(f, t); }
  absl::StatusOr<A> SetAttributes(std::string_view p, const catalog::AttributeChange& c) override {
    return c_->SetAttributes(p, c);
  }

 private:
  catalog::NamespaceEditor* c_;
};

}  // namespace gfrep::replica::testing
