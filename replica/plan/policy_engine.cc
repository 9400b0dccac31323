#include "replica/plan/policy_engine.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "replica/plan/lifetime.h"
#include "replica/plan/policy_explain.h"
#include "transfer/durable_file.h"

namespace gfrep::replica::plan {
namespace {

constexpr std::size_t kEventBatch = 10000;
constexpr std::size_t kMaxSeen = 1'000'000;
constexpr std::size_t kMaxWaiting = 1'000'000;

// The sites with their labels, as one string (to notice a change).
std::string SitesKey(const std::vector<catalog::Site>& sites) {
  std::string key;
  for (const catalog::Site& s : sites) {
    key += s.name;
    for (const auto& [k, v] : s.labels) key += fmt::format("\x1f{}={}", k, v);
    key += '\x1e';
  }
  return key;
}

}  // namespace

PolicyEngine::PolicyEngine(PolicyEngineOptions options)
    : options_(std::move(options)),
      log_(options_.logger ? options_.logger : spdlog::default_logger()),
      holds_(options_.catalog.view) {}

PolicyEngine::~PolicyEngine() { Stop(); }

std::int64_t PolicyEngine::Now() const {
  return options_.clock ? options_.clock() : catalog::SystemNowNs();
}

void PolicyEngine::Reload(std::vector<PolicyRule> rules) {
  {
    absl::MutexLock lock(&mu_);
    rules_ = std::move(rules);
    reloaded_ = true;
    rules_known_ = true;
  }  // Loop's Await sees reloaded_ when the lock is released
}

absl::Status PolicyEngine::LoadState() {
  if (options_.state_file.empty()) return absl::OkStatus();
  std::ifstream in(options_.state_file);
  if (!in) return absl::OkStatus();  // first start
  std::stringstream text;
  text << in.rdbuf();
  nlohmann::json j = nlohmann::json::parse(text.str(), nullptr, false);
  if (j.is_discarded() || !j.is_object() || !j.contains("last_run_ns") ||
      !j["last_run_ns"].is_object()) {
    log_->warn("policy state {}: not a state file; scheduled rules start afresh",
               options_.state_file.string());
    return absl::OkStatus();
  }
  for (const auto& [name, ns] : j["last_run_ns"].items()) {
    if (ns.is_number_integer()) last_run_ns_[name] = ns.get<std::int64_t>();
  }
  return absl::OkStatus();
}

absl::Status PolicyEngine::SaveState() {
  if (options_.state_file.empty()) return absl::OkStatus();
  nlohmann::json j = {{"last_run_ns", last_run_ns_}};
  const std::string text = j.dump(2) + "\n";
  // The new name is durable only with its directory: a power cut would bring the old state
  // back (scheduled rules run again).
  return transfer::WriteFileDurably(options_.state_file, text);
}

absl::Status PolicyEngine::Request(const PolicyRule& rule, const std::vector<std::string>& paths,
                                   const std::vector<catalog::Site>& sites,
                                   PolicyStepSummary& summary) {
  if (paths.empty()) return absl::OkStatus();
  std::set<std::string> dst = rule.sites.Evaluate(sites);
  auto wait = [&] {
    std::vector<std::string>& w = waiting_[rule.name];
    for (const std::string& p : paths) {
      if (w.size() < kMaxWaiting) w.push_back(p);
    }
  };
  if (dst.empty()) {
    log_->warn("policy {}: sites '{}' select no site now; {} file(s) wait for a site to match",
               rule.name, rule.sites.text(), paths.size());
    wait();
    return absl::OkStatus();
  }
  catalog::RequestSpec spec;
  spec.copies = rule.copies;
  spec.dst_sites.assign(dst.begin(), dst.end());
  spec.priority = rule.priority;
  spec.origin = catalog::RequestOrigin::kPolicy;
  spec.owner = rule.name;
  if (rule.source_sites) {
    std::set<std::string> src = rule.source_sites->Evaluate(sites);
    if (src.empty()) {
      log_->warn("policy {}: source_sites '{}' select no site now; {} file(s) wait", rule.name,
                 rule.source_sites->text(), paths.size());
      wait();
      return absl::OkStatus();
    }
    if (src.size() == 1) {
      spec.src_site = *src.begin();
    } else {
      log_->info("policy {}: source_sites '{}' select {} sites; any source is used", rule.name,
                 rule.source_sites->text(), src.size());
    }
  }
  for (std::size_t i = 0; i < paths.size(); i += catalog::kMaxBatchPaths) {
    spec.paths.assign(paths.begin() + static_cast<std::ptrdiff_t>(i),
                      paths.begin() + static_cast<std::ptrdiff_t>(
                                          std::min(paths.size(), i + catalog::kMaxBatchPaths)));
    absl::StatusOr<catalog::Request> r = options_.catalog.work->CreateRequest(spec);
    if (!r.ok()) return r.status();
    summary.requests_created += 1;
    summary.files_requested += spec.paths.size();
    log_->info("policy {}: request {} for {} file(s), {} cop{} in {}", rule.name, r->id,
               spec.paths.size(), spec.copies, spec.copies == 1 ? "y" : "ies",
               fmt::join(spec.dst_sites, ","));
  }
  return absl::OkStatus();
}

absl::StatusOr<PolicyStepSummary> PolicyEngine::Step() {
  const catalog::Roles& cat = options_.catalog;
  PolicyStepSummary summary;
  if (!started_) {
    if (absl::Status s = LoadState(); !s.ok()) return s;
    // Events from now on; existing files are covered by applying every rule once (below).
    events_.emplace(*cat.view, kEventBatch);
    if (absl::Status s = events_->Start(); !s.ok()) return s;
    started_ = true;
  }
  // The catalog's policy document, when it changed.
  if (absl::StatusOr<catalog::PolicyDocument> doc = cat.view->GetPolicies(); doc.ok()) {
    if (doc->version != document_version_) {
      document_version_ = doc->version;
      absl::StatusOr<std::vector<PolicyRule>> parsed =
          ParsePolicies(doc->text, doc->source.empty() ? "policies" : doc->source);
      if (parsed.ok()) {
        log_->info("policies: version {} from {}: {} rule(s)", doc->version, doc->source,
                   parsed->size());
        Reload(std::move(*parsed));
      } else {
        log_->error("policies: version {} from {} refused, the rules in force stay: {}",
                    doc->version, doc->source, parsed.status().ToString());
      }
    }
  } else if (!absl::IsUnimplemented(doc.status())) {
    return doc.status();
  }
  std::vector<PolicyRule> rules;
  bool apply_all;
  bool rules_known;
  {
    absl::MutexLock lock(&mu_);
    rules = rules_;
    apply_all = reloaded_;
    reloaded_ = false;
    rules_known = rules_known_;
  }
  absl::StatusOr<std::vector<catalog::Site>> sites = cat.view->ListSites();
  if (!sites.ok()) return sites.status();
  if (absl::Status s = holds_.Update(); !s.ok()) return s;
  if (apply_all) {
    waiting_.clear();  // every rule walks its files again
  } else if (std::string key = SitesKey(*sites); key != sites_key_ && !sites_key_.empty()) {
    if (absl::Status s = RetryWaiting(rules, *sites, summary); !s.ok()) return s;
  }
  sites_key_ = SitesKey(*sites);

  // New files (a new generation complete somewhere) -> the continuous rules they match.
  std::map<std::string, std::vector<std::string>> matched;  // rule -> paths
  absl::Status drained = events_->Drain([&](const catalog::Event& e) {
    if (apply_all || e.kind != catalog::EventKind::kReplica ||
        e.state != catalog::ToString(catalog::ReplicaState::kComplete)) {
      return;
    }
    absl::StatusOr<catalog::Attributes> a = cat.view->StatInode(e.id);
    if (!a.ok()) return;  // removed meanwhile
    if (seen_.size() >= kMaxSeen) seen_.clear();
    if (!seen_.insert({a->inode, a->generation}).second) return;
    absl::StatusOr<std::string> path = cat.view->PathOf(e.id);
    if (!path.ok()) return;
    for (const PolicyRule& r : rules) {
      if (r.continuous && Matches(r, *path)) matched[r.name].push_back(*path);
    }
  });
  if (!drained.ok()) return drained;
  for (const PolicyRule& r : rules) {
    std::vector<std::string> paths;
    if (apply_all && r.continuous) {
      // The generations walked count as seen (their copies completing later are not new
      // files); a rule with a lifetime asks once per file, not again for files it held.
      absl::StatusOr<std::vector<std::string>> files =
          FilesOfRule(*cat.view, r, [&](const catalog::Attributes& a) {
            if (seen_.size() < kMaxSeen) seen_.insert({a.inode, a.generation});
            return !r.lifetime || !holds_.EverHeld(a.inode, r.name);
          });
      if (!files.ok()) return files.status();
      paths = std::move(*files);
      log_->info("policy {}: applied to {} existing file(s)", r.name, paths.size());
    } else if (auto it = matched.find(r.name); it != matched.end()) {
      paths = std::move(it->second);
    }
    if (absl::Status s = Request(r, paths, *sites, summary); !s.ok()) return s;
  }

  // Scheduled rules: due runs (a missed one once).
  const std::int64_t now = Now();
  bool state_changed = false;
  for (const PolicyRule& r : rules) {
    if (!r.schedule) continue;
    auto it = last_run_ns_.find(r.name);
    if (it == last_run_ns_.end()) {
      last_run_ns_[r.name] = now;  // a new schedule starts now, not in the past
      state_changed = true;
      continue;
    }
    std::optional<absl::Time> due =
        r.schedule->Due(absl::FromUnixNanos(it->second), absl::FromUnixNanos(now));
    if (!due) continue;
    absl::StatusOr<std::vector<std::string>> files = FilesOfRule(*cat.view, r);
    if (!files.ok()) return files.status();
    std::vector<std::string> paths = std::move(*files);
    log_->info("policy {}: scheduled run of {} ({} {}), {} file(s)", r.name,
               absl::FormatTime("%Y-%m-%d %H:%M %Z", *due, absl::UTCTimeZone()),
               r.schedule->spec(), r.schedule->time_zone(), paths.size());
    if (absl::Status s = Request(r, paths, *sites, summary); !s.ok()) return s;
    it->second = now;
    summary.scheduled_runs += 1;
    state_changed = true;
  }
  if (state_changed) {
    if (absl::Status s = SaveState(); !s.ok()) log_->warn("policy state: {}", s.ToString());
  }

  // Ended holds give back their copies (only once the rules in force are known: an engine
  // that has not read them would take every rule for removed).
  if (rules_known && now - last_release_ns_ >= std::chrono::nanoseconds(options_.release_interval).count()) {
    last_release_ns_ = now;
    ReleaseInput in;
    in.catalog = cat;
    in.holds = &holds_;
    in.rules = &rules;
    in.removed_since = &removed_since_;
    in.removed_grace = options_.removed_rule_grace;
    in.now_ns = now;
    absl::StatusOr<ReleaseSummary> released = ReleaseEndedHolds(in, *log_);
    if (!released.ok()) return released.status();
    summary.holds_ended += released->holds_ended;
    summary.replicas_released += released->replicas_removed;
  }
  return summary;
}

absl::Status PolicyEngine::RetryWaiting(const std::vector<PolicyRule>& rules,
                                        const std::vector<catalog::Site>& sites,
                                        PolicyStepSummary& summary) {
  std::map<std::string, std::vector<std::string>> waiting;
  waiting.swap(waiting_);
  for (const PolicyRule& r : rules) {
    auto it = waiting.find(r.name);
    if (it == waiting.end()) continue;
    log_->info("policy {}: the sites changed; asking again for {} waiting file(s)", r.name, it->second.size());
    if (absl::Status s = Request(r, it->second, sites, summary); !s.ok()) return s;
  }
  return absl::OkStatus();
}

void PolicyEngine::Loop() {
  while (!stop_) {
    absl::StatusOr<PolicyStepSummary> s = Step();
    if (!s.ok()) log_->warn("policy engine: {}", s.status().ToString());
    absl::MutexLock lock(&mu_);
    mu_.AwaitWithTimeout(absl::Condition(this, &PolicyEngine::WakeLocked),
                         absl::FromChrono(options_.interval));
  }
}

void PolicyEngine::Start() {
  if (thread_.joinable()) return;
  stop_ = false;
  thread_ = std::thread([this] { Loop(); });
}

void PolicyEngine::Stop() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  if (thread_.joinable()) thread_.join();
}

}  // namespace gfrep::replica::plan
