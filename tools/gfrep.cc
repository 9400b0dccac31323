// gfrep [-N COPIES] [-S SRCSITE] [-D DSTSITE[,...]] [-r] [-j PARALLEL] [-n] [--json]
//       [--detach] PATH...
// Gfarm's replicate command: make sure each file has COPIES complete replicas (in the
// destination sites when -D is given; -D without -N means one copy per named site),
// recursively with -r. Creates a replication request in the catalog, which the planner in
// gfcatalogd turns into transfer tasks for the site agents, then follows it: a live
// progress line on a terminal, a summary at the end, the failed files listed and a
// non-zero exit status when any failed. --detach prints the request id and returns.
// Exit: 0 all done, 1 some files failed (or the request was cancelled), 2 usage/catalog
// errors, 3 timeout.
//
// Requests are first-class (also those of policies and the repairer):
//   gfrep list [--all] [--json]   active requests (--all: the latest 100 of any state)
//   gfrep status ID [--json]      one request, with each unfinished file's state and why it
//                                 waits (queued for a claim, backing off until T after an
//                                 error, copying now, failed and why)
//   gfrep attach ID               follow a request (as gfrep does after creating one)
//   gfrep cancel ID               cancel it (its open copies end)
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <ctime>
#include <cstdlib>
#include <iostream>
#include <map>
#include <optional>
#include <set>
#include <thread>

#include <fmt/format.h>

#include "absl/strings/numbers.h"
#include "catalog/client.h"
#include "catalog/event_cursor.h"
#include "catalog/request_file_pages.h"
#include "replica/client/ramp.h"
#include "replica/plan/planner.h"
#include "replica/plan/policy_explain.h"
#include "tools/internal/catalog_flags.h"
#include "tools/internal/cli.h"
#include "transfer/units.h"

