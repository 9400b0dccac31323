#pragma once

// PolicyEngine: enforces replication policies (replica/plan/policy.h) by creating replication
// requests; the planner (replica/plan/planner.h) does the rest, so a policy's copies get the same
// source selection, limits, retries and explanations as a `gfrep` request.
//
//   - Continuous rules follow the catalog's event log: a file that becomes complete at a new
//     generation (a `gfreg` commit) is matched against every continuous rule, and each rule
//     gets one request per step for all its new files (origin kPolicy, owner the rule's
//     name): copies = the rule's, destination sites = what its site expression selects now (a
//     rule that selects no site logs why and waits), source site = its source expression's
//     site when that selects exactly one.
//   - When rules are loaded (at start, on Reload) every rule is applied once to the files
//     that already exist (a walk of the namespace below each pattern's literal prefix), so a
//     new rule also covers old files.
//   - Lifetimes and removed rules (replica/plan/lifetime.h): every `release_interval` the copies
//     of holds that ended (a rule's lifetime for a file passed; a rule gone for
//     `removed_rule_grace`) move to deleting unless another rule or a `gfrep -N` request
//     needs them (replica/plan/holds.h keeps which requests hold which files). A rule with a
//     lifetime asks for each file once: a reload does not ask again for files it held.
//   - A rule whose sites (or source sites) select no site keeps its files waiting and asks
//     again as soon as the sites or their labels change.
//   - Scheduled rules run at their cron times (replica/core/cron.h): the same walk, as a request.
//     The time of each rule's last run is kept in `state_file` (written atomically), so a run
//     missed while gfcatalogd was down is made up once at start, not once per missed run.
//
// Where rules come from: the catalog's policy document (Catalog::GetPolicies; `gfpolicy apply`
// and `gfcatalogd --policies FILE` put it there), read at every step and parsed when its
// version changes (a document with mistakes is logged once and the rules in force stay), or
// Reload() (tests, and catalogs without a policy document).
//
// Threading: Step() is synchronous; Start() runs it every `interval` on an own thread;
// Reload() may be called from any thread (a SIGHUP handler's thread); Stop() joins.

#include <spdlog/logger.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "catalog/catalog.h"
#include "catalog/event_cursor.h"
#include "replica/plan/holds.h"
#include "replica/plan/policy.h"

namespace gfrep::replica::plan {

struct PolicyEngineOptions {
  // Uses view and work. REQUIRES: those non-null, outliving the engine.
  catalog::Roles catalog;
  // Where the last run of each scheduled rule is remembered (JSON; empty: not remembered,
  // a missed run is not made up).
  std::filesystem::path state_file;
  std::chrono::milliseconds interval{1000};
  // Unix ns; null: catalog::SystemNowNs (tests inject one).
  catalog::Clock clock;
  // How often ended holds are looked for (a pass over every held file: cheap, O(files)).
  std::chrono::milliseconds release_interval{std::chrono::seconds(60)};
  // How long the copies of a removed rule stay (a rule put back within it loses nothing).
  std::chrono::milliseconds removed_rule_grace{std::chrono::hours(1)};
  // Null: spdlog::default_logger().
  std::shared_ptr<spdlog::logger> logger;
};

struct PolicyStepSummary {
  std::uint64_t requests_created = 0;
  std::uint64_t files_requested = 0;
  std::uint64_t scheduled_runs = 0;
  std::uint64_t holds_ended = 0;
  std::uint64_t replicas_released = 0;  // moved to deleting: no rule or request needs them
};

class PolicyEngine {
 public:
  explicit PolicyEngine(PolicyEngineOptions options);
  ~PolicyEngine();

  // Replaces the rules; each is applied once to existing files at the next step.
  void Reload(std::vector<PolicyRule> rules);

  absl::StatusOr<PolicyStepSummary> Step();

  void Start();
  void Stop();

 private:
  std::int64_t Now() const;
  // One request for `paths` under `rule` (split into batches of kMaxBatchPaths).
  absl::Status Request(const PolicyRule& rule, const std::vector<std::string>& paths,
                       const std::vector<catalog::Site>& sites, PolicyStepSummary& summary);
  // The sites changed: files waiting for an eligible site are asked for again.
  absl::Status RetryWaiting(const std::vector<PolicyRule>& rules, const std::vector<catalog::Site>& sites,
                            PolicyStepSummary& summary);
  absl::Status LoadState();
  absl::Status SaveState();
  void Loop();
  // Loop's wait ends: stopping, or new rules.
  bool WakeLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stop_.load() || reloaded_; }

  PolicyEngineOptions options_;
  std::shared_ptr<spdlog::logger> log_;

  mutable absl::Mutex mu_;
  std::vector<PolicyRule> rules_ ABSL_GUARDED_BY(mu_);
  bool reloaded_ ABSL_GUARDED_BY(mu_) = false;     // apply every rule to existing files
  bool rules_known_ ABSL_GUARDED_BY(mu_) = false;  // rules were loaded (else nothing is released)

  // Step() state (one caller at a time).
  bool started_ = false;
  std::optional<catalog::EventCursor> events_;  // set at the first Step()
  std::uint64_t document_version_ = 0;  // of the catalog's policy document last looked at
  std::map<std::string, std::int64_t> last_run_ns_;  // scheduled rule -> last run
  std::set<std::pair<catalog::InodeId, std::uint64_t>> seen_;  // generations already matched
  HoldIndex holds_;
  std::map<std::string, std::int64_t> removed_since_;  // rules gone -> when first seen gone
  std::int64_t last_release_ns_ = 0;
  std::map<std::string, std::vector<std::string>> waiting_;  // rule -> files with no site
  std::string sites_key_;  // the sites and labels last seen

  std::atomic<bool> stop_{false};  // set under mu_, so that Loop's wait ends at once
  std::thread thread_;
};

}  // namespace gfrep::replica::plan
