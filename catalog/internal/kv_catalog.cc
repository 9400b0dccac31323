#include "catalog/internal/kv_catalog.h"

#include <algorithm>
#include <limits>
#include <set>

#include "catalog/internal/kv_catalog_impl.h"
#include "catalog/internal/rocks_store.h"
#include "catalog/storage.h"

namespace gfrep::catalog {
namespace internal {

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

std::string ErrorText(std::string_view error) {
  std::string out(TruncateUtf8(error, kMaxLabelBytes));
  if (!IsValidUtf8(out)) {
    for (char& c : out) {
      if (static_cast<unsigned char>(c) >= 0x80) c = '?';
    }
  }
  return out;
}

// Permission bits and the sticky bit; anything above (setuid, file type bits, garbage from a
// client) is refused rather than stored.
absl::Status ValidateMode(std::uint32_t mode) {
  if (mode > 01777) {
    return absl::InvalidArgumentError(
        fmt::format("mode {:o}: want permission bits and the sticky bit (at most 1777)", mode));
  }
  return absl::OkStatus();
}

absl::Status ValidateContent(const FileContent& content) {
  if (absl::Status s = ValidateMode(content.mode); !s.ok()) return s;
  for (auto [what, v] : {std::pair<std::string_view, std::string_view>{"owner", content.owner},
                         {"checksum algorithm", content.checksum_algo},
                         {"checksum", content.checksum}}) {
    if (absl::Status s = ValidateLabel(what, v); !s.ok()) return s;
  }
  return absl::OkStatus();
}


absl::Status KvCatalog::Init() {
  absl::StatusOr<Attributes> root = Root();
  if (absl::IsNotFound(root.status())) {
    Attributes a;
    a.inode = kRootInode;
    a.type = FileType::kDirectory;
    a.mode = 0755;
    a.mtime_ns = Now();
    KvBatch batch;
    batch.Put(kDentries, DentryKey(0, ""), EncodeAttributes(a));
    batch.Put(kInodes, U64Key(kRootInode), EncodeInodeRef(0, ""));
    batch.Put(kMeta, kInodeHwmKey, U64Key(kRootInode + 1));
    if (absl::Status s = Write(&batch, "create root"); !s.ok()) return s;
  } else if (!root.ok()) {
    return root.status();
  }
  absl::StatusOr<std::string> hwm = Get(kMeta, kInodeHwmKey, "inode high-water mark");
  if (!hwm.ok()) return hwm.status();
  absl::StatusOr<std::uint64_t> h = GetBigEndian64(*hwm);
  if (!h.ok()) return h.status();
  {
    absl::MutexLock l(&id_mu_);
    next_inode_ = inode_hwm_ = *h;  // the first allocation persists a fresh block
  }
  absl::MutexLock l(&work_mu_);
  return ReloadMarksLocked();
}

absl::Status KvCatalog::ReloadMarksLocked() {
  absl::StatusOr<std::uint64_t> seq = LastU64Key(*store_, kEvents);
  absl::StatusOr<std::uint64_t> req = LastU64Key(*store_, kRequests);
  absl::StatusOr<std::uint64_t> task = LastU64Key(*store_, kTasks);
  if (!seq.ok()) return seq.status();
  if (!req.ok()) return req.status();
  if (!task.ok()) return task.status();
  std::uint64_t request = *req, last_task = *task;
  for (auto [key, last] : {std::pair{kRequestHwmKey, &request}, std::pair{kTaskHwmKey, &last_task}}) {
    absl::StatusOr<std::string> v = Get(kMeta, key, key);
    if (absl::IsNotFound(v.status())) continue;
    if (!v.ok()) return v.status();
    absl::StatusOr<std::uint64_t> mark = GetBigEndian64(*v);
    if (!mark.ok()) return mark.status();
    *last = std::max(*last, *mark);
  }
  // Never below what this process handed out: ids are not reused even if a purge removed
  // the highest ones.
  committed_seq_ = std::max(committed_seq_, *seq);
  last_seq_ = committed_seq_;
  last_request_ = std::max(last_request_, request);
  last_task_ = std::max(last_task_, last_task);
  marks_unknown_ = false;
  return absl::OkStatus();
}

absl::Status KvCatalog::Resync() {
  WorkLock l(this);
  claim_queue_.Reset();
  return ReloadMarksLocked();
}

namespace {
// The catalog whose write gate this thread holds (nested gates of it are no-ops).
thread_local const KvCatalog* t_gate_holder = nullptr;
}  // namespace

KvCatalog::WriteGate::WriteGate(KvCatalog* catalog) {
  if (!catalog->store_->shared() || t_gate_holder == catalog) return;
  absl::StatusOr<std::unique_ptr<KvWriteLock>> lock = catalog->store_->LockWrites();
  if (!lock.ok()) {
    status_ = lock.status();
    return;
  }
  lock_ = std::move(*lock);
  t_gate_holder = catalog;
  outer_ = true;
  status_ = catalog->Resync();
}

KvCatalog::WriteGate::~WriteGate() {
  if (outer_) t_gate_holder = nullptr;
}

void KvCatalog::WatchOtherFrontEnds() {
  watch_ = store_->WatchWrites([this] { OnExternalWrite(); });
}

void KvCatalog::OnExternalWrite() {
  WorkLock l(this);
  (void)ReloadMarksLocked();  // ignored: the next mutation re-reads (Resync) and reports
}

absl::StatusOr<InodeId> KvCatalog::AllocateInode() {
  absl::MutexLock l(&id_mu_);
  if (next_inode_ >= inode_hwm_) {
    // A new block starts at the stored mark (one read per block): on a shared store, written
    // under its write lock here, another process may have taken blocks since this one's last;
    // alone, the mark is this process's own.
    absl::StatusOr<std::string> v = Get(kMeta, kInodeHwmKey, "inode high-water mark");
    if (!v.ok()) return v.status();
    absl::StatusOr<std::uint64_t> stored = GetBigEndian64(*v);
    if (!stored.ok()) return stored.status();
    next_inode_ = std::max(next_inode_, *stored);
    // Persist the end of a new block before handing out ids from it, so ids are never
    // reused after a crash even though creates commit out of order.
    std::uint64_t hwm = next_inode_ + kInodeBlock;
    KvBatch batch;
    batch.Put(kMeta, kInodeHwmKey, U64Key(hwm));
    if (absl::Status s = store_->Write(batch, /*sync=*/true, "persist inode block"); !s.ok()) {
      return s;
    }
    inode_hwm_ = hwm;
  }
  return next_inode_++;
}

absl::StatusOr<Attributes> KvCatalog::Resolve(const std::vector<std::string>& parts,
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

absl::StatusOr<Attributes> KvCatalog::CreateEntry(const Attributes& parent,
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
  a.group = parent.group;
  a.mtime_ns = Now();
  if (type == FileType::kFile) {
    a.size = content.size;
    a.checksum_algo = content.checksum_algo;
    a.checksum = content.checksum;
  }
  KvBatch batch;
  batch.Put(kDentries, DentryKey(parent.inode, name), EncodeAttributes(a));
  batch.Put(kInodes, U64Key(a.inode), EncodeInodeRef(parent.inode, name));
  if (absl::Status s = Write(&batch, "create entry"); !s.ok()) return s;
  return a;
}

absl::StatusOr<Attributes> KvCatalog::Mkdir(std::string_view path,
                                               const MkdirOptions& options) {
  WriteGate gate(this);
  if (!gate.status().ok()) return gate.status();
  absl::StatusOr<std::vector<std::string>> parts = SplitPath(path);
  if (!parts.ok()) return parts.status();
  if (absl::Status s = ValidateLabel("owner", options.owner); !s.ok()) return s;
  if (absl::Status s = ValidateMode(options.mode); !s.ok()) return s;
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

absl::StatusOr<Attributes> KvCatalog::CreateFile(std::string_view path,
                                                    const FileContent& content) {
  WriteGate gate(this);
  if (!gate.status().ok()) return gate.status();
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

absl::StatusOr<std::vector<Attributes>> KvCatalog::CreateFiles(
    const std::vector<NewFile>& files) {
  WriteGate gate(this);
  if (!gate.status().ok()) return gate.status();
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
  // A set of locks taken and given back as one scope: the analysis cannot follow a lock
  // taken in a loop, so this scope is the one place it does not check.
  struct LockAll {
    std::set<absl::Mutex*>& locks;
    explicit LockAll(std::set<absl::Mutex*>& l) ABSL_NO_THREAD_SAFETY_ANALYSIS : locks(l) {
      for (absl::Mutex* m : locks) m->Lock();
    }
    ~LockAll() ABSL_NO_THREAD_SAFETY_ANALYSIS {
      for (auto it = locks.rbegin(); it != locks.rend(); ++it) (*it)->Unlock();
    }
  } lock_all{locks};
  // Every name's entry (absent, one hopes) in one read.
  std::vector<std::string> entry_keys;
  entry_keys.reserve(files.size());
  for (std::size_t i = 0; i < files.size(); ++i) {
    entry_keys.push_back(DentryKey(parent_of[i]->inode, parts[i].back()));
  }
  absl::StatusOr<std::vector<absl::StatusOr<std::string>>> existing_entries =
      store_->MultiGet(kDentries, entry_keys, "create files");
  if (!existing_entries.ok()) return existing_entries.status();
  std::set<std::pair<InodeId, std::string_view>> seen;
  KvBatch batch;
  std::vector<Attributes> out;
  out.reserve(files.size());
  std::int64_t now = Now();
  for (std::size_t i = 0; i < files.size(); ++i) {
    const std::string& name = parts[i].back();
    InodeId parent = parent_of[i]->inode;
    if (!seen.emplace(parent, name).second) {
      return absl::InvalidArgumentError(fmt::format("{}: twice in one batch", files[i].path));
    }
    const absl::StatusOr<std::string>& existing = (*existing_entries)[i];
    if (existing.ok()) return absl::AlreadyExistsError(fmt::format("{}: already exists", files[i].path));
    if (!absl::IsNotFound(existing.status())) return existing.status();
    absl::StatusOr<InodeId> id = AllocateInode();
    if (!id.ok()) return id.status();
    Attributes a;
    a.inode = *id;
    a.parent = parent;
    a.name = name;
    a.type = FileType::kFile;
    a.mode = files[i].content.mode;
    a.owner = files[i].content.owner;
    a.group = parent_of[i]->group;
    a.mtime_ns = now;
    a.size = files[i].content.size;
    a.checksum_algo = files[i].content.checksum_algo;
    a.checksum = files[i].content.checksum;
    batch.Put(kDentries, DentryKey(parent, name), EncodeAttributes(a));
    batch.Put(kInodes, U64Key(a.inode), EncodeInodeRef(parent, name));
    out.push_back(std::move(a));
  }
  if (absl::Status s = Write(&batch, "create files"); !s.ok()) return s;
  return out;
}

absl::StatusOr<std::uint64_t> KvCatalog::ReservedGeneration(InodeId inode) {
  absl::StatusOr<std::string> v =
      Get(kMeta, ReservedGenerationKey(inode), "reserved generation");
  if (absl::IsNotFound(v.status())) return 0;
  if (!v.ok()) return v.status();
  return GetBigEndian64(*v);
}

absl::StatusOr<WriteReservation> KvCatalog::BeginWrite(std::string_view path,
                                                          const FileContent& content) {
  WriteGate gate(this);
  if (!gate.status().ok()) return gate.status();
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
  KvBatch batch;
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
    a.group = parent->group;
    a.mtime_ns = Now();
    batch.Put(kDentries, DentryKey(a.parent, a.name), EncodeAttributes(a));
    batch.Put(kInodes, U64Key(a.inode), EncodeInodeRef(a.parent, a.name));
  } else {
    return existing.status();
  }
  out.generation = std::max(a.generation, reserved) + 1;
  batch.Put(kMeta, ReservedGenerationKey(a.inode), U64Key(out.generation));
  if (absl::Status s = Write(&batch, "begin write"); !s.ok()) return s;
  return out;
}

absl::StatusOr<Attributes> KvCatalog::CommitFile(
    std::string_view path, const FileContent& content, std::string_view writer_node,
    std::optional<std::uint64_t> expected_generation) {
  WriteGate gate(this);
  if (!gate.status().ok()) return gate.status();
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
    a.group = parent->group;
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
  KvBatch batch;
  batch.Put(kDentries, DentryKey(a.parent, a.name), EncodeAttributes(a));
  batch.Put(kInodes, U64Key(a.inode), EncodeInodeRef(a.parent, a.name));
  if (reserved != 0 && a.generation >= reserved) {
    // The generation itself is the mark now (generations only grow).
    batch.Delete(kMeta, ReservedGenerationKey(a.inode));
  }
  absl::StatusOr<std::vector<Replica>> replicas = GetReplicas(a.inode);
  if (!replicas.ok()) return replicas.status();
  for (Replica r : *replicas) {
    if (r.node == writer_node) continue;
    // Pending records belong to copies in flight: CompleteTask turns them stale (their
    // generation is older) and FailTask drops them, each checking its own generation.
    // An unverified copy (its node dead) of the old generation is as stale as a complete one.
    if (r.state == ReplicaState::kComplete || r.state == ReplicaState::kUnverified) {
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

absl::StatusOr<Attributes> KvCatalog::Stat(std::string_view path) { return ResolvePath(path); }

// Stat of each path, resolved one level at a time for all of them together: one MultiGet per
// level (of the distinct (parent, name) keys) instead of one Get per component per path, so
// a batch costs as many round trips as its deepest path has components. Same answers and
// messages as Stat.
absl::StatusOr<std::vector<absl::StatusOr<Attributes>>> KvCatalog::StatMany(
    const std::vector<std::string>& paths) {
  if (paths.size() > kMaxBatchPaths) {
    return absl::InvalidArgumentError(fmt::format("more than {} paths", kMaxBatchPaths));
  }
  absl::StatusOr<Attributes> root = Root();
  if (!root.ok()) return root.status();
  std::vector<absl::StatusOr<Attributes>> out(paths.size(), *root);
  std::vector<std::vector<std::string>> parts(paths.size());
  std::vector<std::size_t> active;  // paths still being resolved
  for (std::size_t i = 0; i < paths.size(); ++i) {
    absl::StatusOr<std::vector<std::string>> p = SplitPath(paths[i]);
    if (!p.ok()) {
      out[i] = p.status();
    } else if (!p->empty()) {
      parts[i] = std::move(*p);
      active.push_back(i);
    }
  }
  for (std::size_t depth = 0; !active.empty(); ++depth) {
    std::vector<std::string> keys;
    std::map<std::string, std::size_t, std::less<>> slot;  // key -> index in keys
    std::vector<std::size_t> slot_of(paths.size());
    std::vector<std::size_t> asking;
    for (std::size_t i : active) {
      if (out[i]->type != FileType::kDirectory) {
        std::vector<std::string> prefix(parts[i].begin(), parts[i].begin() + depth);
        out[i] = absl::FailedPreconditionError(
            fmt::format("{}: not a directory", JoinPath(prefix)));
        continue;
      }
      std::string key = DentryKey(out[i]->inode, parts[i][depth]);
      auto [it, added] = slot.emplace(std::move(key), keys.size());
      if (added) keys.push_back(it->first);
      slot_of[i] = it->second;
      asking.push_back(i);
    }
    if (keys.empty()) break;
    absl::StatusOr<std::vector<absl::StatusOr<std::string>>> values =
        store_->MultiGet(kDentries, keys, "stat");
    if (!values.ok()) return values.status();
    active.clear();
    for (std::size_t i : asking) {
      const absl::StatusOr<std::string>& v = (*values)[slot_of[i]];
      if (absl::IsNotFound(v.status())) {
        std::vector<std::string> prefix(parts[i].begin(), parts[i].begin() + depth + 1);
        out[i] = absl::NotFoundError(
            fmt::format("{}: no such file or directory", JoinPath(prefix)));
        continue;
      }
      if (!v.ok()) return v.status();
      out[i] = DecodeAttributes(*v);
      if (out[i].ok() && depth + 1 < parts[i].size()) active.push_back(i);
    }
  }
  return out;
}

absl::StatusOr<Attributes> KvCatalog::StatInode(InodeId inode) {
  // Two reads of one snapshot: a rename committing between them must not make the inode
  // look removed (its old name gone, the reverse record not yet read).
  std::unique_ptr<KvSnapshot> snapshot = store_->Snapshot();
  absl::StatusOr<std::string> ref = Get(kInodes, U64Key(inode), fmt::format("inode {}", inode), snapshot.get());
  if (!ref.ok()) return ref.status();
  absl::StatusOr<std::pair<InodeId, std::string>> pn = DecodeInodeRef(*ref);
  if (!pn.ok()) return pn.status();
  return GetDentry(pn->first, pn->second, snapshot.get());
}

absl::StatusOr<std::string> KvCatalog::PathOf(InodeId inode) {
  std::vector<std::string> parts;
  InodeId cur = inode;
  std::unique_ptr<KvSnapshot> snapshot = store_->Snapshot();  // one chain while renames go on
  // Bounded: a path has at most kMaxPathBytes/2 components.
  for (std::size_t depth = 0; cur != kRootInode; ++depth) {
    if (depth > kMaxPathBytes) return absl::DataLossError("inode chain too long (cycle?)");
    absl::StatusOr<std::string> ref = Get(kInodes, U64Key(cur), fmt::format("inode {}", cur), snapshot.get());
    if (!ref.ok()) return ref.status();
    absl::StatusOr<std::pair<InodeId, std::string>> pn = DecodeInodeRef(*ref);
    if (!pn.ok()) return pn.status();
    parts.push_back(pn->second);
    cur = pn->first;
  }
  std::reverse(parts.begin(), parts.end());
  return JoinPath(parts);
}

absl::StatusOr<std::vector<DirEntry>> KvCatalog::List(std::string_view path,
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

absl::Status KvCatalog::MarkSubtreeDeleted(KvBatch& batch, const Attributes& a,
                                              std::size_t& count) {
  ++count;
  batch.Delete(kDentries, DentryKey(a.parent, a.name));
  batch.Delete(kInodes, U64Key(a.inode));
  if (a.type == FileType::kFile) {
    batch.Delete(kMeta, ReservedGenerationKey(a.inode));
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

absl::Status KvCatalog::Remove(std::string_view path, bool recursive) {
  WriteGate gate(this);
  if (!gate.status().ok()) return gate.status();
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
  KvBatch batch;
  std::size_t count = 0;
  if (absl::Status s = MarkSubtreeDeleted(batch, *a, count); !s.ok()) return s;
  return WriteLocked(&batch, "remove");
}

absl::Status KvCatalog::Rename(std::string_view from, std::string_view to) {
  WriteGate gate(this);
  if (!gate.status().ok()) return gate.status();
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
  KvBatch batch;
  batch.Delete(kDentries, DentryKey(a->parent, a->name));
  batch.Put(kDentries, DentryKey(moved.parent, moved.name), EncodeAttributes(moved));
  batch.Put(kInodes, U64Key(moved.inode), EncodeInodeRef(moved.parent, moved.name));
  return WriteLocked(&batch, "rename");
}

absl::StatusOr<Attributes> KvCatalog::SetAttributes(std::string_view path, const AttributeChange& change) {
  WriteGate gate(this);
  if (!gate.status().ok()) return gate.status();
  absl::StatusOr<std::vector<std::string>> parts = SplitPath(path);
  if (!parts.ok()) return parts.status();
  if (change.mode) {
    if (absl::Status s = ValidateMode(*change.mode); !s.ok()) return s;
  }
  for (const auto& [what, v] : {std::pair{"owner", &change.owner}, std::pair{"group", &change.group}}) {
    if (v->has_value()) {
      if (absl::Status s = ValidateLabel(what, **v); !s.ok()) return s;
    }
  }
  absl::ReaderMutexLock tree(&tree_mu_);
  absl::StatusOr<Attributes> a = Resolve(*parts, parts->size());
  if (!a.ok()) return a.status();
  absl::MutexLock name_lock(&NameLock(a->parent, a->name));
  absl::StatusOr<Attributes> cur = GetDentry(a->parent, a->name);  // again, under the name's lock
  if (!cur.ok()) return cur.status();
  if (change.mode) cur->mode = *change.mode;
  if (change.owner) cur->owner = *change.owner;
  if (change.group) cur->group = *change.group;
  KvBatch batch;
  batch.Put(kDentries, DentryKey(cur->parent, cur->name), EncodeAttributes(*cur));
  if (absl::Status s = Write(&batch, "set attributes"); !s.ok()) return s;
  return cur;
}

absl::Status KvCatalog::RevokeToken(std::string_view id, std::int64_t expires_unix) {
  WriteGate gate(this);
  if (!gate.status().ok()) return gate.status();
  if (id.empty() || id.size() > 64) return absl::InvalidArgumentError("token id: 1-64 characters");
  KvBatch batch;
  batch.Put(kMeta, fmt::format("{}{}", kRevokedTokenPrefix, id), U64Key(static_cast<std::uint64_t>(expires_unix)));
  // Records of tokens that expired are no longer needed (an expired token is refused as
  // such): each revocation forgets them, so the list stays as long as the live revocations.
  const std::int64_t now_unix = Now() / 1'000'000'000;
  absl::Status s = Scan(kMeta, kRevokedTokenPrefix, "", [&](std::string_view k, std::string_view v) {
    absl::StatusOr<std::uint64_t> exp = GetBigEndian64(v);
    if (exp.ok() && static_cast<std::int64_t>(*exp) < now_unix && k.substr(std::string_view(kRevokedTokenPrefix).size()) != id) {
      batch.Delete(kMeta, k);
    }
    return true;
  });
  if (!s.ok()) return s;
  return Write(&batch, "revoke token");
}

absl::StatusOr<std::vector<std::pair<std::string, std::int64_t>>> KvCatalog::RevokedTokens() {
  std::vector<std::pair<std::string, std::int64_t>> out;
  absl::Status s = Scan(kMeta, kRevokedTokenPrefix, "", [&](std::string_view k, std::string_view v) {
    if (absl::StatusOr<std::uint64_t> exp = GetBigEndian64(v); exp.ok()) {
      out.emplace_back(std::string(k.substr(std::string_view(kRevokedTokenPrefix).size())),
                       static_cast<std::int64_t>(*exp));
    }
    return true;
  });
  if (!s.ok()) return s;
  return out;
}

absl::StatusOr<std::string> GetDbProperty(Catalog& catalog, std::string_view property) {
  KvStore* store = StoreOf(catalog);
  if (store == nullptr) return absl::InvalidArgumentError("not a catalog on a KvStore");
  return store->Property(property);
}

KvStore* StoreOf(Catalog& catalog) {
  auto* kv = dynamic_cast<KvCatalog*>(&catalog);
  return kv == nullptr ? nullptr : &kv->store();
}

absl::StatusOr<std::unique_ptr<Catalog>> OpenKvCatalog(const CatalogOptions& options,
                                                       std::unique_ptr<KvStore> store) {
  const bool shared = store->shared();
  auto catalog = std::make_unique<KvCatalog>(options, std::move(store));
  if (!shared) {
    if (absl::Status init = catalog->Init(); !init.ok()) return init;
    return std::unique_ptr<Catalog>(std::move(catalog));
  }
  {
    // The root may be created here, by whichever front end opens first.
    absl::StatusOr<std::unique_ptr<KvWriteLock>> lock = catalog->store().LockWrites();
    if (!lock.ok()) return lock.status();
    if (absl::Status init = catalog->Init(); !init.ok()) return init;
  }
  catalog->WatchOtherFrontEnds();
  return std::unique_ptr<Catalog>(std::move(catalog));
}

absl::StatusOr<std::map<std::string, std::uint64_t>> KvCatalog::StorageStats() {
  return store_->Stats();
}

}  // namespace internal

absl::StatusOr<std::unique_ptr<Catalog>> OpenRocksCatalog(const CatalogOptions& options) {
  if (internal::IsPostgresUrl(options.path)) {
    return absl::InvalidArgumentError(
        fmt::format("{}: a PostgreSQL address, not a RocksDB directory (use OpenCatalog)",
                    options.path));
  }
  if (options.shared) {
    return absl::InvalidArgumentError(fmt::format(
        "{}: several front ends share a PostgreSQL catalog only, not a RocksDB directory",
        options.path));
  }
  absl::StatusOr<std::unique_ptr<internal::KvStore>> store = internal::OpenRocksStore(options);
  if (!store.ok()) return store.status();
  return internal::OpenKvCatalog(options, std::move(*store));
}

bool IsPostgresLocation(std::string_view location) { return internal::IsPostgresUrl(location); }

std::string DescribeStorage(Catalog& catalog) {
  internal::KvStore* store = internal::StoreOf(catalog);
  return store == nullptr ? std::string() : store->Describe();
}

bool HoldLeadership(Catalog& catalog) {
  internal::KvStore* store = internal::StoreOf(catalog);
  return store == nullptr || store->HoldLeadership();
}

}  // namespace gfrep::catalog
