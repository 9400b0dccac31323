#pragma once

// gfrep's BPF HighSpeed TCP (transfer/bpf/highspeed.bpf.c) in the kernel: load, register
// under "highspeed", read its counters, unregister. transfer/congestion.cc decides when.
//
// Thread safety: one object is used under congestion.cc's registry mutex.

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "transfer/congestion.h"

struct highspeed_bpf;
struct bpf_link;

namespace gfrep::transfer::internal {

class BpfHighSpeed {
 public:
  // Loads the program and registers it. With `legacy`, the registration is the pre-6.4 kind
  // (no link: this object's destructor removes it, a killed process leaves it); otherwise it
  // is bound to a BPF link descriptor that the kernel closes with the process.
  // kAlreadyExists: some other provider already registered "highspeed". kFailedPrecondition:
  // no privileges, no BTF, or a kernel without BPF congestion controls (libbpf's reason in the
  // message).
  static absl::StatusOr<std::unique_ptr<BpfHighSpeed>> Register(bool legacy);
  ~BpfHighSpeed();
  BpfHighSpeed(const BpfHighSpeed&) = delete;
  BpfHighSpeed& operator=(const BpfHighSpeed&) = delete;

  bool legacy() const { return legacy_; }
  // The kernel's id of this registration's struct_ops map (0 if unknown).
  std::uint32_t map_id() const;
  HighSpeedCounters Counters() const;

 private:
  BpfHighSpeed() = default;

  highspeed_bpf* skel_ = nullptr;
  ::bpf_link* legacy_link_ = nullptr;  // legacy registration (detaching unregisters)
  int link_fd_ = -1;                   // link registration (closing unregisters)
  bool legacy_ = false;
};

// The ids of the live struct_ops maps named "gfrep_highspeed" on this host: registrations of
// gfrep's BPF program by any process, and programs whose registration ended but that
// connections still use (a closing connection can hold one for a while). Empty when the maps
// cannot be listed (no privileges).
std::vector<std::uint32_t> GfrepHighSpeedMaps();
// !GfrepHighSpeedMaps().empty().
bool GfrepHighSpeedRegistered();

}  // namespace gfrep::transfer::internal
