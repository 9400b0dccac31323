#pragma once

// gfrep's BPF congestion controls in the kernel: load, register, read their counters,
// unregister. Two programs: HighSpeed TCP (transfer/bpf/highspeed.bpf.c, registered as
// "highspeed" where the kernel lacks it) and CUBIC keeping its window over idle
// (transfer/bpf/gfrep_cubic.bpf.c, "gfrep_cubic"). transfer/congestion.cc decides when.
//
// Thread safety: one object is used under congestion.cc's registry mutex.

#include <cstdint>
#include <memory>
#include <optional>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "transfer/congestion.h"

struct highspeed_bpf;
struct gfrep_cubic_bpf;
struct bpf_link;
struct bpf_map;

namespace gfrep::transfer::internal {

enum class BpfControlKind { kHighSpeed, kGfrepCubic };

// The kernel's name for each ("highspeed", "gfrep_cubic").
std::string_view KernelName(BpfControlKind kind);
// The kind registered under `name`; nullopt for a name that none of gfrep's programs takes.
std::optional<BpfControlKind> BpfControlNamed(std::string_view name);

class BpfControl {
 public:
  // Loads the program and registers it. With `legacy`, the registration is the pre-6.4 kind
  // (no link: this object's destructor removes it, a killed process leaves it); otherwise it
  // is bound to a BPF link descriptor that the kernel closes with the process.
  // kAlreadyExists: some other provider already registered the name. kFailedPrecondition:
  // no privileges, no BTF, or a kernel without BPF congestion controls (libbpf's reason in the
  // message).
  static absl::StatusOr<std::unique_ptr<BpfControl>> Register(BpfControlKind kind, bool legacy);
  ~BpfControl();
  BpfControl(const BpfControl&) = delete;
  BpfControl& operator=(const BpfControl&) = delete;

  BpfControlKind kind() const { return kind_; }
  bool legacy() const { return legacy_; }
  // The kernel's id of this registration's struct_ops map (0 if unknown).
  std::uint32_t map_id() const;
  // The program's counters; zeros for the other kind's.
  HighSpeedCounters HighSpeed() const;
  GfrepCubicCounters GfrepCubic() const;

 private:
  explicit BpfControl(BpfControlKind kind) : kind_(kind) {}

  const BpfControlKind kind_;
  highspeed_bpf* highspeed_ = nullptr;      // one of the two skeletons, by kind_
  gfrep_cubic_bpf* gfrep_cubic_ = nullptr;
  ::bpf_map* ops_ = nullptr;                // the skeleton's struct_ops map
  ::bpf_link* legacy_link_ = nullptr;       // legacy registration (detaching unregisters)
  int link_fd_ = -1;                        // link registration (closing unregisters)
  bool legacy_ = false;
};

// The ids of the live struct_ops maps of gfrep's program `kind` on this host: registrations
// by any process, and programs whose registration ended but that connections still use (a
// closing connection can hold one for a while). Empty when the maps cannot be listed (no
// privileges).
std::vector<std::uint32_t> GfrepStructOpsMaps(BpfControlKind kind);
// !GfrepStructOpsMaps(kind).empty().
bool GfrepRegistered(BpfControlKind kind);

inline std::vector<std::uint32_t> GfrepHighSpeedMaps() { return GfrepStructOpsMaps(BpfControlKind::kHighSpeed); }
inline bool GfrepHighSpeedRegistered() { return GfrepRegistered(BpfControlKind::kHighSpeed); }

}  // namespace gfrep::transfer::internal
