#include "catalog/internal/codec.h"

#include <algorithm>
#include <cstring>

#include <fmt/format.h>

namespace gfrep::catalog::internal {
namespace {

constexpr std::uint8_t kVersion = 1;
// Bounds for decoded containers, so a corrupt record cannot make us allocate wildly.
constexpr std::uint64_t kMaxItems = 1u << 20;

class Writer {
 public:
  Writer() { out_.push_back(static_cast<char>(kVersion)); }
  void U64(std::uint64_t v) {
    while (v >= 0x80) {
      out_.push_back(static_cast<char>((v & 0x7f) | 0x80));
      v >>= 7;
    }
    out_.push_back(static_cast<char>(v));
  }
  void I64(std::int64_t v) { U64(static_cast<std::uint64_t>(v)); }
  void Str(std::string_view s) {
    U64(s.size());
    out_.append(s);
  }
  void F64(double d) {
    char b[8];
    std::memcpy(b, &d, 8);
    out_.append(b, 8);
  }
  std::string Take() { return std::move(out_); }

 private:
  std::string out_;
};

class Reader {
 public:
  explicit Reader(std::string_view in) : in_(in) {
    if (in_.empty() || static_cast<std::uint8_t>(in_[0]) != kVersion) {
      ok_ = false;
    } else {
      pos_ = 1;
    }
  }
  std::uint64_t U64() {
    std::uint64_t v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      if (pos_ >= in_.size()) {
        ok_ = false;
        return 0;
      }
      auto b = static_cast<std::uint8_t>(in_[pos_++]);
      v |= static_cast<std::uint64_t>(b & 0x7f) << shift;
      if (!(b & 0x80)) return v;
    }
    ok_ = false;
    return 0;
  }
  std::int64_t I64() { return static_cast<std::int64_t>(U64()); }
  std::uint32_t U32() {
    std::uint64_t v = U64();
    if (v > 0xffffffffu) ok_ = false;
    return static_cast<std::uint32_t>(v);
  }
  std::string Str() {
    std::uint64_t n = U64();
    if (!ok_ || n > in_.size() - pos_) {
      ok_ = false;
      return {};
    }
    std::string s(in_.substr(pos_, n));
    pos_ += n;
    return s;
  }
  double F64() {
    if (in_.size() - pos_ < 8) {
      ok_ = false;
      return 0;
    }
    double d;
    std::memcpy(&d, in_.data() + pos_, 8);
    pos_ += 8;
    return d;
  }
  std::uint64_t Count() {
    std::uint64_t n = U64();
    if (n > kMaxItems || n > in_.size()) ok_ = false;
    return ok_ ? n : 0;
  }
  absl::Status Finish(std::string_view what) const {
    if (!ok_ || pos_ != in_.size()) {
      return absl::DataLossError(fmt::format("corrupt {} record ({} bytes)", what, in_.size()));
    }
    return absl::OkStatus();
  }
  bool ok() const { return ok_; }
  // Whether every byte was read: fields appended to a record later are read only when
  // present, so records written before they existed still decode.
  bool AtEnd() const { return !ok_ || pos_ == in_.size(); }

 private:
  std::string_view in_;
  std::size_t pos_ = 0;
  bool ok_ = true;
};

template <typename E>
E EnumIn(Reader& r, std::uint64_t lo, std::uint64_t hi, bool& ok) {
  std::uint64_t v = r.U64();
  if (v < lo || v > hi) ok = false;
  return static_cast<E>(v);
}

}  // namespace

