#include "transfer/congestion.h"

#include <fmt/format.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <optional>
#include <sstream>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "transfer/internal/bpf_congestion.h"

extern char** environ;

namespace gfrep::transfer {
namespace {

constexpr std::chrono::seconds kFailureMemory{60};

struct Registry {
  absl::Mutex mu;
  std::map<internal::BpfControlKind, std::unique_ptr<internal::BpfControl>> bpf ABSL_GUARDED_BY(mu);
  std::map<std::string, std::pair<absl::Status, std::chrono::steady_clock::time_point>> failures
      ABSL_GUARDED_BY(mu);
};

Registry& TheRegistry() {
  static Registry* r = new Registry();  // never destroyed: exit() unregisters through the kernel
  return *r;
}

bool Offered(std::string_view name) {
  for (const std::string& n : AvailableCongestionControls()) {
    if (n == name) return true;
  }
  return false;
}

// `modprobe -q tcp_NAME`, as root only; true if it exited 0.
bool LoadModule(std::string_view name) {
  if (::geteuid() != 0) return false;
  for (const char* path : {"/usr/sbin/modprobe", "/sbin/modprobe"}) {
    if (!std::filesystem::exists(path)) continue;
    std::string module = fmt::format("tcp_{}", name);
    std::string quiet = "-q";
    char* argv[] = {const_cast<char*>(path), quiet.data(), module.data(), nullptr};
    pid_t pid = 0;
    if (::posix_spawn(&pid, path, nullptr, nullptr, argv, environ) != 0) return false;
    int status = 0;
    while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    return WIFEXITED(status) && WEXITSTATUS(status) == 0;
  }
  return false;
}

// What gfrep's BPF program `name` is, for the one-line detail.
std::string_view WhatBpf(std::string_view name) {
  return name == kGfrepCubic ? "the kernel's CUBIC keeping its window over idle" : "RFC 3649";
}

CongestionControl Describe(std::string name, CongestionSource source, bool legacy = false) {
  CongestionControl c;
  c.name = std::move(name);
  c.source = source;
  switch (source) {
    case CongestionSource::kKernel:
      c.detail = fmt::format("{}: the kernel's", c.name);
      break;
    case CongestionSource::kKernelModule:
      c.detail = fmt::format("{}: the kernel's module tcp_{}, loaded by this process", c.name, c.name);
      break;
    case CongestionSource::kBpf:
      c.detail = fmt::format("{}: gfrep BPF ({}), registered by this process{}", c.name, WhatBpf(c.name),
                             legacy ? " (without a link: removed at a normal exit only)" : "");
      break;
    case CongestionSource::kBpfShared:
      c.detail = fmt::format("{}: gfrep BPF ({}), registered by another process", c.name, WhatBpf(c.name));
      break;
  }
  return c;
}

// Remembers that `key` could not be had (for kFailureMemory) and returns why.
absl::Status Remember(Registry& r, const std::string& key, absl::Status s)
    ABSL_EXCLUSIVE_LOCKS_REQUIRED(r.mu) {
  r.failures[key] = {s, std::chrono::steady_clock::now()};
  return s;
}

// The source of an algorithm the kernel offers. REQUIRES: r.mu held.
CongestionControl DescribeOffered(Registry& r, std::string_view name)
    ABSL_EXCLUSIVE_LOCKS_REQUIRED(r.mu) {
  if (const std::optional<internal::BpfControlKind> kind = internal::BpfControlNamed(name)) {
    if (auto it = r.bpf.find(*kind); it != r.bpf.end()) {
      return Describe(std::string(name), CongestionSource::kBpf, it->second->legacy());
    }
    if (internal::GfrepRegistered(*kind)) return Describe(std::string(name), CongestionSource::kBpfShared);
  }
  return Describe(std::string(name), CongestionSource::kKernel);
}

}  // namespace

std::string_view ToString(CongestionSource source) {
  switch (source) {
    case CongestionSource::kKernel:
      return "kernel";
    case CongestionSource::kKernelModule:
      return "kernel-module";
    case CongestionSource::kBpf:
      return "bpf";
    case CongestionSource::kBpfShared:
      return "bpf-shared";
  }
  return "unknown";
}

bool IsCongestionControlName(std::string_view name) {
  if (name.empty() || name.size() > 15) return false;
  for (char c : name) {
    if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' || c == '-')) return false;
  }
  return true;
}

std::vector<std::string> AvailableCongestionControls() {
  std::ifstream in("/proc/sys/net/ipv4/tcp_available_congestion_control");
  std::vector<std::string> names;
  std::string name;
  while (in >> name) names.push_back(name);
  return names;
}

absl::StatusOr<CongestionControl> DescribeCongestionControl(std::string_view name) {
  if (!IsCongestionControlName(name)) return absl::InvalidArgumentError(fmt::format("congestion control name '{}'", name));
  if (!Offered(name)) {
    return absl::NotFoundError(fmt::format("congestion control '{}' is not offered by this kernel "
                                           "(available: {})",
                                           name, absl::StrJoin(AvailableCongestionControls(), " ")));
  }
  Registry& r = TheRegistry();
  absl::MutexLock lock(&r.mu);
  return DescribeOffered(r, name);
}

absl::StatusOr<CongestionControl> EnsureCongestionControl(std::string_view name,
                                                          const EnsureOptions& options) {
  if (!IsCongestionControlName(name)) return absl::InvalidArgumentError(fmt::format("congestion control name '{}'", name));
  Registry& r = TheRegistry();
  absl::MutexLock lock(&r.mu);
  if (Offered(name)) return DescribeOffered(r, name);
  const std::string key(name);
  if (auto it = r.failures.find(key);
      it != r.failures.end() && std::chrono::steady_clock::now() - it->second.second < kFailureMemory) {
    return it->second.first;
  }
  if (options.allow_module && LoadModule(name) && Offered(name)) {
    r.failures.erase(key);
    return Describe(key, CongestionSource::kKernelModule);
  }
  const std::optional<internal::BpfControlKind> kind = internal::BpfControlNamed(name);
  if (!kind) {
    return Remember(
        r, key,
        absl::NotFoundError(fmt::format(
            "congestion control '{}' is not available here (available: {}) and gfrep has no "
            "implementation of its own",
            name, absl::StrJoin(AvailableCongestionControls(), " "))));
  }
  if (!options.allow_bpf) {
    return Remember(r, key,
                    absl::FailedPreconditionError(fmt::format(
                        "congestion control '{}': not in this kernel and BPF not allowed", name)));
  }
  // A registration of ours from earlier whose name has gone (should not happen while we hold
  // it; drop it so a fresh one can take its place).
  r.bpf.erase(*kind);
  bool legacy = options.legacy_registration;
  absl::StatusOr<std::unique_ptr<internal::BpfControl>> bpf = internal::BpfControl::Register(*kind, legacy);
  if (!bpf.ok() && !legacy && !absl::IsAlreadyExists(bpf.status())) {
    // Kernels before 6.4 have no struct_ops links: register the older way.
    absl::StatusOr<std::unique_ptr<internal::BpfControl>> old = internal::BpfControl::Register(*kind, true);
    if (old.ok()) {
      bpf = std::move(old);
      legacy = true;
    }
  }
  if (!bpf.ok()) {
    if (absl::IsAlreadyExists(bpf.status())) {
      // Another process registered it between our look and our load (and, if it is gone
      // again already, the next socket tries afresh: not remembered as a failure).
      if (Offered(name)) return DescribeOffered(r, name);
      return bpf.status();
    }
    return Remember(r, key, bpf.status());
  }
  r.bpf[*kind] = std::move(*bpf);
  r.failures.erase(key);
  return Describe(key, CongestionSource::kBpf, legacy);
}

absl::StatusOr<HighSpeedCounters> ReadHighSpeedCounters() {
  Registry& r = TheRegistry();
  absl::MutexLock lock(&r.mu);
  auto it = r.bpf.find(internal::BpfControlKind::kHighSpeed);
  if (it == r.bpf.end()) return absl::NotFoundError("this process has not registered BPF highspeed");
  return it->second->HighSpeed();
}

absl::StatusOr<GfrepCubicCounters> ReadGfrepCubicCounters() {
  Registry& r = TheRegistry();
  absl::MutexLock lock(&r.mu);
  auto it = r.bpf.find(internal::BpfControlKind::kGfrepCubic);
  if (it == r.bpf.end()) return absl::NotFoundError("this process has not registered BPF gfrep_cubic");
  return it->second->GfrepCubic();
}

void ReleaseCongestionControls() {
  Registry& r = TheRegistry();
  absl::MutexLock lock(&r.mu);
  r.bpf.clear();
  r.failures.clear();
}

}  // namespace gfrep::transfer
