#pragma once

// Why is this file not replicated (yet)? Per rule and per file, from what the catalog holds:
// the rule's sites now, the file's complete replicas there, the rule's requests and their
// copies (tasks), and the nodes' heartbeats. Used by `gfpolicy explain PATH` and `gfpolicy
// status RULE`; `DescribeTask` also by `gfrep status`.
//
// Thread safety: functions; blocking (catalog calls).

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "catalog/catalog.h"
#include "replica/plan/policy.h"

namespace gfrep::replica::plan {

// kEnded: the rule's lifetime for the file has passed; it wants no copies any more (the ones
// it made are released, replica/plan/lifetime.h).
enum class RuleFileState { kSatisfied, kInFlight, kWaiting, kFailed, kEnded };
std::string_view ToString(RuleFileState state);

struct RuleFileVerdict {
  std::string rule;
  std::string path;
  RuleFileState state = RuleFileState::kWaiting;
  std::uint32_t wanted = 0;        // copies the rule wants in its sites
  std::uint32_t have = 0;          // complete replicas of the current generation there
  std::vector<std::string> sites;  // what the rule's expression selects now
  std::uint64_t request_id = 0;    // the rule's latest request naming the file (0: none)
  std::string reason;              // why, for every state but satisfied
};

struct ExplainOptions {
  std::int64_t now_ns = 0;  // 0: now
  std::chrono::milliseconds heartbeat_timeout{30000};
};

// One verdict per rule that matches `path` (none: no rule matches).
absl::StatusOr<std::vector<RuleFileVerdict>> ExplainPath(catalog::CatalogView& catalog,
                                                         const std::vector<PolicyRule>& rules,
                                                         const std::string& path,
                                                         const ExplainOptions& options = {});

struct RuleStatusSummary {
  std::string rule;
  std::uint64_t files = 0;
  std::uint64_t satisfied = 0;
  std::uint64_t in_flight = 0;
  std::uint64_t waiting = 0;
  std::uint64_t failed = 0;
  std::uint64_t ended = 0;
  std::vector<RuleFileVerdict> unsatisfied;  // at most `limit`, in path order
};

// Every file under the rule's patterns now, classified.
absl::StatusOr<RuleStatusSummary> StatusOfRule(catalog::CatalogView& catalog,
                                               const PolicyRule& rule, std::size_t limit = 100,
                                               const ExplainOptions& options = {});

// Unix ns as "2026-11-24T03:19:20Z".
std::string FormatUtc(std::int64_t ns);

// Why one copy (task) is where it is, in words ("backing off until ... after: ...").
std::string DescribeTask(const catalog::Task& task, std::int64_t now_ns);

// The files under `rule`'s patterns now, in path order (a walk of the namespace from each
// pattern's literal prefix); with `keep`, only those it returns true for.
absl::StatusOr<std::vector<std::string>> FilesOfRule(
    catalog::CatalogView& catalog, const PolicyRule& rule,
    const std::function<bool(const catalog::Attributes&)>& keep = nullptr);

}  // namespace gfrep::replica::plan