void PutBigEndian64(std::string& out, std::uint64_t v) {
  for (int i = 7; i >= 0; --i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

absl::StatusOr<std::uint64_t> GetBigEndian64(std::string_view in, std::size_t pos) {
  if (in.size() < pos + 8) return absl::DataLossError("short 64-bit key field");
  std::uint64_t v = 0;
  for (std::size_t i = 0; i < 8; ++i) v = (v << 8) | static_cast<std::uint8_t>(in[pos + i]);
  return v;
}

std::string U64Key(std::uint64_t v) {
  std::string k;
  PutBigEndian64(k, v);
  return k;
}

std::string DentryKey(InodeId parent, std::string_view name) {
  std::string k = U64Key(parent);
  k.append(name);
  return k;
}

std::string DentryPrefix(InodeId parent) { return U64Key(parent); }

std::string ReplicaKey(InodeId inode, std::string_view node) { return DentryKey(inode, node); }

std::string NodePrefix(std::string_view node) {
  std::string k(node);
  k.push_back('\0');
  return k;
}

std::string NodeReplicaKey(std::string_view node, InodeId inode) {
  std::string k = NodePrefix(node);
  PutBigEndian64(k, inode);
  return k;
}

std::string RouteKey(std::string_view src, std::string_view dst) {
  std::string k = NodePrefix(src);
  k.append(dst);
  return k;
}

std::string NodeTaskKey(std::string_view node, std::uint64_t task) {
  return NodeReplicaKey(node, task);
}

std::string RequestTaskKey(std::uint64_t request, std::uint64_t task) {
  std::string k = U64Key(request);
  PutBigEndian64(k, task);
  return k;
}

std::string RequestFileKey(std::uint64_t request, std::uint64_t file) {
  return RequestTaskKey(request, file);  // the same layout: BE64(request) BE64(file)
}

std::string ReservedGenerationKey(InodeId inode) {
  std::string k = "reserved_generation";
  PutBigEndian64(k, inode);
  return k;
}

std::string PrefixSuccessor(std::string_view prefix) {
  std::string s(prefix);
  while (!s.empty()) {
    auto c = static_cast<unsigned char>(s.back());
    if (c != 0xff) {
      s.back() = static_cast<char>(c + 1);
      return s;
    }
    s.pop_back();
  }
  return s;
}

std::string EncodeAttributes(const Attributes& a) {
  Writer w;
  w.U64(a.inode);
  w.U64(a.parent);
  w.Str(a.name);
  w.U64(static_cast<std::uint8_t>(a.type));
  w.U64(a.size);
  w.U64(a.mode);
  w.Str(a.owner);
  w.I64(a.mtime_ns);
  w.Str(a.checksum_algo);
  w.Str(a.checksum);
  w.U64(a.generation);
  w.Str(a.group);  // added later: records without it decode with group ""
  return w.Take();
}

absl::StatusOr<Attributes> DecodeAttributes(std::string_view in) {
  Reader r(in);
  Attributes a;
  bool ok = true;
  a.inode = r.U64();
  a.parent = r.U64();
  a.name = r.Str();
  a.type = EnumIn<FileType>(r, 1, 2, ok);
  a.size = r.U64();
  a.mode = r.U32();
  a.owner = r.Str();
  a.mtime_ns = r.I64();
  a.checksum_algo = r.Str();
  a.checksum = r.Str();
  a.generation = r.U64();
  if (!r.AtEnd()) a.group = r.Str();
  if (!ok) return absl::DataLossError("corrupt attributes record: bad type");
  if (absl::Status s = r.Finish("attributes"); !s.ok()) return s;
  return a;
}

std::string EncodeInodeRef(InodeId parent, std::string_view name) {
  Writer w;
  w.U64(parent);
  w.Str(name);
  return w.Take();
}

absl::StatusOr<std::pair<InodeId, std::string>> DecodeInodeRef(std::string_view in) {
  Reader r(in);
  InodeId parent = r.U64();
  std::string name = r.Str();
  if (absl::Status s = r.Finish("inode"); !s.ok()) return s;
  return std::make_pair(parent, std::move(name));
}

std::string EncodeReplica(const Replica& x) {
  Writer w;
  w.U64(x.inode);
  w.Str(x.node);
  w.U64(static_cast<std::uint8_t>(x.state));
  w.U64(x.generation);
  w.U64(x.size);
  w.I64(x.verified_ns);
  w.I64(x.updated_ns);
  w.I64(x.mtime_ns);
  w.Str(x.note);
  return w.Take();
}

absl::StatusOr<Replica> DecodeReplica(std::string_view in) {
  Reader r(in);
  Replica x;
  bool ok = true;
  x.inode = r.U64();
  x.node = r.Str();
  x.state = EnumIn<ReplicaState>(r, 1, 7, ok);
  x.generation = r.U64();
  x.size = r.U64();
  x.verified_ns = r.I64();
  x.updated_ns = r.I64();
  if (!r.AtEnd()) {  // added 2026-11-24: older records end here
    x.mtime_ns = r.I64();
    x.note = r.Str();
  }
  if (!ok) return absl::DataLossError("corrupt replica record: bad state");
  if (absl::Status s = r.Finish("replica"); !s.ok()) return s;
  return x;
}

std::string EncodePolicyDocument(const PolicyDocument& d) {
  Writer w;
  w.U64(d.version);
  w.I64(d.updated_ns);
  w.Str(d.source);
  w.Str(d.text);
  return w.Take();
}

absl::StatusOr<PolicyDocument> DecodePolicyDocument(std::string_view in) {
  Reader r(in);
  PolicyDocument d;
  d.version = r.U64();
  d.updated_ns = r.I64();
  d.source = r.Str();
  d.text = r.Str();
  if (absl::Status s = r.Finish("policy document"); !s.ok()) return s;
  return d;
}

std::string EncodeSite(const Site& x) {
  Writer w;
  w.Str(x.name);
  w.U64(x.labels.size());
  for (const auto& [k, v] : x.labels) {
    w.Str(k);
    w.Str(v);
  }
  return w.Take();
}

absl::StatusOr<Site> DecodeSite(std::string_view in) {
  Reader r(in);
  Site x;
  x.name = r.Str();
  std::uint64_t n = r.Count();
  for (std::uint64_t i = 0; i < n && r.ok(); ++i) {
    std::string k = r.Str();
    x.labels[k] = r.Str();
  }
  if (absl::Status s = r.Finish("site"); !s.ok()) return s;
  return x;
}

std::string EncodeNode(const Node& x) {
  Writer w;
  w.Str(x.name);
  w.Str(x.site);
  w.Str(x.address);
  w.Str(x.spool);
  w.U64(x.capacity_bytes);
  w.U64(x.free_bytes);
  w.F64(x.load);
  w.U64(x.active_transfers);
  w.I64(x.last_heartbeat_ns);
  w.U64(x.workers);
  w.Str(x.disk.dir);
  w.U64(x.disk.write_io_size_bytes);
  w.U64(x.disk.direct ? 1 : 0);
  w.U64(x.disk.flush_interval_bytes);
  w.F64(x.disk.write_mbps);
  w.F64(x.disk.read_mbps);
  w.I64(x.disk.measured_ns);
  w.U64(x.requires_data_tls ? 1 : 0);
  w.U64(static_cast<std::uint8_t>(x.mode));
  return w.Take();
}

absl::StatusOr<Node> DecodeNode(std::string_view in) {
  Reader r(in);
  Node x;
  x.name = r.Str();
  x.site = r.Str();
  x.address = r.Str();
  x.spool = r.Str();
  x.capacity_bytes = r.U64();
  x.free_bytes = r.U64();
  x.load = r.F64();
  x.active_transfers = r.U32();
  x.last_heartbeat_ns = r.I64();
  if (!r.AtEnd()) x.workers = r.U32();  // added 2026-11-23: older records end here
  if (!r.AtEnd()) {                      // added 2026-11-24: older records end here
    x.disk.dir = r.Str();
    x.disk.write_io_size_bytes = r.U64();
    x.disk.direct = r.U64() != 0;
    x.disk.flush_interval_bytes = r.U64();
    x.disk.write_mbps = r.F64();
    x.disk.read_mbps = r.F64();
    x.disk.measured_ns = r.I64();
  }
  if (!r.AtEnd()) x.requires_data_tls = r.U64() != 0;  // older records end here
  bool mode_ok = true;
  if (!r.AtEnd()) x.mode = EnumIn<NodeMode>(r, 0, 2, mode_ok);  // added 2026-12-01
  if (!mode_ok) return absl::DataLossError("corrupt node record: bad mode");
  if (absl::Status s = r.Finish("node"); !s.ok()) return s;
  return x;
}

std::string EncodeRoute(const Route& x) {
  Writer w;
  w.Str(x.src_site);
  w.Str(x.dst_site);
  w.U64(x.streams);
  w.U64(x.socket_buffer_bytes);
  w.U64(x.stripe_unit_bytes);
  w.U64(x.stream_rate_bps);
  w.U64(x.route_rate_bps);
  w.Str(x.congestion_control);
  w.U64(x.max_concurrent_tasks);
  w.F64(x.rtt_ms);
  w.U64(x.bandwidth_bps);
  w.I64(x.measured_ns);
  w.U64(x.total_streams);
  w.F64(x.observed.rtt_ms);
  w.F64(x.observed.srtt_ms);
  w.F64(x.observed.loss);
  w.U64(x.observed.peak_bps);
  w.I64(x.observed.peak_ns);
  w.U64(x.observed.bytes);
  w.I64(x.observed.at_ns);
  w.Str(x.observed.congestion);
  w.U64(x.data_tls ? 1 : 0);
  return w.Take();
}

absl::StatusOr<Route> DecodeRoute(std::string_view in) {
  Reader r(in);
  Route x;
  x.src_site = r.Str();
  x.dst_site = r.Str();
  x.streams = r.U32();
  x.socket_buffer_bytes = r.U64();
  x.stripe_unit_bytes = r.U64();
  x.stream_rate_bps = r.U64();
  x.route_rate_bps = r.U64();
  x.congestion_control = r.Str();
  x.max_concurrent_tasks = r.U32();
  x.rtt_ms = r.F64();
  x.bandwidth_bps = r.U64();
  x.measured_ns = r.I64();
  if (!r.AtEnd()) x.total_streams = r.U32();
  if (!r.AtEnd()) {  // added 2026-11-24: older records end here
    x.observed.rtt_ms = r.F64();
    x.observed.srtt_ms = r.F64();
    x.observed.loss = r.F64();
    x.observed.peak_bps = r.U64();
    x.observed.peak_ns = r.I64();
    x.observed.bytes = r.U64();
    x.observed.at_ns = r.I64();
  }
  if (!r.AtEnd()) x.observed.congestion = r.Str();  // added 2026-11-26: older records end here
  if (!r.AtEnd()) x.data_tls = r.U64() != 0;        // older records end here
  if (absl::Status s = r.Finish("route"); !s.ok()) return s;
  return x;
}

std::string EncodeRequest(const Request& x) {
  Writer w;
  w.U64(x.id);
  w.U64(x.spec.paths.size());
  for (const auto& p : x.spec.paths) w.Str(p);
  w.U64(x.spec.copies);
  w.Str(x.spec.src_site);
  w.U64(x.spec.dst_sites.size());
  for (const auto& d : x.spec.dst_sites) w.Str(d);
  w.U64(x.spec.recursive ? 1 : 0);
  w.I64(x.spec.priority);
  w.Str(x.spec.owner);
  w.U64(x.spec.parallel);
  w.U64(static_cast<std::uint8_t>(x.state));
  w.Str(x.error);
  w.U64(x.files_total);
  w.U64(x.files_done);
  w.U64(x.files_failed);
  w.U64(x.bytes_total);
  w.U64(x.bytes_done);
  w.I64(x.created_ns);
  w.I64(x.updated_ns);
  w.U64(static_cast<std::uint8_t>(x.spec.origin));
  w.U64(x.expanded ? 1 : 0);
  return w.Take();
}

absl::StatusOr<Request> DecodeRequest(std::string_view in) {
  Reader r(in);
  Request x;
  bool ok = true;
  x.id = r.U64();
  std::uint64_t n = r.Count();
  for (std::uint64_t i = 0; i < n && r.ok(); ++i) x.spec.paths.push_back(r.Str());
  x.spec.copies = r.U32();
  x.spec.src_site = r.Str();
  n = r.Count();
  for (std::uint64_t i = 0; i < n && r.ok(); ++i) x.spec.dst_sites.push_back(r.Str());
  x.spec.recursive = r.U64() != 0;
  x.spec.priority = static_cast<std::int32_t>(r.I64());
  x.spec.owner = r.Str();
  x.spec.parallel = r.U32();
  x.state = EnumIn<RequestState>(r, 1, 5, ok);
  x.error = r.Str();
  x.files_total = r.U64();
  x.files_done = r.U64();
  x.files_failed = r.U64();
  x.bytes_total = r.U64();
  x.bytes_done = r.U64();
  x.created_ns = r.I64();
  x.updated_ns = r.I64();
  if (!r.AtEnd()) {
    x.spec.origin = EnumIn<RequestOrigin>(r, 1, 3, ok);
    // Older records end here: not expanded (the planner lists their files again).
    if (!r.AtEnd()) x.expanded = r.U64() != 0;
  } else if (x.spec.owner == "repair") {  // older records end here and name it in the owner
    x.spec.origin = RequestOrigin::kRepair;
  } else if (std::string_view owner = x.spec.owner;
             owner.size() > 7 && owner.substr(0, 7) == "policy:") {
    x.spec.origin = RequestOrigin::kPolicy;
    x.spec.owner = std::string(owner.substr(7));
  }
  if (!ok) return absl::DataLossError("corrupt request record: bad state or origin");
  if (absl::Status s = r.Finish("request"); !s.ok()) return s;
  return x;
}

std::string EncodeRequestFile(const RequestFile& x) {
  Writer w;
  w.U64(x.request_id);
  w.U64(x.id);
  w.Str(x.path);
  w.U64(x.size);
  w.U64(static_cast<std::uint8_t>(x.state));
  w.Str(x.reason);
  w.U64(x.attempts);
  w.U64(x.open_tasks);
  w.U64(x.failed_copies);
  w.I64(x.updated_ns);
  w.U64(x.slow_sources.size());
  for (const std::string& s : x.slow_sources) w.Str(s);
  return w.Take();
}

absl::StatusOr<RequestFile> DecodeRequestFile(std::string_view in) {
  Reader r(in);
  RequestFile x;
  bool ok = true;
  x.request_id = r.U64();
  x.id = r.U64();
  x.path = r.Str();
  x.size = r.U64();
  x.state = EnumIn<RequestFileState>(r, 1, 4, ok);
  x.reason = r.Str();
  x.attempts = r.U32();
  x.open_tasks = r.U32();
  x.failed_copies = r.U32();
  x.updated_ns = r.I64();
  if (!r.AtEnd()) {  // added 2026-11-29: older records end here
    std::uint64_t n = r.Count();
    for (std::uint64_t i = 0; i < n && r.ok(); ++i) x.slow_sources.push_back(r.Str());
  }
  if (!ok) return absl::DataLossError("corrupt request file record: bad state");
  if (absl::Status s = r.Finish("request file"); !s.ok()) return s;
  return x;
}

std::string EncodeTask(const Task& x) {
  Writer w;
  w.U64(x.id);
  w.U64(x.spec.request_id);
  w.Str(x.spec.path);
  w.Str(x.spec.src_node);
  w.Str(x.spec.dst_node);
  w.I64(x.spec.priority);
  w.U64(x.spec.max_attempts);
  w.I64(x.spec.not_before_ns);
  w.U64(x.inode);
  w.U64(x.generation);
  w.U64(x.size);
  w.U64(static_cast<std::uint8_t>(x.state));
  w.U64(x.attempts);
  w.Str(x.lease_owner);
  w.I64(x.lease_expiry_ns);
  w.I64(x.next_attempt_ns);
  w.Str(x.last_error);
  w.I64(x.created_ns);
  w.I64(x.updated_ns);
  w.U64(x.spec.streams);
  w.U64(x.spec.route_rate_bps);
  w.U64(x.spec.dst_share_ppm);
  return w.Take();
}

absl::StatusOr<Task> DecodeTask(std::string_view in) {
  Reader r(in);
  Task x;
  bool ok = true;
  x.id = r.U64();
  x.spec.request_id = r.U64();
  x.spec.path = r.Str();
  x.spec.src_node = r.Str();
  x.spec.dst_node = r.Str();
  x.spec.priority = static_cast<std::int32_t>(r.I64());
  x.spec.max_attempts = r.U32();
  x.spec.not_before_ns = r.I64();
  x.inode = r.U64();
  x.generation = r.U64();
  x.size = r.U64();
  x.state = EnumIn<TaskState>(r, 1, 5, ok);
  x.attempts = r.U32();
  x.lease_owner = r.Str();
  x.lease_expiry_ns = r.I64();
  x.next_attempt_ns = r.I64();
  x.last_error = r.Str();
  x.created_ns = r.I64();
  x.updated_ns = r.I64();
  if (!r.AtEnd()) {
    x.spec.streams = r.U32();
    x.spec.route_rate_bps = r.U64();
    if (!r.AtEnd()) x.spec.dst_share_ppm = std::min<std::uint32_t>(r.U32(), kWholeRoutePpm);
  }
  if (!ok) return absl::DataLossError("corrupt task record: bad state");
  if (absl::Status s = r.Finish("task"); !s.ok()) return s;
  return x;
}

std::string EncodeEvent(const Event& x) {
  Writer w;
  w.U64(x.seq);
  w.U64(static_cast<std::uint8_t>(x.kind));
  w.I64(x.time_ns);
  w.U64(x.id);
  w.Str(x.node);
  w.Str(x.state);
  w.Str(x.detail);
  return w.Take();
}

absl::StatusOr<Event> DecodeEvent(std::string_view in) {
  Reader r(in);
  Event x;
  bool ok = true;
  x.seq = r.U64();
  x.kind = EnumIn<EventKind>(r, 1, 6, ok);
  x.time_ns = r.I64();
  x.id = r.U64();
  x.node = r.Str();
  x.state = r.Str();
  x.detail = r.Str();
  if (!ok) return absl::DataLossError("corrupt event record: bad kind");
  if (absl::Status s = r.Finish("event"); !s.ok()) return s;
  return x;
}

}  // namespace gfrep::catalog::internal