namespace {

using namespace gfrep;

struct RouteTotals {
  std::uint64_t bytes = 0;      // of finished copies
  std::uint64_t files = 0;      // finished copies
  std::uint64_t in_flight = 0;  // open copies (queued or leased) now
  std::uint64_t peak_in_flight = 0;  // the most seen at once while gfrep followed the request
};

struct FailedFile {
  std::string path;
  std::string error;
};

struct Snapshot {
  catalog::Request request;
  std::map<std::string, RouteTotals> routes;  // "SRC->DST" of finished and open copies
  std::vector<FailedFile> failed;
  std::uint64_t copies_open = 0;
};

// The request's files in `state` (any state: nullopt), all of them, in pages.
absl::StatusOr<std::vector<catalog::RequestFile>> Files(catalog::Catalog& c, std::uint64_t id,
                                                        std::optional<catalog::RequestFileState> state) {
  std::vector<catalog::RequestFile> out;
  catalog::RequestFileFilter f;
  f.any_state = !state.has_value();
  if (state) f.state = *state;
  absl::Status s = catalog::ForEachRequestFile(c, id, f, [&](const catalog::RequestFile& row) {
    out.push_back(row);
    return true;
  });
  if (!s.ok()) return s;
  return out;
}

absl::StatusOr<Snapshot> Take(catalog::Catalog& c, std::uint64_t id,
                              const std::map<std::string, std::string>& site_of) {
  Snapshot s;
  absl::StatusOr<catalog::Request> r = c.GetRequest(id);
  if (!r.ok()) return r.status();
  s.request = *r;
  catalog::TaskFilter f;
  f.request_id = id;
  f.limit = catalog::kMaxBatchPaths * 4;
  absl::StatusOr<std::vector<catalog::Task>> tasks = c.ListTasks(f);
  if (!tasks.ok()) return tasks.status();
  for (const catalog::Task& t : *tasks) {
    auto site = [&](const std::string& node) {
      auto it = site_of.find(node);
      return it == site_of.end() ? node : it->second;
    };
    const std::string route = fmt::format("{}->{}", site(t.spec.src_node), site(t.spec.dst_node));
    if (t.state == catalog::TaskState::kDone) {
      RouteTotals& rt = s.routes[route];
      rt.bytes += t.size;
      rt.files += 1;
    } else if (t.state == catalog::TaskState::kQueued || t.state == catalog::TaskState::kLeased) {
      s.copies_open += 1;
      s.routes[route].in_flight += 1;
    }
  }
  if (catalog::IsFinished(s.request.state) && s.request.files_failed > 0) {
    // Why each failed file failed, as the catalog settled it (also files that never got a
    // copy: a missing path, no destination with room).
    absl::StatusOr<std::vector<catalog::RequestFile>> failed =
        Files(c, id, catalog::RequestFileState::kFailed);
    // A gfcatalogd older than the request files: the request's error names them.
    if (!failed.ok() && !absl::IsUnimplemented(failed.status())) return failed.status();
    if (failed.ok()) {
      for (const catalog::RequestFile& f : *failed) s.failed.push_back({f.path, f.reason});
    }
  }
  return s;
}

double Mbps(std::uint64_t bytes, double seconds) {
  return seconds > 0 ? static_cast<double>(bytes) * 8 / seconds / 1e6 : 0;
}

// What "full rate" means for a request: of its one route (SRC->DST sites), the measured
// bandwidth (gfprobe), else the rate cap, else the best goodput copies have reached on it;
// none of those (or several routes): the request's own peak. Also the route's RTT.
struct RateReference {
  double bps = 0;
  std::string what = "this request's peak";
  double rtt_ms = 0;
};

RateReference ReferenceFor(catalog::Catalog& c, const std::map<std::string, RouteTotals>& routes) {
  RateReference ref;
  if (routes.size() != 1) return ref;
  const std::string& key = routes.begin()->first;
  const std::size_t arrow = key.find("->");
  absl::StatusOr<catalog::Route> r = c.GetRoute(key.substr(0, arrow), key.substr(arrow + 2));
  if (!r.ok()) return ref;
  ref.rtt_ms = r->rtt_ms > 0 ? r->rtt_ms : r->observed.rtt_ms;
  if (r->bandwidth_bps > 0) {
    ref = {static_cast<double>(r->bandwidth_bps), "the route's measured bandwidth", ref.rtt_ms};
  } else if (r->route_rate_bps > 0) {
    ref = {static_cast<double>(r->route_rate_bps), "the route's rate cap", ref.rtt_ms};
  } else if (r->observed.peak_bps > 0) {
    ref = {static_cast<double>(r->observed.peak_bps), "the route's best learned goodput", ref.rtt_ms};
  }
  return ref;
}

// Follows request `created` until it ends (or `timeout_s`): progress on a terminal, the
// summary at the end; gfrep's exit status.
int Follow(catalog::CatalogClient& c, const catalog::Request& created, bool json, double timeout_s) {
  constexpr const char* kProgram = "gfrep";
  const std::uint64_t id = created.id;
  std::map<std::string, std::string> site_of;
  if (absl::StatusOr<std::vector<catalog::Node>> nodes = c.ListNodes(""); nodes.ok()) {
    for (const catalog::Node& n : *nodes) site_of[n.name] = n.site;
  }
  const bool tty = !json && ::isatty(STDERR_FILENO);
  const auto start = std::chrono::steady_clock::now();
  auto elapsed = [&] {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  };
  catalog::EventCursor events(c);
  if (!events.Start().ok()) events.Seek(0);
  Snapshot snap;
  snap.request = created;
  // Bytes received so far (done files plus the running copies'), for the time to full rate.
  std::vector<replica::client::RampSample> samples;
  auto sample = [&](const catalog::Request& r) {
    samples.push_back({elapsed(), r.bytes_done + r.in_flight_bytes});
  };
  bool timed_out = false;
  int transient = 0;
  // The full snapshot lists every task of the request: at most one per second while it runs
  // (taking one per catalog event cost the catalog and gfrep a listing per finished copy,
  // quadratic in the files of the request); each event in between only reads the request.
  auto last_full = std::chrono::steady_clock::time_point{};
  while (true) {
    if (std::chrono::steady_clock::now() - last_full < std::chrono::seconds(1)) {
      absl::StatusOr<catalog::Request> r = c.GetRequest(id);
      if (r.ok()) sample(*r);
      if (r.ok() && !catalog::IsFinished(r->state)) {
        (void)events.Read(std::chrono::milliseconds(250));  // a change, or a quarter second
        continue;
      }
    }
    last_full = std::chrono::steady_clock::now();
    absl::StatusOr<Snapshot> s = Take(c, id, site_of);
    if (!s.ok()) {
      // The catalog may be restarting: keep following for a while.
      if (++transient > 60) return tools::Fail(kProgram, tools::ErrorText(s.status()), 2);
      std::this_thread::sleep_for(std::chrono::milliseconds(500));
      continue;
    }
    transient = 0;
    sample(s->request);
    for (auto& [route, t] : s->routes) {
      t.peak_in_flight = std::max(t.in_flight, snap.routes.count(route) ? snap.routes[route].peak_in_flight : 0);
    }
    snap = std::move(*s);
    if (tty) {
      std::string routes;
      for (const auto& [route, t] : snap.routes) {
        routes += fmt::format("  {} {:.0f} Mbit/s, {} in flight", route, Mbps(t.bytes, elapsed()), t.in_flight);
      }
      std::cerr << fmt::format("\r\033[Krequest {}: files {}/{} failed {}  {}{} / {}  {} copies running{}",
                               id, snap.request.files_done, snap.request.files_total,
                               snap.request.files_failed, transfer::HumanBytes(snap.request.bytes_done),
                               snap.request.in_flight_bytes == 0
                                   ? std::string()
                                   : fmt::format(" (+{} in flight)", transfer::HumanBytes(snap.request.in_flight_bytes)),
                               transfer::HumanBytes(snap.request.bytes_total), snap.copies_open, routes)
                << std::flush;
    }
    if (catalog::IsFinished(snap.request.state)) break;
    if (timeout_s > 0 && elapsed() > timeout_s) {
      timed_out = true;
      break;
    }
    // Wake on the next catalog change (or after a second, to refresh the rates).
    (void)events.Read(std::chrono::milliseconds(1000));
  }
  if (tty) std::cerr << "\n";
  const double secs = elapsed();
  std::uint64_t moved = 0;
  for (const auto& [route, t] : snap.routes) moved += t.bytes;
  const catalog::Request& r = snap.request;
  const RateReference ref = ReferenceFor(c, snap.routes);
  const replica::client::Ramp ramp = replica::client::MeasureRamp(samples, ref.bps);
  std::string ramp_text;
  if (ramp.seconds_to_90pct) {
    ramp_text = fmt::format("; 90 % of {} ({:.0f} Mbit/s) after {:.1f} s", ref.what,
                            (ref.bps > 0 ? ref.bps : ramp.peak_bps) / 1e6, *ramp.seconds_to_90pct);
    if (ref.rtt_ms > 0) ramp_text += fmt::format(" ({:.0f} round trips)", *ramp.seconds_to_90pct * 1000 / ref.rtt_ms);
  } else if (ref.bps > 0 && moved > 0) {
    ramp_text = fmt::format("; never 90 % of {} ({:.0f} Mbit/s; best {:.0f})", ref.what, ref.bps / 1e6,
                            ramp.peak_bps / 1e6);
  }
  if (json) {
    nlohmann::json j = {{"request_id", id},
                        {"state", timed_out ? "timeout" : std::string(catalog::ToString(r.state))},
                        {"files_total", r.files_total},
                        {"files_done", r.files_done},
                        {"files_failed", r.files_failed},
                        {"bytes_total", r.bytes_total},
                        {"bytes_done", r.bytes_done},
                        {"bytes_copied", moved},
                        {"seconds", secs},
                        {"error", r.error},
                        {"routes", nlohmann::json::array()},
                        {"failed", nlohmann::json::array()}};
    nlohmann::json series = nlohmann::json::array();
    for (double bps : ramp.series_bps) series.push_back(std::round(bps / 1e4) / 100);
    j["ramp"] = {{"reference", ref.what},
                 {"reference_mbit_s", (ref.bps > 0 ? ref.bps : ramp.peak_bps) / 1e6},
                 {"peak_mbit_s", ramp.peak_bps / 1e6},
                 {"seconds_to_90pct", ramp.seconds_to_90pct ? nlohmann::json(*ramp.seconds_to_90pct) : nlohmann::json()},
                 {"rtt_ms", ref.rtt_ms},
                 {"rtts_to_90pct", ramp.seconds_to_90pct && ref.rtt_ms > 0
                                       ? nlohmann::json(*ramp.seconds_to_90pct * 1000 / ref.rtt_ms)
                                       : nlohmann::json()},
                 {"series_mbit_s", series},
                 {"series_bin_s", 0.5}};
    for (const auto& [route, t] : snap.routes) {
      j["routes"].push_back({{"route", route}, {"files", t.files}, {"bytes", t.bytes},
                             {"mbit_s", Mbps(t.bytes, secs)}, {"in_flight", t.in_flight},
                             {"peak_in_flight", t.peak_in_flight}});
    }
    for (const FailedFile& f : snap.failed) {
      j["failed"].push_back({{"path", f.path}, {"error", f.error}});
    }
    std::cout << j.dump() << "\n";
  } else {
    std::cout << fmt::format("request {} {}: {} of {} files have their copies, {} failed; "
                             "copied {} in {:.1f} s ({:.0f} Mbit/s){}\n",
                             id, timed_out ? "timed out" : catalog::ToString(r.state),
                             r.files_done, r.files_total, r.files_failed, transfer::HumanBytes(moved), secs,
                             Mbps(moved, secs), ramp_text);
    for (const auto& [route, t] : snap.routes) {
      std::cout << fmt::format("  route {}: {} files, {}, {:.0f} Mbit/s, up to {} in flight\n", route,
                               t.files, transfer::HumanBytes(t.bytes), Mbps(t.bytes, secs), t.peak_in_flight);
    }
  }
  if (timed_out) {
    return tools::Fail(kProgram, fmt::format("request {} still running after {:.0f} s", id, timeout_s), 3);
  }
  if (r.state == catalog::RequestState::kDone) return 0;
  if (!json) {
    for (const FailedFile& f : snap.failed) {
      std::cerr << fmt::format("gfrep: failed: {}: {}\n", f.path, f.error);
    }
  }
  return tools::Fail(kProgram, r.state == catalog::RequestState::kCancelled
                                   ? fmt::format("request {} was cancelled", id)
                                   : fmt::format("request {} failed: {}", id, r.error));
}

nlohmann::json RequestJson(const catalog::Request& r) {
  return {{"id", r.id},
          {"state", std::string(catalog::ToString(r.state))},
          {"owner", catalog::DescribeOwner(r.spec)},
          {"origin", std::string(catalog::ToString(r.spec.origin))},
          {"paths", r.spec.paths},
          {"copies", r.spec.copies},
          {"dst_sites", r.spec.dst_sites},
          {"src_site", r.spec.src_site},
          {"priority", r.spec.priority},
          {"files_total", r.files_total},
          {"files_done", r.files_done},
          {"files_failed", r.files_failed},
          {"bytes_total", r.bytes_total},
          {"bytes_done", r.bytes_done},
          {"in_flight_bytes", r.in_flight_bytes},
          {"error", r.error},
          {"created_ns", r.created_ns},
          {"updated_ns", r.updated_ns}};
}

// gfrep list [--all]: requests, newest first.
int List(catalog::CatalogClient& c, bool all, bool json) {
  std::vector<catalog::Request> out;
  if (all) {
    absl::StatusOr<std::vector<catalog::Request>> r = c.ListRequests(true, catalog::RequestState::kQueued, 100);
    if (!r.ok()) return tools::Fail("gfrep", tools::ErrorText(r.status()), 2);
    out = std::move(*r);
  } else {
    for (catalog::RequestState st : {catalog::RequestState::kRunning, catalog::RequestState::kQueued}) {
      absl::StatusOr<std::vector<catalog::Request>> r = c.ListRequests(false, st, 10000);
      if (!r.ok()) return tools::Fail("gfrep", tools::ErrorText(r.status()), 2);
      out.insert(out.end(), r->begin(), r->end());
    }
    std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.id > b.id; });
  }
  if (json) {
    nlohmann::json j = nlohmann::json::array();
    for (const catalog::Request& r : out) j.push_back(RequestJson(r));
    std::cout << j.dump() << "\n";
    return 0;
  }
  for (const catalog::Request& r : out) {
    std::string what = r.spec.paths.empty() ? "" : r.spec.paths.front();
    if (r.spec.paths.size() > 1) what += fmt::format(" (+{} more)", r.spec.paths.size() - 1);
    std::cout << fmt::format(
        "{:>6} {:<9} {:<22} files {}/{} failed {}  {} / {}  {}\n", r.id, catalog::ToString(r.state),
        catalog::DescribeOwner(r.spec), r.files_done, r.files_total, r.files_failed,
        transfer::HumanBytes(r.bytes_done), transfer::HumanBytes(r.bytes_total), what);
  }
  if (out.empty()) std::cout << (all ? "no requests\n" : "no active requests (--all: every state)\n");
  return 0;
}

