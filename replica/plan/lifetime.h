#pragma once

// Lifetimes: the copies a rule made, once no rule needs them, go.
//
// A policy rule's hold on a file (replica/plan/holds.h) ends when
//   - the rule has a `lifetime` and that long has passed since its request for the file was
//     created (Rucio's rule lifetime, per file: a continuous rule's copies of each new file
//     live `lifetime` from the file's arrival), or
//   - the rule is no longer in force (removed from the policies) and `removed_grace` has
//     passed since the engine first saw it gone (an accidental `gfpolicy rm` undone within
//     the grace loses nothing).
// Then each copy that request made (its done tasks: the destination node, the generation
// it copied) that is still the file's complete replica of the current generation moves to
// `deleting` (its node unlinks it, as for any removed replica), unless removing it would
// leave some other holder short:
//   - a `gfrep -N` request not cancelled (its copy count in its destination sites, or
//     anywhere);
//   - a rule in force whose hold on the file has not ended (its count in the sites its
//     expression selects now), or a continuous rule in force that matches the file and
//     has not held it yet;
//   - and never the last complete replica (the catalog refuses that too).
// A copy kept because another holder needs it stays; the ended hold is released once its
// request is over (while it still runs, copies it finishes later go at later passes).
//
// Thread safety: none (called from the policy engine's thread).

#include <spdlog/logger.h>

#include <chrono>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "catalog/catalog.h"
#include "replica/plan/holds.h"
#include "replica/plan/policy.h"

namespace gfrep::replica::plan {

struct ReleaseSummary {
  std::uint64_t holds_ended = 0;  // ended holds looked at (again each pass while their request runs)
  std::uint64_t replicas_removed = 0;  // moved to deleting
  std::uint64_t replicas_kept = 0;     // made by an ended hold, still needed by another
};

struct ReleaseInput {
  catalog::Roles catalog;               // uses view and replicas (REQUIRES non-null)
  HoldIndex* holds = nullptr;           // REQUIRES non-null, updated
  const std::vector<PolicyRule>* rules = nullptr;  // in force; REQUIRES non-null
  // Rules no longer in force -> when the engine first saw them gone (Unix ns). Rules found
  // gone here for the first time are added with `now_ns`.
  std::map<std::string, std::int64_t>* removed_since = nullptr;
  std::chrono::nanoseconds removed_grace{0};
  std::int64_t now_ns = 0;
};

// Ends the holds due at `now_ns` and releases their copies (see above).
absl::StatusOr<ReleaseSummary> ReleaseEndedHolds(const ReleaseInput& in, spdlog::logger& log);

}  // namespace gfrep::replica::plan
