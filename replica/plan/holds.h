#pragma once

// HoldIndex: which requests want copies of which files, so that a request outlives its
// copies (Rucio's replica locks, kept in memory and rebuilt from the catalog's requests).
//
// Every replication request holds the files it names (directories of a recursive request:
// the files below them when the request is indexed), with its copy count and destination
// sites, from its creation on:
//   - a user's request (origin kUser: `gfrep -N`, Replicate(), a read): a rule without end. Its
//     copies are never removed by a lifetime or a removed rule (replica/plan/lifetime.h), and
//     repair restores its count (replica/plan/repairer.h). Cancelling the request lets it go.
//   - a policy's request (origin kPolicy): its rule holds the file while the rule is
//     in force and, for a rule with a lifetime, until `lifetime` after the request that
//     first asked for the file; then the copies that request made are surplus.
//   - a repair request (origin kRepair) holds nothing (it restores what others hold).
//
// Update() reads the requests created since the last call (all of them the first time: a
// walk of every request's paths; cost in RESULTS.md). Files are held by inode: a rename
// keeps its holds, a new generation too (the copies of it are made under the same holds).
//
// Thread safety: none; one owner (the policy engine's thread) calls everything.

#include <chrono>
#include <cstdint>
#include <functional>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "absl/status/statusor.h"
#include "catalog/catalog.h"
#include "replica/plan/policy.h"

namespace gfrep::replica::plan {

// One request's claim on its files.
struct HoldRequest {
  std::uint64_t id = 0;
  std::string rule;           // a policy's request: its rule's name; empty for a user's
  std::int64_t since_ns = 0;  // the request's creation
  std::uint32_t copies = 1;
  std::vector<std::string> dst_sites;  // empty: any site
  bool cancelled = false;              // as last read
};

class HoldIndex {
 public:
  explicit HoldIndex(catalog::CatalogView* catalog) : catalog_(catalog) {}

  // Indexes the requests created since the last call, then forgets removed files
  // (ForgetRemoved with kForgetLooks).
  absl::Status Update();

  // Looks at up to `looks` indexed files (in turn: a pass over all of them, then the next
  // pass) and forgets those the catalog no longer has (inodes are never reused), and every
  // request that then holds no file. Before, a removed file and its requests stayed in
  // memory for the catalog's lifetime: the index grew with every request ever indexed.
  absl::Status ForgetRemoved(std::size_t looks);
  static constexpr std::size_t kForgetLooks = 64;

  // The requests holding `inode` (oldest first; released ones not); empty if none.
  std::vector<const HoldRequest*> Of(catalog::InodeId inode) const;

  // True if a request of policy rule `rule` held `inode` at some time (released or not): a
  // rule with a lifetime applies once per file, not again at every reload.
  bool EverHeld(catalog::InodeId inode, const std::string& rule) const;

  // Every inode with holds not yet released, with those holds' request ids (unspecified
  // order). `fn` may call Release() for the inode it is given.
  void ForEach(const std::function<void(catalog::InodeId, const std::vector<std::uint64_t>&)>& fn);

  // Request `id` no longer holds `inode` (the copies it made were released); remembered for
  // EverHeld until the index is rebuilt (a restart), after which the release is redone.
  void Release(catalog::InodeId inode, std::uint64_t id);

  // Re-reads whether request `id` was cancelled (a cancelled request holds nothing).
  absl::StatusOr<bool> Cancelled(std::uint64_t id);

  const HoldRequest* Request(std::uint64_t id) const;
  std::size_t files() const { return by_inode_.size(); }
  std::size_t requests() const { return requests_.size(); }

 private:
  catalog::CatalogView* catalog_;
  std::uint64_t last_id_ = 0;
  std::unordered_map<std::uint64_t, HoldRequest> requests_;
  struct Ref {
    std::uint64_t id = 0;
    bool released = false;
  };
  std::unordered_map<catalog::InodeId, std::vector<Ref>> by_inode_;
  // Per request, how many files of by_inode_ it holds (released or not).
  std::unordered_map<std::uint64_t, std::size_t> files_of_;
  // The files ForgetRemoved looks at next (refilled from by_inode_ when empty).
  std::vector<catalog::InodeId> to_look_;
};

// True if a hold that began at `since_ns` has outlived `lifetime` at `now_ns` (no overflow
// for any lifetime a policy file can give: `lifetime: 99999w` never ends early).
bool LifetimeEnded(std::int64_t since_ns, std::chrono::seconds lifetime, std::int64_t now_ns);

// A holder a file must keep copies for: `copies` complete replicas in `sites` (empty: in
// any site).
struct Want {
  std::string who;  // "request 12", "rule exp-in-japan"
  std::uint32_t copies = 1;
  std::set<std::string> sites;
};

// What holds `inode` (at `path`) now, as wants:
//   - each holding gfrep request not cancelled: its copies in its destination sites;
//   - each holding policy request whose hold has not ended (`ended` returns false for
//     it): its rule's copies in the sites the rule selects now when the rule is in force,
//     else (a removed rule within its grace) what the request asked;
//   - each continuous rule in force that matches `path` and has not held the file yet.
absl::StatusOr<std::vector<Want>> WantsOf(HoldIndex& holds, const std::vector<PolicyRule>& rules,
                                          const std::vector<catalog::Site>& sites,
                                          catalog::InodeId inode, const std::string& path,
                                          const std::function<bool(const HoldRequest&)>& ended);

}  // namespace gfrep::replica::plan
