#include "catalog/authorization.h"

#include <algorithm>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "fmt/format.h"

namespace gfrep::catalog {

// Open requests of one state read for a quota (as many as the server lists in one call).
constexpr std::size_t kOpenRequestsListed = 1'000'000;

AuthorizedCatalog Authorizer::As(std::optional<Identity> who, bool enforce,
                                 std::function<void(const absl::Status&)> on_refused) {
  return AuthorizedCatalog(*this, std::move(who), enforce, std::move(on_refused));
}

absl::Status AuthorizedCatalog::Refused(absl::Status s) {
  if (absl::IsPermissionDenied(s) && on_refused_) on_refused_(s);
  return s;
}

absl::Status AuthorizedCatalog::Check(std::string_view action, Access access,
                                      const std::vector<std::string_view>& nodes) {
  if (!enforce_) return absl::OkStatus();
  if (absl::Status s = Authorize(who_, action, access, nodes); !s.ok()) return Refused(s);
  return absl::OkStatus();
}

NamespaceGuard AuthorizedCatalog::Guard() {
  return NamespaceGuard(inner(), Principal{who_->name, who_->groups, who_->ToString()});
}

absl::Status AuthorizedCatalog::OwnRequest(std::string_view action, std::uint64_t id) {
  if (!user()) return absl::OkStatus();
  absl::StatusOr<Request> r = inner().GetRequest(id);
  if (!r.ok()) return r.status();
  if (r->spec.origin == RequestOrigin::kUser && r->spec.owner == who_->name) {
    return absl::OkStatus();
  }
  return Refused(absl::PermissionDeniedError(
      fmt::format("{} {}: {} may not (the request is {}'s)", action, id, who_->ToString(),
                  r->spec.owner.empty() ? "an admin" : DescribeOwner(r->spec))));
}

absl::Status AuthorizedCatalog::NewContent(std::string_view action, std::string_view path,
                                           bool write_existing, FileContent& content) {
  if (content.mode == 0) content.mode = 0644;
  if (!user()) return absl::OkStatus();
  absl::StatusOr<std::optional<Attributes>> existing =
      Guard().MayCreate(action, path, write_existing);
  if (!existing.ok()) return Refused(existing.status());
  content.owner = who_->name;
  return absl::OkStatus();
}

// ---- reads ----

absl::StatusOr<Attributes> AuthorizedCatalog::Stat(std::string_view path) {
  if (absl::Status s = Check("Stat", Access::kRead); !s.ok()) return s;
  if (user()) {
    if (absl::Status s = Guard().MayLookup("Stat", path); !s.ok()) return Refused(s);
  }
  return inner().Stat(path);
}

absl::StatusOr<std::vector<absl::StatusOr<Attributes>>> AuthorizedCatalog::StatMany(
    const std::vector<std::string>& paths) {
  if (absl::Status s = Check("StatMany", Access::kRead); !s.ok()) return s;
  absl::StatusOr<std::vector<absl::StatusOr<Attributes>>> results = inner().StatMany(paths);
  if (!results.ok() || !user()) return results;
  // Looking up a path needs search rights on the directories above it only: one walk per
  // parent directory (a batch usually stats the files of a few directories).
  NamespaceGuard guard = Guard();
  absl::flat_hash_map<std::string, absl::Status> by_parent;
  for (std::size_t i = 0; i < paths.size() && i < results->size(); ++i) {
    const std::size_t slash = paths[i].rfind('/');
    const std::string parent =
        slash == std::string::npos ? std::string() : paths[i].substr(0, slash);
    auto [it, fresh] = by_parent.try_emplace(parent);
    if (fresh) it->second = guard.MayLookup("StatMany", paths[i]);
    if (!it->second.ok()) {
      // The refusal names the first path of its directory; reported once per directory.
      (*results)[i] = fresh ? Refused(it->second) : it->second;
    }
  }
  return results;
}

absl::StatusOr<Attributes> AuthorizedCatalog::StatInode(InodeId inode) {
  if (absl::Status s = Check("StatInode", Access::kRead); !s.ok()) return s;
  return inner().StatInode(inode);
}

absl::StatusOr<std::string> AuthorizedCatalog::PathOf(InodeId inode) {
  if (absl::Status s = Check("PathOf", Access::kRead); !s.ok()) return s;
  return inner().PathOf(inode);
}

absl::StatusOr<std::vector<DirEntry>> AuthorizedCatalog::List(std::string_view path,
                                                              const ListOptions& options) {
  if (absl::Status s = Check("List", Access::kRead); !s.ok()) return s;
  if (user()) {
    if (absl::Status s = Guard().MayList("List", path); !s.ok()) return Refused(s);
  }
  return inner().List(path, options);
}

absl::StatusOr<Location> AuthorizedCatalog::Locate(std::string_view path) {
  if (absl::Status s = Check("Locate", Access::kRead); !s.ok()) return s;
  if (user()) {
    if (absl::Status s = Guard().MayRead("Locate", path); !s.ok()) return Refused(s);
  }
  return inner().Locate(path);
}

absl::StatusOr<std::vector<Replica>> AuthorizedCatalog::GetReplicas(InodeId inode) {
  if (absl::Status s = Check("GetReplicas", Access::kRead); !s.ok()) return s;
  return inner().GetReplicas(inode);
}

absl::StatusOr<std::vector<Replica>> AuthorizedCatalog::ListNodeReplicas(std::string_view node,
                                                                         InodeId start_after,
                                                                         std::size_t limit) {
  if (absl::Status s = Check("ListNodeReplicas", Access::kRead); !s.ok()) return s;
  return inner().ListNodeReplicas(node, start_after, limit);
}

absl::StatusOr<std::vector<Site>> AuthorizedCatalog::ListSites() {
  if (absl::Status s = Check("ListSites", Access::kRead); !s.ok()) return s;
  return inner().ListSites();
}

absl::StatusOr<Node> AuthorizedCatalog::GetNode(std::string_view name) {
  if (absl::Status s = Check("GetNode", Access::kRead); !s.ok()) return s;
  return inner().GetNode(name);
}

absl::StatusOr<std::vector<Node>> AuthorizedCatalog::ListNodes(std::string_view site) {
  if (absl::Status s = Check("ListNodes", Access::kRead); !s.ok()) return s;
  return inner().ListNodes(site);
}

absl::StatusOr<Route> AuthorizedCatalog::GetRoute(std::string_view src_site,
                                                  std::string_view dst_site) {
  if (absl::Status s = Check("GetRoute", Access::kRead); !s.ok()) return s;
  return inner().GetRoute(src_site, dst_site);
}

absl::StatusOr<std::vector<Route>> AuthorizedCatalog::ListRoutes() {
  if (absl::Status s = Check("ListRoutes", Access::kRead); !s.ok()) return s;
  return inner().ListRoutes();
}

absl::StatusOr<Request> AuthorizedCatalog::GetRequest(std::uint64_t id) {
  if (absl::Status s = Check("GetRequest", Access::kRead); !s.ok()) return s;
  return inner().GetRequest(id);
}

absl::StatusOr<std::vector<Request>> AuthorizedCatalog::ListRequests(bool any_state,
                                                                     RequestState state,
                                                                     std::size_t limit) {
  if (absl::Status s = Check("ListRequests", Access::kRead); !s.ok()) return s;
  return inner().ListRequests(any_state, state, limit);
}

absl::StatusOr<Task> AuthorizedCatalog::GetTask(std::uint64_t id) {
  if (absl::Status s = Check("GetTask", Access::kRead); !s.ok()) return s;
  return inner().GetTask(id);
}

absl::StatusOr<std::vector<Task>> AuthorizedCatalog::ListTasks(const TaskFilter& filter) {
  if (absl::Status s = Check("ListTasks", Access::kRead); !s.ok()) return s;
  return inner().ListTasks(filter);
}

absl::StatusOr<std::vector<RequestFile>> AuthorizedCatalog::ListRequestFiles(
    std::uint64_t request_id, const RequestFileFilter& filter) {
  if (absl::Status s = Check("ListRequestFiles", Access::kRead); !s.ok()) return s;
  return inner().ListRequestFiles(request_id, filter);
}

absl::StatusOr<std::vector<Event>> AuthorizedCatalog::ReadEvents(std::uint64_t after_seq,
                                                                 std::size_t max,
                                                                 std::chrono::milliseconds wait) {
  if (absl::Status s = Check("ReadEvents", Access::kRead); !s.ok()) return s;
  return inner().ReadEvents(after_seq, max, wait);
}

absl::StatusOr<std::uint64_t> AuthorizedCatalog::LastEventSeq() {
  if (absl::Status s = Check("LastEventSeq", Access::kRead); !s.ok()) return s;
  return inner().LastEventSeq();
}

absl::StatusOr<PolicyDocument> AuthorizedCatalog::GetPolicies() {
  if (absl::Status s = Check("GetPolicies", Access::kRead); !s.ok()) return s;
  return inner().GetPolicies();
}

// ---- the namespace ----

absl::StatusOr<Attributes> AuthorizedCatalog::Mkdir(std::string_view path,
                                                    const MkdirOptions& options) {
  if (absl::Status s = Check("Mkdir", Access::kNamespace); !s.ok()) return s;
  MkdirOptions o = options;
  if (o.mode == 0) o.mode = 0755;
  if (user()) {
    if (absl::Status s = Guard().MayCreate("Mkdir", path, false).status(); !s.ok()) {
      return Refused(s);
    }
    o.owner = who_->name;
  }
  return inner().Mkdir(path, o);
}

absl::StatusOr<Attributes> AuthorizedCatalog::CreateFile(std::string_view path,
                                                         const FileContent& content) {
  if (absl::Status s = Check("CreateFile", Access::kNamespace); !s.ok()) return s;
  FileContent c = content;
  if (absl::Status s = NewContent("CreateFile", path, false, c); !s.ok()) return s;
  return inner().CreateFile(path, c);
}

absl::StatusOr<WriteReservation> AuthorizedCatalog::BeginWrite(std::string_view path,
                                                               const FileContent& content) {
  if (absl::Status s = Check("BeginWrite", Access::kNamespace); !s.ok()) return s;
  FileContent c = content;
  if (absl::Status s = NewContent("BeginWrite", path, true, c); !s.ok()) return s;
  return inner().BeginWrite(path, c);
}

absl::StatusOr<Attributes> AuthorizedCatalog::CommitFile(
    std::string_view path, const FileContent& content, std::string_view writer_node,
    std::optional<std::uint64_t> expected_generation) {
  if (absl::Status s = Check("CommitFile", Access::kNamespace); !s.ok()) return s;
  FileContent c = content;
  if (c.mode == 0) c.mode = 0644;
  if (user()) {
    absl::StatusOr<std::optional<Attributes>> existing =
        Guard().MayCreate("CommitFile", path, true);
    if (!existing.ok()) return Refused(existing.status());
    // A new file is the writer's; new content of someone else's file keeps its owner and mode.
    c.owner = existing->has_value() ? "" : who_->name;
    if (existing->has_value()) c.mode = (*existing)->mode;
  }
  return inner().CommitFile(path, c, writer_node, expected_generation);
}

absl::StatusOr<std::vector<Attributes>> AuthorizedCatalog::CreateFiles(
    const std::vector<NewFile>& files) {
  if (absl::Status s = Check("CreateFiles", Access::kNamespace); !s.ok()) return s;
  std::vector<NewFile> out = files;
  std::string checked_parent;  // a batch usually fills one directory: check it once
  for (NewFile& n : out) {
    if (n.content.mode == 0) n.content.mode = 0644;
    if (!user()) continue;
    const std::string parent = n.path.substr(0, n.path.rfind('/'));
    if (parent != checked_parent || parent.empty()) {
      absl::StatusOr<std::optional<Attributes>> existing =
          Guard().MayCreate("CreateFiles", n.path, false);
      if (!existing.ok()) return Refused(existing.status());
      if (!existing->has_value()) checked_parent = parent;  // the parent's rights were checked
    }
    n.content.owner = who_->name;
  }
  return inner().CreateFiles(out);
}

absl::Status AuthorizedCatalog::Remove(std::string_view path, bool recursive) {
  if (absl::Status s = Check("Remove", Access::kNamespace); !s.ok()) return s;
  if (user()) {
    if (absl::Status s = Guard().MayRemove("Remove", path, recursive); !s.ok()) return Refused(s);
  }
  return inner().Remove(path, recursive);
}

absl::Status AuthorizedCatalog::Rename(std::string_view from, std::string_view to) {
  if (absl::Status s = Check("Rename", Access::kNamespace); !s.ok()) return s;
  if (user()) {
    if (absl::Status s = Guard().MayRename("Rename", from, to); !s.ok()) return Refused(s);
  }
  return inner().Rename(from, to);
}

absl::StatusOr<Attributes> AuthorizedCatalog::SetAttributes(std::string_view path,
                                                            const AttributeChange& change) {
  if (absl::Status s = Check("SetAttributes", Access::kNamespace); !s.ok()) return s;
  if (user()) {
    if (absl::Status s = Guard().MaySetAttributes("SetAttributes", path, change); !s.ok()) {
      return Refused(s);
    }
  }
  return inner().SetAttributes(path, change);
}

// ---- a node's own records ----

absl::Status AuthorizedCatalog::PutReplica(const Replica& replica) {
  if (absl::Status s = Check("PutReplica", Access::kOwnNode, {replica.node}); !s.ok()) return s;
  return inner().PutReplica(replica);
}

absl::Status AuthorizedCatalog::RemoveReplica(InodeId inode, std::string_view node) {
  if (absl::Status s = Check("RemoveReplica", Access::kOwnNode, {node}); !s.ok()) return s;
  return inner().RemoveReplica(inode, node);
}

absl::StatusOr<std::vector<absl::Status>> AuthorizedCatalog::TransitionReplicas(
    const std::vector<ReplicaTransition>& items) {
  std::vector<std::string_view> nodes;
  nodes.reserve(items.size());
  for (const ReplicaTransition& t : items) nodes.push_back(t.node);
  if (absl::Status s = Check("TransitionReplicas", Access::kOwnNode, nodes); !s.ok()) return s;
  return inner().TransitionReplicas(items);
}

absl::Status AuthorizedCatalog::RegisterNode(const Node& node) {
  if (absl::Status s = Check("RegisterNode", Access::kOwnNode, {node.name}); !s.ok()) return s;
  return inner().RegisterNode(node);
}

absl::Status AuthorizedCatalog::PutNodeDisk(std::string_view node, const DiskProfile& disk) {
  if (absl::Status s = Check("PutNodeDisk", Access::kOwnNode, {node}); !s.ok()) return s;
  return inner().PutNodeDisk(node, disk);
}

absl::Status AuthorizedCatalog::SendHeartbeat(const Heartbeat& heartbeat) {
  if (absl::Status s = Check("SendHeartbeat", Access::kOwnNode, {heartbeat.node}); !s.ok()) {
    return s;
  }
  return inner().SendHeartbeat(heartbeat);
}

absl::StatusOr<Task> AuthorizedCatalog::ClaimTask(std::string_view node, std::string_view owner,
                                                  std::chrono::milliseconds lease) {
  if (absl::Status s = Check("ClaimTask", Access::kOwnNode, {node}); !s.ok()) return s;
  return inner().ClaimTask(node, owner, lease);
}

absl::StatusOr<std::vector<Task>> AuthorizedCatalog::ClaimTasks(
    std::string_view node, const std::vector<std::string>& owners,
    std::chrono::milliseconds lease, std::chrono::milliseconds wait) {
  if (absl::Status s = Check("ClaimTasks", Access::kOwnNode, {node}); !s.ok()) return s;
  return inner().ClaimTasks(node, owners, lease, wait);
}

// A lease owner "NODE/..." names its node: the catalog checks that the owner holds the task,
// so a node can only renew, complete or fail its own.
absl::StatusOr<Task> AuthorizedCatalog::RenewLease(std::uint64_t id, std::string_view owner,
                                                   std::chrono::milliseconds lease) {
  if (absl::Status s = Check("RenewLease", Access::kOwnNode, {NodeOfOwner(owner)}); !s.ok()) {
    return s;
  }
  return inner().RenewLease(id, owner, lease);
}

absl::StatusOr<std::vector<absl::Status>> AuthorizedCatalog::RenewLeases(
    const std::vector<LeaseRenewal>& items, std::chrono::milliseconds lease) {
  std::vector<std::string_view> nodes;
  nodes.reserve(items.size());
  for (const LeaseRenewal& r : items) nodes.push_back(NodeOfOwner(r.owner));
  if (absl::Status s = Check("RenewLeases", Access::kOwnNode, nodes); !s.ok()) return s;
  return inner().RenewLeases(items, lease);
}

absl::StatusOr<Task> AuthorizedCatalog::CompleteTask(std::uint64_t id, std::string_view owner) {
  if (absl::Status s = Check("CompleteTask", Access::kOwnNode, {NodeOfOwner(owner)}); !s.ok()) {
    return s;
  }
  return inner().CompleteTask(id, owner);
}

absl::StatusOr<std::vector<absl::StatusOr<Task>>> AuthorizedCatalog::CompleteTasks(
    const std::vector<TaskCompletion>& items) {
  std::vector<std::string_view> nodes;
  nodes.reserve(items.size());
  for (const TaskCompletion& c : items) nodes.push_back(NodeOfOwner(c.owner));
  if (absl::Status s = Check("CompleteTasks", Access::kOwnNode, nodes); !s.ok()) return s;
  return inner().CompleteTasks(items);
}

absl::StatusOr<Task> AuthorizedCatalog::FailTask(std::uint64_t id, std::string_view owner,
                                                 std::string_view error, bool retryable,
                                                 std::chrono::milliseconds retry_after) {
  if (absl::Status s = Check("FailTask", Access::kOwnNode, {NodeOfOwner(owner)}); !s.ok()) {
    return s;
  }
  return inner().FailTask(id, owner, error, retryable, retry_after);
}

absl::StatusOr<Task> AuthorizedCatalog::YieldTask(std::uint64_t id, std::string_view owner,
                                                  std::string_view reason) {
  if (absl::Status s = Check("YieldTask", Access::kOwnNode, {NodeOfOwner(owner)}); !s.ok()) {
    return s;
  }
  return inner().YieldTask(id, owner, reason);
}

// ---- requests ----

absl::StatusOr<Request> AuthorizedCatalog::CreateRequest(const RequestSpec& asked) {
  if (absl::Status s = Check("CreateRequest", Access::kReplicate); !s.ok()) return s;
  if (!user()) return inner().CreateRequest(asked);
  RequestSpec spec = asked;
  if (spec.priority > kMaxUserRequestPriority) {
    return Refused(absl::PermissionDeniedError(fmt::format(
        "CreateRequest: priority {} is above {}, the most a user may ask (repairs run above "
        "it); an admin may ask more",
        spec.priority, kMaxUserRequestPriority)));
  }
  for (const std::string& path : spec.paths) {  // what you may not read you may not copy
    if (absl::Status s = Guard().MayRead("CreateRequest", path); !s.ok()) return Refused(s);
  }
  spec.owner = who_->name;
  spec.origin = RequestOrigin::kUser;  // a user never speaks for a policy or the repairer
  const std::size_t quota = a_.options_.max_open_requests_per_user;
  if (quota == 0) return inner().CreateRequest(spec);
  // Count and create under one lock, so concurrent calls cannot both take the last place.
  absl::MutexLock lock(&a_.quota_mu_);
  std::size_t open = 0;
  for (RequestState state : {RequestState::kQueued, RequestState::kRunning}) {
    absl::StatusOr<std::vector<Request>> list =
        inner().ListRequests(false, state, kOpenRequestsListed);
    if (!list.ok()) return list.status();
    open +=
        static_cast<std::size_t>(std::count_if(list->begin(), list->end(), [&](const Request& r) {
          return r.spec.origin == RequestOrigin::kUser && r.spec.owner == spec.owner;
        }));
  }
  if (open >= quota) {
    return absl::ResourceExhaustedError(fmt::format(
        "CreateRequest: user {} has {} open replication requests, its quota (gfcatalogd "
        "--max-open-requests-per-user); wait for some to finish or cancel them",
        spec.owner, open));
  }
  return inner().CreateRequest(spec);
}

absl::StatusOr<Request> AuthorizedCatalog::UpdateRequest(const RequestUpdate& update) {
  if (absl::Status s = Check("UpdateRequest", Access::kReplicate); !s.ok()) return s;
  if (absl::Status s = OwnRequest("UpdateRequest", update.id); !s.ok()) return s;
  return inner().UpdateRequest(update);
}

absl::Status AuthorizedCatalog::CancelRequest(std::uint64_t id) {
  if (absl::Status s = Check("CancelRequest", Access::kReplicate); !s.ok()) return s;
  if (absl::Status s = OwnRequest("CancelRequest", id); !s.ok()) return s;
  return inner().CancelRequest(id);
}

// ---- administration ----

absl::Status AuthorizedCatalog::PutSite(const Site& site) {
  if (absl::Status s = Check("PutSite", Access::kAdmin); !s.ok()) return s;
  return inner().PutSite(site);
}

absl::Status AuthorizedCatalog::RemoveSite(std::string_view name) {
  if (absl::Status s = Check("RemoveSite", Access::kAdmin); !s.ok()) return s;
  return inner().RemoveSite(name);
}

absl::Status AuthorizedCatalog::SetNodeMode(std::string_view node, NodeMode mode) {
  if (absl::Status s = Check("SetNodeMode", Access::kAdmin); !s.ok()) return s;
  return inner().SetNodeMode(node, mode);
}

absl::Status AuthorizedCatalog::RemoveNode(std::string_view name) {
  if (absl::Status s = Check("RemoveNode", Access::kAdmin); !s.ok()) return s;
  return inner().RemoveNode(name);
}

absl::Status AuthorizedCatalog::PutRoute(const Route& route) {
  if (absl::Status s = Check("PutRoute", Access::kAdmin); !s.ok()) return s;
  return inner().PutRoute(route);
}

absl::Status AuthorizedCatalog::RemoveRoute(std::string_view src_site, std::string_view dst_site) {
  if (absl::Status s = Check("RemoveRoute", Access::kAdmin); !s.ok()) return s;
  return inner().RemoveRoute(src_site, dst_site);
}

// The planner's: an admin's (gfcatalogd's own planner is the catalog's, never a caller).
absl::StatusOr<Request> AuthorizedCatalog::AddRequestFiles(
    std::uint64_t request_id, const std::vector<RequestFileInput>& files, bool last) {
  if (absl::Status s = Check("AddRequestFiles", Access::kAdmin); !s.ok()) return s;
  return inner().AddRequestFiles(request_id, files, last);
}

absl::StatusOr<RequestFile> AuthorizedCatalog::SettleRequestFile(std::uint64_t request_id,
                                                                 std::uint64_t file_id,
                                                                 RequestFileState state,
                                                                 std::string_view reason) {
  if (absl::Status s = Check("SettleRequestFile", Access::kAdmin); !s.ok()) return s;
  return inner().SettleRequestFile(request_id, file_id, state, reason);
}

absl::StatusOr<std::size_t> AuthorizedCatalog::PurgeFinishedRequests(
    std::int64_t finished_before_ns, std::size_t max) {
  if (absl::Status s = Check("PurgeFinishedRequests", Access::kAdmin); !s.ok()) return s;
  return inner().PurgeFinishedRequests(finished_before_ns, max);
}

absl::StatusOr<std::vector<Task>> AuthorizedCatalog::CreateTasks(
    const std::vector<TaskSpec>& specs) {
  if (absl::Status s = Check("CreateTasks", Access::kAdmin); !s.ok()) return s;
  return inner().CreateTasks(specs);
}

absl::StatusOr<std::size_t> AuthorizedCatalog::ExpireLeases() {
  if (absl::Status s = Check("ExpireLeases", Access::kAdmin); !s.ok()) return s;
  return inner().ExpireLeases();
}

absl::StatusOr<Task> AuthorizedCatalog::AbandonTask(std::uint64_t id, std::string_view reason) {
  if (absl::Status s = Check("AbandonTask", Access::kAdmin); !s.ok()) return s;
  return inner().AbandonTask(id, reason);
}

absl::StatusOr<PolicyDocument> AuthorizedCatalog::PutPolicies(
    std::string_view text, std::string_view source, std::optional<std::uint64_t> expected_version) {
  if (absl::Status s = Check("PutPolicies", Access::kAdmin); !s.ok()) return s;
  return inner().PutPolicies(text, source, expected_version);
}

absl::Status AuthorizedCatalog::RevokeToken(std::string_view id, std::int64_t expires_unix) {
  if (absl::Status s = Check("RevokeToken", Access::kAdmin); !s.ok()) return s;
  return inner().RevokeToken(id, expires_unix);
}

absl::StatusOr<std::vector<std::pair<std::string, std::int64_t>>>
AuthorizedCatalog::RevokedTokens() {
  if (absl::Status s = Check("RevokedTokens", Access::kAdmin); !s.ok()) return s;
  return inner().RevokedTokens();
}

absl::Status AuthorizedCatalog::RecordAudit(std::string_view who, std::string_view what,
                                            std::string_view detail) {
  if (absl::Status s = Check("RecordAudit", Access::kAdmin); !s.ok()) return s;
  return inner().RecordAudit(who, what, detail);
}

absl::StatusOr<std::map<std::string, std::uint64_t>> AuthorizedCatalog::StorageStats() {
  if (absl::Status s = Check("StorageStats", Access::kAdmin); !s.ok()) return s;
  return inner().StorageStats();
}

}  // namespace gfrep::catalog
