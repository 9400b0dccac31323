#include "replica/plan/policy_explain.h"

#include <fmt/format.h>

#include <algorithm>
#include <ctime>
#include <map>
#include <optional>
#include <set>

#include "replica/core/selection.h"
#include "replica/plan/holds.h"
#include "replica/plan/policy_engine.h"

namespace gfrep::replica::plan {
namespace {

bool Wild(std::string_view component) {
  return component.find_first_of("*?") != std::string_view::npos;
}

std::string LiteralPrefix(const std::string& pattern) {
  std::vector<std::string> parts;
  std::size_t start = 1;
  while (start <= pattern.size()) {
    std::size_t end = pattern.find('/', start);
    if (end == std::string::npos) end = pattern.size();
    std::string c = pattern.substr(start, end - start);
    if (Wild(c)) break;
    if (!c.empty()) parts.push_back(c);
    start = end + 1;
  }
  return catalog::JoinPath(parts);
}

// What the catalog says around one file, shared by the verdicts of its rules.
struct Context {
  std::vector<catalog::Site> sites;
  std::map<std::string, catalog::Node> nodes;
  std::vector<catalog::Request> requests;  // newest first
  std::int64_t now_ns = 0;
  std::chrono::milliseconds heartbeat_timeout{30000};

  bool Live(const std::string& node) const {
    auto it = nodes.find(node);
    return it != nodes.end() &&
           now_ns - it->second.last_heartbeat_ns <=
               std::chrono::duration_cast<std::chrono::nanoseconds>(heartbeat_timeout).count();
  }
  std::string SiteOf(const std::string& node) const {
    auto it = nodes.find(node);
    return it == nodes.end() ? "" : it->second.site;
  }
};

absl::StatusOr<Context> Load(catalog::CatalogView& cat, const ExplainOptions& options) {
  Context ctx;
  ctx.now_ns = options.now_ns != 0 ? options.now_ns : catalog::SystemNowNs();
  ctx.heartbeat_timeout = options.heartbeat_timeout;
  absl::StatusOr<std::vector<catalog::Site>> sites = cat.ListSites();
  if (!sites.ok()) return sites.status();
  ctx.sites = std::move(*sites);
  absl::StatusOr<std::vector<catalog::Node>> nodes = cat.ListNodes("");
  if (!nodes.ok()) return nodes.status();
  for (catalog::Node& n : *nodes) ctx.nodes[n.name] = std::move(n);
  absl::StatusOr<std::vector<catalog::Request>> reqs =
      cat.ListRequests(true, catalog::RequestState::kQueued, 1000);
  if (!reqs.ok()) return reqs.status();
  ctx.requests = std::move(*reqs);
  return ctx;
}

// The request's row of the file `inode`, if the catalog has one (a request expanded before the
// rows existed, or a catalog without them, has none).
std::optional<catalog::RequestFile> RowOf(catalog::CatalogView& cat, std::uint64_t request_id,
                                          catalog::InodeId inode) {
  catalog::RequestFileFilter f;
  f.after = inode - 1;  // rows come in id order after `after`; inodes start at 1
  f.limit = 1;
  absl::StatusOr<std::vector<catalog::RequestFile>> rows = cat.ListRequestFiles(request_id, f);
  if (!rows.ok() || rows->empty() || rows->front().id != inode) return std::nullopt;
  return rows->front();
}

RuleFileVerdict Judge(catalog::CatalogView& cat, const Context& ctx, const PolicyRule& rule,
                      const catalog::Location& loc) {
  RuleFileVerdict v;
  v.rule = rule.name;
  v.path = loc.path;
  v.wanted = rule.copies;
  std::set<std::string> sites = rule.sites.Evaluate(ctx.sites);
  v.sites.assign(sites.begin(), sites.end());
  if (sites.empty()) {
    v.state = RuleFileState::kWaiting;
    v.reason = fmt::format("no eligible site: '{}' selects no site now (gfsite list shows the labels)",
                           rule.sites.text());
    return v;
  }
  // The rule's latest request that names the file.
  const catalog::Request* req = nullptr;
  for (const catalog::Request& r : ctx.requests) {
    if (r.spec.origin == catalog::RequestOrigin::kPolicy && r.spec.owner == rule.name &&
        std::find(r.spec.paths.begin(), r.spec.paths.end(), loc.path) != r.spec.paths.end()) {
      req = &r;
      break;
    }
  }
  if (req != nullptr && rule.lifetime && LifetimeEnded(req->created_ns, *rule.lifetime, ctx.now_ns)) {
    v.state = RuleFileState::kEnded;
    v.request_id = req->id;
    v.reason = fmt::format("lifetime ended at {} ({} s after request {}): the rule wants no copies "
                           "any more; those it made go unless another rule or request needs them "
                           "(never the last)",
                           FormatUtc(req->created_ns + std::chrono::nanoseconds(*rule.lifetime).count()),
                           rule.lifetime->count(), req->id);
    return v;
  }
  std::vector<std::string> holders;  // complete replicas anywhere
  std::string remaking;              // copies that stopped counting, being made again
  for (const catalog::Replica& r : CurrentReplicas(loc)) {
    holders.push_back(r.node);
    auto n = ctx.nodes.find(r.node);
    if (n != ctx.nodes.end() && n->second.mode == catalog::NodeMode::kDraining) {
      remaking += fmt::format("{}node {} draining", remaking.empty() ? "" : "; ", r.node);
      continue;  // on its way out: does not count
    }
    if (sites.count(ctx.SiteOf(r.node)) > 0) ++v.have;
  }
  for (const catalog::Replica& r : loc.replicas) {
    if (r.state == catalog::ReplicaState::kUnverified && r.generation == loc.attributes.generation &&
        r.note != catalog::kRemadeNote) {
      remaking += fmt::format("{}{}", remaking.empty() ? "" : "; ", r.note);
    }
  }
  if (v.have >= v.wanted) {
    v.state = RuleFileState::kSatisfied;
    return v;
  }
  if (!remaking.empty()) {
    v.state = RuleFileState::kWaiting;
    v.reason = fmt::format("re-making: {} ({} of {} copies count now; gfcatalogd's repairer makes "
                           "them again elsewhere)",
                           remaking, v.have, v.wanted);
    return v;
  }
  if (req == nullptr) {
    v.state = RuleFileState::kWaiting;
    v.reason = rule.continuous
                   ? "no request yet: the policy engine asks for new files within a second of "
                     "their commit, and for existing ones when the rules are (re)loaded"
                   : fmt::format("no request yet: next scheduled run at {} ({} {})",
                                 FormatUtc(absl::ToUnixNanos(rule.schedule->Next(absl::FromUnixNanos(ctx.now_ns)))),
                                 rule.schedule->spec(), rule.schedule->time_zone());
    return v;
  }
  v.request_id = req->id;
  // The file's row in the request (catalog table request_files) says where it stands; only a
  // file with copies under way (or a request from before the rows) needs the request's tasks,
  // for what each copy is doing.
  std::optional<catalog::RequestFile> row = RowOf(cat, req->id, loc.attributes.inode);
  if (row && row->state == catalog::RequestFileState::kFailed) {
    v.state = RuleFileState::kFailed;
    v.reason = fmt::format("request {}: {}", req->id, row->reason);
    return v;
  }
  absl::StatusOr<std::vector<catalog::Task>> tasks = std::vector<catalog::Task>{};
  if (!row || row->state == catalog::RequestFileState::kCopying) {
    catalog::TaskFilter f;
    f.request_id = req->id;
    f.limit = catalog::kMaxBatchPaths * 4;
    tasks = cat.ListTasks(f);
  }
  std::map<std::string, const catalog::Task*> latest;  // dst node -> its latest task
  if (tasks.ok()) {
    for (const catalog::Task& t : *tasks) {
      if (t.spec.path != loc.path || t.generation != loc.attributes.generation) continue;
      const catalog::Task*& slot = latest[t.spec.dst_node];
      if (slot == nullptr || t.id > slot->id) slot = &t;
    }
  }
  std::vector<std::string> open, failed;
  for (const auto& [dst, t] : latest) {
    std::string what = fmt::format("{} -> {}: {}", t->spec.src_node, dst, DescribeTask(*t, ctx.now_ns));
    if (t->state == catalog::TaskState::kQueued || t->state == catalog::TaskState::kLeased) {
      if (t->state == catalog::TaskState::kQueued && !ctx.Live(dst)) {
        what += fmt::format(" (node {} is silent: no heartbeat within {} s)", dst,
                            ctx.heartbeat_timeout.count() / 1000);
      }
      open.push_back(std::move(what));
    } else if (t->state == catalog::TaskState::kFailed) {
      failed.push_back(std::move(what));
    }
  }
  auto joined = [](const std::vector<std::string>& v) { return fmt::format("{}", fmt::join(v, "; ")); };
  if (!open.empty()) {
    const bool leased = std::any_of(latest.begin(), latest.end(), [](const auto& kv) {
      return kv.second->state == catalog::TaskState::kLeased;
    });
    v.state = leased ? RuleFileState::kInFlight : RuleFileState::kWaiting;
    v.reason = fmt::format("request {}: {}", req->id, joined(open));
    return v;
  }
  if (!failed.empty() || req->state == catalog::RequestState::kFailed) {
    v.state = RuleFileState::kFailed;
    v.reason = fmt::format("request {} {}: {}", req->id, catalog::ToString(req->state),
                           failed.empty() ? req->error : joined(failed));
    return v;
  }
  // A request with no copy under way for the file: why the planner has none.
  v.state = RuleFileState::kWaiting;
  const bool source_up = std::any_of(holders.begin(), holders.end(),
                                     [&](const std::string& n) { return ctx.Live(n); });
  if (holders.empty()) {
    v.reason = fmt::format("request {}: no complete replica of generation {} to copy from",
                           req->id, loc.attributes.generation);
  } else if (!source_up) {
    v.reason = fmt::format("request {}: no source up: the replicas are on {} (no heartbeat within {} s)",
                           req->id, fmt::join(holders, ","), ctx.heartbeat_timeout.count() / 1000);
  } else if (std::none_of(ctx.nodes.begin(), ctx.nodes.end(), [&](const auto& kv) {
               return sites.count(kv.second.site) > 0 && ctx.Live(kv.first) &&
                      std::find(holders.begin(), holders.end(), kv.first) == holders.end();
             })) {
    v.reason = fmt::format("request {}: no live node without a copy in {}", req->id,
                           fmt::join(v.sites, ","));
  } else if (req->state == catalog::RequestState::kDone || req->state == catalog::RequestState::kCancelled) {
    v.reason = fmt::format("request {} is {}, and {} of {} copies are there now (lost since?); "
                           "the next reload or the repairer asks again",
                           req->id, catalog::ToString(req->state), v.have, v.wanted);
  } else {
    v.reason = fmt::format("request {} {}: waiting for the planner (per-node or per-route limits "
                           "are full, or its next step)",
                           req->id, catalog::ToString(req->state));
  }
  return v;
}

}  // namespace

std::string FormatUtc(std::int64_t ns) {
  const std::time_t t = static_cast<std::time_t>(ns / 1'000'000'000);
  std::tm tm {};
  ::gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

std::string_view ToString(RuleFileState state) {
  switch (state) {
    case RuleFileState::kSatisfied: return "satisfied";
    case RuleFileState::kInFlight: return "in flight";
    case RuleFileState::kWaiting: return "waiting";
    case RuleFileState::kFailed: return "failed";
    case RuleFileState::kEnded: return "ended";
  }
  return "?";
}

std::string DescribeTask(const catalog::Task& t, std::int64_t now_ns) {
  const std::string attempt = fmt::format("attempt {}/{}", t.attempts, t.spec.max_attempts);
  switch (t.state) {
    case catalog::TaskState::kQueued:
      if (t.next_attempt_ns > now_ns) {
        return fmt::format("backing off until {} ({} failed: {})", FormatUtc(t.next_attempt_ns), attempt,
                           t.last_error);
      }
      return t.attempts == 0
                 ? fmt::format("waiting for {}'s agent to claim it", t.spec.dst_node)
                 : fmt::format("waiting for {}'s agent to claim it again (last error: {})",
                               t.spec.dst_node, t.last_error);
    case catalog::TaskState::kLeased:
      return fmt::format("copying now from {} ({}, lease of {} until {})", t.spec.src_node, attempt,
                         t.lease_owner, FormatUtc(t.lease_expiry_ns));
    case catalog::TaskState::kFailed:
      return fmt::format("failed after {} attempts: {}", t.attempts, t.last_error);
    case catalog::TaskState::kCancelled:
      return fmt::format("cancelled: {}", t.last_error);
    case catalog::TaskState::kDone:
      return "done";
  }
  return "";
}

absl::StatusOr<std::vector<std::string>> FilesOfRule(
    catalog::CatalogView& cat, const PolicyRule& rule,
    const std::function<bool(const catalog::Attributes&)>& keep) {
  std::set<std::string> found;
  for (const std::string& pattern : rule.paths) {
    std::vector<std::string> dirs = {LiteralPrefix(pattern)};
    while (!dirs.empty()) {
      const std::string dir = dirs.back();
      dirs.pop_back();
      absl::StatusOr<catalog::Attributes> a = cat.Stat(dir);
      if (absl::IsNotFound(a.status())) continue;
      if (!a.ok()) return a.status();
      if (a->type == catalog::FileType::kFile) {
        if (MatchPath(pattern, dir) && (!keep || keep(*a))) found.insert(dir);
        continue;
      }
      catalog::ListOptions list;
      for (;;) {
        absl::StatusOr<std::vector<catalog::DirEntry>> page = cat.List(dir, list);
        if (!page.ok()) return page.status();
        for (const catalog::DirEntry& e : *page) {
          std::string child = dir == "/" ? "/" + e.name : dir + "/" + e.name;
          if (e.attributes.type == catalog::FileType::kDirectory) {
            dirs.push_back(std::move(child));
          } else if (MatchPath(pattern, child) && (!keep || keep(e.attributes))) {
            found.insert(std::move(child));
          }
        }
        if (page->size() < list.limit) break;
        list.start_after = page->back().name;
      }
    }
  }
  return std::vector<std::string>(found.begin(), found.end());
}

absl::StatusOr<std::vector<RuleFileVerdict>> ExplainPath(catalog::CatalogView& cat,
                                                         const std::vector<PolicyRule>& rules,
                                                         const std::string& path,
                                                         const ExplainOptions& options) {
  absl::StatusOr<catalog::Location> loc = cat.Locate(path);
  if (!loc.ok()) return loc.status();
  if (loc->attributes.type != catalog::FileType::kFile) {
    return absl::FailedPreconditionError(fmt::format("{}: is a directory", path));
  }
  std::vector<RuleFileVerdict> out;
  std::optional<Context> ctx;
  for (const PolicyRule& r : rules) {
    if (!Matches(r, path)) continue;
    if (!ctx) {
      absl::StatusOr<Context> c = Load(cat, options);
      if (!c.ok()) return c.status();
      ctx = std::move(*c);
    }
    out.push_back(Judge(cat, *ctx, r, *loc));
  }
  return out;
}

absl::StatusOr<RuleStatusSummary> StatusOfRule(catalog::CatalogView& cat, const PolicyRule& rule,
                                               std::size_t limit, const ExplainOptions& options) {
  absl::StatusOr<std::vector<std::string>> files = FilesOfRule(cat, rule);
  if (!files.ok()) return files.status();
  absl::StatusOr<Context> ctx = Load(cat, options);
  if (!ctx.ok()) return ctx.status();
  RuleStatusSummary s;
  s.rule = rule.name;
  for (const std::string& path : *files) {
    absl::StatusOr<catalog::Location> loc = cat.Locate(path);
    if (!loc.ok()) continue;  // removed meanwhile
    RuleFileVerdict v = Judge(cat, *ctx, rule, *loc);
    s.files += 1;
    switch (v.state) {
      case RuleFileState::kSatisfied: s.satisfied += 1; break;
      case RuleFileState::kInFlight: s.in_flight += 1; break;
      case RuleFileState::kWaiting: s.waiting += 1; break;
      case RuleFileState::kFailed: s.failed += 1; break;
      case RuleFileState::kEnded: s.ended += 1; break;
    }
    if (v.state != RuleFileState::kSatisfied && v.state != RuleFileState::kEnded &&
        s.unsatisfied.size() < limit) {
      s.unsatisfied.push_back(std::move(v));
    }
  }
  return s;
}

}  // namespace gfrep::replica::plan