// gfrep status ID: the request, each unsettled or failed file (as the catalog follows it)
// and each unfinished copy with why it is where it is.
int Status(catalog::CatalogClient& c, std::uint64_t id, bool json) {
  absl::StatusOr<catalog::Request> r = c.GetRequest(id);
  if (!r.ok()) return tools::Fail("gfrep", tools::ErrorText(r.status()), 2);
  absl::StatusOr<std::vector<catalog::RequestFile>> files = Files(c, id, std::nullopt);
  if (absl::IsUnimplemented(files.status())) files = std::vector<catalog::RequestFile>{};  // an older gfcatalogd
  if (!files.ok()) return tools::Fail("gfrep", tools::ErrorText(files.status()), 2);
  std::erase_if(*files, [](const catalog::RequestFile& f) { return f.state == catalog::RequestFileState::kDone; });
  catalog::TaskFilter f;
  f.request_id = id;
  f.limit = catalog::kMaxBatchPaths * 4;
  absl::StatusOr<std::vector<catalog::Task>> tasks = c.ListTasks(f);
  if (!tasks.ok()) return tools::Fail("gfrep", tools::ErrorText(tasks.status()), 2);
  const std::int64_t now = catalog::SystemNowNs();
  // The latest task of each (file, destination): what that copy is doing now.
  std::map<std::pair<std::string, std::string>, const catalog::Task*> latest;
  for (const catalog::Task& t : *tasks) {
    auto& slot = latest[{t.spec.path, t.spec.dst_node}];
    if (slot == nullptr || t.id > slot->id) slot = &t;
  }
  std::uint64_t in_flight_bytes = 0;
  for (const auto& [key, t] : latest) {
    if (t->state == catalog::TaskState::kLeased) in_flight_bytes += t->size;
  }
  if (json) {
    nlohmann::json j = RequestJson(*r);
    j["copying_bytes"] = in_flight_bytes;
    j["files"] = nlohmann::json::array();  // not done: wanted, copying or failed
    for (const catalog::RequestFile& f : *files) {
      j["files"].push_back({{"path", f.path},
                            {"state", std::string(catalog::ToString(f.state))},
                            {"attempts", f.attempts},
                            {"open_copies", f.open_tasks},
                            {"slow_sources", f.slow_sources},
                            {"reason", f.reason}});
    }
    j["copies"] = nlohmann::json::array();
    for (const auto& [key, t] : latest) {
      if (t->state == catalog::TaskState::kDone) continue;
      j["copies"].push_back({{"path", t->spec.path},
                             {"src_node", t->spec.src_node},
                             {"dst_node", t->spec.dst_node},
                             {"state", std::string(catalog::ToString(t->state))},
                             {"attempts", t->attempts},
                             {"next_attempt_ns", t->next_attempt_ns},
                             {"last_error", t->last_error},
                             {"reason", replica::plan::DescribeTask(*t, now)}});
    }
    std::cout << j.dump() << "\n";
    return 0;
  }
  std::cout << fmt::format(
      "request {} {} (owner {}, priority {}): {} of {} files have their copies, {} failed; {} / "
      "{} done, {} being copied now ({} of it received)\n",
      r->id, catalog::ToString(r->state), catalog::DescribeOwner(r->spec), r->spec.priority,
      r->files_done, r->files_total, r->files_failed, transfer::HumanBytes(r->bytes_done),
      transfer::HumanBytes(r->bytes_total), transfer::HumanBytes(in_flight_bytes),
      transfer::HumanBytes(r->in_flight_bytes));
  std::cout << fmt::format("  wants {} cop{} of {}{}{}\n", r->spec.copies,
                           r->spec.copies == 1 ? "y" : "ies", fmt::join(r->spec.paths, " "),
                           r->spec.dst_sites.empty() ? "" : fmt::format(" in {}", fmt::join(r->spec.dst_sites, ",")),
                           r->spec.src_site.empty() ? "" : fmt::format(" from {}", r->spec.src_site));
  if (!r->error.empty()) std::cout << "  " << r->error << "\n";
  for (const catalog::RequestFile& f : *files) {
    if (!f.slow_sources.empty()) {
      std::cout << fmt::format("  {}: too slow from {} (a copy given back as a straggler; "
                               "planned from another source while there is one)\n",
                               f.path, fmt::join(f.slow_sources, ","));
    }
    if (f.state == catalog::RequestFileState::kCopying) continue;  // its copies below
    std::cout << fmt::format("  {}: {}{}\n", f.path,
                             f.state == catalog::RequestFileState::kWanted
                                 ? "not planned yet (its destinations are busy or down)"
                                 : std::string(catalog::ToString(f.state)),
                             f.reason.empty() ? "" : fmt::format(" ({})", f.reason));
  }
  for (const auto& [key, t] : latest) {
    if (t->state == catalog::TaskState::kDone) continue;
    std::cout << fmt::format("  {} -> {}: {}\n", key.first, key.second, replica::plan::DescribeTask(*t, now));
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  constexpr const char* kProgram = "gfrep";
  CLI::App app{"gfrep: replicate files between sites (Gfarm's gfrep)"};
  tools::CommonFlags common;
  tools::CatalogFlags cat;
  int copies = 0;
  std::string src_site;
  std::vector<std::string> dst_sites;
  bool recursive = false, dry_run = false, json = false, detach = false;
  int parallel = 0;
  int priority = 0;
  double timeout_s = 0;
  std::vector<std::string> paths;
  tools::AddCommonFlags(app, common);
  tools::AddCatalogFlags(app, cat);
  app.add_option("-N,--copies", copies,
                 "Complete replicas wanted per file (default: one per -D site, else 2)")
      ->check(CLI::Range(1, 64));
  app.add_option("-S,--source-site", src_site, "Copy only from replicas at this site");
  app.add_option("-D,--destination-sites", dst_sites, "Destination sites (comma-separated)")
      ->delimiter(',');
  app.add_flag("-r,--recursive", recursive, "Replicate directories recursively");
  app.add_option("-j,--parallel", parallel, "At most this many copies of this request at once")
      ->check(CLI::Range(1, 10000));
  app.add_flag("-n,--dry-run", dry_run, "Show what would be copied; change nothing");
  app.add_flag("--json", json, "Print the result as one JSON object (for scripts)");
  app.add_flag("--detach", detach, "Print the request id and return without waiting");
  app.add_option("--priority", priority, "Higher runs first")->capture_default_str();
  app.add_option("--wait-timeout", timeout_s, "Give up waiting after this many seconds (0: never)");
  app.add_option("PATH", paths, "Files or directories (with -r)")->required();
  bool all = false;
  app.add_flag("--all", all, "gfrep list: requests of every state (the latest 100)");
  CLI11_PARSE(app, argc, argv);
  auto log = tools::MakeLogger(kProgram, common);

  // gfrep list | status ID | attach ID | cancel ID (a path is absolute, so no clash).
  if (!paths.empty() && paths.front().rfind('/', 0) != 0) {
    const std::string verb = paths.front();
    auto client = tools::ConnectCatalog(cat);
    if (!client.ok()) return tools::Fail(kProgram, tools::ErrorText(client.status()), 2);
    if (verb == "list" && paths.size() == 1) return List(**client, all, json);
    std::uint64_t id = 0;
    if (paths.size() != 2 || !absl::SimpleAtoi(paths[1], &id)) {
      return tools::Fail(kProgram,
                         fmt::format("'{}': want a path (absolute), or list, status ID, attach ID, "
                                     "cancel ID", fmt::join(paths, " ")),
                         2);
    }
    if (verb == "status") return Status(**client, id, json);
    if (verb == "cancel") {
      if (absl::Status s = (*client)->CancelRequest(id); !s.ok()) {
        return tools::Fail(kProgram, tools::ErrorText(s), 2);
      }
      std::cout << fmt::format("request {} cancelled\n", id);
      return 0;
    }
    if (verb == "attach") {
      absl::StatusOr<catalog::Request> r = (*client)->GetRequest(id);
      if (!r.ok()) return tools::Fail(kProgram, tools::ErrorText(r.status()), 2);
      return Follow(**client, *r, json, timeout_s);
    }
    return tools::Fail(kProgram, fmt::format("unknown command '{}'", verb), 2);
  }

  catalog::RequestSpec spec;
  spec.paths = paths;
  spec.copies = copies > 0 ? copies : (dst_sites.empty() ? 2 : static_cast<int>(dst_sites.size()));
  spec.src_site = src_site;
  spec.dst_sites = dst_sites;
  spec.recursive = recursive;
  spec.priority = priority;
  const char* user = std::getenv("USER");
  spec.owner = user == nullptr ? "gfrep" : user;
  spec.parallel = static_cast<std::uint32_t>(parallel);

  auto client = tools::ConnectCatalog(cat);
  if (!client.ok()) return tools::Fail(kProgram, tools::ErrorText(client.status()), 2);
  catalog::CatalogClient& c = **client;

  if (dry_run) {
    replica::plan::PlannerOptions po;
    po.catalog = &c;
    po.logger = log;
    auto planner = replica::plan::Planner::Create(po);
    if (!planner.ok()) return tools::Fail(kProgram, tools::ErrorText(planner.status()), 2);
    absl::StatusOr<replica::plan::PlanPreview> preview = (*planner)->Preview(spec);
    if (!preview.ok()) return tools::Fail(kProgram, tools::ErrorText(preview.status()), 2);
    if (json) {
      nlohmann::json j = {{"dry_run", true},
                          {"copies", nlohmann::json::array()},
                          {"satisfied", preview->satisfied},
                          {"failed", nlohmann::json::array()}};
      for (const auto& p : preview->copies) {
        j["copies"].push_back({{"path", p.path}, {"size", p.size}, {"src_node", p.src_node},
                               {"src_site", p.src_site}, {"dst_node", p.dst_node},
                               {"dst_site", p.dst_site}});
      }
      for (const auto& f : preview->failures) {
        j["failed"].push_back({{"path", f.path}, {"error", f.error}});
      }
      std::cout << j.dump() << "\n";
    } else {
      std::uint64_t bytes = 0;
      for (const auto& p : preview->copies) {
        std::cout << fmt::format("copy {} {} -> {} ({}), {}\n", p.path, p.src_node, p.dst_node,
                                 p.dst_site, transfer::HumanBytes(p.size));
        bytes += p.size;
      }
      for (const auto& s : preview->satisfied) std::cout << fmt::format("ok   {}\n", s);
      for (const auto& f : preview->failures) {
        std::cout << fmt::format("FAIL {}: {}\n", f.path, f.error);
      }
      std::cout << fmt::format("dry run: {} copies ({}), {} files already satisfied, {} failing\n",
                               preview->copies.size(), transfer::HumanBytes(bytes), preview->satisfied.size(),
                               preview->failures.size());
    }
    return preview->failures.empty() ? 0 : 1;
  }

  absl::StatusOr<catalog::Request> created = c.CreateRequest(spec);
  if (!created.ok()) return tools::Fail(kProgram, tools::ErrorText(created.status()), 2);
  const std::uint64_t id = created->id;
  if (detach) {
    if (json) {
      std::cout << nlohmann::json({{"request_id", id}}).dump() << "\n";
    } else {
      std::cout << id << "\n";
    }
    return 0;
  }

  return Follow(c, *created, json, timeout_s);
}
