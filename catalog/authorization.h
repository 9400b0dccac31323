#pragma once

// Who may do what to the catalog, and the rules that depend on who calls. An
// AuthorizedCatalog is one caller's view of a catalog: what the gRPC service
// (catalog_service.h) hands each call once it knows the caller. The service only converts and
// carries: the transport, the caller's identity (certificate or token), rate limits and long
// polls stay there. Everything the catalog's business decides from the caller is here:
//   - roles (identity.h Authorize): reads for anyone; the namespace and requests for users
//     and admins; topology, policies and task administration for admins; a node's calls
//     (registration, heartbeats, claims, leases, replica records) for the node they name;
//   - a user's namespace permissions (permissions.h), and that what a user may not read it
//     may not replicate;
//   - new content: a user's new entries are its own (new content of someone else's file
//     keeps that file's owner and mode); a mode of 0 is the default (0644 for files, 0755
//     for directories);
//   - requests: a user's is origin user, at most kMaxUserRequestPriority, counts against
//     its quota (AuthorizerOptions::max_open_requests_per_user), and only its own may be
//     changed or cancelled by it.
// Without identities (a server without a client CA: Authorizer::As with enforce = false)
// every call goes through as asked, but for the default modes.
//
// A refusal is kPermissionDenied naming the action and the identity ("PutSite: user alice
// may not (admin only)"), reported to the caller's on_refused (the server counts, logs and
// audits it) before it is returned; nothing was changed.
//
// Thread safety: one Authorizer serves every call of a server, from any thread; an
// AuthorizedCatalog is one call's (cheap to make) and may be used from any thread.

#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "catalog/catalog.h"
#include "catalog/identity.h"
#include "catalog/permissions.h"

namespace gfrep::catalog {

struct AuthorizerOptions {
  // Open (queued or running) requests of user origin one user may have; more are
  // kResourceExhausted. 0: no bound.
  std::size_t max_open_requests_per_user = 0;
};

class AuthorizedCatalog;

// The rules of one server, shared by its calls.
class Authorizer {
 public:
  // `catalog` outlives the authorizer and every AuthorizedCatalog made from it.
  Authorizer(Catalog& catalog, AuthorizerOptions options) : catalog_(catalog), options_(options) {}

  // The catalog as `who` (nullopt: the caller named no identity) may use it. With `enforce`
  // false (the server checks no identities) every call goes through as asked.
  // `on_refused` (may be null) hears every refusal before it is returned.
  AuthorizedCatalog As(std::optional<Identity> who, bool enforce,
                       std::function<void(const absl::Status&)> on_refused);

 private:
  friend class AuthorizedCatalog;
  Catalog& catalog_;
  const AuthorizerOptions options_;
  // Held across a user's request count and its creation, so concurrent creates cannot both
  // take the last place of a quota.
  absl::Mutex quota_mu_;
};

class AuthorizedCatalog final : public Catalog {
 public:
  // OK when the caller may do `action` of this `access` (for Access::kOwnNode: for each of
  // `nodes`); else the refusal, reported. For what is not a Catalog call (a Watch stream).
  absl::Status Check(std::string_view action, Access access,
                     const std::vector<std::string_view>& nodes = {});

