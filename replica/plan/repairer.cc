#include "replica/plan/repairer.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <limits>
#include <set>
#include <vector>

#include "replica/plan/policy_explain.h"

namespace gfrep::replica::plan {
namespace {

using catalog::ReplicaState;

constexpr std::size_t kRepairEventBatch = 10000;
constexpr std::size_t kRepairPage = 1000;

// A record whose copy must be made (again): damaged or gone, or on a dead node and not made
// again yet (whatever its generation: Consider looks at the current one).
bool NeedsCopy(const catalog::Replica& r) {
  return catalog::IsBad(r.state) ||
         (r.state == ReplicaState::kUnverified && r.note != catalog::kRemadeNote);
}

// A complete record that its node checked after coming back from the dead: a copy the
// holders may not need any more.
bool Rechecked(const catalog::Replica& r) {
  return r.state == ReplicaState::kComplete && r.note == catalog::kRecheckedNote;
}

// Whether every want has its copies among `good` (nodes with a complete replica).
bool Satisfied(const std::vector<Want>& wants, const std::set<std::string>& good,
               const std::map<std::string, std::string>& site_of) {
  for (const Want& w : wants) {
    std::uint32_t have = 0;
    for (const std::string& n : good) {
      auto it = site_of.find(n);
      if (w.sites.empty() || (it != site_of.end() && w.sites.count(it->second) > 0)) ++have;
    }
    if (have < w.copies) return false;
  }
  return true;
}

}  // namespace

Repairer::Repairer(RepairerOptions options)
    : options_(std::move(options)),
      log_(options_.logger ? options_.logger : spdlog::default_logger()),
      holds_(options_.catalog.view) {}

Repairer::~Repairer() { Stop(); }

absl::Status Repairer::Recover() {
  const catalog::Roles& cat = options_.catalog;
  // Events from now on; what happened before is found by the first full scan.
  events_.emplace(*cat.view, kRepairEventBatch);
  if (absl::Status s = events_->Start(); !s.ok()) return s;
  absl::StatusOr<std::vector<catalog::Node>> nodes = cat.view->ListNodes("");
  if (!nodes.ok()) return nodes.status();
  std::set<std::string> draining;
  for (const catalog::Node& n : *nodes) {
    if (n.mode == catalog::NodeMode::kDraining) draining.insert(n.name);
  }
  for (catalog::RequestState state : {catalog::RequestState::kQueued, catalog::RequestState::kRunning}) {
    absl::StatusOr<std::vector<catalog::Request>> reqs =
        cat.view->ListRequests(false, state, std::numeric_limits<std::size_t>::max());
    if (!reqs.ok()) return reqs.status();
    for (const catalog::Request& r : *reqs) {
      if (r.spec.origin != catalog::RequestOrigin::kRepair || r.spec.paths.size() != 1) continue;
      absl::StatusOr<catalog::Location> loc = cat.view->Locate(r.spec.paths.front());
      if (!loc.ok()) continue;  // gone: the request fails by itself
      Open& open = open_[loc->attributes.inode];
      open.request_ids.push_back(r.id);
      open.generation = loc->attributes.generation;
      for (const catalog::Replica& rep : loc->replicas) {
        const bool leaving = rep.state == ReplicaState::kComplete && draining.count(rep.node) > 0;
        if (NeedsCopy(rep) || leaving) open.bad_nodes.insert(rep.node);
      }
    }
  }
  recovered_ = true;
  return absl::OkStatus();
}

absl::Status Repairer::Scan(std::set<catalog::InodeId>& out) {
  const catalog::Roles& cat = options_.catalog;
  absl::StatusOr<std::vector<catalog::Node>> nodes = cat.view->ListNodes("");
  if (!nodes.ok()) return nodes.status();
  for (const catalog::Node& n : *nodes) {
    catalog::InodeId after = 0;
    while (!stop_) {
      absl::StatusOr<std::vector<catalog::Replica>> page =
          cat.view->ListNodeReplicas(n.name, after, kRepairPage);
      if (!page.ok()) return page.status();
      for (const catalog::Replica& r : *page) {
        after = r.inode;
        if (NeedsCopy(r) || Rechecked(r)) out.insert(r.inode);
      }
      if (page->size() < kRepairPage) break;
    }
  }
  return absl::OkStatus();
}

absl::Status Repairer::Consider(catalog::InodeId inode, RepairStepSummary& summary) {
  const catalog::Roles& cat = options_.catalog;
  absl::StatusOr<catalog::Attributes> attrs = cat.view->StatInode(inode);
  if (absl::IsNotFound(attrs.status())) return absl::OkStatus();  // removed: its records go too
  if (!attrs.ok()) return attrs.status();
  absl::StatusOr<std::vector<catalog::Replica>> replicas = cat.view->GetReplicas(inode);
  if (!replicas.ok()) return replicas.status();
  const std::uint64_t generation = attrs->generation;
  std::vector<const catalog::Replica*> bad;       // copies to make again
  std::vector<const catalog::Replica*> rejoined;  // copies that may be one too many
  std::vector<catalog::ReplicaTransition> old;
  int complete = 0;  // sources: complete copies, a draining node's too
  for (const catalog::Replica& r : *replicas) {
    if (r.state == ReplicaState::kComplete && r.generation == generation) ++complete;
    if (Rechecked(r) && !Leaving(r) && r.generation == generation) rejoined.push_back(&r);
    if (Leaving(r) && r.generation == generation) {
      bad.push_back(&r);  // made again elsewhere, then dropped
      continue;
    }
    if (!NeedsCopy(r)) continue;
    if (r.generation == generation) {
      bad.push_back(&r);
    } else if (catalog::IsBad(r.state)) {
      // A damaged copy of an older generation: nothing to repair, only to drop.
      old.push_back({r.inode, r.node, r.generation, r.state, ReplicaState::kDeleting, false, 0,
                     "older generation than the file's"});
    }
  }
  if (!old.empty()) {
    absl::StatusOr<std::vector<absl::Status>> done = cat.replicas->TransitionReplicas(old);
    if (!done.ok()) return done.status();
    summary.records_dropped +=
        static_cast<std::uint64_t>(std::count_if(done->begin(), done->end(), [](const absl::Status& s) { return s.ok(); }));
  }
  if (bad.empty() && rejoined.empty()) return absl::OkStatus();
  absl::StatusOr<std::string> path = cat.view->PathOf(inode);
  if (!path.ok()) return absl::IsNotFound(path.status()) ? absl::OkStatus() : path.status();
  const std::int64_t now = options_.clock ? options_.clock() : catalog::SystemNowNs();
  const std::int64_t timeout = std::chrono::nanoseconds(options_.node_timeout).count();
  std::map<std::string, std::string> site_of;
  std::set<std::string> live_sites;  // sites with a live node that takes new replicas
  for (const catalog::Node& n : nodes_) {
    site_of[n.name] = n.site;
    if (now - n.last_heartbeat_ns <= timeout && n.mode == catalog::NodeMode::kNormal) {
      live_sites.insert(n.site);
    }
  }
  std::set<std::string> good;  // copies that count
  for (const catalog::Replica& r : *replicas) {
    if (r.state == ReplicaState::kComplete && r.generation == generation && !Leaving(r)) {
      good.insert(r.node);
    }
  }
  absl::StatusOr<std::vector<catalog::Site>> all_sites = cat.view->ListSites();
  if (!all_sites.ok()) return all_sites.status();
  absl::StatusOr<std::vector<Want>> wants = HolderWants(inode, *path, *all_sites);
  if (!wants.ok()) return wants.status();
  // The rules' desired state first: a file whose holders all have their copies needs none
  // made again, and a copy that came back from a dead node beyond their counts goes.
  if (!wants->empty() && Satisfied(*wants, good, site_of)) {
    return Settle(*path, bad, rejoined, *wants, good, site_of, summary);
  }
  if (bad.empty()) return absl::OkStatus();  // rechecked copies the holders need: kept
  std::string what;
  for (const catalog::Replica* r : bad) {
    what += Leaving(*r) ? fmt::format("{}{} draining", what.empty() ? "" : ", ", r->node)
                        : fmt::format("{}{} {} ({})", what.empty() ? "" : ", ", r->node,
                                      catalog::ToString(r->state),
                                      r->note.empty() ? "no reason recorded" : r->note);
  }
  if (complete == 0) {
    summary.unrepairable += 1;
    log_->error("repair of {}: no complete replica of generation {} is left to copy from; bad: {}",
                *path, generation, what);
    return absl::OkStatus();
  }
  // Where the bad copies were: their sites, each getting its copies back.
  std::set<std::string> sites;  // bad replicas' sites that can take a copy now
  bool elsewhere = false;       // some bad replica's site cannot
  for (const catalog::Replica* r : bad) {
    auto it = site_of.find(r->node);
    if (it != site_of.end() && live_sites.count(it->second) > 0) {
      sites.insert(it->second);
    } else {
      elsewhere = true;
    }
  }
  const std::int32_t priority = good.size() <= 1 ? kLastCopyPriority : kRepairPriority;
  Open open;
  open.generation = generation;
  for (const catalog::Replica* r : bad) open.bad_nodes.insert(r->node);
  // Requests made are followed even if a later call fails (else an error after the first
  // CreateRequest would leave it untracked and the next scan would make another).
  struct Track {
    std::map<catalog::InodeId, Open>& open_;
    catalog::InodeId inode;
    Open& open;
    ~Track() {
      if (!open.request_ids.empty()) open_[inode] = open;
    }
  } track{open_, inode, open};
  if (!sites.empty()) {
    catalog::RequestSpec spec;
    spec.paths = {*path};
    spec.origin = catalog::RequestOrigin::kRepair;
    spec.owner = kRepairOwner;
    spec.priority = priority;
    spec.dst_sites.assign(sites.begin(), sites.end());
    std::uint32_t in_sites = 0, bad_in_sites = 0;
    for (const std::string& n : good) in_sites += sites.count(site_of[n]) > 0 ? 1 : 0;
    for (const catalog::Replica* r : bad) bad_in_sites += sites.count(site_of[r->node]) > 0 ? 1 : 0;
    spec.copies = in_sites + bad_in_sites;
    absl::StatusOr<catalog::Request> req = cat.work->CreateRequest(spec);
    if (!req.ok()) return req.status();
    open.request_ids.push_back(req->id);
    summary.requests_created += 1;
    log_->warn("repair of {}: {}; request {} makes {} cop{} in {} (priority {}, {} complete left)",
               *path, what, req->id, spec.copies, spec.copies == 1 ? "y" : "ies",
               fmt::join(spec.dst_sites, ","), spec.priority, complete);
  }
  if (elsewhere) {
    if (absl::Status s = RestoreHolders(*path, *wants, live_sites, good, site_of, priority, open, summary);
        !s.ok()) {
      return s;
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<Want>> Repairer::HolderWants(catalog::InodeId inode, const std::string& path,
                                                        const std::vector<catalog::Site>& sites) {
  const std::int64_t now = options_.clock ? options_.clock() : catalog::SystemNowNs();
  return WantsOf(holds_, rules_, sites, inode, path, [&](const HoldRequest& h) {
    const std::string& rule = h.rule;
    if (rule.empty()) return false;
    for (const PolicyRule& r : rules_) {
      if (r.name == rule) {
        return r.lifetime && LifetimeEnded(h.since_ns, *r.lifetime, now);
      }
    }
    return true;  // a removed rule restores nothing
  });
}

absl::Status Repairer::Settle(const std::string& path,
                              const std::vector<const catalog::Replica*>& bad,
                              const std::vector<const catalog::Replica*>& rejoined,
                              const std::vector<Want>& wants, std::set<std::string> good,
                              const std::map<std::string, std::string>& site_of,
                              RepairStepSummary& summary) {
  std::vector<catalog::ReplicaTransition> items;
  for (const catalog::Replica* r : bad) {
    if (r->state == ReplicaState::kComplete) {  // a draining node's: its copies are elsewhere
      items.push_back({r->inode, r->node, r->generation, r->state, ReplicaState::kDeleting, false, 0,
                       "drained: the holders have their copies without it"});
    } else if (r->state == ReplicaState::kUnverified) {
      // Its node may come back: the record stays, marked as needing no copy.
      items.push_back({r->inode, r->node, r->generation, r->state, ReplicaState::kUnverified, false,
                       0, std::string(catalog::kRemadeNote)});
    } else {
      items.push_back({r->inode, r->node, r->generation, r->state, ReplicaState::kDeleting, false, 0,
                       "the holders have their copies without it"});
    }
  }
  // Never below a holder's count, never the last complete copy (the catalog refuses that too).
  for (const catalog::Replica* r : rejoined) {
    std::set<std::string> without = good;
    without.erase(r->node);
    if (without.empty() || !Satisfied(wants, without, site_of)) continue;
    items.push_back({r->inode, r->node, r->generation, ReplicaState::kComplete, ReplicaState::kDeleting,
                     false, 0, "trimmed: its node came back after the copy was made again"});
    good = std::move(without);
  }
  if (items.empty()) return absl::OkStatus();
  absl::StatusOr<std::vector<absl::Status>> done = options_.catalog.replicas->TransitionReplicas(items);
  if (!done.ok()) return done.status();
  for (std::size_t i = 0; i < done->size() && i < items.size(); ++i) {
    const catalog::ReplicaTransition& t = items[i];
    if (!(*done)[i].ok()) {
      log_->info("repair of {}: {} on {} left as it is: {}", path, catalog::ToString(t.from), t.node,
                 (*done)[i].ToString());
      continue;
    }
    if (t.to != ReplicaState::kDeleting) continue;
    if (t.from == ReplicaState::kComplete && draining_.count(t.node) > 0) {
      summary.drained += 1;
    } else if (t.from == ReplicaState::kComplete) {
      summary.trimmed += 1;
      log_->info("repair of {}: the copy on {} is trimmed ({}): its holders have their counts without it",
                 path, t.node, fmt::join(good, ","));
    } else {
      summary.records_dropped += 1;
    }
  }
  return absl::OkStatus();
}

absl::Status Repairer::RestoreHolders(const std::string& path, std::vector<Want> wants,
                                      const std::set<std::string>& live_sites, const std::set<std::string>& good,
                                      const std::map<std::string, std::string>& site_of, std::int32_t priority,
                                      Open& open, RepairStepSummary& summary) {
  if (wants.empty()) {
    // Nobody asked for the copies: restore the count anywhere.
    wants.push_back({"the copies that were there", static_cast<std::uint32_t>(good.size() + open.bad_nodes.size()), {}});
  }
  for (Want& w : wants) {
    // Only sites that can take a copy now (a holder whose sites are all down waits for the
    // next scan rather than getting a request that cannot succeed).
    if (!w.sites.empty()) {
      std::set<std::string> live;
      for (const std::string& s : w.sites) {
        if (live_sites.count(s) > 0) live.insert(s);
      }
      if (live.empty()) {
        log_->warn("repair of {}: {} wants its copies in {}, where no node is live now", path, w.who,
                   fmt::join(w.sites, ","));
        continue;
      }
      w.sites = std::move(live);
    }
    std::uint32_t have = 0;
    for (const std::string& n : good) {
      auto it = site_of.find(n);
      if (w.sites.empty() || (it != site_of.end() && w.sites.count(it->second) > 0)) ++have;
    }
    if (have >= w.copies) continue;
    catalog::RequestSpec spec;
    spec.paths = {path};
    spec.origin = catalog::RequestOrigin::kRepair;
    spec.owner = kRepairOwner;
    spec.priority = priority;
    spec.copies = w.copies;
    spec.dst_sites.assign(w.sites.begin(), w.sites.end());
    absl::StatusOr<catalog::Request> req = options_.catalog.work->CreateRequest(spec);
    if (!req.ok()) return req.status();
    open.request_ids.push_back(req->id);
    summary.requests_created += 1;
    log_->warn("repair of {}: a bad replica's site has no live node; request {} restores {}'s {} cop{} "
               "in {} ({} there now)",
               path, req->id, w.who, w.copies, w.copies == 1 ? "y" : "ies",
               w.sites.empty() ? std::string("any site") : fmt::format("{}", fmt::join(w.sites, ",")), have);
  }
  return absl::OkStatus();
}

absl::Status Repairer::LoadRules() {
  absl::StatusOr<catalog::PolicyDocument> doc = options_.catalog.view->GetPolicies();
  if (absl::IsUnimplemented(doc.status())) return absl::OkStatus();
  if (!doc.ok()) return doc.status();
  if (doc->version == rules_version_) return absl::OkStatus();
  rules_version_ = doc->version;
  absl::StatusOr<std::vector<PolicyRule>> parsed = ParsePolicies(doc->text, doc->source);
  if (parsed.ok()) rules_ = std::move(*parsed);  // a bad document: the rules before stay
  return absl::OkStatus();
}

absl::Status Repairer::Finish(catalog::InodeId inode, Open& open, RepairStepSummary& summary) {
  const catalog::Roles& cat = options_.catalog;
  absl::StatusOr<std::vector<catalog::Replica>> replicas = cat.view->GetReplicas(inode);
  if (!replicas.ok()) return replicas.status();
  std::vector<catalog::ReplicaTransition> drop;
  for (const catalog::Replica& r : *replicas) {
    if (open.bad_nodes.count(r.node) == 0) continue;
    if (Leaving(r)) {
      drop.push_back({r.inode, r.node, r.generation, r.state, ReplicaState::kDeleting, false, 0,
                      fmt::format("drained: copied by request {}", fmt::join(open.request_ids, ","))});
    } else if (catalog::IsBad(r.state)) {
      drop.push_back({r.inode, r.node, r.generation, r.state, ReplicaState::kDeleting, false, 0,
                      fmt::format("repaired by request {}", fmt::join(open.request_ids, ","))});
    } else if (NeedsCopy(r)) {
      // On a dead node: kept (it may come back and count again), needing no other copy.
      drop.push_back({r.inode, r.node, r.generation, r.state, ReplicaState::kUnverified, false, 0,
                      std::string(catalog::kRemadeNote)});
    }
  }
  if (drop.empty()) return absl::OkStatus();
  absl::StatusOr<std::vector<absl::Status>> done = cat.replicas->TransitionReplicas(drop);
  if (!done.ok()) return done.status();
  for (std::size_t i = 0; i < done->size() && i < drop.size(); ++i) {
    if (!(*done)[i].ok() || drop[i].to != ReplicaState::kDeleting) continue;
    if (drop[i].from == ReplicaState::kComplete) {
      summary.drained += 1;
    } else {
      summary.records_dropped += 1;
    }
  }
  return absl::OkStatus();
}

absl::Status Repairer::WalkNodes(bool rescan, std::set<catalog::InodeId>& out,
                                   RepairStepSummary& summary) {
  const catalog::Roles& cat = options_.catalog;
  const std::int64_t now = options_.clock ? options_.clock() : catalog::SystemNowNs();
  std::map<std::string, std::int64_t> dead;
  std::set<std::string> draining;
  for (const catalog::Node& n : nodes_) {
    const bool is_dead = catalog::LivenessOf(n.last_heartbeat_ns, now, options_.node_timeout,
                                             options_.node_dead_after) == catalog::NodeLiveness::kDead;
    if (!is_dead && n.mode == catalog::NodeMode::kDraining) {
      // Every complete replica it holds is made again elsewhere (walked once per drain).
      draining.insert(n.name);
      if (!rescan && draining_.count(n.name) > 0) continue;
      std::uint64_t leaving = 0;
      catalog::InodeId after = 0;
      while (!stop_) {
        absl::StatusOr<std::vector<catalog::Replica>> page = cat.view->ListNodeReplicas(n.name, after, kRepairPage);
        if (!page.ok()) return page.status();
        for (const catalog::Replica& r : *page) {
          after = r.inode;
          if (r.state == ReplicaState::kComplete) {
            out.insert(r.inode);
            leaving += 1;
          }
        }
        if (page->size() < kRepairPage) break;
      }
      if (draining_.count(n.name) == 0) {
        log_->warn("node {} of site {} is draining: its {} complete replica{} are made again elsewhere",
                   n.name, n.site, leaving, leaving == 1 ? "" : "s");
      }
      continue;
    }
    if (!is_dead) continue;
    dead[n.name] = n.last_heartbeat_ns;
    auto known = dead_.find(n.name);
    if (!rescan && known != dead_.end() && known->second == n.last_heartbeat_ns) continue;
    const std::string note = fmt::format("node {} dead since {} (silent for {} s)", n.name,
                                         FormatUtc(n.last_heartbeat_ns),
                                         (now - n.last_heartbeat_ns) / 1'000'000'000);
    std::uint64_t unverified = 0;
    catalog::InodeId after = 0;
    while (!stop_) {
      absl::StatusOr<std::vector<catalog::Replica>> page = cat.view->ListNodeReplicas(n.name, after, kRepairPage);
      if (!page.ok()) return page.status();
      std::vector<catalog::ReplicaTransition> items;
      for (const catalog::Replica& r : *page) {
        after = r.inode;
        if (r.state == ReplicaState::kComplete) {
          items.push_back({r.inode, r.node, r.generation, r.state, ReplicaState::kUnverified, false, 0, note});
        } else if (NeedsCopy(r)) {
          out.insert(r.inode);  // marked before (a restart, or another front end)
        }
      }
      if (!items.empty()) {
        absl::StatusOr<std::vector<absl::Status>> done = cat.replicas->TransitionReplicas(items);
        if (!done.ok()) return done.status();
        for (std::size_t i = 0; i < done->size() && i < items.size(); ++i) {
          if (!(*done)[i].ok()) continue;  // changed meanwhile: not ours now
          out.insert(items[i].inode);
          unverified += 1;
        }
      }
      if (page->size() < kRepairPage) break;
    }
    if (unverified > 0) {
      log_->warn("node {} of site {} is dead ({}): its {} complete replica{} stop counting and "
                 "are made again elsewhere",
                 n.name, n.site, note, unverified, unverified == 1 ? "" : "s");
    }
    summary.replicas_unverified += unverified;
  }
  dead_ = std::move(dead);
  draining_ = std::move(draining);
  return absl::OkStatus();
}

absl::StatusOr<RepairStepSummary> Repairer::Step() {
  const catalog::Roles& cat = options_.catalog;
  RepairStepSummary summary;
  if (!recovered_) {
    if (absl::Status s = Recover(); !s.ok()) return s;
  }
  std::set<catalog::InodeId> candidates;
  absl::Status drained = events_->Drain([&](const catalog::Event& e) {
    if (e.kind != catalog::EventKind::kReplica) return;
    if (e.state == catalog::ToString(ReplicaState::kCorrupt) || e.state == catalog::ToString(ReplicaState::kLost) ||
        (e.state == catalog::ToString(ReplicaState::kUnverified) && e.detail != catalog::kRemadeNote) ||
        (e.state == catalog::ToString(ReplicaState::kComplete) && e.detail == catalog::kRecheckedNote)) {
      candidates.insert(e.id);
    }
  });
  if (!drained.ok()) return drained;
  const auto now = std::chrono::steady_clock::now();
  const bool full = !scanned_ || now - last_scan_ >= options_.scan_interval;
  absl::StatusOr<std::vector<catalog::Node>> nodes = cat.view->ListNodes("");
  if (!nodes.ok()) return nodes.status();
  nodes_ = std::move(*nodes);
  if (absl::Status s = WalkNodes(full, candidates, summary); !s.ok()) return s;
  if (full) {
    if (absl::Status s = Scan(candidates); !s.ok()) return s;
    scanned_ = true;
    last_scan_ = now;
  }
  if (absl::Status st = LoadRules(); !st.ok()) return st;
  if (absl::Status st = holds_.Update(); !st.ok()) return st;
  // Repairs in flight: those that ended give back their bad records.
  for (auto it = open_.begin(); it != open_.end();) {
    bool running = false, all_done = true;
    std::string ended;
    for (std::uint64_t id : it->second.request_ids) {
      absl::StatusOr<catalog::Request> r = cat.view->GetRequest(id);
      if (absl::IsNotFound(r.status())) continue;
      if (!r.ok()) return r.status();
      if (!catalog::IsFinished(r->state)) {
        running = true;
        break;
      }
      if (r->state != catalog::RequestState::kDone) {
        all_done = false;
        ended += fmt::format("{}request {} ended {}: {}", ended.empty() ? "" : "; ", r->id,
                             catalog::ToString(r->state), r->error);
      }
    }
    if (running) {
      ++it;
      continue;
    }
    if (all_done) {
      if (absl::Status s = Finish(it->first, it->second, summary); !s.ok()) return s;
      log_->info("repair request {} done", fmt::join(it->second.request_ids, ","));
      // Copies found bad while it ran (not its own) are repaired next.
      candidates.insert(it->first);
    } else {
      log_->warn("repair: {} (tried again at the next scan)", ended);
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
  while (!stop_) {
    absl::StatusOr<RepairStepSummary> s = Step();
    if (!s.ok()) log_->warn("repairer: {}", s.status().ToString());
    absl::MutexLock lock(&wake_mu_);
    wake_mu_.AwaitWithTimeout(absl::Condition(
                                  +[](std::atomic<bool>* stop) { return stop->load(); }, &stop_),
                              absl::Seconds(1));
  }
}

void Repairer::Start() {
  if (thread_.joinable()) return;
  stop_ = false;
  thread_ = std::thread([this] { Loop(); });
}

void Repairer::Stop() {
  {
    absl::MutexLock lock(&wake_mu_);
    stop_ = true;
  }
  if (thread_.joinable()) thread_.join();
}

}  // namespace gfrep::replica::plan
