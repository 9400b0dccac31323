// KvCatalog (kv_catalog_impl.h): requests, transfer tasks (claims, leases, commits,
// expiry) and reading the event log.

#include <algorithm>
#include <limits>
#include <set>

#include "catalog/internal/kv_catalog_impl.h"

namespace gfrep::catalog::internal {

absl::StatusOr<Request> KvCatalog::CreateRequest(const RequestSpec& spec) {
  WriteGate gate(this);
  if (!gate.status().ok()) return gate.status();
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
  KvBatch batch;
  batch.Put(kRequests, U64Key(r.id), EncodeRequest(r));
  AddEvent(batch, EventKind::kRequest, r.id, "", ToString(r.state), "");
  if (absl::Status s = WriteLocked(&batch, "create request"); !s.ok()) return s;
  last_request_ = r.id;
  return r;
}

absl::StatusOr<Request> KvCatalog::GetRequest(std::uint64_t id) {
  absl::StatusOr<std::string> v = Get(kRequests, U64Key(id), fmt::format("request {}", id));
  if (!v.ok()) return v.status();
  return DecodeRequest(*v);
}

absl::StatusOr<std::vector<Request>> KvCatalog::ListRequests(bool any_state,
                                                                RequestState state,
                                                                std::size_t limit) {
  std::vector<Request> out;
  if (limit == 0) return out;
  absl::Status bad;
  absl::Status s = store_->Scan(
      kRequests, "", "",
      [&](std::string_view, std::string_view v) {
        absl::StatusOr<Request> r = DecodeRequest(v);
        if (!r.ok()) {
          bad = r.status();
          return false;
        }
        if (any_state || r->state == state) out.push_back(std::move(*r));
        return out.size() < limit;
      },
      nullptr, /*reverse=*/true);
  if (!bad.ok()) return bad;
  if (!s.ok()) return s;
  return out;
}


absl::StatusOr<std::size_t> KvCatalog::PurgeFinishedRequests(std::int64_t finished_before_ns, std::size_t max) {
  WriteGate gate(this);
  if (!gate.status().ok()) return gate.status();
  WorkLock work(this);
  KvBatch batch;
  std::size_t purged = 0;
  // Finished requests a page at a time (a scan's callback does not read tasks), oldest first,
  // until `max` are purged; one whose tasks are still open is stepped over.
  std::string start;
  bool more = true;
  while (more && purged < max) {
    std::vector<Request> finished;
    absl::Status bad;
    more = false;
    absl::Status scanned = Scan(kRequests, "", start, [&](std::string_view k, std::string_view v) {
      if (finished.size() >= 256) {
        start.assign(k);
        more = true;
        return false;
      }
      absl::StatusOr<Request> r = DecodeRequest(v);
      if (!r.ok()) {
        bad = r.status();
        return false;
      }
      if (IsFinished(r->state) && r->updated_ns < finished_before_ns)
        finished.push_back(std::move(*r));
      return true;
    });
    if (!bad.ok()) return bad;
    if (!scanned.ok()) return scanned;
  for (const Request& req : finished) {
    if (purged >= max) break;
    const Request* r = &req;
    std::vector<std::uint64_t> tasks;
    absl::Status s = Scan(kRequestTasks, U64Key(r->id), "", [&](std::string_view key, std::string_view) {
      if (absl::StatusOr<std::uint64_t> id = GetBigEndian64(key, 8); id.ok()) tasks.push_back(*id);
      return true;
    });
    if (!s.ok()) return s;
    bool keep = false;
    for (std::uint64_t id : tasks) {
      absl::StatusOr<Task> t = GetTask(id);
      if (absl::IsNotFound(t.status())) continue;
      if (!t.ok()) return t.status();
      keep = keep || t->state == TaskState::kQueued || t->state == TaskState::kLeased;
    }
    if (keep) continue;
    for (std::uint64_t id : tasks) {
      batch.Delete(kTasks, U64Key(id));
      batch.Delete(kRequestTasks, RequestTaskKey(r->id, id));
    }
    batch.Delete(kRequests, U64Key(r->id));
    batch.DeleteRange(kRequestFiles, U64Key(r->id), U64Key(r->id + 1));
    batch.DeleteRange(kRequestWanted, U64Key(r->id), U64Key(r->id + 1));
    AddEvent(batch, EventKind::kRequest, r->id, "", "purged",
             fmt::format("finished {} ({}), {} tasks", ToString(r->state), DescribeOwner(r->spec),
                         tasks.size()));
    purged += 1;
  }
  }
  if (purged == 0) return purged;
  batch.Put(kMeta, kRequestHwmKey, U64Key(last_request_));
  batch.Put(kMeta, kTaskHwmKey, U64Key(last_task_));
  if (absl::Status s = WriteLocked(&batch, "purge requests"); !s.ok()) return s;
  return purged;
}

absl::StatusOr<Request> KvCatalog::UpdateRequest(const RequestUpdate& u) {
  WriteGate gate(this);
  if (!gate.status().ok()) return gate.status();
  if (absl::Status s = ValidateLabel("error", u.error); !s.ok()) return s;
  WorkLock work(this);
  absl::StatusOr<Request> r = GetRequest(u.id);
  if (!r.ok()) return r.status();
  bool state_changed = false;
  if (u.set_state) {
    state_changed = r->state != u.state;
    // done/failed/cancelled are final (the planner only plans queued/running requests and
    // never reopens one): a planner that read the request before a cancel must not revive it.
    if (state_changed && IsFinished(r->state)) {
      return absl::FailedPreconditionError(fmt::format(
          "request {} is {}: cannot set it to {}", r->id, ToString(r->state), ToString(u.state)));
    }
    r->state = u.state;
    r->error = u.error;
  }
  r->updated_ns = Now();
  KvBatch batch;
  batch.Put(kRequests, U64Key(r->id), EncodeRequest(*r));
  if (state_changed) {
    AddEvent(batch, EventKind::kRequest, r->id, "", ToString(r->state),
             fmt::format("files {}/{} failed {}", r->files_done, r->files_total, r->files_failed));
  }
  if (absl::Status s = WriteLocked(&batch, "update request"); !s.ok()) return s;
  return r;
}

void KvCatalog::PutTaskLocked(KvBatch& batch, const Task& t) {
  batch.Put(kTasks, U64Key(t.id), EncodeTask(t));
  claim_queue_.Stage(t);
  bool open = t.state == TaskState::kQueued || t.state == TaskState::kLeased;
  if (open) {
    batch.Put(kNodeTasks, NodeTaskKey(t.spec.dst_node, t.id), "");
  } else {
    batch.Delete(kNodeTasks, NodeTaskKey(t.spec.dst_node, t.id));
  }
  AddEvent(batch, EventKind::kTask, t.id, t.spec.dst_node, ToString(t.state),
           t.state == TaskState::kFailed || t.state == TaskState::kQueued ? t.last_error
                                                                          : t.spec.path);
}

absl::StatusOr<std::vector<Task>> KvCatalog::CreateTasks(const std::vector<TaskSpec>& specs) {
  WriteGate gate(this);
  if (!gate.status().ok()) return gate.status();
  if (specs.size() > kMaxBatchPaths) {
    return absl::InvalidArgumentError(fmt::format("more than {} tasks", kMaxBatchPaths));
  }
  std::vector<Task> out;
  out.reserve(specs.size());
  WorkLock work(this);
  std::set<std::string> nodes_ok;
  std::set<std::uint64_t> requests_ok;
  KvBatch batch;
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
      batch.Put(kRequestTasks, RequestTaskKey(spec.request_id, t.id), "");
    }
    if (absl::Status s = TaskOpenedLocked(batch, t); !s.ok()) return s;
    out.push_back(std::move(t));
  }
  if (absl::Status s = WriteLocked(&batch, "create tasks"); !s.ok()) return s;
  last_task_ = id;
  return out;
}

