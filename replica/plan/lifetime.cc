#include "replica/plan/lifetime.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <limits>
#include <set>
#include <unordered_map>

namespace gfrep::replica::plan {
namespace {

using catalog::ReplicaState;

class Releaser {
 public:
  Releaser(const ReleaseInput& in, spdlog::logger& log) : in_(in), log_(log) {
    for (const PolicyRule& r : *in.rules) rules_[r.name] = &r;
  }

  absl::StatusOr<ReleaseSummary> Run() {
    // Which holds have ended.
    std::vector<std::pair<catalog::InodeId, std::vector<std::uint64_t>>> due;
    in_.holds->ForEach([&](catalog::InodeId inode, const std::vector<std::uint64_t>& ids) {
      std::vector<std::uint64_t> ended;
      for (std::uint64_t id : ids) {
        const HoldRequest* h = in_.holds->Request(id);
        if (h != nullptr && !Ended(*h).empty()) ended.push_back(id);
      }
      if (!ended.empty()) due.emplace_back(inode, std::move(ended));
    });
    if (due.empty()) return summary_;
    absl::StatusOr<std::vector<catalog::Site>> sites = in_.catalog.view->ListSites();
    if (!sites.ok()) return sites.status();
    sites_ = std::move(*sites);
    absl::StatusOr<std::vector<catalog::Node>> nodes = in_.catalog.view->ListNodes("");
    if (!nodes.ok()) return nodes.status();
    for (const catalog::Node& n : *nodes) site_of_[n.name] = n.site;
    for (auto& [inode, ended] : due) {
      if (absl::Status s = Release(inode, ended); !s.ok()) return s;
    }
    return summary_;
  }

 private:
  // Why the hold has ended ("" if it has not).
  std::string Ended(const HoldRequest& h) {
    const std::string& rule = h.rule;
    if (rule.empty()) return "";  // a gfrep request: no end
    if (auto it = rules_.find(rule); it != rules_.end()) {
      in_.removed_since->erase(rule);
      const PolicyRule& r = *it->second;
      if (!r.lifetime) return "";
      return LifetimeEnded(h.since_ns, *r.lifetime, in_.now_ns)
                 ? fmt::format("lifetime of rule {} ({} s) ended", rule, r.lifetime->count())
                 : "";
    }
    auto [it, added] = in_.removed_since->emplace(rule, in_.now_ns);
    return it->second + in_.removed_grace.count() <= in_.now_ns ? fmt::format("rule {} removed", rule) : "";
  }

  // The done tasks of request `id` for `inode`.
  absl::StatusOr<std::vector<const catalog::Task*>> MadeBy(std::uint64_t id, catalog::InodeId inode) {
    auto it = tasks_.find(id);
    if (it == tasks_.end()) {
      catalog::TaskFilter f;
      f.request_id = id;
      f.any_state = false;
      f.state = catalog::TaskState::kDone;
      f.limit = std::numeric_limits<std::size_t>::max();
      absl::StatusOr<std::vector<catalog::Task>> list = in_.catalog.view->ListTasks(f);
      if (!list.ok()) return list.status();
      it = tasks_.emplace(id, std::move(*list)).first;
    }
    std::vector<const catalog::Task*> out;
    for (const catalog::Task& t : it->second) {
      if (t.inode == inode && t.state == catalog::TaskState::kDone) out.push_back(&t);
    }
    return out;
  }

