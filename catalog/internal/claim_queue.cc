#include "catalog/internal/claim_queue.h"

namespace gfrep::catalog::internal {

bool ClaimQueue::Loaded(std::string_view node) const { return nodes_.find(node) != nodes_.end(); }

void ClaimQueue::Load(std::string_view node, const std::vector<Task>& open) {
  NodeQueue& q = nodes_[std::string(node)];
  q = NodeQueue{};
  for (const Task& t : open) Note(q, t);
}

void ClaimQueue::LoadAll(const std::vector<Task>& open) {
  std::set<std::string, std::less<>> fresh;
  for (const Task& t : open) {
    const std::string& node = t.spec.dst_node;
    if (Loaded(node) && fresh.count(node) == 0) continue;  // current already
    fresh.insert(node);
    Note(nodes_[node], t);
  }
  all_loaded_ = true;
}

std::vector<std::string> ClaimQueue::Nodes() const {
  std::vector<std::string> out;
  for (const auto& [node, q] : nodes_) out.push_back(node);
  return out;
}

void ClaimQueue::Note(NodeQueue& q, const Task& t) {
  if (t.state == TaskState::kQueued) {
    q.inbox.emplace(t.next_attempt_ns, -static_cast<std::int64_t>(t.spec.priority), t.id);
  } else if (t.state == TaskState::kLeased) {
    q.leased.emplace(t.lease_expiry_ns, t.id);
  }
  // Finished tasks need no entry; their old ones are dropped when visited.
}

void ClaimQueue::Stage(const Task& t) {
  // Notes for a node not followed would be dropped by Commit: do not copy them.
  if (all_loaded_ || Loaded(t.spec.dst_node)) staged_.push_back(t);
}

void ClaimQueue::Commit() {
  for (const Task& t : staged_) {
    auto it = nodes_.find(t.spec.dst_node);
    if (it != nodes_.end()) {
      Note(it->second, t);
    } else if (all_loaded_) {
      Note(nodes_[t.spec.dst_node], t);  // a node's first open task
    }  // else: an unloaded node is read from disk when needed
  }
  staged_.clear();
}

void ClaimQueue::Reset() {
  nodes_.clear();
  all_loaded_ = false;
  staged_.clear();
}

void ClaimQueue::Promote(std::string_view node, std::int64_t now) {
  auto it = nodes_.find(node);
  if (it == nodes_.end()) return;
  NodeQueue& q = it->second;
  while (!q.inbox.empty() && std::get<0>(*q.inbox.begin()) <= now) {
    const auto& [when, neg_priority, id] = *q.inbox.begin();
    q.ready.emplace(neg_priority, id);
    q.inbox.erase(q.inbox.begin());
  }
}

std::vector<std::uint64_t> ClaimQueue::TakeExpiredLeases(std::string_view node, std::int64_t now) {
  std::vector<std::uint64_t> out;
  auto it = nodes_.find(node);
  if (it == nodes_.end()) return out;
  auto& leased = it->second.leased;
  while (!leased.empty() && leased.begin()->first <= now) {
    out.push_back(leased.begin()->second);
    leased.erase(leased.begin());
  }
  return out;
}

std::set<ClaimQueue::ReadyKey>& ClaimQueue::Ready(std::string_view node) { return nodes_.find(node)->second.ready; }

void ClaimQueue::AddReady(std::string_view node, std::int32_t priority, std::uint64_t id) {
  auto it = nodes_.find(node);
  if (it != nodes_.end()) it->second.ready.emplace(-static_cast<std::int64_t>(priority), id);
}

std::size_t ClaimQueue::size() const {
  std::size_t n = 0;
  for (const auto& [node, q] : nodes_) n += q.ready.size() + q.inbox.size() + q.leased.size();
  return n;
}

}  // namespace gfrep::catalog::internal