absl::StatusOr<Task> KvCatalog::GetTask(std::uint64_t id) {
  absl::StatusOr<std::string> v = Get(kTasks, U64Key(id), fmt::format("task {}", id));
  if (!v.ok()) return v.status();
  return DecodeTask(*v);
}

absl::StatusOr<std::vector<Task>> KvCatalog::ListTasks(const TaskFilter& f) {
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

absl::StatusOr<Task> KvCatalog::ClaimTask(std::string_view node, std::string_view owner,
                                             std::chrono::milliseconds lease) {
  WriteGate gate(this);
  if (!gate.status().ok()) return gate.status();
  std::vector<std::string> owners;
  owners.emplace_back(owner);
  absl::StatusOr<std::vector<Task>> claimed = ClaimNow(node, owners, lease);
  if (!claimed.ok()) return claimed.status();
  if (claimed->empty()) {
    return absl::NotFoundError(fmt::format("no claimable task for node {}", node));
  }
  return std::move(claimed->front());
}

absl::StatusOr<std::vector<std::uint64_t>> KvCatalog::OpenTaskIdsLocked(std::string_view node) {
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

absl::StatusOr<std::vector<Task>> KvCatalog::ClaimTasks(std::string_view node,
                                                           const std::vector<std::string>& owners,
                                                           std::chrono::milliseconds lease,
                                                           std::chrono::milliseconds wait) {
  // The log's end before the claim: a task queued after the claim looked is an event after it.
  std::uint64_t seen = 0;
  if (wait.count() > 0) {
    absl::StatusOr<std::uint64_t> last = LastEventSeq();
    if (!last.ok()) return last.status();
    seen = *last;
  }
  const auto deadline = std::chrono::steady_clock::now() + wait;
  for (;;) {
    absl::StatusOr<std::vector<Task>> claimed = ClaimNow(node, owners, lease);
    if (!claimed.ok() || !claimed->empty() || owners.empty()) return claimed;
    bool queued = false;
    while (!queued) {
      const auto now = std::chrono::steady_clock::now();
      if (now >= deadline) return claimed;
      absl::StatusOr<std::vector<Event>> events = ReadEvents(
          seen, 1000,
          std::chrono::ceil<std::chrono::milliseconds>(deadline - now));
      if (!events.ok() || events->empty()) return claimed;  // nothing claimable, as asked
      seen = events->back().seq;
      for (const Event& e : *events) queued = queued || QueuesTaskFor(e, node);
    }
  }
}

absl::StatusOr<std::vector<Task>> KvCatalog::ClaimNow(std::string_view node,
                                                        const std::vector<std::string>& owners,
                                                        std::chrono::milliseconds lease) {
  WriteGate gate(this);
  if (!gate.status().ok()) return gate.status();
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
  // Any return before the batch is written leaves the queue's entries of this claim
  // unreliable: forget them (the next claim reads the node's open tasks again).
  ClaimQueue::ResetOnError reset(claim_queue_);
  if (!claim_queue_.Loaded(node)) {
    absl::StatusOr<std::vector<std::uint64_t>> ids = OpenTaskIdsLocked(node);
    if (!ids.ok()) return ids.status();
    std::vector<Task> open;
    for (std::uint64_t id : *ids) {
      absl::StatusOr<Task> t = GetTask(id);
      if (!t.ok()) return t.status();
      open.push_back(std::move(*t));
    }
    claim_queue_.Load(node, open);
  }
  KvBatch batch;
  // Tasks changed in this batch (read from it, not from the database, which has the old).
  std::map<std::uint64_t, Task> changed;
  for (std::uint64_t id : claim_queue_.TakeExpiredLeases(node, now)) {
    absl::StatusOr<Task> t = GetTask(id);
    if (absl::IsNotFound(t.status())) continue;  // purged
    if (!t.ok()) return t.status();
    // Only a lease still held that ran out (a renewed one has a later entry).
    if (t->state != TaskState::kLeased || t->lease_expiry_ns > now) continue;
    if (absl::Status es = ExpireLeaseLocked(batch, *t, now); !es.ok()) return es;
    if (t->state == TaskState::kQueued) claim_queue_.AddReady(node, t->spec.priority, t->id);
    changed[id] = std::move(*t);
  }
  claim_queue_.Promote(node, now);
  std::set<ClaimQueue::ReadyKey>& ready = claim_queue_.Ready(node);
  // Reads do not see this batch: a second task of a file already claimed here waits for the
  // next claim, which sees the first one's replica record.
  std::set<InodeId> inodes;
  std::set<std::uint64_t> visited;  // a task may have two entries (re-queued): act once
  for (auto entry = ready.begin(); entry != ready.end() && claimed.size() < owners.size();) {
    const std::uint64_t id = entry->second;
    const std::int64_t priority = -entry->first;
    if (visited.count(id) > 0) {  // acted on in this pass already: this entry is surplus
      entry = ready.erase(entry);
      continue;
    }
    Task t;
    if (auto c = changed.find(id); c != changed.end()) {
      t = c->second;
    } else {
      absl::StatusOr<Task> read = GetTask(id);
      if (absl::IsNotFound(read.status())) {
        entry = ready.erase(entry);
        continue;
      }
      if (!read.ok()) return read.status();
      t = std::move(*read);
    }
    // A stale entry: the task moved on (claimed, finished, re-queued with another priority
    // or a later attempt, each of which has its own entry).
    if (t.state != TaskState::kQueued || t.next_attempt_ns > now || t.spec.priority != priority ||
        t.spec.dst_node != node) {
      entry = ready.erase(entry);
      continue;
    }
    visited.insert(id);
    if (inodes.count(t.inode) > 0) {
      ++entry;  // stays queued for the next claim
      continue;
    }
    entry = ready.erase(entry);
    Attributes attrs;
    absl::StatusOr<std::string> obsolete = ObsoleteReason(t, &attrs);
    if (!obsolete.ok()) return obsolete.status();
    if (!obsolete->empty()) {
      // Claiming it would put a pending record of an old generation over a newer one.
      t.state = TaskState::kCancelled;
      t.last_error = std::move(*obsolete);
      t.updated_ns = now;
      PutTaskLocked(batch, t);
      if (absl::Status s = TaskSettledLocked(batch, t); !s.ok()) return s;
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
  reset.Done();
  return claimed;
}

absl::Status KvCatalog::ExpireLeaseLocked(KvBatch& batch, Task& t,
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
  return t.state == TaskState::kFailed ? TaskSettledLocked(batch, t) : TaskRetriedLocked(batch, t);
}

absl::StatusOr<std::string> KvCatalog::ObsoleteReason(const Task& t, Attributes* attrs) {
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

absl::StatusOr<std::size_t> KvCatalog::ExpireLeases() {
  WriteGate gate(this);
  if (!gate.status().ok()) return gate.status();
  WorkLock work(this);
  std::int64_t now = Now();
  ClaimQueue::ResetOnError reset(claim_queue_);
  if (!claim_queue_.AllLoaded()) {
    // Once (and after a failed write): node_tasks holds the open tasks of every node.
    std::vector<std::uint64_t> ids;
    absl::Status s = Scan(kNodeTasks, "", "", [&](std::string_view key, std::string_view) {
      if (key.size() < 8) return true;
      if (absl::StatusOr<std::uint64_t> id = GetBigEndian64(key, key.size() - 8); id.ok()) {
        ids.push_back(*id);
      }
      return true;
    });
    if (!s.ok()) return s;
    std::vector<Task> open;
    for (std::uint64_t id : ids) {
      absl::StatusOr<Task> t = GetTask(id);
      if (!t.ok()) return t.status();
      open.push_back(std::move(*t));
    }
    claim_queue_.LoadAll(open);
  }
  KvBatch batch;
  std::size_t expired = 0;
  for (const std::string& node : claim_queue_.Nodes()) {
    for (std::uint64_t id : claim_queue_.TakeExpiredLeases(node, now)) {
      absl::StatusOr<Task> t = GetTask(id);
      if (absl::IsNotFound(t.status())) continue;  // purged
      if (!t.ok()) return t.status();
      if (t->state != TaskState::kLeased || t->lease_expiry_ns > now) continue;  // renewed or done
      if (absl::Status es = ExpireLeaseLocked(batch, *t, now); !es.ok()) return es;
      ++expired;
    }
  }
  if (expired > 0) {
    if (absl::Status ws = WriteLocked(&batch, "expire leases"); !ws.ok()) return ws;
  }
  reset.Done();
  return expired;
}

absl::StatusOr<Task> KvCatalog::AbandonTask(std::uint64_t id, std::string_view reason) {
  WriteGate gate(this);
  if (!gate.status().ok()) return gate.status();
  WorkLock work(this);
  absl::StatusOr<Task> t = GetTask(id);
  if (!t.ok()) return t.status();
  if (t->state != TaskState::kQueued && t->state != TaskState::kLeased) return t;
  KvBatch batch;
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
  if (absl::Status s = TaskSettledLocked(batch, *t); !s.ok()) return s;
  if (absl::Status s = WriteLocked(&batch, "abandon task"); !s.ok()) return s;
  return t;
}

absl::StatusOr<Task> KvCatalog::LeasedTask(std::uint64_t id, std::string_view owner) {
  absl::StatusOr<Task> t = GetTask(id);
  if (!t.ok()) return t.status();
  if (t->state != TaskState::kLeased || t->lease_owner != owner) {
    return absl::FailedPreconditionError(fmt::format(
        "task {} is {} (owner '{}'), not leased by '{}'", id, ToString(t->state),
        t->lease_owner, owner));
  }
  return t;
}

absl::StatusOr<Task> KvCatalog::RenewLease(std::uint64_t id, std::string_view owner,
                                              std::chrono::milliseconds lease) {
  WriteGate gate(this);
  if (!gate.status().ok()) return gate.status();
  if (absl::Status s = ValidateDelay("lease", lease, false); !s.ok()) return s;
  WorkLock work(this);
  absl::StatusOr<Task> t = LeasedTask(id, owner);
  if (!t.ok()) return t.status();
  std::int64_t now = Now();
  t->lease_expiry_ns = now + std::chrono::duration_cast<std::chrono::nanoseconds>(lease).count();
  t->updated_ns = now;
  KvBatch batch;
  // No event: renewals are frequent and change nothing a watcher acts on.
  batch.Put(kTasks, U64Key(t->id), EncodeTask(*t));
  claim_queue_.Stage(*t);  // the new expiry
  if (absl::Status s = WriteLocked(&batch, "renew lease"); !s.ok()) return s;
  return t;
}

absl::StatusOr<std::vector<absl::Status>> KvCatalog::RenewLeases(
    const std::vector<LeaseRenewal>& items, std::chrono::milliseconds lease) {
  WriteGate gate(this);
  if (!gate.status().ok()) return gate.status();
  if (absl::Status s = ValidateDelay("lease", lease, false); !s.ok()) return s;
  if (items.size() > kMaxBatchPaths) {
    return absl::InvalidArgumentError(fmt::format("more than {} leases", kMaxBatchPaths));
  }
  WorkLock work(this);
  const std::int64_t now = Now();
  const std::int64_t expiry =
      now + std::chrono::duration_cast<std::chrono::nanoseconds>(lease).count();
  std::vector<absl::Status> out;
  out.reserve(items.size());
  KvBatch batch;
  for (const LeaseRenewal& item : items) {
    absl::StatusOr<Task> t = LeasedTask(item.id, item.owner);
    out.push_back(t.status());
    if (!t.ok()) continue;
    t->lease_expiry_ns = expiry;
    t->updated_ns = now;
    batch.Put(kTasks, U64Key(t->id), EncodeTask(*t));  // no event, as RenewLease
    claim_queue_.Stage(*t);
  }
  if (batch.Count() == 0) return out;
  if (absl::Status s = WriteLocked(&batch, "renew leases"); !s.ok()) return s;
  return out;
}

absl::StatusOr<Task> KvCatalog::CompleteTask(std::uint64_t id, std::string_view owner) {
  WriteGate gate(this);
  if (!gate.status().ok()) return gate.status();
  WorkLock work(this);
  absl::StatusOr<Task> t = LeasedTask(id, owner);
  if (!t.ok()) return t.status();
  KvBatch batch;
  absl::Status outcome;
  if (absl::Status s = CompleteLeasedLocked(batch, *t, 0, outcome); !s.ok()) return s;
  if (absl::Status s = WriteLocked(&batch, "complete task"); !s.ok()) return s;
  if (!outcome.ok()) return outcome;
  return t;
}

absl::StatusOr<std::vector<absl::StatusOr<Task>>> KvCatalog::CompleteTasks(
    const std::vector<TaskCompletion>& items) {
  WriteGate gate(this);
  if (!gate.status().ok()) return gate.status();
  if (items.size() > kMaxBatchPaths) {
    return absl::InvalidArgumentError(fmt::format("more than {} tasks", kMaxBatchPaths));
  }
  std::vector<absl::StatusOr<Task>> out(items.size(), absl::UnknownError("not completed"));
  std::vector<absl::Status> outcome(items.size());
  WorkLock work(this);
  KvBatch batch;
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
    if (absl::Status s = CompleteLeasedLocked(batch, *t, items[i].mtime_ns, outcome[i]);
        !s.ok()) {
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

absl::Status KvCatalog::CompleteLeasedLocked(KvBatch& batch, Task& t,
                                                std::int64_t mtime_ns, absl::Status& outcome) {
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
    r.mtime_ns = mtime_ns;
    r.note.clear();
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
  return TaskSettledLocked(batch, t, &a);  // the file as read above: one read per completion
}

absl::StatusOr<Task> KvCatalog::YieldTask(std::uint64_t id, std::string_view owner,
                                          std::string_view reason) {
  WriteGate gate(this);
  if (!gate.status().ok()) return gate.status();
  WorkLock work(this);
  absl::StatusOr<Task> t = LeasedTask(id, owner);
  if (!t.ok()) return t.status();
  // Given back only if the file can come from elsewhere: a complete replica of its generation
  // on a node that is neither this copy's source, nor its destination, nor named slow already.
  absl::StatusOr<std::vector<Replica>> replicas = GetReplicas(t->inode);
  if (!replicas.ok()) return replicas.status();
  std::vector<std::string> slow;
  if (t->spec.request_id != 0) {
    absl::StatusOr<RequestFile*> f = StagedFileLocked(t->spec.request_id, t->inode);
    if (!f.ok()) return f.status();
    if (*f != nullptr) slow = (*f)->slow_sources;
  }
  const bool elsewhere = std::any_of(replicas->begin(), replicas->end(), [&](const Replica& r) {
    return r.state == ReplicaState::kComplete && r.generation == t->generation &&
           r.node != t->spec.src_node && r.node != t->spec.dst_node &&
           std::find(slow.begin(), slow.end(), r.node) == slow.end();
  });
  if (!elsewhere) {
    return absl::FailedPreconditionError(fmt::format(
        "task {}: no other replica of {} to copy from (the copy from {} goes on)", id,
        t->spec.path, t->spec.src_node));
  }
  t->last_error = ErrorText(reason);
  t->lease_owner.clear();
  t->updated_ns = Now();
  t->state = TaskState::kCancelled;
  KvBatch batch;
  if (absl::Status s = DropPendingReplicaLocked(batch, t->inode, t->spec.dst_node, t->generation);
      !s.ok()) {
    return s;
  }
  PutTaskLocked(batch, *t);
  if (absl::Status s = TaskYieldedLocked(batch, *t); !s.ok()) return s;
  if (absl::Status s = WriteLocked(&batch, "yield task"); !s.ok()) return s;
  return t;
}

absl::StatusOr<Task> KvCatalog::FailTask(std::uint64_t id, std::string_view owner,
                                            std::string_view error, bool retryable,
                                            std::chrono::milliseconds retry_after) {
  WriteGate gate(this);
  if (!gate.status().ok()) return gate.status();
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
  KvBatch batch;
  if (absl::Status s = DropPendingReplicaLocked(batch, t->inode, t->spec.dst_node, t->generation);
      !s.ok()) {
    return s;
  }
  PutTaskLocked(batch, *t);
  if (absl::Status s = t->state == TaskState::kFailed ? TaskSettledLocked(batch, *t)
                                                      : TaskRetriedLocked(batch, *t);
      !s.ok()) {
    return s;
  }
  if (absl::Status s = WriteLocked(&batch, "fail task"); !s.ok()) return s;
  return t;
}

absl::Status KvCatalog::CancelRequest(std::uint64_t id) {
  WriteGate gate(this);
  if (!gate.status().ok()) return gate.status();
  TaskFilter f;
  f.request_id = id;
  f.limit = std::numeric_limits<std::size_t>::max();
  WorkLock work(this);
  absl::StatusOr<Request> r = GetRequest(id);
  if (!r.ok()) return r.status();
  absl::StatusOr<std::vector<Task>> tasks = ListTasks(f);
  if (!tasks.ok()) return tasks.status();
  std::int64_t now = Now();
  KvBatch batch;
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
  batch.Put(kRequests, U64Key(id), EncodeRequest(*r));
  AddEvent(batch, EventKind::kRequest, id, "", ToString(r->state), "");
  return WriteLocked(&batch, "cancel request");
}

absl::StatusOr<std::vector<Event>> KvCatalog::ReadEvents(std::uint64_t after_seq,
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

absl::StatusOr<std::uint64_t> KvCatalog::LastEventSeq() {
  if (store_->shared()) {
    // Other front ends append too: the database's, not this process's, newest.
    WorkLock l(this);
    if (absl::Status s = ReloadMarksLocked(); !s.ok()) return s;
    return last_seq_;
  }
  absl::MutexLock l(&work_mu_);
  return last_seq_;
}

}  // namespace gfrep::catalog::internal