  // NamespaceView
  absl::StatusOr<Attributes> Stat(std::string_view path) override;
  absl::StatusOr<std::vector<absl::StatusOr<Attributes>>> StatMany(
      const std::vector<std::string>& paths) override;
  absl::StatusOr<Attributes> StatInode(InodeId inode) override;
  absl::StatusOr<std::string> PathOf(InodeId inode) override;
  absl::StatusOr<std::vector<DirEntry>> List(std::string_view path,
                                             const ListOptions& options) override;
  // ReplicaView
  absl::StatusOr<Location> Locate(std::string_view path) override;
  absl::StatusOr<std::vector<Replica>> GetReplicas(InodeId inode) override;
  absl::StatusOr<std::vector<Replica>> ListNodeReplicas(std::string_view node, InodeId start_after,
                                                        std::size_t limit) override;
  // SiteView
  absl::StatusOr<std::vector<Site>> ListSites() override;
  absl::StatusOr<Node> GetNode(std::string_view name) override;
  absl::StatusOr<std::vector<Node>> ListNodes(std::string_view site) override;
  absl::StatusOr<Route> GetRoute(std::string_view src_site, std::string_view dst_site) override;
  absl::StatusOr<std::vector<Route>> ListRoutes() override;
  // WorkView
  absl::StatusOr<Request> GetRequest(std::uint64_t id) override;
  absl::StatusOr<std::vector<Request>> ListRequests(bool any_state, RequestState state,
                                                    std::size_t limit) override;
  absl::StatusOr<Task> GetTask(std::uint64_t id) override;
  absl::StatusOr<std::vector<Task>> ListTasks(const TaskFilter& filter) override;
  absl::StatusOr<std::vector<RequestFile>> ListRequestFiles(
      std::uint64_t request_id, const RequestFileFilter& filter) override;
  // EventView
  absl::StatusOr<std::vector<Event>> ReadEvents(std::uint64_t after_seq, std::size_t max,
                                                std::chrono::milliseconds wait) override;
  absl::StatusOr<std::uint64_t> LastEventSeq() override;
  absl::StatusOr<PolicyDocument> GetPolicies() override;
  // NamespaceEditor
  absl::StatusOr<Attributes> Mkdir(std::string_view path, const MkdirOptions& options) override;
  absl::StatusOr<Attributes> CreateFile(std::string_view path, const FileContent& content) override;
  absl::StatusOr<WriteReservation> BeginWrite(std::string_view path,
                                              const FileContent& content) override;
  absl::StatusOr<Attributes> CommitFile(std::string_view path, const FileContent& content,
                                        std::string_view writer_node,
                                        std::optional<std::uint64_t> expected_generation) override;
  absl::StatusOr<std::vector<Attributes>> CreateFiles(const std::vector<NewFile>& files) override;
  absl::Status Remove(std::string_view path, bool recursive) override;
  absl::Status Rename(std::string_view from, std::string_view to) override;
  absl::StatusOr<Attributes> SetAttributes(std::string_view path,
                                           const AttributeChange& change) override;
  // ReplicaRegistry
  absl::Status PutReplica(const Replica& replica) override;
  absl::Status RemoveReplica(InodeId inode, std::string_view node) override;
  absl::StatusOr<std::vector<absl::Status>> TransitionReplicas(
      const std::vector<ReplicaTransition>& items) override;
  // SiteRegistry
  absl::Status PutSite(const Site& site) override;
  absl::Status RemoveSite(std::string_view name) override;
  absl::Status RegisterNode(const Node& node) override;
  absl::Status PutNodeDisk(std::string_view node, const DiskProfile& disk) override;
  absl::Status SetNodeMode(std::string_view node, NodeMode mode) override;
  absl::Status RemoveNode(std::string_view name) override;
  absl::Status SendHeartbeat(const Heartbeat& heartbeat) override;
  absl::Status PutRoute(const Route& route) override;
  absl::Status RemoveRoute(std::string_view src_site, std::string_view dst_site) override;
  // WorkQueue
  absl::StatusOr<Request> CreateRequest(const RequestSpec& spec) override;
  absl::StatusOr<Request> UpdateRequest(const RequestUpdate& update) override;
  absl::StatusOr<Request> AddRequestFiles(std::uint64_t request_id,
                                          const std::vector<RequestFileInput>& files,
                                          bool last) override;
  absl::StatusOr<RequestFile> SettleRequestFile(std::uint64_t request_id, std::uint64_t file_id,
                                                RequestFileState state,
                                                std::string_view reason) override;
  absl::StatusOr<std::size_t> PurgeFinishedRequests(std::int64_t finished_before_ns,
                                                    std::size_t max) override;
  absl::StatusOr<std::vector<Task>> CreateTasks(const std::vector<TaskSpec>& specs) override;
  absl::StatusOr<Task> ClaimTask(std::string_view node, std::string_view owner,
                                 std::chrono::milliseconds lease) override;
  absl::StatusOr<std::vector<Task>> ClaimTasks(std::string_view node,
                                               const std::vector<std::string>& owners,
                                               std::chrono::milliseconds lease,
                                               std::chrono::milliseconds wait) override;
  absl::StatusOr<std::vector<absl::Status>> RenewLeases(const std::vector<LeaseRenewal>& items,
                                                        std::chrono::milliseconds lease) override;
  absl::StatusOr<Task> RenewLease(std::uint64_t id, std::string_view owner,
                                  std::chrono::milliseconds lease) override;
  absl::StatusOr<Task> CompleteTask(std::uint64_t id, std::string_view owner) override;
  absl::StatusOr<std::vector<absl::StatusOr<Task>>> CompleteTasks(
      const std::vector<TaskCompletion>& items) override;
  absl::StatusOr<Task> FailTask(std::uint64_t id, std::string_view owner, std::string_view error,
                                bool retryable, std::chrono::milliseconds retry_after) override;
  absl::StatusOr<Task> YieldTask(std::uint64_t id, std::string_view owner,
                                 std::string_view reason) override;
  absl::StatusOr<std::size_t> ExpireLeases() override;
  absl::StatusOr<Task> AbandonTask(std::uint64_t id, std::string_view reason) override;
  absl::Status CancelRequest(std::uint64_t id) override;
  // Governance
  absl::StatusOr<PolicyDocument> PutPolicies(
      std::string_view text, std::string_view source,
      std::optional<std::uint64_t> expected_version) override;
  absl::Status RevokeToken(std::string_view id, std::int64_t expires_unix) override;
  absl::StatusOr<std::vector<std::pair<std::string, std::int64_t>>> RevokedTokens() override;
  absl::Status RecordAudit(std::string_view who, std::string_view what,
                           std::string_view detail) override;
  // Monitoring
  absl::StatusOr<std::map<std::string, std::uint64_t>> StorageStats() override;

 private:
  friend class Authorizer;
  AuthorizedCatalog(Authorizer& authorizer, std::optional<Identity> who, bool enforce,
                    std::function<void(const absl::Status&)> on_refused)
      : a_(authorizer),
        who_(std::move(who)),
        enforce_(enforce),
        on_refused_(std::move(on_refused)) {}

  Catalog& inner() { return a_.catalog_; }
  // Whether the caller is a user, subject to the namespace's permissions.
  bool user() const { return enforce_ && who_.has_value() && who_->role == Role::kUser; }
  // `s`, reported first if it is a refusal.
  absl::Status Refused(absl::Status s);
  NamespaceGuard Guard();
  // Users change and cancel only their own requests.
  absl::Status OwnRequest(std::string_view action, std::uint64_t id);
  // The default mode of a new file (0: 0644) and, for a user, its owner.
  absl::Status NewContent(std::string_view action, std::string_view path, bool write_existing,
                          FileContent& content);

  Authorizer& a_;
  const std::optional<Identity> who_;
  const bool enforce_;
  const std::function<void(const absl::Status&)> on_refused_;
};

}  // namespace gfrep::catalog
