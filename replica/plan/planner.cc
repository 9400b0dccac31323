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

// Planner::FileList: how often a step looks at every file of a request, and after how many
// files in a row that could not get a copy (windows full) a step stops looking.
constexpr std::int64_t kFullSweepNs = 10'000'000'000;
constexpr int kStarvedFiles = 64;

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

// True if `node` holds a complete replica of `generation` of the located file.
bool HoldsComplete(const catalog::Location& loc, std::string_view node, std::uint64_t generation) {
  return std::any_of(loc.replicas.begin(), loc.replicas.end(), [&](const catalog::Replica& r) {
    return r.node == node && r.state == catalog::ReplicaState::kComplete && r.generation == generation;
  });
}

// Plans one file. `window` false: ignore per-node/route/request limits (dry run).
// `request_budget`: tasks this request may still open (-1: unlimited); decremented.
absl::StatusOr<FileOutcome> PlanFile(const catalog::Roles& catalog, const std::string& path,
                                     const catalog::RequestSpec& spec,
                                     const std::vector<const Task*>& tasks, StepState& st,
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
    std::string site = SiteOf(st.topology, r.node);
    per_site[site] += 1;
    if (!site.empty() && eligible_site(site)) ++complete;
  }
  int inflight = 0;
  const Task* failed = nullptr;
  for (const Task* t : tasks) {
    if (IsOpen(*t)) {
      // Whatever its generation, the node is busy with this file: never plan a second copy
      // onto it meanwhile.
      holders.insert(t->spec.dst_node);
      std::string site = SiteOf(st.topology, t->spec.dst_node);
      if (t->generation == generation) {
        per_site[site] += 1;
        if (eligible_site(site)) ++inflight;
      }
    } else if (t->state == TaskState::kFailed && t->generation == generation &&
               HoldsComplete(*loc, t->spec.src_node, generation)) {
      // A copy that failed from a source whose replica has since been found bad (lost,
      // corrupt) or dropped is not the file's failure: plan it again from a good one.
      if (failed == nullptr || t->id > failed->id) failed = t;
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
  if (failed != nullptr && complete + inflight < copies) {
    out.status = FileStatus::kFailed;
    out.error = fmt::format("copy {} -> {} failed after {} attempts: {}", failed->spec.src_node,
                            failed->spec.dst_node, failed->attempts, failed->last_error);
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
    st.route_load.Add(route, src_node.name,
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

std::string Summarize(const std::vector<FileFailure>& failures, std::uint64_t total) {
  std::string s = fmt::format("{} of {} files failed", failures.size(), total);
  std::size_t shown = 0;
  for (const FileFailure& f : failures) {
    if (shown == 5) {
      s += "; ...";
      break;
    }
    s += fmt::format("{} {}: {}", shown == 0 ? ":" : ";", f.path, f.error);
    ++shown;
  }
  if (s.size() > catalog::kMaxLabelBytes) s.resize(catalog::kMaxLabelBytes);
  return s;
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

absl::StatusOr<Planner::FileList> Planner::Expand(const catalog::RequestSpec& spec) {
  FileList out;
  std::set<std::string> seen;
  auto add = [&](std::string path, std::uint64_t size) {
    if (seen.insert(path).second) {
      out.files.push_back(std::move(path));
      out.sizes.push_back(size);
    }
  };
  for (const std::string& raw : spec.paths) {
    absl::StatusOr<std::vector<std::string>> parts = catalog::SplitPath(raw);
    if (!parts.ok()) {
      out.failures.push_back({raw, std::string(parts.status().message())});
      continue;
    }
    std::string path = catalog::JoinPath(*parts);
    absl::StatusOr<catalog::Attributes> st = options_.catalog.view->Stat(path);
    if (!st.ok()) {
      if (!absl::IsNotFound(st.status())) return st.status();
      out.failures.push_back({path, "no such file or directory"});
      continue;
    }
    if (st->type == catalog::FileType::kFile) {
      add(path, st->size);
      continue;
    }
    if (!spec.recursive) {
      out.failures.push_back({path, "is a directory (use -r)"});
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
            add(std::move(child), e.attributes.size);
          }
        }
        if (entries->size() < list.limit) break;
        list.start_after = entries->back().name;
      }
      if (out.files.size() > catalog::kMaxBatchPaths) {
        return absl::InvalidArgumentError(
            fmt::format("{}: more than {} files", path, catalog::kMaxBatchPaths));
      }
    }
  }
  out.done.assign(out.files.size(), false);
  return out;
}

absl::Status Planner::Step() {
  absl::MutexLock lock(&step_mu_);
  const catalog::Roles& cat = options_.catalog;
  absl::Status first_error = absl::OkStatus();
  // A node that died never claims again, and only its own claims used to expire its
  // leases: expire everyone's here.
  if (absl::StatusOr<std::size_t> expired = cat.work->ExpireLeases(); !expired.ok()) {
    first_error = expired.status();
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

  // First all open tasks, so that limits see every request's load. They come from the
  // catalog's open-task index (cheap however many tasks have finished); each request's view
  // of its other tasks is kept between steps (see TaskView).
  std::set<std::uint64_t> active_ids;
  for (const catalog::Request& r : active) active_ids.insert(r.id);
  catalog::TaskFilter open_filter;
  open_filter.open_only = true;
  open_filter.limit = std::numeric_limits<std::size_t>::max();
  absl::StatusOr<std::vector<Task>> open = cat.view->ListTasks(open_filter);
  if (!open.ok()) return open.status();
  if (absl::Status s = RefreshViews(active, *open); !s.ok()) return s;
  std::map<std::uint64_t, int> open_of_request;
  std::map<std::string, std::vector<const Task*>> open_by_path;
  for (const Task& listed : *open) {
    if (!active_ids.count(listed.spec.request_id)) continue;
    TaskView& view = views_[listed.spec.request_id];
    Task& t = view.tasks[listed.id];  // the view holds it now (RefreshViews)
    // A dead destination never finishes its tasks: end them (not a failed attempt of the
    // file), so that the file is planned again below, onto a live node.
    const catalog::Node* dst = st.topology.FindNode(t.spec.dst_node);
    if (IsOpen(t) && judge_liveness && (dst == nullptr || !IsLive(*dst, st.liveness))) {
      absl::StatusOr<Task> ended =
          cat.work->AbandonTask(t.id, fmt::format("destination node {} is down", t.spec.dst_node));
      if (!ended.ok()) {
        if (first_error.ok()) first_error = ended.status();
      } else {
        log_->warn("planner: request={} task={} path={}: {} ({})", t.spec.request_id, t.id,
                   t.spec.path, ended->last_error, catalog::ToString(ended->state));
        t = std::move(*ended);
      }
    }
    if (!IsOpen(t)) continue;
    open_of_request[t.spec.request_id] += 1;
    open_by_path[t.spec.path].push_back(&t);
    st.open_per_dst[t.spec.dst_node] += 1;
    const RouteKey route{SiteOf(st.topology, t.spec.src_node), SiteOf(st.topology, t.spec.dst_node)};
    st.open_per_route[route] += 1;
    const catalog::Route* r = st.topology.FindRoute(route.first, route.second);
    // A task made before its route had a budget uses the route's per-copy streams.
    st.route_load.Add(route, t.spec.src_node,
                      t.spec.streams > 0 ? t.spec.streams : (r != nullptr ? StreamsWanted(*r, t.size) : 0));
    st.planned_src[t.spec.src_node] += 1;
  }

  // What one request's pass planned, created once every request has been planned.
  struct Pending {
    const catalog::Request* request;
    std::vector<catalog::TaskSpec> specs;
    bool incomplete_view;
    std::uint64_t total;
    std::uint64_t done;
    std::vector<FileFailure> failures;
    std::uint64_t bytes_total;
    std::uint64_t bytes_done;
  };
  std::vector<Pending> pending;
  std::set<std::uint64_t> live_ids;
  for (const catalog::Request& r : active) {
    live_ids.insert(r.id);
    auto it = expanded_.find(r.id);
    if (it == expanded_.end()) {
      absl::StatusOr<FileList> files = Expand(r.spec);
      if (!files.ok()) {
        if (absl::IsInvalidArgument(files.status())) {
          catalog::RequestUpdate u;
          u.id = r.id;
          u.set_state = true;
          u.state = catalog::RequestState::kFailed;
          u.error = std::string(files.status().message());
          (void)cat.work->UpdateRequest(u);  // ignored: retried next step if it did not stick
          continue;
        }
        if (first_error.ok()) first_error = files.status();
        continue;
      }
      it = expanded_.emplace(r.id, std::move(*files)).first;
    }
    FileList& files = it->second;
    const bool full_sweep = st.liveness.now_ns - files.last_full_ns >= kFullSweepNs;
    if (full_sweep) files.last_full_ns = st.liveness.now_ns;
    // Open tasks of every request count for a file (copies are a property of the file, and
    // two requests must not copy it to the same node twice); failures only of this one.
    const TaskView& view = views_[r.id];
    auto tasks_for = [&](const std::string& path) {
      std::vector<const Task*> here;
      if (auto o = open_by_path.find(path); o != open_by_path.end()) here = o->second;
      if (auto ids = view.by_path.find(path); ids != view.by_path.end()) {
        for (std::uint64_t id : ids->second) {
          const Task& t = view.tasks.at(id);
          if (!IsOpen(t)) here.push_back(&t);
        }
      }
      return here;
    };
    const int open_in_request = open_of_request[r.id];
    int parallel = static_cast<int>(r.spec.parallel);
    int budget = parallel > 0 ? std::max(0, parallel - open_in_request) : -1;

    std::vector<FileFailure> failures = files.failures;
    std::uint64_t done = 0, bytes_total = 0, bytes_done = 0;
    std::vector<catalog::TaskSpec> specs;
    bool incomplete_view = false;
    int starved = 0;  // files in a row that wanted a copy and got none: the windows are full
    for (std::size_t i = 0; i < files.files.size(); ++i) {
      const std::string& path = files.files[i];
      if (!full_sweep && files.done[i]) {
        ++done;
        bytes_total += files.sizes[i];
        bytes_done += files.sizes[i];
        continue;
      }
      if (!full_sweep && starved >= kStarvedFiles) {
        bytes_total += files.sizes[i];  // pending; looked at when the windows open again
        continue;
      }
      const std::vector<const Task*> tasks = tasks_for(path);
      absl::StatusOr<FileOutcome> o = PlanFile(cat, path, r.spec, tasks, st, options_, true, budget);
      if (!o.ok()) {
        if (first_error.ok()) first_error = o.status();
        incomplete_view = true;
        continue;
      }
      files.sizes[i] = o->size;
      files.done[i] = o->status == FileStatus::kDone;
      bytes_total += o->size;
      if (o->status == FileStatus::kDone) {
        ++done;
        bytes_done += o->size;
      } else if (o->status == FileStatus::kFailed) {
        failures.push_back({path, o->error});
      } else if (!o->copies.empty()) {
        starved = 0;
      } else if (std::none_of(tasks.begin(), tasks.end(), [](const Task* t) { return IsOpen(*t); })) {
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
    pending.push_back({&r, std::move(specs), incomplete_view, files.files.size() + files.failures.size(), done,
                       std::move(failures), bytes_total, bytes_done});
  }

  // Every copy of this step is planned: each new task gets its source node's share of its
  // route's rate from the final counts (route_budget.h), so that the shares of one step add
  // up to the route's rate.
  for (Pending& p : pending) {
    for (catalog::TaskSpec& spec : p.specs) {
      const std::string src_site = SiteOf(st.topology, spec.src_node);
      const catalog::Route* route = st.topology.FindRoute(src_site, SiteOf(st.topology, spec.dst_node));
      if (route != nullptr) spec.route_rate_bps = st.route_load.RateShare(*route, spec.src_node);
    }
  }
  for (Pending& p : pending) {
    const catalog::Request& r = *p.request;
    std::vector<catalog::TaskSpec>& specs = p.specs;
    std::vector<FileFailure>& failures = p.failures;
    const std::uint64_t done = p.done, bytes_total = p.bytes_total, bytes_done = p.bytes_done;
    if (!specs.empty()) {
      absl::StatusOr<std::vector<Task>> made = cat.work->CreateTasks(specs);
      if (!made.ok() && absl::IsFailedPrecondition(made.status()) && Finished(cat, r.id)) {
        // Cancelled (or finished) since we listed it: the catalog refuses new tasks and
        // state changes, so this request is skipped; it is not listed next step.
        log_->info("planner: request={} ended meanwhile, skipped: {}", r.id,
                   made.status().ToString());
        continue;
      }
      if (!made.ok()) {
        // One bad file (removed meanwhile) must not block the others: retry one by one.
        for (const catalog::TaskSpec& spec : specs) {
          absl::StatusOr<std::vector<Task>> one = cat.work->CreateTasks({spec});
          if (!one.ok()) {
            log_->warn("planner: cannot create task request={} path={} {}->{}: {}", r.id,
                       spec.path, spec.src_node, spec.dst_node, one.status().ToString());
            continue;
          }
          for (Task& t : *one) views_[r.id].Put(std::move(t));
        }
      } else {
        log_->debug("planner: request={} planned {} tasks", r.id, made->size());
        // Known at once: one that finished before the next step is not in the open list.
        for (Task& t : *made) views_[r.id].Put(std::move(t));
      }
    }
    if (p.incomplete_view) continue;
    const std::uint64_t total = p.total;
    catalog::RequestUpdate u;
    u.id = r.id;
    u.set_counters = r.files_total != total || r.files_done != done ||
                     r.files_failed != failures.size() || r.bytes_total != bytes_total ||
                     r.bytes_done != bytes_done;
    u.files_total = total;
    u.files_done = done;
    u.files_failed = failures.size();
    u.bytes_total = bytes_total;
    u.bytes_done = bytes_done;
    catalog::RequestState want = catalog::RequestState::kRunning;
    std::string error;
    if (done + failures.size() == total) {
      want = failures.empty() ? catalog::RequestState::kDone : catalog::RequestState::kFailed;
      if (!failures.empty()) error = Summarize(failures, total);
    }
    u.set_state = want != r.state;
    u.state = want;
    u.error = error;
    if (u.set_state || u.set_counters) {
      absl::StatusOr<catalog::Request> updated = cat.work->UpdateRequest(u);
      if (!updated.ok() && absl::IsFailedPrecondition(updated.status())) {
        // Cancelled (or finished) since we listed it: a final state is not overwritten.
        log_->info("planner: request={} ended meanwhile, skipped: {}", r.id,
                   updated.status().ToString());
      } else if (!updated.ok()) {
        if (first_error.ok()) first_error = updated.status();
      } else if (u.set_state && want != catalog::RequestState::kRunning) {
        log_->info("planner: request={} {} files={}/{} failed={}{}", r.id,
                   catalog::ToString(want), done, total, failures.size(),
                   error.empty() ? "" : " error=" + error);
      }
    }
  }
  for (auto it = expanded_.begin(); it != expanded_.end();) {
    it = live_ids.count(it->first) ? std::next(it) : expanded_.erase(it);
  }
  for (auto it = views_.begin(); it != views_.end();) {
    it = live_ids.count(it->first) ? std::next(it) : views_.erase(it);
  }
  return first_error;
}

void Planner::TaskView::Put(Task t) {
  auto [it, fresh] = tasks.try_emplace(t.id);
  if (fresh) by_path[t.spec.path].push_back(t.id);
  it->second = std::move(t);
}

absl::Status Planner::RefreshViews(const std::vector<catalog::Request>& active,
                                   const std::vector<Task>& open) {
  const catalog::Roles& cat = options_.catalog;
  const std::int64_t now = Now();
  std::set<std::uint64_t> open_ids;
  for (const Task& t : open) open_ids.insert(t.id);
  for (const catalog::Request& r : active) {
    TaskView& view = views_[r.id];
    if (!view.loaded || now - view.loaded_ns >= kFullSweepNs) {
      catalog::TaskFilter f;
      f.request_id = r.id;
      f.limit = std::numeric_limits<std::size_t>::max();
      absl::StatusOr<std::vector<Task>> tasks = cat.view->ListTasks(f);
      if (!tasks.ok()) return tasks.status();
      view = TaskView{};
      for (Task& t : *tasks) view.Put(std::move(t));
      view.loaded = true;
      view.loaded_ns = now;
      continue;
    }
    // A task the view has open that is no longer in the open list has finished: read once.
    for (auto& [id, t] : view.tasks) {
      if (!IsOpen(t) || open_ids.count(id) > 0) continue;
      absl::StatusOr<Task> now_is = cat.view->GetTask(id);
      if (!now_is.ok()) return now_is.status();
      t = std::move(*now_is);
    }
  }
  for (const Task& t : open) {
    if (auto v = views_.find(t.spec.request_id); v != views_.end()) v->second.Put(t);
  }
  return absl::OkStatus();
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
  absl::StatusOr<FileList> files = Expand(spec);
  if (!files.ok()) return files.status();
  PlanPreview out;
  out.failures = files->failures;
  int budget = -1;
  for (const std::string& path : files->files) {
    absl::StatusOr<FileOutcome> o =
        PlanFile(options_.catalog, path, spec, {}, st, options_, false, budget);
    if (!o.ok()) return o.status();
    if (o->status == FileStatus::kDone) out.satisfied.push_back(path);
    if (o->status == FileStatus::kFailed) out.failures.push_back({path, o->error});
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
