#include "replica/plan/planner.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <limits>
#include <set>
#include <utility>

#include "catalog/event_cursor.h"
#include "replica/core/placement.h"
#include "replica/core/route_budget.h"

namespace gfrep::replica::plan {
namespace {

using catalog::Task;
using catalog::TaskState;

bool IsOpen(const Task& t) {
  return t.state == TaskState::kQueued || t.state == TaskState::kLeased;
}

// True if request `id` is done/failed/cancelled now (the catalog then refuses new tasks
// or state changes with kFailedPrecondition): a cancel that raced this step.
bool Finished(const catalog::Roles& cat, std::uint64_t id) {
  absl::StatusOr<catalog::Request> r = cat.view->GetRequest(id);
  return r.ok() && catalog::IsFinished(r->state);
}

using RouteKey = std::pair<std::string, std::string>;

// After how many wanted files in a row that could not get a copy (windows full) a step stops
// looking at a request's files; and how many it reads at a time.
constexpr int kStarvedFiles = 64;
constexpr std::size_t kWantedPage = 256;

// Shared by all files planned in one step: what is open or planned where.
struct StepState {
  Topology topology;
  LivenessOptions liveness;
  std::map<std::string, int> open_per_dst;
  std::map<RouteKey, int> open_per_route;
  RouteLoad route_load;  // streams and source nodes of the open tasks per route
  BusyMap planned_src;
  BusyMap planned_dst;
  std::map<std::string, std::set<std::string>> planned_for_path;  // this step's new copies
};

enum class FileStatus { kDone, kFailed, kPending };

struct FileOutcome {
  FileStatus status = FileStatus::kPending;
  std::string error;
  std::uint64_t size = 0;
  std::vector<PlannedCopy> copies;
};

std::string SiteOf(const Topology& topology, std::string_view node) {
  const catalog::Node* n = topology.FindNode(node);
  return n == nullptr ? std::string() : n->site;
}

// Open tasks a destination node may have: the planner's setting, or 5 per worker its agent
// reported if that is more (besides the running copies, up to 2 per worker are claimed ahead
// and copies waiting for their commit hold tasks too; a node with 64 workers starved at 64
// open tasks).
int OpenTaskCap(const Topology& topology, const PlannerOptions& options, std::string_view node) {
  const catalog::Node* n = topology.FindNode(node);
  const std::uint32_t workers = n == nullptr ? 0 : std::min<std::uint32_t>(n->workers, 1u << 16);
  return std::max(options.max_open_tasks_per_node, 5 * static_cast<int>(workers));
}

// Plans one file: done (it has its copies), failed (it cannot get them), or pending with the
// copies to make now (none while the windows are full). A copy that gave up is not judged
// here: the catalog settles the file when its task settles (catalog::RequestFile).
// `open_tasks`: the file's open tasks, of any request. `slow_sources`: nodes a destination
// gave this file's copy back from as too slow (RequestFile::slow_sources), copied from only
// when no other replica is left. `window` false: ignore per-node/route/request limits (dry
// run). `request_budget`: tasks this request may still open (-1: unlimited); decremented.
absl::StatusOr<FileOutcome> PlanFile(const catalog::Roles& catalog, const std::string& path,
                                     const catalog::RequestSpec& spec,
                                     const std::vector<const Task*>& open_tasks,
                                     const std::vector<std::string>& slow_sources, StepState& st,
                                     const PlannerOptions& options, bool window,
                                     int& request_budget) {
  FileOutcome out;
  absl::StatusOr<catalog::Location> loc = catalog.view->Locate(path);
  if (!loc.ok()) {
    if (absl::IsNotFound(loc.status())) {
      out.status = FileStatus::kFailed;
      out.error = "no such file or directory";
      return out;
    }
    return loc.status();
  }
  out.size = loc->attributes.size;
  if (loc->attributes.type == catalog::FileType::kDirectory) {
    out.status = FileStatus::kFailed;
    out.error = "is a directory";
    return out;
  }
  const std::uint64_t generation = loc->attributes.generation;
  if (generation == 0) {
    out.status = FileStatus::kFailed;
    out.error = "file has no content (never written)";
    return out;
  }
  auto eligible_site = [&](const std::string& site) {
    return spec.dst_sites.empty() ||
           std::find(spec.dst_sites.begin(), spec.dst_sites.end(), site) != spec.dst_sites.end();
  };
  std::set<std::string> holders;
  std::map<std::string, int> per_site;
  int complete = 0;
  for (const catalog::Replica& r : CurrentReplicas(*loc)) {
    holders.insert(r.node);
    const catalog::Node* n = st.topology.FindNode(r.node);
    // A draining node's copy is on its way out: not counted (it stays a source).
    if (n == nullptr || n->mode == catalog::NodeMode::kDraining) continue;
    per_site[n->site] += 1;
    if (eligible_site(n->site)) ++complete;
  }
  int inflight = 0;
  for (const Task* t : open_tasks) {
    // Whatever its generation, the node is busy with this file: never plan a second copy
    // onto it meanwhile.
    holders.insert(t->spec.dst_node);
    std::string site = SiteOf(st.topology, t->spec.dst_node);
    if (t->generation == generation) {
      per_site[site] += 1;
      if (eligible_site(site)) ++inflight;
    }
  }
  for (const std::string& node : st.planned_for_path[path]) {
    if (holders.insert(node).second) {
      std::string site = SiteOf(st.topology, node);
      per_site[site] += 1;
      if (eligible_site(site)) ++inflight;
    }
  }
  const int copies = static_cast<int>(std::max<std::uint32_t>(spec.copies, 1));
  if (complete >= copies) {
    out.status = FileStatus::kDone;
    return out;
  }
  int need = copies - complete - inflight;
  if (need <= 0) return out;

  PlacementRequest place;
  place.count = need;
  place.dst_sites = spec.dst_sites;
  place.file_size = out.size;
  place.exclude_nodes = holders;
  place.replicas_per_site = per_site;
  place.planned = st.planned_dst;
  // Without the window limits, could the copies be placed at all?
  std::vector<catalog::Node> possible = PlaceReplicas(place, st.topology, st.liveness);
  if (static_cast<int>(possible.size()) < need && inflight == 0) {
    // Nodes that are down now may come back (an agent restarting; every node at once after
    // this catalog itself was stalled): if they would do, the file waits for them. Only a
    // shortfall that every node being up would not cure fails it.
    LivenessOptions anyone = st.liveness;
    anyone.heartbeat_timeout = std::chrono::hours(24 * 365 * 100);
    if (static_cast<int>(PlaceReplicas(place, st.topology, anyone).size()) >= need) {
      return out;  // pending, no task: planned again at the next step
    }
    out.status = FileStatus::kFailed;
    out.error = fmt::format(
        "not enough live destination nodes{} with {} bytes free: {} copies wanted, {} present, "
        "{} placeable",
        spec.dst_sites.empty() ? "" : " in the requested sites", out.size, copies, complete,
        possible.size());
    return out;
  }
  if (window) {
    for (const auto& [node, open] : st.open_per_dst) {
      if (open >= OpenTaskCap(st.topology, options, node)) place.exclude_nodes.insert(node);
    }
  }
  std::vector<catalog::Node> dsts =
      window ? PlaceReplicas(place, st.topology, st.liveness) : std::move(possible);
  // -S: copy only from replicas at the source site.
  catalog::Location from = *loc;
  if (!spec.src_site.empty()) {
    std::erase_if(from.replicas, [&](const catalog::Replica& r) {
      return SiteOf(st.topology, r.node) != spec.src_site;
    });
  }
  if (!slow_sources.empty()) {
    catalog::Location others = from;
    std::erase_if(others.replicas, [&](const catalog::Replica& r) {
      return std::find(slow_sources.begin(), slow_sources.end(), r.node) != slow_sources.end();
    });
    if (!CurrentReplicas(others).empty()) from = std::move(others);
  }
  for (const catalog::Node& dst : dsts) {
    if (window && request_budget == 0) break;
    Reader reader{dst.site, dst.name};
    absl::StatusOr<SourceChoice> src =
        SelectSource(from, reader, st.topology, st.liveness, st.planned_src);
    catalog::Node src_node;
    if (src.ok()) {
      src_node = src->node;
    } else if (absl::IsUnavailable(src.status())) {
      // Every holder is down. Plan from one anyway: the agent's attempts fail with the
      // connection error, back off, and the file fails clearly after its retries (a node
      // that comes back meanwhile serves it).
      std::vector<catalog::Replica> current = CurrentReplicas(from);
      const catalog::Node* n = st.topology.FindNode(current.front().node);
      if (n == nullptr) {
        out.status = FileStatus::kFailed;
        out.error = std::string(src.status().message());
        return out;
      }
      src_node = *n;
    } else {
      out.status = FileStatus::kFailed;
      out.error = std::string(src.status().message());
      if (!spec.src_site.empty()) out.error += fmt::format(" at source site {}", spec.src_site);
      return out;
    }
    RouteKey route{src_node.site, dst.site};
    const catalog::Route* r = st.topology.FindRoute(src_node.site, dst.site);
    RouteLoad::Share share;
    if (window && r != nullptr) {
      if (r->max_concurrent_tasks > 0 &&
          st.open_per_route[route] >= static_cast<int>(r->max_concurrent_tasks)) {
        continue;
      }
      share = st.route_load.StreamShare(*r, out.size);
      if (!share.ok) continue;  // the route's stream budget is spent: a later step
    }
    PlannedCopy c;
    c.path = path;
    c.size = out.size;
    c.src_node = src_node.name;
    c.src_site = src_node.site;
    c.dst_node = dst.name;
    c.dst_site = dst.site;
    c.streams = share.streams;
    st.route_load.Add(route, src_node.name, dst.name,
                      share.streams > 0 ? share.streams : (r != nullptr ? StreamsWanted(*r, out.size) : 0));
    out.copies.push_back(std::move(c));
    st.open_per_dst[dst.name] += 1;
    st.open_per_route[route] += 1;
    st.planned_src[src_node.name] += 1;
    st.planned_dst[dst.name] += 1;
    st.planned_for_path[path].insert(dst.name);
    if (request_budget > 0) --request_budget;
  }
  return out;
}

}  // namespace

absl::Status Validate(const PlannerOptions& options) {
  if (options.catalog.view == nullptr || options.catalog.work == nullptr) {
    return absl::InvalidArgumentError("planner needs a catalog (view and work)");
  };
  if (options.max_open_tasks_per_node < 1) {
    return absl::InvalidArgumentError("max_open_tasks_per_node must be >= 1");
  }
  if (options.max_attempts < 1 || options.max_attempts > 1000) {
    return absl::InvalidArgumentError("max_attempts must be 1..1000");
  }
  if (options.heartbeat_timeout.count() <= 0 || options.interval.count() <= 0) {
    return absl::InvalidArgumentError("planner timeouts must be positive");
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<Planner>> Planner::Create(PlannerOptions options) {
  if (absl::Status s = Validate(options); !s.ok()) return s;
  return std::unique_ptr<Planner>(new Planner(std::move(options)));
}

Planner::Planner(PlannerOptions options)
    : options_(std::move(options)),
      log_(options_.logger ? options_.logger : spdlog::default_logger()) {}

Planner::~Planner() { Stop(); }

std::int64_t Planner::Now() const {
  return options_.clock ? options_.clock() : catalog::SystemNowNs();
}

absl::StatusOr<std::vector<catalog::RequestFileInput>> Planner::Expand(
    const catalog::RequestSpec& spec) {
  std::vector<catalog::RequestFileInput> out;
  std::set<std::string> seen;
  auto add = [&](std::string path, std::string error) {
    if (seen.insert(path).second) out.push_back({std::move(path), std::move(error)});
  };
  for (const std::string& raw : spec.paths) {
    absl::StatusOr<std::vector<std::string>> parts = catalog::SplitPath(raw);
    if (!parts.ok()) {
      add(raw, std::string(parts.status().message()));
      continue;
    }
    std::string path = catalog::JoinPath(*parts);
    absl::StatusOr<catalog::Attributes> st = options_.catalog.view->Stat(path);
    if (!st.ok()) {
      if (!absl::IsNotFound(st.status())) return st.status();
      add(path, "no such file or directory");
      continue;
    }
    if (st->type == catalog::FileType::kFile) {
      add(path, "");
      continue;
    }
    if (!spec.recursive) {
      add(path, "is a directory (use -r)");
      continue;
    }
    std::vector<std::string> stack{path};
    while (!stack.empty()) {
      std::string dir = std::move(stack.back());
      stack.pop_back();
      catalog::ListOptions list;
      list.limit = 10000;
      while (true) {
        absl::StatusOr<std::vector<catalog::DirEntry>> entries =
            options_.catalog.view->List(dir, list);
        if (!entries.ok()) {
          if (absl::IsNotFound(entries.status())) break;  // removed meanwhile
          return entries.status();
        }
        for (const catalog::DirEntry& e : *entries) {
          std::string child = dir == "/" ? "/" + e.name : dir + "/" + e.name;
          if (e.attributes.type == catalog::FileType::kDirectory) {
            stack.push_back(std::move(child));
          } else {
            add(std::move(child), "");
          }
        }
        if (entries->size() < list.limit) break;
        list.start_after = entries->back().name;
      }
      if (out.size() > catalog::kMaxBatchPaths) {
        return absl::InvalidArgumentError(
            fmt::format("{}: more than {} files", path, catalog::kMaxBatchPaths));
      }
    }
  }
  return out;
}

absl::StatusOr<catalog::Request> Planner::ExpandInCatalog(const catalog::Request& r) {
  const catalog::Roles& cat = options_.catalog;
  absl::StatusOr<std::vector<catalog::RequestFileInput>> files = Expand(r.spec);
  if (absl::IsInvalidArgument(files.status())) {
    catalog::RequestUpdate u;
    u.id = r.id;
    u.set_state = true;
    u.state = catalog::RequestState::kFailed;
    u.error = std::string(files.status().message());
    return cat.work->UpdateRequest(u);
  }
  if (!files.ok()) return files.status();
  // One write: a planner that stops midway leaves the request unexpanded, with no files.
  return cat.work->AddRequestFiles(r.id, *files, /*last=*/true);
}

absl::Status Planner::Step() {
  absl::MutexLock lock(&step_mu_);
  const catalog::Roles& cat = options_.catalog;
  absl::Status first_error = absl::OkStatus();
  auto note = [&first_error](absl::Status s) {
    if (first_error.ok()) first_error = std::move(s);
  };
  // A node that died never claims again, and only its own claims used to expire its
  // leases: expire everyone's here.
  if (absl::StatusOr<std::size_t> expired = cat.work->ExpireLeases(); !expired.ok()) {
    note(expired.status());
  } else if (*expired > 0) {
    log_->info("planner: expired {} lease(s)", *expired);
  }
  StepState st;
  st.liveness.now_ns = Now();
  st.liveness.heartbeat_timeout = options_.heartbeat_timeout;
  const std::int64_t timeout_ns =
      std::chrono::duration_cast<std::chrono::nanoseconds>(options_.heartbeat_timeout).count();
  if (first_step_ns_ == 0) {
    first_step_ns_ = st.liveness.now_ns;
  } else if (st.liveness.now_ns - last_step_ns_ > timeout_ns / 2) {
    log_->warn("planner: {:.1f} s since its previous step (this catalog was stalled); node "
               "liveness is judged again after {} s of heartbeats",
               static_cast<double>(st.liveness.now_ns - last_step_ns_) / 1e9,
               std::chrono::duration_cast<std::chrono::seconds>(options_.heartbeat_timeout).count());
    first_step_ns_ = st.liveness.now_ns;
  }
  last_step_ns_ = st.liveness.now_ns;
  const bool judge_liveness = st.liveness.now_ns - first_step_ns_ > timeout_ns;
  absl::StatusOr<std::vector<catalog::Node>> nodes = cat.view->ListNodes("");
  if (!nodes.ok()) return nodes.status();
  st.topology.nodes = std::move(*nodes);
  absl::StatusOr<std::vector<catalog::Route>> routes = cat.view->ListRoutes();
  if (!routes.ok()) return routes.status();
  st.topology.routes = std::move(*routes);

  std::vector<catalog::Request> active;
  for (catalog::RequestState s : {catalog::RequestState::kQueued, catalog::RequestState::kRunning}) {
    absl::StatusOr<std::vector<catalog::Request>> list = cat.view->ListRequests(false, s, 10000);
    if (!list.ok()) return list.status();
    active.insert(active.end(), list->begin(), list->end());
  }
  std::sort(active.begin(), active.end(), [](const catalog::Request& a, const catalog::Request& b) {
    return a.spec.priority != b.spec.priority ? a.spec.priority > b.spec.priority : a.id < b.id;
  });

  // First every open task (the catalog's open-task index), so that limits see every
  // request's load. A dead destination never finishes its tasks: they are abandoned (not a
  // failed attempt of the file; the catalog wants the file again) and planned elsewhere.
  catalog::TaskFilter open_filter;
  open_filter.open_only = true;
  open_filter.limit = std::numeric_limits<std::size_t>::max();
  absl::StatusOr<std::vector<Task>> open = cat.view->ListTasks(open_filter);
  if (!open.ok()) return open.status();
  std::map<std::uint64_t, int> open_of_request;
  std::map<std::string, std::vector<const Task*>> open_by_path;
  for (const Task& t : *open) {
    const catalog::Node* dst = st.topology.FindNode(t.spec.dst_node);
    if (judge_liveness && (dst == nullptr || !IsLive(*dst, st.liveness))) {
      absl::StatusOr<Task> ended =
          cat.work->AbandonTask(t.id, fmt::format("destination node {} is down", t.spec.dst_node));
      if (!ended.ok()) {
        note(ended.status());
      } else {
        log_->warn("planner: request={} task={} path={}: {} ({})", t.spec.request_id, t.id,
                   t.spec.path, ended->last_error, catalog::ToString(ended->state));
        if (!IsOpen(*ended)) continue;
      }
    }
    if (t.spec.request_id != 0) open_of_request[t.spec.request_id] += 1;
    open_by_path[t.spec.path].push_back(&t);
    st.open_per_dst[t.spec.dst_node] += 1;
    const RouteKey route{SiteOf(st.topology, t.spec.src_node), SiteOf(st.topology, t.spec.dst_node)};
    st.open_per_route[route] += 1;
    const catalog::Route* r = st.topology.FindRoute(route.first, route.second);
    // A task made before its route had a budget uses the route's per-copy streams.
    st.route_load.Add(route, t.spec.src_node, t.spec.dst_node,
                      t.spec.streams > 0 ? t.spec.streams : (r != nullptr ? StreamsWanted(*r, t.size) : 0));
    st.planned_src[t.spec.src_node] += 1;
  }

  // What one request's pass planned, created once every request has been planned.
  struct Pending {
    std::uint64_t request_id;
    std::vector<catalog::TaskSpec> specs;
  };
  std::vector<Pending> pending;
  for (catalog::Request& r : active) {
    if (!r.expanded) {
      // Listed once; from then on the catalog follows the files (and a restarted planner
      // reads the wanted ones, never the namespace again).
      absl::StatusOr<catalog::Request> expanded = ExpandInCatalog(r);
      if (!expanded.ok()) {
        if (!absl::IsFailedPrecondition(expanded.status())) note(expanded.status());
        continue;  // cancelled meanwhile (FailedPrecondition), or retried next step
      }
      r = std::move(*expanded);
      if (catalog::IsFinished(r.state)) {
        log_->info("planner: request={} {} at expansion: {} files{}", r.id,
                   catalog::ToString(r.state), r.files_total,
                   r.error.empty() ? "" : ", " + r.error);
        continue;
      }
    }
    int budget = r.spec.parallel > 0
                     ? std::max(0, static_cast<int>(r.spec.parallel) - open_of_request[r.id])
                     : -1;
    std::vector<catalog::TaskSpec> specs;
    int starved = 0;  // wanted files in a row that got no copy: the windows are full
    catalog::RequestFileFilter wanted;
    wanted.any_state = false;
    wanted.state = catalog::RequestFileState::kWanted;
    wanted.limit = kWantedPage;
    bool more = true;
    while (more && starved < kStarvedFiles && budget != 0) {
      absl::StatusOr<std::vector<catalog::RequestFile>> files =
          cat.view->ListRequestFiles(r.id, wanted);
      if (!files.ok()) {
        note(files.status());
        break;
      }
      more = files->size() == wanted.limit;
      for (const catalog::RequestFile& f : *files) {
        wanted.after = f.id;
        if (starved >= kStarvedFiles || budget == 0) break;
        std::vector<const Task*> tasks;
        if (auto o = open_by_path.find(f.path); o != open_by_path.end()) tasks = o->second;
        absl::StatusOr<FileOutcome> o =
            PlanFile(cat, f.path, r.spec, tasks, f.slow_sources, st, options_, true, budget);
        if (!o.ok()) {
          note(o.status());
          continue;
        }
        if (o->status != FileStatus::kPending) {
          const bool done = o->status == FileStatus::kDone;
          absl::StatusOr<catalog::RequestFile> settled = cat.work->SettleRequestFile(
              r.id, f.id,
              done ? catalog::RequestFileState::kDone : catalog::RequestFileState::kFailed,
              o->error);
          // FailedPrecondition: a task opened or settled it meanwhile, or the request ended.
          if (!settled.ok() && !absl::IsFailedPrecondition(settled.status()))
            note(settled.status());
          if (!done && settled.ok()) {
            log_->warn("planner: request={} path={} failed: {}", r.id, f.path, o->error);
          }
          continue;
        }
        if (!o->copies.empty()) {
          starved = 0;
        } else if (tasks.empty()) {
          ++starved;  // wanted a copy (none in flight) and the windows gave none
        }
        for (const PlannedCopy& c : o->copies) {
          catalog::TaskSpec spec;
          spec.request_id = r.id;
          spec.path = c.path;
          spec.src_node = c.src_node;
          spec.dst_node = c.dst_node;
          spec.priority = r.spec.priority;
          spec.max_attempts = options_.max_attempts;
          spec.streams = c.streams;
          specs.push_back(std::move(spec));
        }
      }
    }
    if (!specs.empty()) pending.push_back({r.id, std::move(specs)});
  }

  // Every copy of this step is planned: each new task gets its source node's share of its
  // route's rate and its destination node's part of the route's open tasks from the final
  // counts (route_budget.h), so that the shares of one step add up to the route's.
  for (Pending& p : pending) {
    for (catalog::TaskSpec& spec : p.specs) {
      const RouteKey key{SiteOf(st.topology, spec.src_node), SiteOf(st.topology, spec.dst_node)};
      const catalog::Route* route = st.topology.FindRoute(key.first, key.second);
      if (route != nullptr) spec.route_rate_bps = st.route_load.RateShare(*route, spec.src_node);
      spec.dst_share_ppm = st.route_load.DstSharePpm(key, spec.dst_node);
    }
  }
  for (Pending& p : pending) {
    absl::StatusOr<std::vector<Task>> made = cat.work->CreateTasks(p.specs);
    if (made.ok()) {
      log_->debug("planner: request={} planned {} tasks", p.request_id, made->size());
      continue;
    }
    if (absl::IsFailedPrecondition(made.status()) && Finished(cat, p.request_id)) {
      // Cancelled (or finished) since we listed it: the catalog refuses new tasks.
      log_->info("planner: request={} ended meanwhile, skipped: {}", p.request_id,
                 made.status().ToString());
      continue;
    }
    // One bad file (removed meanwhile) must not block the others: one by one.
    for (const catalog::TaskSpec& spec : p.specs) {
      if (absl::StatusOr<std::vector<Task>> one = cat.work->CreateTasks({spec}); !one.ok()) {
        log_->warn("planner: cannot create task request={} path={} {}->{}: {}", p.request_id,
                   spec.path, spec.src_node, spec.dst_node, one.status().ToString());
      }
    }
  }
  return first_error;
}

absl::StatusOr<PlanPreview> Planner::Preview(const catalog::RequestSpec& spec) {
  StepState st;
  st.liveness.now_ns = Now();
  st.liveness.heartbeat_timeout = options_.heartbeat_timeout;
  absl::StatusOr<std::vector<catalog::Node>> nodes = options_.catalog.view->ListNodes("");
  if (!nodes.ok()) return nodes.status();
  st.topology.nodes = std::move(*nodes);
  absl::StatusOr<std::vector<catalog::Route>> routes = options_.catalog.view->ListRoutes();
  if (!routes.ok()) return routes.status();
  st.topology.routes = std::move(*routes);
  absl::StatusOr<std::vector<catalog::RequestFileInput>> files = Expand(spec);
  if (!files.ok()) return files.status();
  PlanPreview out;
  int budget = -1;
  for (const catalog::RequestFileInput& f : *files) {
    if (!f.error.empty()) {
      out.failures.push_back({f.path, f.error});
      continue;
    }
    absl::StatusOr<FileOutcome> o =
        PlanFile(options_.catalog, f.path, spec, {}, {}, st, options_, false, budget);
    if (!o.ok()) return o.status();
    if (o->status == FileStatus::kDone) out.satisfied.push_back(f.path);
    if (o->status == FileStatus::kFailed) out.failures.push_back({f.path, o->error});
    out.copies.insert(out.copies.end(), o->copies.begin(), o->copies.end());
  }
  return out;
}

void Planner::Start() {
  if (thread_.joinable()) return;
  stop_ = false;
  thread_ = std::thread([this] { Loop(); });
}

void Planner::Stop() {
  stop_ = true;
  if (thread_.joinable()) thread_.join();
}

void Planner::PurgeIfDue() {
  if (options_.finished_request_retention.count() <= 0) return;
  const auto now = std::chrono::steady_clock::now();
  if (last_purge_.time_since_epoch().count() != 0 && now - last_purge_ < options_.purge_interval) return;
  last_purge_ = now;
  const std::int64_t cutoff =
      Now() - std::chrono::duration_cast<std::chrono::nanoseconds>(options_.finished_request_retention).count();
  for (int round = 0; round < 100 && !stop_; ++round) {  // 1000 a round, 100,000 at most per interval
    absl::StatusOr<std::size_t> n = options_.catalog.work->PurgeFinishedRequests(cutoff, 1000);
    if (!n.ok()) {
      if (!absl::IsUnimplemented(n.status())) log_->warn("planner: purge finished requests: {}", n.status().ToString());
      return;
    }
    if (*n > 0) log_->info("planner: forgot {} requests finished over {} s ago", *n, options_.finished_request_retention.count());
    if (*n < 1000) return;
  }
}

void Planner::Loop() {
  catalog::EventCursor events(*options_.catalog.view);
  while (!stop_) {
    PurgeIfDue();
    const bool have_seq = events.Start().ok();
    if (absl::Status s = Step(); !s.ok()) {
      log_->warn("planner step: {}", s.ToString());
    }
    if (!have_seq) {
      std::this_thread::sleep_for(std::min(options_.interval, std::chrono::milliseconds(500)));
      continue;
    }
    // Wake on any change (task finished, request created, ...) or after `interval` (a
    // node's heartbeat, which makes no event, may have made a placement possible).
    if (absl::StatusOr<std::vector<catalog::Event>> read = events.Read(options_.interval); !read.ok()) {
      log_->warn("planner: read events: {}", read.status().ToString());
      events.Reset();
      std::this_thread::sleep_for(std::min(options_.interval, std::chrono::milliseconds(500)));
    }
  }
}

}  // namespace gfrep::replica::plan
