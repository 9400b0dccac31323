// KvCatalog (kv_catalog_impl.h): replica records, the event log's writer, the
// topology tables (sites, nodes, routes) and the policy document.

#include <algorithm>
#include <limits>
#include <map>
#include <set>

#include "catalog/internal/kv_catalog_impl.h"

namespace gfrep::catalog::internal {
namespace {

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

}  // namespace

absl::StatusOr<Location> KvCatalog::Locate(std::string_view path) {
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

absl::StatusOr<std::vector<Replica>> KvCatalog::GetReplicas(InodeId inode) {
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

void KvCatalog::AddEvent(KvBatch& batch, EventKind kind, std::uint64_t id,
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
  batch.Put(kEvents, U64Key(e.seq), EncodeEvent(e));
  if (e.seq % 1024 == 0 && e.seq > options_.event_retention) {
    batch.DeleteRange(kEvents, U64Key(0), U64Key(e.seq - options_.event_retention));
  }
}

void KvCatalog::PutReplicaLocked(KvBatch& batch, const Replica& in,
                                    std::string_view detail) {
  Replica r = in;
  r.updated_ns = Now();
  batch.Put(kReplicas, ReplicaKey(r.inode, r.node), EncodeReplica(r));
  batch.Put(kNodeReplicas, NodeReplicaKey(r.node, r.inode), "");
  AddEvent(batch, EventKind::kReplica, r.inode, r.node, ToString(r.state), detail);
}

void KvCatalog::DeleteReplicaLocked(KvBatch& batch, InodeId inode,
                                       std::string_view node) {
  batch.Delete(kReplicas, ReplicaKey(inode, node));
  batch.Delete(kNodeReplicas, NodeReplicaKey(node, inode));
  AddEvent(batch, EventKind::kReplica, inode, node, "removed", "");
}

absl::StatusOr<std::optional<Replica>> KvCatalog::FindReplica(InodeId inode,
                                                                 std::string_view node) {
  absl::StatusOr<std::string> v = Get(kReplicas, ReplicaKey(inode, node), "replica");
  if (absl::IsNotFound(v.status())) return std::optional<Replica>();
  if (!v.ok()) return v.status();
  absl::StatusOr<Replica> r = DecodeReplica(*v);
  if (!r.ok()) return r.status();
  return std::optional<Replica>(std::move(*r));
}

absl::Status KvCatalog::DropPendingReplicaLocked(KvBatch& batch, InodeId inode,
                                                    std::string_view node,
                                                    std::uint64_t generation) {
  absl::StatusOr<std::optional<Replica>> r = FindReplica(inode, node);
  if (!r.ok()) return r.status();
  if (r->has_value() && (*r)->state == ReplicaState::kPending && (*r)->generation == generation) {
    DeleteReplicaLocked(batch, inode, node);
  }
  return absl::OkStatus();
}

absl::Status KvCatalog::PutReplica(const Replica& replica) {
  WriteGate gate(this);
  if (!gate.status().ok()) return gate.status();
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
  KvBatch batch;
  PutReplicaLocked(batch, replica, a->name);
  return WriteLocked(&batch, "put replica");
}

absl::StatusOr<std::vector<absl::Status>> KvCatalog::TransitionReplicas(
    const std::vector<ReplicaTransition>& items) {
  WriteGate gate(this);
  if (!gate.status().ok()) return gate.status();
  if (items.size() > kMaxBatchPaths) {
    return absl::InvalidArgumentError(fmt::format("more than {} replicas", kMaxBatchPaths));
  }
  std::vector<absl::Status> out(items.size());
  WorkLock work(this);
  KvBatch batch;
  std::vector<std::size_t> applied;
  // Records this batch changes (reads do not see the batch): a second change of one is
  // refused, and "never the last complete replica" counts the batch's own removals.
  std::set<std::pair<InodeId, std::string>> touched;
  std::map<InodeId, int> complete_removed;
  const std::int64_t now = Now();
  for (std::size_t i = 0; i < items.size(); ++i) {
    const ReplicaTransition& t = items[i];
    if (absl::Status s = Validate(t); !s.ok()) {
      out[i] = s;
      continue;
    }
    if (touched.count({t.inode, t.node}) > 0) {
      out[i] = absl::InvalidArgumentError(
          fmt::format("replica of inode {} on {} given twice", t.inode, t.node));
      continue;
    }
    absl::StatusOr<std::optional<Replica>> rec = FindReplica(t.inode, t.node);
    if (!rec.ok()) return rec.status();
    if (!rec->has_value()) {
      out[i] = absl::NotFoundError(fmt::format("no replica of inode {} on {}", t.inode, t.node));
      continue;
    }
    Replica r = **rec;
    if (r.state != t.from || r.generation != t.generation) {
      out[i] = absl::AbortedError(fmt::format("replica of inode {} on {} is {} at generation {}",
                                              t.inode, t.node, ToString(r.state), r.generation));
      continue;
    }
    if (t.from == ReplicaState::kComplete && t.to == ReplicaState::kDeleting) {
      absl::StatusOr<std::vector<Replica>> all = GetReplicas(t.inode);
      if (!all.ok()) return all.status();
      int others = -complete_removed[t.inode];
      for (const Replica& o : *all) {
        if (o.node != t.node && o.state == ReplicaState::kComplete && o.generation == t.generation) {
          ++others;
        }
      }
      if (others <= 0) {
        out[i] = absl::FailedPreconditionError(fmt::format(
            "replica of inode {} on {} is the last complete one: never removed", t.inode, t.node));
        continue;
      }
      ++complete_removed[t.inode];
    }
    r.state = t.to;
    if (t.to == ReplicaState::kComplete) {
      if (t.verified) r.verified_ns = now;
      if (t.mtime_ns != 0) r.mtime_ns = t.mtime_ns;
    }
    if (t.from == ReplicaState::kComplete && t.to == ReplicaState::kComplete) {
      // Re-verified: the record changes, its state does not; no event.
      r.updated_ns = now;
      batch.Put(kReplicas, ReplicaKey(r.inode, r.node), EncodeReplica(r));
    } else {
      r.note = t.note;
      PutReplicaLocked(batch, r, t.note);
    }
    applied.push_back(i);
    touched.insert({t.inode, t.node});
  }
  if (applied.empty()) return out;
  if (absl::Status s = WriteLocked(&batch, "transition replicas"); !s.ok()) {
    for (std::size_t i : applied) out[i] = s;
  }
  return out;
}

absl::Status KvCatalog::RemoveReplica(InodeId inode, std::string_view node) {
  WriteGate gate(this);
  if (!gate.status().ok()) return gate.status();
  if (absl::Status s = ValidateName(node); !s.ok()) return s;
  WorkLock work(this);
  absl::StatusOr<std::string> existing = Get(kReplicas, ReplicaKey(inode, node), "replica");
  if (absl::IsNotFound(existing.status())) return absl::OkStatus();
  if (!existing.ok()) return existing.status();
  KvBatch batch;
  DeleteReplicaLocked(batch, inode, node);
  return WriteLocked(&batch, "remove replica");
}

absl::StatusOr<std::vector<Replica>> KvCatalog::ListNodeReplicas(std::string_view node,
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

absl::Status KvCatalog::PutSite(const Site& site) {
  WriteGate gate(this);
  if (!gate.status().ok()) return gate.status();
  if (absl::Status s = ValidateName(site.name); !s.ok()) return s;
  if (site.labels.size() > kMaxLabels) return absl::InvalidArgumentError("too many labels");
  for (const auto& [k, v] : site.labels) {
    if (absl::Status s = ValidateName(k); !s.ok()) {
      return absl::InvalidArgumentError(fmt::format("bad label key: {}", std::string(s.message())));
    }
    if (absl::Status s = ValidateLabel("label value", v); !s.ok()) return s;
  }
  WorkLock work(this);
  KvBatch batch;
  batch.Put(kSites, site.name, EncodeSite(site));
  return WriteLocked(&batch, "put site");
}

absl::Status KvCatalog::RemoveSite(std::string_view name) {
  WriteGate gate(this);
  if (!gate.status().ok()) return gate.status();
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
  KvBatch batch;
  batch.Delete(kSites, name);
  absl::StatusOr<std::vector<Route>> routes = ListRoutes();
  if (!routes.ok()) return routes.status();
  for (const Route& r : *routes) {
    if (r.src_site == name || r.dst_site == name) {
      batch.Delete(kRoutes, RouteKey(r.src_site, r.dst_site));
    }
  }
  return WriteLocked(&batch, "remove site");
}
absl::StatusOr<std::vector<Site>> KvCatalog::ListSites() {
  return ScanAll<Site>([&](const auto& fn) { return Scan(kSites, "", "", fn); }, DecodeSite,
                       [](const Site&) { return true; });
}

absl::Status KvCatalog::RegisterNode(const Node& node) {
  WriteGate gate(this);
  if (!gate.status().ok()) return gate.status();
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
  // The disk profile is the probe's (PutNodeDisk) and the mode the operator's (SetNodeMode):
  // a re-registering agent keeps both.
  n.disk = {};
  n.mode = NodeMode::kNormal;
  n.liveness.clear();
  if (absl::StatusOr<std::string> old = Get(kNodes, node.name, "node"); old.ok()) {
    absl::StatusOr<Node> o = DecodeNode(*old);
    if (!o.ok()) return o.status();
    n.disk = o->disk;
    n.mode = o->mode;
  } else if (!absl::IsNotFound(old.status())) {
    return old.status();
  }
  KvBatch batch;
  batch.Put(kNodes, n.name, EncodeNode(n));
  AddEvent(batch, EventKind::kNode, 0, n.name, "registered", n.address);
  return WriteLocked(&batch, "register node");
}

absl::Status KvCatalog::PutNodeDisk(std::string_view name, const DiskProfile& disk) {
  WriteGate gate(this);
  if (!gate.status().ok()) return gate.status();
  if (absl::Status s = ValidateName(name); !s.ok()) return s;
  if (absl::Status s = Validate(disk); !s.ok()) return s;
  WorkLock work(this);
  absl::StatusOr<Node> n = GetNode(name);
  if (!n.ok()) return n.status();
  n->disk = disk;
  KvBatch batch;
  batch.Put(kNodes, n->name, EncodeNode(*n));
  AddEvent(batch, EventKind::kNode, 0, n->name, "disk",
           fmt::format("io={} direct={} flush={}", disk.write_io_size_bytes, disk.direct,
                       disk.flush_interval_bytes));
  return WriteLocked(&batch, "put node disk");
}

absl::Status KvCatalog::SetNodeMode(std::string_view name, NodeMode mode) {
  WriteGate gate(this);
  if (!gate.status().ok()) return gate.status();
  if (absl::Status s = ValidateName(name); !s.ok()) return s;
  if (mode != NodeMode::kNormal && mode != NodeMode::kReadOnly && mode != NodeMode::kDraining) {
    return absl::InvalidArgumentError("bad node mode");
  }
  WorkLock work(this);
  absl::StatusOr<Node> n = GetNode(name);
  if (!n.ok()) return n.status();
  if (n->mode == mode) return absl::OkStatus();
  n->mode = mode;
  KvBatch batch;
  batch.Put(kNodes, n->name, EncodeNode(*n));
  AddEvent(batch, EventKind::kNode, 0, n->name, "mode", ToString(mode));
  return WriteLocked(&batch, "set node mode");
}

absl::Status KvCatalog::RemoveNode(std::string_view name) {
  WriteGate gate(this);
  if (!gate.status().ok()) return gate.status();
  if (absl::Status s = ValidateName(name); !s.ok()) return s;
  WorkLock work(this);
  if (absl::StatusOr<std::string> v = Get(kNodes, name, fmt::format("node {}", name)); !v.ok()) {
    return v.status();
  }
  KvBatch batch;
  batch.Delete(kNodes, name);
  AddEvent(batch, EventKind::kNode, 0, name, "removed", "");
  return WriteLocked(&batch, "remove node");
}

absl::Status KvCatalog::RecordAudit(std::string_view who, std::string_view what, std::string_view detail) {
  WriteGate gate(this);
  if (!gate.status().ok()) return gate.status();
  WorkLock work(this);
  KvBatch batch;
  AddEvent(batch, EventKind::kAudit, 0, TruncateUtf8(who, kMaxNameBytes), what, detail);
  return WriteLocked(&batch, "record audit event");
}

absl::StatusOr<Node> KvCatalog::GetNode(std::string_view name) {
  if (absl::Status s = ValidateName(name); !s.ok()) return s;
  absl::StatusOr<std::string> v = Get(kNodes, name, fmt::format("node {}", name));
  if (!v.ok()) return v.status();
  return DecodeNode(*v);
}

absl::StatusOr<std::vector<Node>> KvCatalog::ListNodes(std::string_view site) {
  std::string s(site);
  return ScanAll<Node>([&](const auto& fn) { return Scan(kNodes, "", "", fn); }, DecodeNode,
                       [&](const Node& n) { return s.empty() || n.site == s; });
}

absl::Status KvCatalog::SendHeartbeat(const Heartbeat& hb) {
  WriteGate gate(this);
  if (!gate.status().ok()) return gate.status();
  if (absl::Status s = ValidateName(hb.node); !s.ok()) return s;
  if (hb.routes.size() > kMaxRouteObservations) {
    return absl::InvalidArgumentError(
        fmt::format("a heartbeat carries at most {} route observations", kMaxRouteObservations));
  }
  for (const RouteObservation& o : hb.routes) {
    if (absl::Status s = Validate(o); !s.ok()) return s;
  }
  WorkLock work(this);
  absl::StatusOr<Node> n = GetNode(hb.node);
  if (!n.ok()) return n.status();
  const std::int64_t now = Now();
  n->free_bytes = hb.free_bytes;
  n->load = hb.load;
  n->active_transfers = hb.active_transfers;
  n->last_heartbeat_ns = now;
  KvBatch batch;
  batch.Put(kNodes, n->name, EncodeNode(*n));
  // Routes into the node's site learn from what its copies saw. A route without a record
  // gets one (its settings all "default"); a source site removed meanwhile is skipped.
  for (const RouteObservation& o : hb.routes) {
    if (o.src_site == n->site) continue;
    Route route;
    if (absl::StatusOr<Route> r = GetRoute(o.src_site, n->site); r.ok()) {
      route = *r;
    } else if (!absl::IsNotFound(r.status())) {
      return r.status();
    } else if (!Get(kSites, o.src_site, "site").ok()) {
      continue;
    } else {
      route.src_site = o.src_site;
      route.dst_site = n->site;
    }
    route.observed = WithObservation(route.observed, o, now);
    batch.Put(kRoutes, RouteKey(route.src_site, route.dst_site), EncodeRoute(route));
  }
  return WriteLocked(&batch, "heartbeat");
}

absl::Status KvCatalog::PutRoute(const Route& route) {
  WriteGate gate(this);
  if (!gate.status().ok()) return gate.status();
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
  // Settings and measurements come from the caller; what the copies taught stays.
  Route stored = route;
  stored.observed = {};
  if (absl::StatusOr<Route> old = GetRoute(route.src_site, route.dst_site); old.ok()) {
    stored.observed = old->observed;
  } else if (!absl::IsNotFound(old.status())) {
    return old.status();
  }
  KvBatch batch;
  batch.Put(kRoutes, RouteKey(route.src_site, route.dst_site), EncodeRoute(stored));
  // The agents of the destination site drop what they cached of the route.
  AddEvent(batch, EventKind::kRoute, 0, route.dst_site, "set",
           fmt::format("{}->{}", route.src_site, route.dst_site));
  return WriteLocked(&batch, "put route");
}

absl::Status KvCatalog::RemoveRoute(std::string_view src, std::string_view dst) {
  WriteGate gate(this);
  if (!gate.status().ok()) return gate.status();
  WorkLock work(this);
  if (absl::StatusOr<Route> r = GetRoute(src, dst); !r.ok()) return r.status();
  KvBatch batch;
  batch.Delete(kRoutes, RouteKey(src, dst));
  AddEvent(batch, EventKind::kRoute, 0, std::string(dst), "removed", fmt::format("{}->{}", src, dst));
  return WriteLocked(&batch, "remove route");
}

absl::StatusOr<Route> KvCatalog::GetRoute(std::string_view src, std::string_view dst) {
  if (absl::Status s = ValidateName(src); !s.ok()) return s;
  if (absl::Status s = ValidateName(dst); !s.ok()) return s;
  absl::StatusOr<std::string> v = Get(kRoutes, RouteKey(src, dst), fmt::format("route {} -> {}", src, dst));
  if (!v.ok()) return v.status();
  return DecodeRoute(*v);
}

absl::StatusOr<std::vector<Route>> KvCatalog::ListRoutes() {
  return ScanAll<Route>([&](const auto& fn) { return Scan(kRoutes, "", "", fn); }, DecodeRoute,
                        [](const Route&) { return true; });
}

absl::StatusOr<PolicyDocument> KvCatalog::GetPolicies() {
  absl::StatusOr<std::string> v = Get(kMeta, kPoliciesKey, "policies");
  if (absl::IsNotFound(v.status())) return PolicyDocument{};
  if (!v.ok()) return v.status();
  return DecodePolicyDocument(*v);
}

absl::StatusOr<PolicyDocument> KvCatalog::PutPolicies(std::string_view text,
                                                         std::string_view source,
                                                         std::optional<std::uint64_t> expected) {
  WriteGate gate(this);
  if (!gate.status().ok()) return gate.status();
  if (text.size() > kMaxPolicyBytes) {
    return absl::InvalidArgumentError(
        fmt::format("policy document of {} bytes: at most {}", text.size(), kMaxPolicyBytes));
  }
  if (!IsValidUtf8(text) || !IsValidUtf8(source) || source.size() > kMaxPathBytes) {
    return absl::InvalidArgumentError("policy document and source must be UTF-8");
  }
  WorkLock work(this);
  absl::StatusOr<PolicyDocument> now = GetPolicies();
  if (!now.ok()) return now.status();
  if (expected.has_value() && *expected != now->version) {
    return absl::AbortedError(fmt::format("policies are at version {}, not {}: changed meanwhile",
                                          now->version, *expected));
  }
  PolicyDocument d;
  d.text = std::string(text);
  d.source = std::string(source);
  d.version = now->version + 1;
  d.updated_ns = Now();
  KvBatch batch;
  batch.Put(kMeta, kPoliciesKey, EncodePolicyDocument(d));
  if (absl::Status s = WriteLocked(&batch, "put policies"); !s.ok()) return s;
  return d;
}

}  // namespace gfrep::catalog::internal
