#pragma once

// Replication policies: rules that say, once, where copies of which files must be. This
// header holds what a rule is and how a policy file is read and checked; PolicyEngine
// (policy_engine.h) enforces the rules, continuously from the catalog's event log and on
// schedules (replica/README.md "Policies").
//
// A policy file (YAML, written by hand):
//
//   rules:
//     - name: exp-two-copies-in-japan       # [A-Za-z0-9_.-]+, unique
//       paths: ["/exp/**", "/sim/2026/*.root"]
//       copies: 2                           # complete replicas wanted in the selected sites
//       sites: "region=jp & !tape"          # site expression (replica/core/site_expr.h)
//       source_sites: "tsukuba"             # optional: copy only from these
//       priority: 10                        # optional, higher first (default 0)
//       lifetime: 30d                       # optional: after this the rule's extra copies
//                                           #   may be removed (never the last one)
//       continuous: true                    # new files are replicated as they appear
//                                           #   (default true unless a schedule is given)
//     - name: nightly-mirror
//       paths: ["/sim/**"]
//       copies: 1
//       sites: sdsc
//       source_sites: tsukuba
//       schedule: "0 2 * * *"               # cron (replica/core/cron.h)
//       timezone: Asia/Tokyo                # default UTC
//
// Path patterns: absolute; `*` matches within one path component, `?` one character of it,
// `**` (a whole component) any number of components, none included ("/exp/**" matches
// "/exp" and everything below it).
//
// Errors are kInvalidArgument with the file's line (and column) of the offending item:
// "policy.yaml:7:14: copies: must be a whole number 1..100, not 'two'". Unknown keys are
// errors (a typo must not silently drop a constraint).
//
// Thread safety: values.

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "replica/core/cron.h"
#include "replica/core/site_expr.h"

namespace gfrep::replica::plan {

struct PolicyRule {
  std::string name;
  std::vector<std::string> paths;  // patterns
  std::uint32_t copies = 1;
  SiteExpr sites;
  std::optional<SiteExpr> source_sites;
  std::int32_t priority = 0;
  std::optional<std::chrono::seconds> lifetime;
  bool continuous = true;
  std::optional<CronSchedule> schedule;
  int line = 0;  // where the rule starts in its file (0: not from a file)
};

// True if `path` (absolute, normalised) matches `pattern` (see above).
bool MatchPath(std::string_view pattern, std::string_view path);

// True if `path` matches one of the rule's patterns.
bool Matches(const PolicyRule& rule, std::string_view path);

// Parses and checks a policy file's text; `file` names it in errors.
absl::StatusOr<std::vector<PolicyRule>> ParsePolicies(std::string_view text, std::string_view file);

// Reads and parses a policy file (kNotFound / kPermissionDenied if unreadable).
absl::StatusOr<std::vector<PolicyRule>> LoadPolicyFile(const std::string& path);

// "30d", "12h", "90m", "3600s", "2w" -> seconds (kInvalidArgument otherwise).
absl::StatusOr<std::chrono::seconds> ParseDuration(std::string_view text);

}  // namespace gfrep::replica::plan
