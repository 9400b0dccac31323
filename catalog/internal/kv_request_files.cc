// KvCatalog (kv_catalog_impl.h): a request's files (RequestFile), moved in the same write as
// the task changes that concern them, with the request's counters and its end.

#include <algorithm>
#include <set>
#include <utility>

#include "catalog/internal/kv_catalog_impl.h"

namespace gfrep::catalog::internal {
namespace {

// The request's error when it ends failed: how many failed and up to five of them.
std::string Summarize(const std::vector<const RequestFile*>& failed, std::uint64_t failed_count,
                      std::uint64_t total) {
  std::string s = fmt::format("{} of {} files failed", failed_count, total);
  std::size_t shown = 0;
  for (const RequestFile* f : failed) {
    if (shown == 5) {
      s += "; ...";
      break;
    }
    s += fmt::format("{} {}: {}", shown == 0 ? ":" : ";", f->path, f->reason);
    ++shown;
  }
  if (s.size() > kMaxLabelBytes) s.resize(kMaxLabelBytes);
  return s;
}

}  // namespace

absl::StatusOr<Request*> KvCatalog::StagedRequestLocked(std::uint64_t id) {
  if (auto it = staged_.requests.find(id); it != staged_.requests.end()) return &it->second;
  absl::StatusOr<Request> r = GetRequest(id);
  if (!r.ok()) return r.status();
  return &staged_.requests.emplace(id, std::move(*r)).first->second;
}

absl::StatusOr<RequestFile*> KvCatalog::StagedFileLocked(std::uint64_t request,
                                                         std::uint64_t file) {
  const auto key = std::make_pair(request, file);
  auto it = staged_.files.find(key);
  if (it == staged_.files.end()) {
    absl::StatusOr<std::string> v = Get(kRequestFiles, RequestFileKey(request, file),
                                        fmt::format("file {} of request {}", file, request));
    std::optional<RequestFile> f;
    if (v.ok()) {
      absl::StatusOr<RequestFile> decoded = DecodeRequestFile(*v);
      if (!decoded.ok()) return decoded.status();
      f = std::move(*decoded);
    } else if (!absl::IsNotFound(v.status())) {
      return v.status();
    }
    it = staged_.files.emplace(key, std::move(f)).first;
  }
  return it->second.has_value() ? &*it->second : nullptr;
}

void KvCatalog::PutRequestLocked(KvBatch& batch, const Request& r) {
  batch.Put(kRequests, U64Key(r.id), EncodeRequest(r));
}

void KvCatalog::PutRequestFileLocked(KvBatch& batch, const RequestFile& f) {
  const std::string key = RequestFileKey(f.request_id, f.id);
  batch.Put(kRequestFiles, key, EncodeRequestFile(f));
  if (f.state == RequestFileState::kWanted) {
    batch.Put(kRequestWanted, key, "");
  } else {
    batch.Delete(kRequestWanted, key);
  }
}

absl::Status KvCatalog::SettleFileLocked(KvBatch& batch, Request& r, RequestFile& f,
                                         RequestFileState to, std::string reason) {
  const std::int64_t now = Now();
  f.state = to;
  f.reason = ErrorText(reason);
  f.updated_ns = now;
  PutRequestFileLocked(batch, f);
  if (to == RequestFileState::kDone) {
    r.files_done += 1;
    r.bytes_done += f.size;
  } else {
    r.files_failed += 1;
  }
  r.updated_ns = now;
  if (!r.expanded || IsFinished(r.state) || r.files_done + r.files_failed < r.files_total) {
    PutRequestLocked(batch, r);
    return absl::OkStatus();
  }
  // The last file: the request ends here, in the same write.
  r.state = r.files_failed == 0 ? RequestState::kDone : RequestState::kFailed;
  r.error.clear();
  if (r.state == RequestState::kFailed) {
    // Up to five failed files: this batch's first (the store does not have them yet).
    std::vector<const RequestFile*> failed;
    std::set<std::uint64_t> listed;
    for (const auto& [key, staged] : staged_.files) {
      if (key.first == r.id && staged.has_value() && staged->state == RequestFileState::kFailed) {
        failed.push_back(&*staged);
        listed.insert(key.second);
      }
    }
    std::vector<RequestFile> stored;
    absl::Status bad;
    absl::Status s =
        Scan(kRequestFiles, U64Key(r.id), "", [&](std::string_view, std::string_view v) {
          absl::StatusOr<RequestFile> rf = DecodeRequestFile(v);
          if (!rf.ok()) {
            bad = rf.status();
            return false;
          }
          if (rf->state == RequestFileState::kFailed && !listed.count(rf->id))
            stored.push_back(std::move(*rf));
          return failed.size() + stored.size() < 6;
        });
    if (!bad.ok()) return bad;
    if (!s.ok()) return s;
    for (const RequestFile& rf : stored) failed.push_back(&rf);
    r.error = Summarize(failed, r.files_failed, r.files_total);
  }
  PutRequestLocked(batch, r);
  AddEvent(batch, EventKind::kRequest, r.id, "", ToString(r.state),
           fmt::format("files {}/{} failed {}", r.files_done, r.files_total, r.files_failed));
  return absl::OkStatus();
}

absl::StatusOr<int> KvCatalog::CopiesForLocked(const Request& r, const Attributes& file,
                                               std::string_view also_node) {
  std::set<std::string> holders;
  absl::Status bad;
  absl::Status s =
      Scan(kReplicas, U64Key(file.inode), "", [&](std::string_view, std::string_view v) {
        absl::StatusOr<Replica> rep = DecodeReplica(v);
        if (!rep.ok()) {
          bad = rep.status();
          return false;
        }
        if (rep->state == ReplicaState::kComplete && rep->generation == file.generation) {
          holders.insert(rep->node);
        }
        return true;
      });
  if (!bad.ok()) return bad;
  if (!s.ok()) return s;
  if (!also_node.empty()) holders.insert(std::string(also_node));
  int n = 0;
  for (const std::string& node : holders) {
    absl::StatusOr<Node> info = GetNode(node);
    if (absl::IsNotFound(info.status())) {
      n += r.spec.dst_sites.empty() ? 1 : 0;  // as before node records were looked up here
      continue;
    }
    if (!info.ok()) return info.status();
    // A draining node's copy is on its way out (SetNodeMode): it does not count.
    if (info->mode == NodeMode::kDraining && node != also_node) continue;
    if (r.spec.dst_sites.empty() ||
        std::find(r.spec.dst_sites.begin(), r.spec.dst_sites.end(), info->site) !=
            r.spec.dst_sites.end()) {
      ++n;
    }
  }
  return n;
}

absl::Status KvCatalog::TaskOpenedLocked(KvBatch& batch, const Task& t) {
  if (t.spec.request_id == 0) return absl::OkStatus();
  absl::StatusOr<Request*> r = StagedRequestLocked(t.spec.request_id);
  if (!r.ok()) return r.status();
  if ((*r)->state == RequestState::kQueued) {
    (*r)->state = RequestState::kRunning;
    (*r)->updated_ns = Now();
    PutRequestLocked(batch, **r);
    AddEvent(batch, EventKind::kRequest, (*r)->id, "", ToString((*r)->state), "");
  }
  absl::StatusOr<RequestFile*> f = StagedFileLocked(t.spec.request_id, t.inode);
  if (!f.ok()) return f.status();
  if (*f == nullptr || IsSettled((*f)->state)) return absl::OkStatus();
  (*f)->state = RequestFileState::kCopying;
  (*f)->open_tasks += 1;
  (*f)->updated_ns = Now();
  PutRequestFileLocked(batch, **f);
  return absl::OkStatus();
}

absl::Status KvCatalog::TaskRetriedLocked(KvBatch& batch, const Task& t) {
  if (t.spec.request_id == 0) return absl::OkStatus();
  absl::StatusOr<RequestFile*> f = StagedFileLocked(t.spec.request_id, t.inode);
  if (!f.ok()) return f.status();
  if (*f == nullptr || IsSettled((*f)->state)) return absl::OkStatus();
  (*f)->attempts += 1;
  (*f)->reason = t.last_error;
  (*f)->updated_ns = Now();
  PutRequestFileLocked(batch, **f);
  return absl::OkStatus();
}

absl::Status KvCatalog::TaskSettledLocked(KvBatch& batch, const Task& t,
                                          const absl::StatusOr<Attributes>* file) {
  if (t.spec.request_id == 0) return absl::OkStatus();
  absl::StatusOr<Request*> r = StagedRequestLocked(t.spec.request_id);
  if (absl::IsNotFound(r.status())) return absl::OkStatus();  // purged
  if (!r.ok()) return r.status();
  if (IsFinished((*r)->state)) return absl::OkStatus();  // cancelled: its files stay as they are
  absl::StatusOr<RequestFile*> found = StagedFileLocked(t.spec.request_id, t.inode);
  if (!found.ok()) return found.status();
  if (*found == nullptr || IsSettled((*found)->state)) return absl::OkStatus();
  RequestFile& f = **found;
  if (f.open_tasks > 0) f.open_tasks -= 1;
  f.updated_ns = Now();
  if (t.state != TaskState::kDone) {
    f.attempts += t.state == TaskState::kFailed ? 1 : 0;
    f.reason = t.last_error;
  }
  const absl::StatusOr<Attributes> a = file != nullptr ? *file : StatInode(t.inode);
  if (absl::IsNotFound(a.status())) {
    return SettleFileLocked(batch, **r, f, RequestFileState::kFailed,
                            "no such file or directory (removed during the request)");
  }
  if (!a.ok()) return a.status();
  if (t.state == TaskState::kFailed && t.generation == a->generation) {
    // The copy gave up. It is the file's failure only if its source still holds the file:
    // a source found bad or dropped meanwhile is not, and the file is planned again from a
    // good one. A task of an older generation is not either (the file changed).
    absl::StatusOr<std::optional<Replica>> src = FindReplica(t.inode, t.spec.src_node);
    if (!src.ok()) return src.status();
    if (src->has_value() && (*src)->state == ReplicaState::kComplete &&
        (*src)->generation == t.generation) {
      f.failed_copies += 1;
      f.reason = fmt::format("copy {} -> {} failed after {} attempts: {}", t.spec.src_node,
                             t.spec.dst_node, t.attempts, t.last_error);
    }
  }
  if (f.open_tasks > 0) {
    PutRequestFileLocked(batch, f);  // its other copies decide
    return absl::OkStatus();
  }
  const bool copied_here = t.state == TaskState::kDone && t.generation == a->generation;
  absl::StatusOr<int> copies = CopiesForLocked(**r, *a, copied_here ? t.spec.dst_node : "");
  if (!copies.ok()) return copies.status();
  if (*copies >= static_cast<int>(std::max<std::uint32_t>((*r)->spec.copies, 1))) {
    return SettleFileLocked(batch, **r, f, RequestFileState::kDone, "");
  }
  if (f.failed_copies > 0) {
    std::string reason = f.reason;
    return SettleFileLocked(batch, **r, f, RequestFileState::kFailed, std::move(reason));
  }
  f.state = RequestFileState::kWanted;  // planned again
  PutRequestFileLocked(batch, f);
  return absl::OkStatus();
}

absl::Status KvCatalog::TaskYieldedLocked(KvBatch& batch, const Task& t) {
  absl::StatusOr<Request*> r = t.spec.request_id == 0
                                   ? absl::StatusOr<Request*>(absl::NotFoundError("no request"))
                                   : StagedRequestLocked(t.spec.request_id);
  if (!r.ok() && !absl::IsNotFound(r.status())) return r.status();
  if (r.ok() && !IsFinished((*r)->state)) {
    absl::StatusOr<RequestFile*> f = StagedFileLocked(t.spec.request_id, t.inode);
    if (!f.ok()) return f.status();
    if (*f != nullptr && !IsSettled((*f)->state)) {
      std::vector<std::string>& slow = (*f)->slow_sources;
      std::erase(slow, t.spec.src_node);
      slow.push_back(t.spec.src_node);  // the newest last
      constexpr std::size_t kMaxSlowSources = 8;
      if (slow.size() > kMaxSlowSources) slow.erase(slow.begin());
    }
  }
  return TaskSettledLocked(batch, t);
}

absl::StatusOr<Request> KvCatalog::AddRequestFiles(std::uint64_t request_id,
                                                   const std::vector<RequestFileInput>& files,
                                                   bool last) {
  WriteGate gate(this);
  if (!gate.status().ok()) return gate.status();
  if (files.size() > kMaxBatchPaths) {
    return absl::InvalidArgumentError(fmt::format("more than {} files", kMaxBatchPaths));
  }
  // Errors are stored as ErrorText makes them (at most kMaxLabelBytes, UTF-8): a long one
  // must not stop the expansion, which the planner would retry at every step.
  WorkLock work(this);
  absl::StatusOr<Request*> found = StagedRequestLocked(request_id);
  if (!found.ok()) return found.status();
  Request& r = **found;
  if (IsFinished(r.state) || r.expanded) {
    return absl::FailedPreconditionError(fmt::format("request {} is {}: no more files", r.id,
                                                     r.expanded ? "expanded" : ToString(r.state)));
  }
  KvBatch batch;
  const std::int64_t now = Now();
  std::uint64_t failed_now = 0;
  for (const RequestFileInput& in : files) {
    RequestFile f;
    f.request_id = r.id;
    f.path = in.path;
    f.updated_ns = now;
    std::string error = in.error;
    if (error.empty()) {
      absl::StatusOr<Attributes> a = ResolvePath(in.path);
      if (absl::IsNotFound(a.status())) {
        error = "no such file or directory";
      } else if (!a.ok()) {
        return a.status();
      } else if (a->type != FileType::kFile) {
        error = "is a directory";
      } else {
        f.id = a->inode;
        f.size = a->size;
      }
    }
    if (!error.empty()) {
      f.id = kUnresolvedRequestFile | (r.files_total + 1);
      f.state = RequestFileState::kFailed;
      f.reason = ErrorText(error);
      ++failed_now;
    } else {
      absl::StatusOr<RequestFile*> existing = StagedFileLocked(r.id, f.id);
      if (!existing.ok()) return existing.status();
      if (*existing != nullptr) continue;  // listed already (the same file twice)
    }
    staged_.files[{r.id, f.id}] = f;
    PutRequestFileLocked(batch, f);
    r.files_total += 1;
    r.bytes_total += f.size;
  }
  r.files_failed += failed_now;
  r.expanded = last;
  r.updated_ns = now;
  if (last && r.files_done + r.files_failed == r.files_total) {
    // Nothing to copy: ends now. SettleFileLocked ends requests whose last file settles
    // later; here every file settled at expansion.
    r.state = r.files_failed == 0 ? RequestState::kDone : RequestState::kFailed;
    if (r.state == RequestState::kFailed) {
      std::vector<const RequestFile*> failed;
      for (const auto& [key, staged] : staged_.files) {
        if (key.first == r.id && staged.has_value() && staged->state == RequestFileState::kFailed) {
          failed.push_back(&*staged);
        }
      }
      r.error = Summarize(failed, r.files_failed, r.files_total);
    }
    AddEvent(batch, EventKind::kRequest, r.id, "", ToString(r.state),
             fmt::format("files {}/{} failed {}", r.files_done, r.files_total, r.files_failed));
  } else if (last) {
    AddEvent(batch, EventKind::kRequest, r.id, "", ToString(r.state),
             fmt::format("expanded: {} files", r.files_total));
  }
  PutRequestLocked(batch, r);
  Request out = r;
  if (absl::Status s = WriteLocked(&batch, "add request files"); !s.ok()) return s;
  return out;
}

absl::StatusOr<RequestFile> KvCatalog::SettleRequestFile(std::uint64_t request_id,
                                                         std::uint64_t file_id,
                                                         RequestFileState state,
                                                         std::string_view reason) {
  WriteGate gate(this);
  if (!gate.status().ok()) return gate.status();
  if (!IsSettled(state)) {
    return absl::InvalidArgumentError(
        fmt::format("a request file is settled done or failed, not {}", ToString(state)));
  }
  WorkLock work(this);  // `reason` is stored as ErrorText makes it (SettleFileLocked)
  absl::StatusOr<Request*> r = StagedRequestLocked(request_id);
  if (!r.ok()) return r.status();
  if (IsFinished((*r)->state)) {
    return absl::FailedPreconditionError(
        fmt::format("request {} is {}", request_id, ToString((*r)->state)));
  }
  absl::StatusOr<RequestFile*> f = StagedFileLocked(request_id, file_id);
  if (!f.ok()) return f.status();
  if (*f == nullptr) {
    return absl::NotFoundError(fmt::format("request {} has no file {}", request_id, file_id));
  }
  if ((*f)->state != RequestFileState::kWanted) {
    return absl::FailedPreconditionError(fmt::format(
        "file {} of request {} is {}, not wanted", (*f)->path, request_id, ToString((*f)->state)));
  }
  KvBatch batch;
  if (absl::Status s = SettleFileLocked(batch, **r, **f, state, std::string(reason)); !s.ok()) {
    return s;
  }
  RequestFile out = **f;
  if (absl::Status s = WriteLocked(&batch, "settle request file"); !s.ok()) return s;
  return out;
}

absl::StatusOr<std::vector<RequestFile>> KvCatalog::ListRequestFiles(
    std::uint64_t request_id, const RequestFileFilter& filter) {
  if (absl::StatusOr<Request> r = GetRequest(request_id); !r.ok()) return r.status();
  std::vector<RequestFile> out;
  if (filter.limit == 0 || filter.after == ~std::uint64_t{0}) return out;
  const std::string prefix = U64Key(request_id);
  const std::string start = RequestFileKey(request_id, filter.after + 1);
  absl::Status bad;
  if (!filter.any_state && filter.state == RequestFileState::kWanted) {
    // The wanted index: the planner's question, cheap however many files have settled.
    std::vector<std::string> keys;
    absl::Status s = Scan(kRequestWanted, prefix, start, [&](std::string_view k, std::string_view) {
      keys.emplace_back(k);
      return keys.size() < filter.limit;
    });
    if (!s.ok()) return s;
    for (const std::string& k : keys) {
      absl::StatusOr<std::string> v = Get(kRequestFiles, k, "request file");
      if (absl::IsNotFound(v.status())) continue;  // settled and purged meanwhile
      if (!v.ok()) return v.status();
      absl::StatusOr<RequestFile> f = DecodeRequestFile(*v);
      if (!f.ok()) return f.status();
      if (f->state == RequestFileState::kWanted) out.push_back(std::move(*f));
    }
    return out;
  }
  absl::Status s = Scan(kRequestFiles, prefix, start, [&](std::string_view, std::string_view v) {
    absl::StatusOr<RequestFile> f = DecodeRequestFile(v);
    if (!f.ok()) {
      bad = f.status();
      return false;
    }
    if (filter.any_state || f->state == filter.state) out.push_back(std::move(*f));
    return out.size() < filter.limit;
  });
  if (!bad.ok()) return bad;
  if (!s.ok()) return s;
  return out;
}

}  // namespace gfrep::catalog::internal