  absl::Status Release(catalog::InodeId inode, const std::vector<std::uint64_t>& ended) {
    const catalog::Roles& cat = in_.catalog;
    summary_.holds_ended += ended.size();
    absl::StatusOr<catalog::Attributes> attrs = cat.view->StatInode(inode);
    absl::StatusOr<std::string> path = attrs.ok() ? cat.view->PathOf(inode) : attrs.status();
    if (!path.ok()) {
      if (!absl::IsNotFound(path.status())) return path.status();
      for (std::uint64_t id : ended) in_.holds->Release(inode, id);  // file removed: nothing to keep
      return absl::OkStatus();
    }
    absl::StatusOr<std::vector<catalog::Replica>> replicas = cat.view->GetReplicas(inode);
    if (!replicas.ok()) return replicas.status();
    const std::set<std::uint64_t> ended_set(ended.begin(), ended.end());
    absl::StatusOr<std::vector<Want>> wants =
        WantsOf(*in_.holds, *in_.rules, sites_, inode, *path,
                [&](const HoldRequest& h) { return ended_set.count(h.id) > 0 || !Ended(h).empty(); });
    if (!wants.ok()) return wants.status();

    std::set<std::string> complete;  // nodes with a complete replica of the generation
    for (const catalog::Replica& r : *replicas) {
      if (r.state == ReplicaState::kComplete && r.generation == attrs->generation) complete.insert(r.node);
    }
    auto count_in = [&](const Want& w) {
      return static_cast<std::uint32_t>(std::count_if(complete.begin(), complete.end(), [&](const std::string& n) {
        return w.sites.empty() || w.sites.count(site_of_[n]) > 0;
      }));
    };
    std::vector<catalog::ReplicaTransition> drop;
    for (std::uint64_t id : ended) {
      const HoldRequest* h = in_.holds->Request(id);
      const std::string why = h != nullptr ? Ended(*h) : "";
      absl::StatusOr<std::vector<const catalog::Task*>> made = MadeBy(id, inode);
      if (!made.ok()) return made.status();
      for (const catalog::Task* t : *made) {
        const std::string& node = t->spec.dst_node;
        if (t->generation != attrs->generation || complete.count(node) == 0) continue;
        std::string needed_by;
        if (complete.size() <= 1) needed_by = "the last complete replica";
        for (const Want& w : *wants) {
          if (!needed_by.empty()) break;
          if (!w.sites.empty() && w.sites.count(site_of_[node]) == 0) continue;
          if (count_in(w) <= w.copies) needed_by = w.who;
        }
        if (!needed_by.empty()) {
          summary_.replicas_kept += 1;
          log_.info("policy: {} on {}: {}; kept, needed by {}", *path, node, why, needed_by);
          continue;
        }
        complete.erase(node);
        drop.push_back({inode, node, attrs->generation, ReplicaState::kComplete,
                        ReplicaState::kDeleting, false, 0, why});
      }
    }
    if (!drop.empty()) {
      absl::StatusOr<std::vector<absl::Status>> done = cat.replicas->TransitionReplicas(drop);
      if (!done.ok()) return done.status();
      for (std::size_t i = 0; i < done->size(); ++i) {
        if ((*done)[i].ok()) {
          summary_.replicas_removed += 1;
          log_.info("policy: {} on {}: {}; the copy goes", *path, drop[i].node, drop[i].note);
        } else {
          summary_.replicas_kept += 1;
          log_.info("policy: {} on {}: kept: {}", *path, drop[i].node, (*done)[i].ToString());
        }
      }
    }
    // A hold whose request still runs stays (ended): its copies finishing later go at a
    // later pass; once the request is over, the hold is released.
    for (std::uint64_t id : ended) {
      absl::StatusOr<bool> over = Over(id);
      if (!over.ok()) return over.status();
      if (*over) in_.holds->Release(inode, id);
    }
    return absl::OkStatus();
  }

  // True if request `id` has ended (done, failed, cancelled, or gone).
  absl::StatusOr<bool> Over(std::uint64_t id) {
    auto it = over_.find(id);
    if (it != over_.end()) return it->second;
    absl::StatusOr<catalog::Request> r = in_.catalog.view->GetRequest(id);
    if (!r.ok() && !absl::IsNotFound(r.status())) return r.status();
    const bool over = !r.ok() || catalog::IsFinished(r->state);
    over_[id] = over;
    return over;
  }

  const ReleaseInput& in_;
  spdlog::logger& log_;
  ReleaseSummary summary_;
  std::map<std::string, const PolicyRule*> rules_;
  std::vector<catalog::Site> sites_;
  std::unordered_map<std::string, std::string> site_of_;
  std::unordered_map<std::uint64_t, std::vector<catalog::Task>> tasks_;
  std::unordered_map<std::uint64_t, bool> over_;
};

}  // namespace

absl::StatusOr<ReleaseSummary> ReleaseEndedHolds(const ReleaseInput& in, spdlog::logger& log) {
  return Releaser(in, log).Run();
}

}  // namespace gfrep::replica::plan
