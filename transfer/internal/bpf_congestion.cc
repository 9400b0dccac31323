#include "transfer/internal/bpf_congestion.h"

#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <unistd.h>

#include <fmt/format.h>

#include <cerrno>
#include <cstdarg>
#include <cstring>
#include <string>

#include "transfer/bpf/hstcp_table.h"
#include "transfer/bpf/gfrep_cubic_stats.h"
#include "transfer/bpf/gfrep_cubic.skel.h"  // generated (transfer/CMakeLists.txt)
#include "transfer/bpf/highspeed.skel.h"

namespace gfrep::transfer::internal {
namespace {

// Kernel ABI values newer than Debian 12's <linux/bpf.h> (6.1): a struct_ops map registered
// through a link (Linux 6.4).
constexpr unsigned kBpfFLink = 1u << 13;             // BPF_F_LINK
constexpr int kBpfStructOpsAttach = 44;              // BPF_STRUCT_OPS (enum bpf_attach_type)

// The struct_ops variables' names (the maps' names in the kernel).
const char* MapName(BpfControlKind kind) {
  return kind == BpfControlKind::kHighSpeed ? "gfrep_highspeed" : "gfrep_cubic";
}

// libbpf's messages during one Register call, kept for the error it returns (libbpf prints to
// stderr by default; a daemon wants them in its own error instead).
std::string* g_libbpf_log = nullptr;

int CollectLibbpf(enum libbpf_print_level level, const char* format, va_list args) {
  if (g_libbpf_log == nullptr || level == LIBBPF_DEBUG) return 0;
  char line[512];
  int n = std::vsnprintf(line, sizeof(line), format, args);
  if (n > 0 && g_libbpf_log->size() < 4096) g_libbpf_log->append(line);
  return 0;
}

// The tail of libbpf's messages, one line (the verifier's log can be long).
std::string LibbpfReason(const std::string& log) {
  std::string s = log;
  for (char& c : s) {
    if (c == '\n') c = ' ';
  }
  if (s.size() > 400) s = "..." + s.substr(s.size() - 400);
  return s;
}

absl::Status LoadError(BpfControlKind kind, std::string_view step, int err, const std::string& log) {
  std::string msg = fmt::format("BPF {}: {}: {}{}{}", KernelName(kind), step, std::strerror(err),
                                log.empty() ? "" : " (libbpf: ", log.empty() ? "" : LibbpfReason(log) + ")");
  if (err == EEXIST) return absl::AlreadyExistsError(msg);
  if (err == EPERM || err == EACCES) {
    return absl::FailedPreconditionError(msg + "; needs root (CAP_BPF and CAP_NET_ADMIN)");
  }
  return absl::FailedPreconditionError(msg);
}

}  // namespace

std::string_view KernelName(BpfControlKind kind) {
  return kind == BpfControlKind::kHighSpeed ? "highspeed" : "gfrep_cubic";
}

std::optional<BpfControlKind> BpfControlNamed(std::string_view name) {
  for (BpfControlKind kind : {BpfControlKind::kHighSpeed, BpfControlKind::kGfrepCubic}) {
    if (name == KernelName(kind)) return kind;
  }
  return std::nullopt;
}

absl::StatusOr<std::unique_ptr<BpfControl>> BpfControl::Register(BpfControlKind kind, bool legacy) {
  std::string log;
  g_libbpf_log = &log;
  libbpf_print_fn_t previous = libbpf_set_print(CollectLibbpf);
  struct Restore {
    libbpf_print_fn_t previous;
    ~Restore() {
      libbpf_set_print(previous);
      g_libbpf_log = nullptr;
    }
  } restore{previous};

  std::unique_ptr<BpfControl> self(new BpfControl(kind));
  self->legacy_ = legacy;
  if (kind == BpfControlKind::kHighSpeed) {
    self->highspeed_ = highspeed_bpf__open();
    if (self->highspeed_ != nullptr) self->ops_ = self->highspeed_->maps.gfrep_highspeed;
  } else {
    self->gfrep_cubic_ = gfrep_cubic_bpf__open();
    if (self->gfrep_cubic_ != nullptr) self->ops_ = self->gfrep_cubic_->maps.gfrep_cubic;
  }
  if (self->ops_ == nullptr) return LoadError(kind, "open", errno, log);
  if (!legacy) {
    if (int err = bpf_map__set_map_flags(self->ops_, kBpfFLink); err != 0) {
      return LoadError(kind, "map flags", -err, log);
    }
  }
  const int loaded = kind == BpfControlKind::kHighSpeed ? highspeed_bpf__load(self->highspeed_)
                                                        : gfrep_cubic_bpf__load(self->gfrep_cubic_);
  if (loaded != 0) return LoadError(kind, "load (verifier, BTF or privileges)", -loaded, log);
  struct bpf_link* link = bpf_map__attach_struct_ops(self->ops_);
  if (link == nullptr) return LoadError(kind, "register", errno, log);
  if (legacy) {
    self->legacy_link_ = link;
    return self;
  }
  // For a link map, the update above only readied the ops; the link registers them. libbpf
  // 1.1's own link object would try to delete the map's element on destruction, which link
  // maps refuse: let it go without detaching.
  bpf_link__disconnect(link);
  bpf_link__destroy(link);
  int fd = bpf_link_create(bpf_map__fd(self->ops_), 0,
                           static_cast<enum bpf_attach_type>(kBpfStructOpsAttach), nullptr);
  if (fd < 0) return LoadError(kind, "register (link)", errno, log);
  self->link_fd_ = fd;
  return self;
}

BpfControl::~BpfControl() {
  if (link_fd_ >= 0) ::close(link_fd_);
  if (legacy_link_ != nullptr) bpf_link__destroy(legacy_link_);
  if (highspeed_ != nullptr) highspeed_bpf__destroy(highspeed_);
  if (gfrep_cubic_ != nullptr) gfrep_cubic_bpf__destroy(gfrep_cubic_);
}

HighSpeedCounters BpfControl::HighSpeed() const {
  HighSpeedCounters c;
  if (highspeed_ == nullptr) return c;
  // The .bss is mapped into this process: plain reads of counters the program updates.
  const volatile hstcp_stats& s = highspeed_->bss->gfrep_hstcp_stats;
  c.sockets = s.sockets;
  c.reductions = s.reductions;
  c.undos = s.undos;
  std::uint64_t last = s.last_reduction;
  c.last_cwnd = static_cast<std::uint32_t>(last >> 32);
  c.last_ssthresh = static_cast<std::uint32_t>(last & 0xffffffffu);
  c.max_row = s.max_row;
  c.max_cwnd = s.max_cwnd;
  return c;
}

GfrepCubicCounters BpfControl::GfrepCubic() const {
  GfrepCubicCounters c;
  if (gfrep_cubic_ == nullptr) return c;
  const volatile auto& s = gfrep_cubic_->bss->gfrep_cubic_stats;
  c.sockets = s.sockets;
  c.kept = s.kept;
  c.let_go = s.let_go;
  std::uint64_t last = s.last_kept;
  c.last_kept_cwnd = static_cast<std::uint32_t>(last >> 32);
  c.last_restart_cwnd = static_cast<std::uint32_t>(last & 0xffffffffu);
  return c;
}

std::uint32_t BpfControl::map_id() const {
  struct bpf_map_info info = {};
  __u32 len = sizeof(info);
  if (bpf_obj_get_info_by_fd(bpf_map__fd(ops_), &info, &len) != 0) return 0;
  return info.id;
}

std::vector<std::uint32_t> GfrepStructOpsMaps(BpfControlKind kind) {
  std::vector<std::uint32_t> ids;
  __u32 id = 0;
  while (bpf_map_get_next_id(id, &id) == 0) {
    int fd = bpf_map_get_fd_by_id(id);
    if (fd < 0) continue;
    struct bpf_map_info info = {};
    __u32 len = sizeof(info);
    if (bpf_obj_get_info_by_fd(fd, &info, &len) == 0 && info.type == BPF_MAP_TYPE_STRUCT_OPS &&
        std::strcmp(info.name, MapName(kind)) == 0) {
      ids.push_back(id);
    }
    ::close(fd);
  }
  return ids;
}

bool GfrepRegistered(BpfControlKind kind) { return !GfrepStructOpsMaps(kind).empty(); }

}  // namespace gfrep::transfer::internal
