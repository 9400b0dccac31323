#include "replica/repairer.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <condition_variable>
#include <limits>
#include <mutex>
#include <vector>

namespace gfrep::replica {
namespace {

using catalog::ReplicaState;

constexpr std::size_t kEventBatch = 10000;
constexpr std::size_t kPage = 1000;

bool Terminal(catalog::RequestState s) {
  return s == catalog::RequestState::kDone || s == catalog::RequestState::kFailed ||
         s == catalog::RequestState::kCancelled;
}

}  // namespace

Repairer::Repairer(RepairerOptions options)
    : options_(std::move(options)),
      log_(options_.logger ? options_.logger : spdlog::default_logger()) {}

Repairer::~Repairer() { Stop(); }

absl::Status Repairer::Recover() {
  catalog::Catalog& cat = *options_.catalog;
  // Events from now on; what happened before is found by the first full scan.
  absl::StatusOr<std::uint64_t> seq = cat.LastEventSeq();
  if (!seq.ok()) return seq.status();
  after_seq_ = *seq;
  for (catalog::RequestState state : {catalog::RequestState::kQueued, catalog::RequestState::kRunning}) {
    absl::StatusOr<std::vector<catalog::Request>> reqs =
        cat.ListRequests(false, state, std::numeric_limits<std::size_t>::max());
    if (!reqs.ok()) return reqs.status();
    for (const catalog::Request& r : *reqs) {
      if (r.spec.owner != kRepairOwner || r.spec.paths.size() != 1) continue;
      absl::StatusOr<catalog::Location> loc = cat.Locate(r.spec.paths.front());
      if (!loc.ok()) continue;  // gone: the request fails by itself
      Open open;
      open.request_id = r.id;
      open.generation = loc->attributes.generation;
      for (const catalog::Replica& rep : loc->replicas) {
        if (catalog::IsBad(rep.state)) open.bad_nodes.insert(rep.node);
      }
      open_[loc->attributes.inode] = std::move(open);
    }
  }
  recovered_ = true;
  return absl::OkStatus();
}

absl::Status Repairer::Scan(std::set<catalog::InodeId>& out) {
  catalog::Catalog& cat = *options_.catalog;
  absl::StatusOr<std::vector<catalog::Node>> nodes = cat.ListNodes("");
  if (!nodes.ok()) return nodes.status();
  for (const catalog::Node& n : *nodes) {
    catalog::InodeId after = 0;
    while (!stop_) {
      absl::StatusOr<std::vector<catalog::Replica>> page = cat.ListNodeReplicas(n.name, after, kPage);
      if (!page.ok()) return page.status();
      for (const catalog::Replica& r : *page) {
        after = r.inode;
        if (catalog::IsBad(r.state)) out.insert(r.inode);
      }
      if (page->size() < kPage) break;
    }
  }
  return absl::OkStatus();
}

absl::Status Repairer::Consider(catalog::InodeId inode, RepairStepSummary& summary) {
  catalog::Catalog& cat = *options_.catalog;
  absl::StatusOr<catalog::Attributes> attrs = cat.StatInode(inode);
  if (absl::IsNotFound(attrs.status())) return absl::OkStatus();  // removed: its records go too
  if (!attrs.ok()) return attrs.status();
  absl::StatusOr<std::vector<catalog::Replica>> replicas = cat.GetReplicas(inode);
  if (!replicas.ok()) return replicas.status();
  const std::uint64_t generation = attrs->generation;
  std::vector<const catalog::Replica*> bad;
  std::vector<catalog::ReplicaTransition> old;
  int complete = 0;
  for (const catalog::Replica& r : *replicas) {
    if (r.state == ReplicaState::kComplete && r.generation == generation) ++complete;
    if (!catalog::IsBad(r.state)) continue;
    if (r.generation == generation) {
      bad.push_back(&r);
    } else {
      // A damaged copy of an older generation: nothing to repair, only to drop.
      old.push_back({r.inode, r.node, r.generation, r.state, ReplicaState::kDeleting, false, 0,
                     "older generation than the file's"});
    }
  }
  if (!old.empty()) {
    absl::StatusOr<std::vector<absl::Status>> done = cat.TransitionReplicas(old);
    if (!done.ok()) return done.status();
    summary.records_dropped +=
        static_cast<std::uint64_t>(std::count_if(done->begin(), done->end(), [](const absl::Status& s) { return s.ok(); }));
  }
  if (bad.empty()) return absl::OkStatus();
  absl::StatusOr<std::string> path = cat.PathOf(inode);
  if (!path.ok()) return absl::IsNotFound(path.status()) ? absl::OkStatus() : path.status();
  std::string what;
  for (const catalog::Replica* r : bad) {
    what += fmt::format("{}{} {} ({})", what.empty() ? "" : ", ", r->node, catalog::ToString(r->state),
                        r->note.empty() ? "no reason recorded" : r->note);
  }
  if (complete == 0) {
    summary.unrepairable += 1;
    log_->error("repair of {}: no complete replica of generation {} is left to copy from; bad: {}",
                *path, generation, what);
    return absl::OkStatus();
  }
  // Where the bad copies were: their sites, each getting its copies back.
  absl::StatusOr<std::vector<catalog::Node>> nodes = cat.ListNodes("");
  if (!nodes.ok()) return nodes.status();
  auto site_of = [&](const std::string& node) -> std::string {
    for (const catalog::Node& n : *nodes) {
      if (n.name == node) return n.site;
    }
    return "";
  };
  std::set<std::string> sites;
  for (const catalog::Replica* r : bad) {
    std::string site = site_of(r->node);
    if (!site.empty()) sites.insert(site);
  }
  catalog::RequestSpec spec;
  spec.paths = {*path};
  spec.owner = kRepairOwner;
  spec.priority = complete <= 1 ? kLastCopyPriority : kRepairPriority;
  std::uint32_t in_sites = 0;
  for (const catalog::Replica& r : *replicas) {
    if (r.state == ReplicaState::kComplete && r.generation == generation &&
        sites.count(site_of(r.node)) > 0) {
      ++in_sites;
    }
  }
  if (sites.empty()) {
    // Every bad record belongs to a node no longer registered: restore the count anywhere.
    spec.copies = static_cast<std::uint32_t>(complete) + static_cast<std::uint32_t>(bad.size());
  } else {
    spec.dst_sites.assign(sites.begin(), sites.end());
    spec.copies = in_sites + static_cast<std::uint32_t>(bad.size());
  }
  absl::StatusOr<catalog::Request> req = cat.CreateRequest(spec);
  if (!req.ok()) return req.status();
  Open open;
  open.request_id = req->id;
  open.generation = generation;
  for (const catalog::Replica* r : bad) open.bad_nodes.insert(r->node);
  open_[inode] = std::move(open);
  summary.requests_created += 1;
  log_->warn("repair of {}: {}; request {} makes {} cop{} in {} (priority {}, {} complete left)",
             *path, what, req->id, spec.copies, spec.copies == 1 ? "y" : "ies",
             spec.dst_sites.empty() ? std::string("any site") : fmt::format("{}", fmt::join(spec.dst_sites, ",")),
             spec.priority, complete);
  return absl::OkStatus();
}

absl::Status Repairer::Finish(catalog::InodeId inode, Open& open, RepairStepSummary& summary) {
  catalog::Catalog& cat = *options_.catalog;
  absl::StatusOr<std::vector<catalog::Replica>> replicas = cat.GetReplicas(inode);
  if (!replicas.ok()) return replicas.status();
  std::vector<catalog::ReplicaTransition> drop;
  for (const catalog::Replica& r : *replicas) {
    if (catalog::IsBad(r.state) && open.bad_nodes.count(r.node) > 0) {
      drop.push_back({r.inode, r.node, r.generation, r.state, ReplicaState::kDeleting, false, 0,
                      fmt::format("repaired by request {}", open.request_id)});
    }
  }
  if (drop.empty()) return absl::OkStatus();
  absl::StatusOr<std::vector<absl::Status>> done = cat.TransitionReplicas(drop);
  if (!done.ok()) return done.status();
  for (const absl::Status& s : *done) {
    if (s.ok()) summary.records_dropped += 1;
  }
  return absl::OkStatus();
}

absl::StatusOr<RepairStepSummary> Repairer::Step() {
  catalog::Catalog& cat = *options_.catalog;
  RepairStepSummary summary;
  if (!recovered_) {
    if (absl::Status s = Recover(); !s.ok()) return s;
  }
  std::set<catalog::InodeId> candidates;
  for (;;) {
    absl::StatusOr<std::vector<catalog::Event>> events =
        cat.ReadEvents(after_seq_, kEventBatch, std::chrono::milliseconds(0));
    if (!events.ok()) return events.status();
    for (const catalog::Event& e : *events) {
      after_seq_ = std::max(after_seq_, e.seq);
      if (e.kind == catalog::EventKind::kReplica &&
          (e.state == catalog::ToString(ReplicaState::kCorrupt) ||
           e.state == catalog::ToString(ReplicaState::kLost))) {
        candidates.insert(e.id);
      }
    }
    if (events->size() < kEventBatch) break;
  }
  const auto now = std::chrono::steady_clock::now();
  if (!scanned_ || now - last_scan_ >= options_.scan_interval) {
    if (absl::Status s = Scan(candidates); !s.ok()) return s;
    scanned_ = true;
    last_scan_ = now;
  }
  // Repairs in flight: those that ended give back their bad records.
  for (auto it = open_.begin(); it != open_.end();) {
    absl::StatusOr<catalog::Request> r = cat.GetRequest(it->second.request_id);
    if (absl::IsNotFound(r.status())) {
      it = open_.erase(it);
      continue;
    }
    if (!r.ok()) return r.status();
    if (!Terminal(r->state)) {
      ++it;
      continue;
    }
    if (r->state == catalog::RequestState::kDone) {
      if (absl::Status s = Finish(it->first, it->second, summary); !s.ok()) return s;
      log_->info("repair request {} done", r->id);
      // Copies found bad while it ran (not its own) are repaired next.
      candidates.insert(it->first);
    } else {
      log_->warn("repair request {} ended {}: {} (tried again at the next scan)", r->id,
                 catalog::ToString(r->state), r->error);
      candidates.erase(it->first);  // not again before the next scan
    }
    it = open_.erase(it);
  }
  for (catalog::InodeId inode : candidates) {
    if (stop_) break;
    if (open_.count(inode) > 0) continue;
    if (absl::Status s = Consider(inode, summary); !s.ok()) return s;
  }
  return summary;
}

void Repairer::Loop() {
  std::mutex mu;
  std::condition_variable cv;
  while (!stop_) {
    absl::StatusOr<RepairStepSummary> s = Step();
    if (!s.ok()) log_->warn("repairer: {}", s.status().ToString());
    std::unique_lock<std::mutex> lock(mu);
    cv.wait_for(lock, std::chrono::seconds(1), [&] { return stop_.load(); });
  }
}

void Repairer::Start() {
  if (thread_.joinable()) return;
  stop_ = false;
  thread_ = std::thread([this] { Loop(); });
}

void Repairer::Stop() {
  stop_ = true;
  if (thread_.joinable()) thread_.join();
}

}  // namespace gfrep::replica
