#include "replica/web/dashboard.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <fstream>
#include <limits>
#include <set>
#include <sstream>

#include "catalog/request_file_pages.h"
#include "replica/plan/policy.h"
#include "replica/plan/policy_explain.h"
#include "replica/web/internal/dashboard_assets.h"

namespace gfrep::replica::web {
namespace {

using nlohmann::json;

constexpr std::size_t kMaxErrors = 20;
constexpr std::size_t kMaxCountedReplicas = 1'000'000;
constexpr std::size_t kMaxOpenTasksCounted = 100'000;

HttpResponse Json(int status, const json& j) {
  // A string in the answer may not be UTF-8 (an error naming the path asked for), which
  // dump() would throw on, turning a 400 into a 500: replace the bad bytes (U+FFFD) instead.
  return {status, "application/json", j.dump(-1, ' ', false, json::error_handler_t::replace),
          {{"Cache-Control", "no-store"}}};
}

HttpResponse Error(int status, const std::string& what) { return Json(status, {{"error", what}}); }

int HttpStatusOf(const absl::Status& s) {
  switch (s.code()) {
    case absl::StatusCode::kNotFound: return 404;
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kFailedPrecondition: return 400;
    default: return 500;
  }
}

std::string TypeOf(const std::string& name) {
  if (name.ends_with(".html")) return "text/html; charset=utf-8";
  if (name.ends_with(".js")) return "text/javascript; charset=utf-8";
  if (name.ends_with(".css")) return "text/css; charset=utf-8";
  return "application/octet-stream";
}

json BinsJson(const TelemetryBins& bins) {
  json series = json::object();
  for (const auto& [name, values] : bins.series) series[name] = values;
  return series;
}

}  // namespace

Dashboard::Dashboard(DashboardOptions options)
    : options_(std::move(options)), log_(options_.logger ? options_.logger : spdlog::default_logger()) {
  for (const char* name : {"dygraph.min.js", "dygraph.min.css"}) {
    std::ifstream in(options_.library_dir / name, std::ios::binary);
    if (!in) {
      log_->warn("dashboard: {} not found (install libjs-dygraphs, tools/setup-deps): the page shows no graphs",
                 (options_.library_dir / name).string());
      continue;
    }
    std::stringstream text;
    text << in.rdbuf();
    library_[name] = text.str();
  }
}

Dashboard::~Dashboard() { Stop(); }

void Dashboard::AddRoutes(HttpRoutes& routes) {
  for (const auto& [name, content] : internal::DashboardAssets()) {
    const std::string path = name == "index.html" ? "/" : "/" + name;
    routes.pages[path] = [this, type = TypeOf(name), body = &content](const HttpRequest&) {
      {
        absl::MutexLock lock(&mu_);
        pages_served_ += 1;
      }
      return HttpResponse{200, type, *body, {{"Cache-Control", "no-cache"}}};
    };
  }
  for (const char* name : {"dygraph.min.js", "dygraph.min.css"}) {
    routes.pages[std::string("/lib/") + name] = [this, name = std::string(name)](const HttpRequest&) {
      auto it = library_.find(name);
      if (it == library_.end()) {
        return HttpResponse{404, "text/plain; charset=utf-8",
                            fmt::format("{} is not installed (libjs-dygraphs)\n", name), {}};
      }
      return HttpResponse{200, TypeOf(name), it->second, {{"Cache-Control", "max-age=3600"}}};
    };
  }
  routes.pages["/favicon.ico"] = [](const HttpRequest&) {  // none: say so without an error
    return HttpResponse{204, "image/x-icon", "", {{"Cache-Control", "max-age=86400"}}};
  };
  routes.pages["/api/request"] = [this](const HttpRequest& r) { return ApiRequest(r); };
  routes.pages["/api/explain"] = [this](const HttpRequest& r) { return ApiExplain(r); };
  routes.pages["/api/state"] = [this](const HttpRequest&) {
    absl::MutexLock lock(&mu_);
    return HttpResponse{200, "application/json", last_state_.empty() ? "{}" : last_state_, {{"Cache-Control", "no-store"}}};
  };
  routes.websockets["/ws"] = [this](std::shared_ptr<WebSocketPeer> peer) {
    {
      absl::MutexLock lock(&mu_);
      pages_.push_back({std::move(peer), false, std::make_shared<StreamWatch>()});
    }  // greeted at once (Loop's Await sees the page), not at the next tick
  };
}

HttpResponse Dashboard::ApiRequest(const HttpRequest& r) {
  auto it = r.query.find("id");
  std::uint64_t id = 0;
  if (it == r.query.end() || it->second.empty() ||
      it->second.find_first_not_of("0123456789") != std::string::npos || it->second.size() > 19) {
    return Error(400, "id: a request number, e.g. /api/request?id=7");
  }
  id = std::stoull(it->second);
  catalog::CatalogView& cat = *options_.catalog;
  absl::StatusOr<catalog::Request> req = cat.GetRequest(id);
  if (!req.ok()) return Error(HttpStatusOf(req.status()), req.status().ToString());
  catalog::TaskFilter f;
  f.request_id = id;
  f.limit = catalog::kMaxBatchPaths * 4;
  absl::StatusOr<std::vector<catalog::Task>> tasks = cat.ListTasks(f);
  if (!tasks.ok()) return Error(500, tasks.status().ToString());
  std::map<std::pair<std::string, std::string>, const catalog::Task*> latest;  // (path, dst) ->
  for (const catalog::Task& t : *tasks) {
    const catalog::Task*& slot = latest[{t.spec.path, t.spec.dst_node}];
    if (slot == nullptr || t.id > slot->id) slot = &t;
  }
  const std::int64_t now = catalog::SystemNowNs();
  json files = json::array();
  for (const auto& [key, t] : latest) {
    if (t->state == catalog::TaskState::kDone) continue;
    files.push_back({{"path", key.first},
                     {"dst", key.second},
                     {"src", t->spec.src_node},
                     {"state", std::string(catalog::ToString(t->state))},
                     {"reason", plan::DescribeTask(*t, now)}});
    if (files.size() >= 200) break;
  }
  // The request's files as the catalog follows them: those not done (wanted, copying,
  // failed with the reason), up to 200, from at most 10,000 read.
  json file_states = json::array();
  absl::Status rows = catalog::ForEachRequestFile(
      cat, id, {},
      [&](const catalog::RequestFile& f) {
        if (f.state != catalog::RequestFileState::kDone) {
          file_states.push_back({{"path", f.path},
                                 {"state", std::string(catalog::ToString(f.state))},
                                 {"attempts", f.attempts},
                                 {"slow_sources", f.slow_sources},
                                 {"reason", f.reason}});
        }
        return file_states.size() < 200;
      },
      10'000);
  if (!rows.ok()) return Error(HttpStatusOf(rows), rows.ToString());
  const std::uint64_t in_flight = options_.hub->Now().request_in_flight_bytes[id];
  return Json(200, {{"id", req->id},
                    {"owner", catalog::DescribeOwner(req->spec)},
                    {"origin", std::string(catalog::ToString(req->spec.origin))},
                    {"state", std::string(catalog::ToString(req->state))},
                    {"error", req->error},
                    {"copies", req->spec.copies},
                    {"files_total", req->files_total},
                    {"files_done", req->files_done},
                    {"files_failed", req->files_failed},
                    {"bytes_total", req->bytes_total},
                    {"bytes_done", req->bytes_done},
                    {"in_flight_bytes", in_flight},
                    {"files", files},
                    {"file_states", file_states}});
}

HttpResponse Dashboard::ApiExplain(const HttpRequest& r) {
  auto it = r.query.find("path");
  if (it == r.query.end() || it->second.empty()) return Error(400, "path: e.g. /api/explain?path=/exp/a");
  catalog::CatalogView& cat = *options_.catalog;
  absl::StatusOr<catalog::Location> loc = cat.Locate(it->second);
  if (!loc.ok()) return Error(HttpStatusOf(loc.status()), loc.status().ToString());
  json locations = json::array();
  for (const catalog::Replica& rep : loc->replicas) {
    locations.push_back({{"node", rep.node},
                         {"state", std::string(catalog::ToString(rep.state))},
                         {"generation", rep.generation},
                         {"note", rep.note}});
  }
  json rules = json::array();
  std::vector<plan::PolicyRule> parsed;
  if (absl::StatusOr<catalog::PolicyDocument> doc = cat.GetPolicies(); doc.ok() && !doc->text.empty()) {
    absl::StatusOr<std::vector<plan::PolicyRule>> p = plan::ParsePolicies(doc->text, doc->source);
    if (p.ok()) parsed = std::move(*p);
  }
  if (loc->attributes.type == catalog::FileType::kFile) {
    plan::ExplainOptions eo;
    eo.heartbeat_timeout = options_.node_timeout;
    absl::StatusOr<std::vector<plan::RuleFileVerdict>> v = plan::ExplainPath(cat, parsed, loc->path, eo);
    if (!v.ok()) return Error(HttpStatusOf(v.status()), v.status().ToString());
    for (const plan::RuleFileVerdict& x : *v) {
      rules.push_back({{"rule", x.rule},
                       {"state", std::string(plan::ToString(x.state))},
                       {"have", x.have},
                       {"wanted", x.wanted},
                       {"sites", x.sites},
                       {"reason", x.reason}});
    }
  }
  return Json(200, {{"path", loc->path},
                    {"size", loc->attributes.size},
                    {"generation", loc->attributes.generation},
                    {"locations", locations},
                    {"rules", rules}});
}

void Dashboard::ReadEvents() {
  if (!events_) events_.emplace(*options_.catalog);
  absl::StatusOr<std::vector<catalog::Event>> events = events_->Read();
  if (!events.ok()) return;
  std::map<std::string, std::uint64_t> counts;
  for (const catalog::Event& e : *events) {
    if (e.kind == catalog::EventKind::kTask) counts[e.state] += 1;
    const bool task_failed = e.kind == catalog::EventKind::kTask && e.state == "failed";
    const bool replica_bad = e.kind == catalog::EventKind::kReplica && (e.state == "corrupt" || e.state == "lost");
    if (!task_failed && !replica_bad) continue;
    errors_.push_front({{"time_ms", e.time_ns / 1'000'000},
                        {"what", task_failed ? fmt::format("task {} to {} failed: {}", e.id, e.node, e.detail)
                                             : fmt::format("replica on {} {}: {}", e.node, e.state, e.detail)}});
    if (errors_.size() > kMaxErrors) errors_.pop_back();
  }
  absl::MutexLock lock(&mu_);
  for (const auto& [state, n] : counts) task_events_[state] += n;
}

void Dashboard::RefreshSlow() {
  catalog::CatalogView& cat = *options_.catalog;
  // Complete replicas per site (bounded: a count past the bound is marked approximate).
  absl::StatusOr<std::vector<catalog::Node>> nodes = cat.ListNodes("");
  if (nodes.ok()) {
    json counts = json::object();
    std::size_t seen = 0;
    for (const catalog::Node& n : *nodes) {
      catalog::InodeId after = 0;
      std::uint64_t complete = 0;
      while (seen < kMaxCountedReplicas) {
        absl::StatusOr<std::vector<catalog::Replica>> page = cat.ListNodeReplicas(n.name, after, 10000);
        if (!page.ok() || page->empty()) break;
        for (const catalog::Replica& r : *page) {
          after = r.inode;
          complete += r.state == catalog::ReplicaState::kComplete ? 1 : 0;
        }
        seen += page->size();
        if (page->size() < 10000) break;
      }
      counts[n.site] = counts.value(n.site, std::uint64_t{0}) + complete;
    }
    replicas_ = std::move(counts);
  }
  // The policies' state.
  json policies = json::array();
  if (absl::StatusOr<catalog::PolicyDocument> doc = cat.GetPolicies(); doc.ok() && !doc->text.empty()) {
    absl::StatusOr<std::vector<plan::PolicyRule>> rules = plan::ParsePolicies(doc->text, doc->source);
    if (rules.ok()) {
      plan::ExplainOptions eo;
      eo.heartbeat_timeout = options_.node_timeout;
      for (const plan::PolicyRule& r : *rules) {
        absl::StatusOr<plan::RuleStatusSummary> s = plan::StatusOfRule(cat, r, 0, eo);
        if (!s.ok()) continue;
        policies.push_back({{"rule", r.name}, {"files", s->files}, {"satisfied", s->satisfied},
                            {"in_flight", s->in_flight}, {"waiting", s->waiting}, {"failed", s->failed},
                            {"ended", s->ended}});
      }
    }
  }
  policies_ = std::move(policies);
}

json Dashboard::State() {
  catalog::CatalogView& cat = *options_.catalog;
  const std::int64_t now_ns = catalog::SystemNowNs();
  const TelemetryNow moving = options_.hub->Now();
  json state = {{"type", "state"}, {"time_ms", now_ns / 1'000'000}};
  // Sites with their nodes.
  json sites = json::array();
  absl::StatusOr<std::vector<catalog::Site>> all_sites = cat.ListSites();
  absl::StatusOr<std::vector<catalog::Node>> nodes = cat.ListNodes("");
  if (all_sites.ok() && nodes.ok()) {
    for (const catalog::Site& s : *all_sites) {
      json ns = json::array();
      for (const catalog::Node& n : *nodes) {
        if (n.site != s.name) continue;
        ns.push_back({{"name", n.name},
                      {"live", now_ns - n.last_heartbeat_ns <= std::chrono::nanoseconds(options_.node_timeout).count()},
                      {"active_transfers", n.active_transfers},
                      {"free_bytes", n.free_bytes}});
      }
      sites.push_back({{"name", s.name}, {"labels", s.labels}, {"nodes", ns}});
    }
  }
  state["sites"] = sites;
  // Routes: those in the catalog and those carrying bytes; throughput over the last second.
  const TelemetryBins last = options_.hub->Since(last_end_ms_ - 1000);
  std::map<std::string, double> now_bps;
  for (const auto& [name, bins] : last.series) {
    if (!name.starts_with("route:")) continue;
    std::uint64_t sum = 0;
    const std::size_t n = std::min<std::size_t>(bins.size(), 10);
    for (std::size_t i = bins.size() - n; i < bins.size(); ++i) sum += bins[i];
    now_bps[name.substr(6)] = static_cast<double>(sum) * 8.0 / (static_cast<double>(n) * last.bin_ms / 1000.0);
  }
  std::map<std::string, json> routes;
  if (absl::StatusOr<std::vector<catalog::Route>> rs = cat.ListRoutes(); rs.ok()) {
    for (const catalog::Route& r : *rs) {
      const std::string key = r.src_site + "->" + r.dst_site;
      routes[key] = {{"src", r.src_site},
                     {"dst", r.dst_site},
                     {"rtt_ms", r.rtt_ms > 0 ? r.rtt_ms : r.observed.rtt_ms},
                     {"capacity_bps", r.route_rate_bps},
                     {"ceiling_bps", r.bandwidth_bps},
                     {"peak_bps", r.observed.peak_bps}};
    }
  }
  for (const auto& [key, bytes] : moving.route_bytes_total) {
    if (routes.count(key) > 0) continue;
    const std::size_t arrow = key.find("->");
    routes[key] = {{"src", key.substr(0, arrow)}, {"dst", key.substr(arrow + 2)}, {"rtt_ms", 0},
                   {"capacity_bps", 0}, {"ceiling_bps", 0}, {"peak_bps", 0}};
  }
  json route_list = json::array();
  for (auto& [key, r] : routes) {
    r["now_bps"] = now_bps.count(key) > 0 ? now_bps[key] : 0.0;
    r["files_in_flight"] = moving.route_copies.count(key) > 0 ? moving.route_copies.at(key) : 0;
    r["bytes_total"] = moving.route_bytes_total.count(key) > 0 ? moving.route_bytes_total.at(key) : 0;
    route_list.push_back(r);
  }
  state["routes"] = route_list;
  // The queue: the newest requests (and every unfinished one among the newest 50; each comes
  // with its paths, so a look at many big requests per second would cost).
  json requests = json::array();
  std::map<std::string, std::uint64_t> request_states;
  if (absl::StatusOr<std::vector<catalog::Request>> rs = cat.ListRequests(true, catalog::RequestState::kQueued, 50);
      rs.ok()) {
    std::size_t shown = 0;
    for (const catalog::Request& r : *rs) {
      request_states[std::string(catalog::ToString(r.state))] += 1;
      const bool open = r.state == catalog::RequestState::kQueued || r.state == catalog::RequestState::kRunning;
      if (!open && shown >= 20) continue;
      shown += 1;
      auto inflight = moving.request_in_flight_bytes.find(r.id);
      requests.push_back({{"id", r.id},
                          {"owner", catalog::DescribeOwner(r.spec)},
                          {"origin", std::string(catalog::ToString(r.spec.origin))},
                          {"state", std::string(catalog::ToString(r.state))},
                          {"copies", r.spec.copies},
                          {"files_total", r.files_total},
                          {"files_done", r.files_done},
                          {"files_failed", r.files_failed},
                          {"bytes_total", r.bytes_total},
                          {"bytes_done", r.bytes_done},
                          {"in_flight_bytes",
                           inflight == moving.request_in_flight_bytes.end() ? 0 : inflight->second},
                          {"error", r.error}});
    }
  }
  std::map<std::string, std::uint64_t> task_states = {{"queued", 0}, {"leased", 0}};
  catalog::TaskFilter open;
  open.open_only = true;
  open.limit = kMaxOpenTasksCounted;
  if (absl::StatusOr<std::vector<catalog::Task>> ts = cat.ListTasks(open); ts.ok()) {
    for (const catalog::Task& t : *ts) task_states[std::string(catalog::ToString(t.state))] += 1;
  }
  state["queue"] = {{"requests", requests}, {"tasks", task_states}, {"routes_in_flight", moving.route_copies}};
  state["replicas"] = replicas_;
  state["policies"] = policies_;
  state["errors"] = json(std::vector<json>(errors_.begin(), errors_.end()));
  double total_bps = 0;
  for (const auto& [key, bps] : now_bps) total_bps += bps;
  state["totals"] = {{"bytes", moving.bytes_total}, {"bps", total_bps}, {"copies", moving.copies},
                     {"streams", moving.streams}};
  absl::MutexLock lock(&mu_);
  tasks_open_ = task_states;
  requests_ = request_states;
  return state;
}

void Dashboard::AppendMetrics(MetricsText& m) {
  const TelemetryNow moving = options_.hub->Now();
  m.Family("gfrep_route_received_bytes_total", "counter",
           "Bytes received over each route (source site -> destination site), from the agents' telemetry");
  for (const auto& [key, bytes] : moving.route_bytes_total) {
    const std::size_t arrow = key.find("->");
    m.Sample("gfrep_route_received_bytes_total", {{"src_site", key.substr(0, arrow)}, {"dst_site", key.substr(arrow + 2)}},
             static_cast<double>(bytes));
  }
  m.Family("gfrep_route_files_total", "counter",
           "Files received whole over each route (source site -> destination site), from the agents' telemetry");
  for (const auto& [key, n] : moving.route_files_total) {
    const std::size_t arrow = key.find("->");
    m.Sample("gfrep_route_files_total", {{"src_site", key.substr(0, arrow)}, {"dst_site", key.substr(arrow + 2)}},
             static_cast<double>(n));
  }
  m.Family("gfrep_route_copies_running", "gauge", "Copies running over each route now");
  for (const auto& [key, n] : moving.route_copies) {
    const std::size_t arrow = key.find("->");
    m.Sample("gfrep_route_copies_running", {{"src_site", key.substr(0, arrow)}, {"dst_site", key.substr(arrow + 2)}},
             static_cast<double>(n));
  }
  m.Gauge("gfrep_copies_running", "Copies running now, all routes", static_cast<double>(moving.copies));
  m.Gauge("gfrep_streams_running", "Data streams of the copies running now", static_cast<double>(moving.streams));
  m.Counter("gfrep_telemetry_batches_total", "Telemetry batches received from site agents",
            static_cast<double>(moving.batches));
  absl::MutexLock lock(&mu_);
  m.Family("gfrep_tasks", "gauge", "Open tasks by state (queued, leased), as of the dashboard's last look");
  for (const auto& [state, n] : tasks_open_) m.Sample("gfrep_tasks", {{"state", state}}, static_cast<double>(n));
  m.Family("gfrep_requests", "gauge", "The newest 50 requests by state, as of the dashboard's last look");
  for (const auto& [state, n] : requests_) m.Sample("gfrep_requests", {{"state", state}}, static_cast<double>(n));
  m.Family("gfrep_task_transitions_total", "counter",
           "Task state changes seen in the event log since gfcatalogd started (done, failed, queued again, ...)");
  for (const auto& [state, n] : task_events_) {
    m.Sample("gfrep_task_transitions_total", {{"state", state}}, static_cast<double>(n));
  }
  m.Gauge("gfrep_dashboard_pages_connected", "Dashboard pages connected now", static_cast<double>(pages_.size()));
}

void Dashboard::Loop() {
  auto next_state = std::chrono::steady_clock::now();
  while (!stop_) {
    const auto now = std::chrono::steady_clock::now();
    // The bins completed since the last tick, to every page.
    TelemetryBins bins = options_.hub->Since(last_end_ms_);
    std::string tick;
    if (last_end_ms_ == 0 || bins.end_ms > last_end_ms_) {
      tick = json{{"type", "tick"}, {"bin_ms", bins.bin_ms}, {"end_ms", bins.end_ms}, {"bins", BinsJson(bins)}}.dump();
      last_end_ms_ = bins.end_ms;
    }
    std::string state;  // built in this round: to every page
    if (now >= next_state) {
      next_state = now + options_.state_interval;
      ReadEvents();
      if (last_slow_ == std::chrono::steady_clock::time_point{} || now - last_slow_ >= options_.slow_interval) {
        last_slow_ = now;
        RefreshSlow();
      }
      state = State().dump();
    }
    std::vector<Page> greet;
    std::vector<Page> peers;
    std::string greet_state;  // the latest state, for pages that just connected
    {
      absl::MutexLock lock(&mu_);
      if (!state.empty()) last_state_ = state;
      greet_state = last_state_;
      std::erase_if(pages_, [](const Page& p) { return !p.peer->open(); });
      for (Page& p : pages_) {
        if (!p.greeted) {
          greet.push_back(p);
          p.greeted = true;
        } else {
          peers.push_back(p);
        }
      }
    }
    if (!greet.empty()) {
      TelemetryBins history = options_.hub->Since(0);
      const std::string hello =
          json{{"type", "history"}, {"bin_ms", history.bin_ms}, {"end_ms", history.end_ms}, {"series", BinsJson(history)}}.dump();
      for (Page& p : greet) {
        p.peer->Send(hello);
        if (!greet_state.empty()) p.peer->Send(greet_state);
      }
    }
    for (const Page& p : peers) {
      if (!tick.empty()) p.peer->Send(tick);
      if (!state.empty()) p.peer->Send(state);
    }
    FeedStreams(peers);
    absl::MutexLock lock(&mu_);
    mu_.AwaitWithTimeout(absl::Condition(this, &Dashboard::WakeLocked),
                         absl::FromChrono(options_.tick));
  }
}

bool Dashboard::WakeLocked() const {
  return stop_.load() ||
         std::any_of(pages_.begin(), pages_.end(), [](const Page& p) { return !p.greeted; });
}

void Dashboard::FeedStreams(const std::vector<Page>& pages) {
  // One message per (pair, bins after) this round, shared by the pages that need the same.
  std::map<std::pair<std::string, std::int64_t>, std::pair<std::string, std::int64_t>> built;
  for (const Page& p : pages) {
    StreamWatch& w = *p.watch;
    std::string wanted = w.pair;
    if (const std::string asked = p.peer->Received(); !asked.empty()) {
      json j = json::parse(asked, nullptr, false);
      if (j.is_object() && j.contains("streams") && j["streams"].is_string()) {
        wanted = j["streams"].get<std::string>();
      }
    }
    const bool reset = wanted != w.pair;
    w.pair = wanted;
    if (wanted.empty()) continue;
    const std::int64_t after = reset ? 0 : w.end_ms;
    auto it = built.find({wanted, after});
    if (it == built.end()) {
      TelemetryBins bins = options_.hub->StreamsSince(wanted, after);
      std::string text;
      if (reset || bins.end_ms > after) {
        text = json{{"type", "streams"}, {"pair", wanted}, {"reset", reset}, {"bin_ms", bins.bin_ms},
                    {"end_ms", bins.end_ms}, {"series", BinsJson(bins)}}
                   .dump();
      }
      it = built.emplace(std::make_pair(wanted, after), std::make_pair(std::move(text), bins.end_ms)).first;
    }
    if (it->second.first.empty()) continue;
    p.peer->Send(it->second.first);
    w.end_ms = it->second.second;
  }
}

void Dashboard::Start() {
  if (thread_.joinable()) return;
  stop_ = false;
  thread_ = std::thread([this] { Loop(); });
}

void Dashboard::Stop() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  if (thread_.joinable()) thread_.join();
  // The pages' connections belong to the HTTP server's I/O context: let them go before it.
  absl::MutexLock lock(&mu_);
  pages_.clear();
}

}  // namespace gfrep::replica::web
