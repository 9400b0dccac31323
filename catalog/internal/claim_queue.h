#pragma once

// Which tasks of each node may be claimable, in claim order, kept in memory so that a claim
// costs O(claimed · log n) instead of reading every open task of the node (issue 12: one
// node with 10,000 queued tasks made each of its claims take 26 ms under the catalog's work
// lock, and another node's claim wait up to 13 s behind a stream of them).
//
// Entries are hints, never the truth: the caller reads each task before acting on it and
// drops an entry that no longer matches. The invariant the caller keeps: every open task of
// a loaded node has a matching entry (queued: in the inbox or ready by its priority; leased:
// by its lease expiry). Entries may be stale (a task that moved on) but never missing: notes
// for a batch are staged and applied only after the batch was written (Commit); a failed or
// abandoned write forgets every node (Reset) so that each is loaded again from the database.
//
// Thread safety: none; KvCatalog uses it under its work lock.

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <string_view>
#include <tuple>
#include <utility>
#include <vector>

#include "catalog/types.h"

namespace gfrep::catalog::internal {

class ClaimQueue {
 public:
  // Ready entries in claim order: higher priority first, then lower id.
  using ReadyKey = std::pair<std::int64_t, std::uint64_t>;  // (-priority, id)

  bool Loaded(std::string_view node) const;
  // `open` holds every open task of `node` as stored.
  void Load(std::string_view node, const std::vector<Task>& open);
  // Every node is loaded (LoadAll): a node with no entry has no open task, and tasks of a
  // node seen for the first time are noted too.
  bool AllLoaded() const { return all_loaded_; }
  // `open` holds every open task of every node as stored; nodes already loaded keep theirs.
  void LoadAll(const std::vector<Task>& open);
  std::vector<std::string> Nodes() const;

  // A task as a batch being built will write it; applied by Commit.
  void Stage(const Task& t);
  // The staged batch was written: its tasks' entries are added.
  void Commit();
  // The staged batch was not written (an error on the way): the notes are dropped.
  void DiscardStaged() { staged_.clear(); }
  // Forgets every node (after a write that failed: what is on disk is unknown here).
  void Reset();

  // Moves `node`'s queued entries whose next attempt is due by `now` into the ready set.
  void Promote(std::string_view node, std::int64_t now);
  // Removes and returns the ids of `node`'s lease entries that expire by `now`.
  std::vector<std::uint64_t> TakeExpiredLeases(std::string_view node, std::int64_t now);
  // `node`'s ready entries in claim order; the caller may erase the one it visits.
  // REQUIRES: Loaded(node).
  std::set<ReadyKey>& Ready(std::string_view node);
  void AddReady(std::string_view node, std::int32_t priority, std::uint64_t id);

  // Entries held, all nodes (for tests and metrics).
  std::size_t size() const;

  // Scope of a claim or a lease expiry: unless Done() is called (no error on the way), the
  // entries it took or changed are unreliable and the queue forgets every node.
  class ResetOnError {
   public:
    explicit ResetOnError(ClaimQueue& q) : q_(q) {}
    ~ResetOnError() {
      if (!done_) q_.Reset();
    }
    ResetOnError(const ResetOnError&) = delete;
    ResetOnError& operator=(const ResetOnError&) = delete;
    void Done() { done_ = true; }

   private:
    ClaimQueue& q_;
    bool done_ = false;
  };

 private:
  struct NodeQueue {
    std::set<ReadyKey> ready;
    std::set<std::tuple<std::int64_t, std::int64_t, std::uint64_t>> inbox;  // (next_attempt, -priority, id)
    std::set<std::pair<std::int64_t, std::uint64_t>> leased;               // (lease expiry, id)
  };
  static void Note(NodeQueue& q, const Task& t);

  std::map<std::string, NodeQueue, std::less<>> nodes_;  // loaded nodes only
  bool all_loaded_ = false;
  std::vector<Task> staged_;
};

}  // namespace gfrep::catalog::internal
