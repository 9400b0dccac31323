#include "catalog/types.h"

#include <chrono>

#include <fmt/format.h>

#include <algorithm>
#include <limits>

#include "catalog/catalog.h"

namespace gfrep::catalog {

std::string_view ToString(ReplicaState state) {
  switch (state) {
    case ReplicaState::kPending: return "pending";
    case ReplicaState::kComplete: return "complete";
    case ReplicaState::kStale: return "stale";
    case ReplicaState::kCorrupt: return "corrupt";
    case ReplicaState::kDeleting: return "deleting";
    case ReplicaState::kLost: return "lost";
    case ReplicaState::kUnverified: return "unverified";
  }
  return "unknown";
}

bool IsBad(ReplicaState state) {
  return state == ReplicaState::kCorrupt || state == ReplicaState::kLost;
}

absl::StatusOr<ReplicaState> ParseReplicaState(std::string_view text) {
  for (ReplicaState s : {ReplicaState::kPending, ReplicaState::kComplete, ReplicaState::kStale,
                         ReplicaState::kCorrupt, ReplicaState::kDeleting, ReplicaState::kLost,
                         ReplicaState::kUnverified}) {
    if (ToString(s) == text) return s;
  }
  return absl::InvalidArgumentError(fmt::format("unknown replica state '{}'", text));
}

std::string_view ToString(NodeMode mode) {
  switch (mode) {
    case NodeMode::kNormal: return "normal";
    case NodeMode::kReadOnly: return "read-only";
    case NodeMode::kDraining: return "draining";
  }
  return "unknown";
}

absl::StatusOr<NodeMode> ParseNodeMode(std::string_view text) {
  for (NodeMode m : {NodeMode::kNormal, NodeMode::kReadOnly, NodeMode::kDraining}) {
    if (ToString(m) == text) return m;
  }
  return absl::InvalidArgumentError(
      fmt::format("unknown node mode '{}' (normal, read-only, draining)", text));
}

std::string_view ToString(NodeLiveness liveness) {
  switch (liveness) {
    case NodeLiveness::kLive: return "live";
    case NodeLiveness::kSuspect: return "suspect";
    case NodeLiveness::kDead: return "dead";
  }
  return "unknown";
}

NodeLiveness LivenessOf(std::int64_t last_heartbeat_ns, std::int64_t now_ns,
                        std::chrono::nanoseconds timeout, std::chrono::nanoseconds dead_after) {
  const std::int64_t silent = now_ns - last_heartbeat_ns;
  if (silent <= timeout.count()) return NodeLiveness::kLive;
  if (silent <= std::max(timeout, dead_after).count()) return NodeLiveness::kSuspect;
  return NodeLiveness::kDead;
}

std::string_view ToString(RequestState state) {
  switch (state) {
    case RequestState::kQueued: return "queued";
    case RequestState::kRunning: return "running";
    case RequestState::kDone: return "done";
    case RequestState::kFailed: return "failed";
    case RequestState::kCancelled: return "cancelled";
  }
  return "unknown";
}

absl::StatusOr<RequestState> ParseRequestState(std::string_view text) {
  for (RequestState s : {RequestState::kQueued, RequestState::kRunning, RequestState::kDone,
                         RequestState::kFailed, RequestState::kCancelled}) {
    if (ToString(s) == text) return s;
  }
  return absl::InvalidArgumentError(fmt::format("unknown request state '{}'", text));
}

std::string_view ToString(RequestFileState state) {
  switch (state) {
    case RequestFileState::kWanted: return "wanted";
    case RequestFileState::kCopying: return "copying";
    case RequestFileState::kDone: return "done";
    case RequestFileState::kFailed: return "failed";
  }
  return "unknown";
}

absl::StatusOr<RequestFileState> ParseRequestFileState(std::string_view text) {
  for (RequestFileState s : {RequestFileState::kWanted, RequestFileState::kCopying,
                             RequestFileState::kDone, RequestFileState::kFailed}) {
    if (ToString(s) == text) return s;
  }
  return absl::InvalidArgumentError(
      fmt::format("unknown request file state '{}' (wanted, copying, done, failed)", text));
}

std::string_view ToString(RequestOrigin origin) {
  switch (origin) {
    case RequestOrigin::kUser:
      return "user";
    case RequestOrigin::kPolicy:
      return "policy";
    case RequestOrigin::kRepair:
      return "repair";
  }
  return "unknown";
}

absl::StatusOr<RequestOrigin> ParseRequestOrigin(std::string_view text) {
  for (RequestOrigin o : {RequestOrigin::kUser, RequestOrigin::kPolicy, RequestOrigin::kRepair}) {
    if (ToString(o) == text) return o;
  }
  return absl::InvalidArgumentError(fmt::format("unknown request origin '{}'", text));
}

std::string DescribeOwner(const RequestSpec& spec) {
  if (spec.origin == RequestOrigin::kPolicy) return fmt::format("policy:{}", spec.owner);
  return spec.owner;
}

std::string_view ToString(TaskState state) {
  switch (state) {
    case TaskState::kQueued: return "queued";
    case TaskState::kLeased: return "leased";
    case TaskState::kDone: return "done";
    case TaskState::kFailed: return "failed";
    case TaskState::kCancelled: return "cancelled";
  }
  return "unknown";
}

absl::StatusOr<TaskState> ParseTaskState(std::string_view text) {
  for (TaskState s : {TaskState::kQueued, TaskState::kLeased, TaskState::kDone,
                      TaskState::kFailed, TaskState::kCancelled}) {
    if (ToString(s) == text) return s;
  }
  return absl::InvalidArgumentError(fmt::format("unknown task state '{}'", text));
}

std::string_view ToString(EventKind kind) {
  switch (kind) {
    case EventKind::kReplica: return "replica";
    case EventKind::kTask: return "task";
    case EventKind::kRequest: return "request";
    case EventKind::kNode: return "node";
    case EventKind::kAudit: return "audit";
    case EventKind::kRoute: return "route";
  }
  return "unknown";
}

bool QueuesTaskFor(const Event& e, std::string_view node) {
  return e.kind == EventKind::kTask && e.node == node && e.state == ToString(TaskState::kQueued);
}

absl::Status Validate(const RouteObservation& o) {
  if (absl::Status s = ValidateName(o.src_site); !s.ok()) {
    return absl::InvalidArgumentError(fmt::format("route observation: {}", std::string(s.message())));
  }
  auto bad = [&](std::string_view field) {
    return absl::InvalidArgumentError(
        fmt::format("route observation from {}: {} out of range", o.src_site, field));
  };
  // Written so that NaN fails every check.
  if (!(o.min_rtt_ms >= 0 && o.min_rtt_ms <= kMaxObservedRttMs)) return bad("min_rtt_ms");
  if (!(o.srtt_ms >= 0 && o.srtt_ms <= kMaxObservedRttMs)) return bad("srtt_ms");
  if (!(o.loss >= 0 && o.loss <= 1)) return bad("loss");
  if (o.peak_bps > kMaxObservedBps) return bad("peak_bps");
  if (o.congestion.size() > 15) return bad("congestion");
  for (char c : o.congestion) {
    if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' || c == '-')) return bad("congestion");
  }
  return absl::OkStatus();
}

absl::Status Validate(const DiskProfile& d) {
  auto bad = [](std::string_view field) {
    return absl::InvalidArgumentError(fmt::format("disk profile: {} out of range", field));
  };
  if (d.dir.size() > kMaxDiskDirBytes) return bad("dir");
  if (d.write_io_size_bytes > kMaxDiskIoSize) return bad("write_io_size_bytes");
  if (d.direct && d.write_io_size_bytes % 4096 != 0) {
    return absl::InvalidArgumentError("disk profile: direct writes need a write_io_size_bytes multiple of 4096");
  }
  // Written so that NaN fails.
  if (!(d.write_mbps >= 0 && d.write_mbps < 1e9)) return bad("write_mbps");
  if (!(d.read_mbps >= 0 && d.read_mbps < 1e9)) return bad("read_mbps");
  if (d.measured_ns < 0) return bad("measured_ns");
  return absl::OkStatus();
}

RouteObserved WithObservation(RouteObserved r, const RouteObservation& o, std::int64_t now_ns) {
  constexpr std::int64_t kDayNs = 24LL * 3600 * 1'000'000'000;
  if (o.min_rtt_ms > 0) {
    r.rtt_ms = o.min_rtt_ms;
    r.srtt_ms = o.srtt_ms;
    r.loss = o.loss;
  }
  if (o.peak_bps > 0 && (o.peak_bps > r.peak_bps || now_ns - r.peak_ns > kDayNs)) {
    r.peak_bps = o.peak_bps;
    r.peak_ns = now_ns;
  }
  r.bytes += o.bytes;
  r.at_ns = now_ns;
  if (!o.congestion.empty()) r.congestion = o.congestion;
  return r;
}

absl::Status ValidateName(std::string_view name) {
  if (name.empty()) return absl::InvalidArgumentError("empty name");
  if (name == "." || name == "..") {
    return absl::InvalidArgumentError(fmt::format("name '{}' is not allowed", name));
  }
  if (name.size() > kMaxNameBytes) {
    return absl::InvalidArgumentError(
        fmt::format("name of {} bytes is longer than {} bytes", name.size(), kMaxNameBytes));
  }
  for (char c : name) {
    const auto u = static_cast<unsigned char>(c);
    if (u < 0x20 || u == 0x7f) {
      // The byte's code, not the byte: the message may reach a log or a terminal.
      return absl::InvalidArgumentError(
          fmt::format("name contains the control character 0x{:02x}", static_cast<unsigned>(u)));
    }
  }
  if (name.find('/') != std::string_view::npos) {
    return absl::InvalidArgumentError(fmt::format("name '{}' contains '/'", name));
  }
  if (!IsValidUtf8(name)) return absl::InvalidArgumentError("name is not valid UTF-8");
  return absl::OkStatus();
}

bool IsValidUtf8(std::string_view text) {
  std::size_t i = 0;
  while (i < text.size()) {
    const auto c = static_cast<unsigned char>(text[i]);
    if (c < 0x80) {
      ++i;
      continue;
    }
    std::size_t len = 0;
    std::uint32_t cp = 0;
    if (c >= 0xc2 && c <= 0xdf) {
      len = 2;
      cp = c & 0x1f;
    } else if (c >= 0xe0 && c <= 0xef) {
      len = 3;
      cp = c & 0x0f;
    } else if (c >= 0xf0 && c <= 0xf4) {
      len = 4;
      cp = c & 0x07;
    } else {
      return false;  // continuation byte, overlong lead (c0, c1) or beyond f4
    }
    if (text.size() - i < len) return false;
    for (std::size_t k = 1; k < len; ++k) {
      const auto cc = static_cast<unsigned char>(text[i + k]);
      if ((cc & 0xc0) != 0x80) return false;
      cp = (cp << 6) | (cc & 0x3f);
    }
    if ((len == 3 && cp < 0x800) || (len == 4 && cp < 0x10000) || cp > 0x10ffff ||
        (cp >= 0xd800 && cp <= 0xdfff)) {
      return false;
    }
    i += len;
  }
  return true;
}

std::string_view TruncateUtf8(std::string_view text, std::size_t max_bytes) {
  if (text.size() <= max_bytes) return text;
  std::size_t end = max_bytes;
  // Back up over continuation bytes to the start of the sequence that was cut.
  while (end > 0 && (static_cast<unsigned char>(text[end]) & 0xc0) == 0x80) --end;
  return text.substr(0, end);
}

absl::StatusOr<std::vector<std::string>> SplitPath(std::string_view path) {
  if (path.size() > kMaxPathBytes) {
    return absl::InvalidArgumentError(
        fmt::format("path of {} bytes is longer than {} bytes", path.size(), kMaxPathBytes));
  }
  if (path.empty()) return absl::InvalidArgumentError("empty path");
  if (path.front() != '/') {
    return absl::InvalidArgumentError(fmt::format("path '{}' is not absolute", path));
  }
  std::vector<std::string> parts;
  std::size_t i = 0;
  while (i < path.size()) {
    while (i < path.size() && path[i] == '/') ++i;
    if (i >= path.size()) break;
    std::size_t j = path.find('/', i);
    if (j == std::string_view::npos) j = path.size();
    std::string_view part = path.substr(i, j - i);
    if (absl::Status s = ValidateName(part); !s.ok()) {
      return absl::InvalidArgumentError(
          fmt::format("bad path '{}': {}", path.find('\0') == std::string_view::npos
                                               ? path
                                               : std::string_view("<contains NUL>"),
                      std::string(s.message())));
    }
    parts.emplace_back(part);
    i = j;
  }
  return parts;
}

std::string JoinPath(const std::vector<std::string>& components) {
  if (components.empty()) return "/";
  std::string out;
  for (const std::string& c : components) {
    out += '/';
    out += c;
  }
  return out;
}

absl::Status Validate(const ReplicaTransition& t) {
  if (absl::Status s = ValidateName(t.node); !s.ok()) return s;
  if (t.note.size() > kMaxLabelBytes || !IsValidUtf8(t.note)) {
    return absl::InvalidArgumentError("a replica note must be UTF-8 of at most 1024 bytes");
  }
  using S = ReplicaState;
  const bool allowed =
      ((t.from == S::kComplete || t.from == S::kUnverified) &&
       (t.to == S::kComplete || t.to == S::kCorrupt || t.to == S::kLost || t.to == S::kDeleting)) ||
      (t.from == S::kComplete && t.to == S::kUnverified) ||
      (t.from == S::kUnverified && t.to == S::kUnverified) ||
      ((IsBad(t.from) || t.from == S::kStale) && t.to == S::kDeleting);
  if (!allowed) {
    return absl::InvalidArgumentError(fmt::format("replica transition {} -> {} is not allowed",
                                                  ToString(t.from), ToString(t.to)));
  }
  return absl::OkStatus();
}

std::int64_t SystemNowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

absl::Status Validate(const TelemetryBatch& b) {
  if (absl::Status s = ValidateName(b.node); !s.ok()) return s;
  if (absl::Status s = ValidateName(b.site); !s.ok()) return s;
  if (b.copies.size() > kMaxTelemetryCopies || b.points.size() > kMaxTelemetryPoints) {
    return absl::InvalidArgumentError(fmt::format("telemetry batch: {} copies, {} points (at most {}, {})",
                                                  b.copies.size(), b.points.size(), kMaxTelemetryCopies,
                                                  kMaxTelemetryPoints));
  }
  std::size_t streams = 0;
  for (const TelemetryCopy& c : b.copies) {
    if (absl::Status s = ValidateName(c.src_node); !s.ok()) return s;
    if (absl::Status s = ValidateName(c.src_site); !s.ok()) return s;
    if (c.streams > kMaxTelemetryStreams) {
      return absl::InvalidArgumentError(
          fmt::format("telemetry copy of task {} with {} streams (at most {})", c.task_id, c.streams,
                      kMaxTelemetryStreams));
    }
    streams += c.streams;
  }
  std::int64_t last = std::numeric_limits<std::int64_t>::min();
  for (const TelemetryPoint& p : b.points) {
    if (p.bytes.size() != b.copies.size()) {
      return absl::InvalidArgumentError(fmt::format("telemetry point with {} counts for {} copies",
                                                    p.bytes.size(), b.copies.size()));
    }
    if (!p.stream_bytes.empty() && p.stream_bytes.size() != streams) {
      return absl::InvalidArgumentError(fmt::format(
          "telemetry point with {} stream counts for {} streams", p.stream_bytes.size(), streams));
    }
    if (p.time_ns <= last) return absl::InvalidArgumentError("telemetry points out of order");
    last = p.time_ns;
  }
  return absl::OkStatus();
}

}  // namespace gfrep::catalog
