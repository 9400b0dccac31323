#include "replica/plan/holds.h"

#include <fmt/format.h>

#include <algorithm>
#include <limits>

#include "replica/core/walk.h"

namespace gfrep::replica::plan {
namespace {

constexpr std::size_t kStatBatch = 10000;

}  // namespace

bool LifetimeEnded(std::int64_t since_ns, std::chrono::seconds lifetime, std::int64_t now_ns) {
  if (now_ns <= since_ns) return false;
  const std::int64_t held_s = (now_ns - since_ns) / 1'000'000'000;  // no overflow: both > 0
  return held_s >= lifetime.count();
}

absl::Status HoldIndex::Update() {
  // Newest first: read more until the last indexed one is reached (usually the newest one
  // already is: one request read per call; each carries its paths, so read few).
  std::vector<catalog::Request> fresh;
  for (std::size_t limit = 1;; limit *= 8) {
    absl::StatusOr<std::vector<catalog::Request>> list =
        catalog_->ListRequests(true, catalog::RequestState::kQueued, limit);
    if (!list.ok()) return list.status();
    const bool all = list->size() < limit || list->back().id <= last_id_;
    if (all || limit > std::numeric_limits<std::size_t>::max() / 8) {
      for (catalog::Request& r : *list) {
        if (r.id > last_id_) fresh.push_back(std::move(r));
      }
      break;
    }
  }
  std::sort(fresh.begin(), fresh.end(),
            [](const catalog::Request& a, const catalog::Request& b) { return a.id < b.id; });
  for (const catalog::Request& r : fresh) {
    // last_id_ moves past a request only once it is indexed: an error leaves it for the next
    // call (a request skipped for good would be a holder forgotten until a restart).
    if (r.spec.origin == catalog::RequestOrigin::kRepair ||
        r.state == catalog::RequestState::kCancelled) {
      last_id_ = std::max(last_id_, r.id);
      continue;
    }
    std::vector<catalog::InodeId> inodes;
    if (r.spec.recursive) {
      for (const std::string& p : r.spec.paths) {
        absl::Status s = CollectInodes(*catalog_, p, true, inodes);
        if (!s.ok() && !absl::IsNotFound(s) && !absl::IsInvalidArgument(s)) return s;
      }
    } else {
      for (std::size_t i = 0; i < r.spec.paths.size(); i += kStatBatch) {
        std::vector<std::string> chunk(
            r.spec.paths.begin() + static_cast<std::ptrdiff_t>(i),
            r.spec.paths.begin() + static_cast<std::ptrdiff_t>(std::min(r.spec.paths.size(), i + kStatBatch)));
        absl::StatusOr<std::vector<absl::StatusOr<catalog::Attributes>>> st = catalog_->StatMany(chunk);
        if (!st.ok()) return st.status();
        for (const absl::StatusOr<catalog::Attributes>& a : *st) {
          if (a.ok() && a->type == catalog::FileType::kFile) inodes.push_back(a->inode);
        }
      }
    }
    last_id_ = std::max(last_id_, r.id);
    if (inodes.empty()) continue;
    HoldRequest& h = requests_[r.id];
    h.id = r.id;
    h.rule = r.spec.origin == catalog::RequestOrigin::kPolicy ? r.spec.owner : "";
    h.since_ns = r.created_ns;
    h.copies = r.spec.copies;
    h.dst_sites = r.spec.dst_sites;
    for (catalog::InodeId inode : inodes) {
      std::vector<Ref>& refs = by_inode_[inode];
      if (refs.empty() || refs.back().id != r.id) {
        refs.push_back({r.id, false});
        ++files_of_[r.id];
      }
    }
  }
  return ForgetRemoved(kForgetLooks);
}

absl::Status HoldIndex::ForgetRemoved(std::size_t looks) {
  if (to_look_.empty()) {
    to_look_.reserve(by_inode_.size());
    for (const auto& [inode, refs] : by_inode_) to_look_.push_back(inode);
  }
  for (; looks > 0 && !to_look_.empty(); --looks) {
    const catalog::InodeId inode = to_look_.back();
    absl::StatusOr<catalog::Attributes> a = catalog_->StatInode(inode);
    if (!a.ok() && !absl::IsNotFound(a.status())) return a.status();  // looked at again next time
    to_look_.pop_back();
    if (a.ok()) continue;
    auto it = by_inode_.find(inode);
    if (it == by_inode_.end()) continue;
    for (const Ref& ref : it->second) {
      auto held = files_of_.find(ref.id);
      if (held != files_of_.end() && --held->second == 0) {
        files_of_.erase(held);
        requests_.erase(ref.id);
      }
    }
    by_inode_.erase(it);
  }
  return absl::OkStatus();
}

std::vector<const HoldRequest*> HoldIndex::Of(catalog::InodeId inode) const {
  std::vector<const HoldRequest*> out;
  auto it = by_inode_.find(inode);
  if (it == by_inode_.end()) return out;
  for (const Ref& ref : it->second) {
    if (ref.released) continue;
    if (const HoldRequest* h = Request(ref.id); h != nullptr) out.push_back(h);
  }
  return out;
}

bool HoldIndex::EverHeld(catalog::InodeId inode, const std::string& rule) const {
  auto it = by_inode_.find(inode);
  if (it == by_inode_.end()) return false;
  return std::any_of(it->second.begin(), it->second.end(), [&](const Ref& ref) {
    const HoldRequest* h = Request(ref.id);
    return h != nullptr && !h->rule.empty() && h->rule == rule;
  });
}

void HoldIndex::ForEach(
    const std::function<void(catalog::InodeId, const std::vector<std::uint64_t>&)>& fn) {
  for (const auto& [inode, refs] : by_inode_) {
    std::vector<std::uint64_t> ids;
    for (const Ref& ref : refs) {
      if (!ref.released) ids.push_back(ref.id);
    }
    if (!ids.empty()) fn(inode, ids);
  }
}

void HoldIndex::Release(catalog::InodeId inode, std::uint64_t id) {
  auto it = by_inode_.find(inode);
  if (it == by_inode_.end()) return;
  for (Ref& ref : it->second) {
    if (ref.id == id) ref.released = true;
  }
}

absl::StatusOr<bool> HoldIndex::Cancelled(std::uint64_t id) {
  auto it = requests_.find(id);
  if (it == requests_.end()) return true;
  if (it->second.cancelled) return true;
  absl::StatusOr<catalog::Request> r = catalog_->GetRequest(id);
  if (absl::IsNotFound(r.status())) return true;
  if (!r.ok()) return r.status();
  it->second.cancelled = r->state == catalog::RequestState::kCancelled;
  return it->second.cancelled;
}

absl::StatusOr<std::vector<Want>> WantsOf(HoldIndex& holds, const std::vector<PolicyRule>& rules,
                                          const std::vector<catalog::Site>& sites,
                                          catalog::InodeId inode, const std::string& path,
                                          const std::function<bool(const HoldRequest&)>& ended) {
  std::vector<Want> wants;
  std::set<std::string> rules_holding;
  auto rule_named = [&](const std::string& name) -> const PolicyRule* {
    for (const PolicyRule& r : rules) {
      if (r.name == name) return &r;
    }
    return nullptr;
  };
  for (const HoldRequest* h : holds.Of(inode)) {
    const std::string& rule = h->rule;
    if (!rule.empty()) rules_holding.insert(rule);
    if (ended(*h)) continue;
    if (rule.empty()) {
      absl::StatusOr<bool> cancelled = holds.Cancelled(h->id);
      if (!cancelled.ok()) return cancelled.status();
      if (*cancelled) continue;
      wants.push_back({fmt::format("request {}", h->id), h->copies,
                       std::set<std::string>(h->dst_sites.begin(), h->dst_sites.end())});
    } else if (const PolicyRule* r = rule_named(rule); r != nullptr) {
      wants.push_back({"rule " + rule, r->copies, r->sites.Evaluate(sites)});
    } else {  // removed, not yet ended (within its grace): as it asked
      wants.push_back({"rule " + rule, h->copies, std::set<std::string>(h->dst_sites.begin(), h->dst_sites.end())});
    }
  }
  for (const PolicyRule& r : rules) {
    if (r.continuous && rules_holding.count(r.name) == 0 && Matches(r, path)) {
      wants.push_back({"rule " + r.name, r.copies, r.sites.Evaluate(sites)});
    }
  }
  return wants;
}

const HoldRequest* HoldIndex::Request(std::uint64_t id) const {
  auto it = requests_.find(id);
  return it == requests_.end() ? nullptr : &it->second;
}

}  // namespace gfrep::replica::plan
