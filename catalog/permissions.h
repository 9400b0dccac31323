#pragma once

// POSIX-like permissions on the catalog's namespace, as Gfarm's gfmd checks them: every
// entry has an owner (a user name), a group and a mode (rwx for owner, group, others, and
// the sticky bit 01000). gfcatalogd checks them for callers with the user role; admins,
// the catalog and nodes (site agents) are not subject to them (nodes cannot change the
// namespace at all, catalog/identity.h). The rules:
//   look up a path    x on every directory above it
//   read (stat is a look-up; Locate: r on the file; List: r and x on the directory)
//   create            w and x on the deepest directory that exists (mkdir -p makes the rest)
//   write a file      w on the file (a new content generation: BeginWrite, CommitFile)
//   remove            w and x on the parent; in a sticky parent only the entry's or the
//                     parent's owner; a recursive remove also needs r, w, x on every
//                     directory inside (and the sticky rule there)
//   rename            remove's rights on the source, create's on the target's parent; a
//                     directory moved to another parent also needs w on itself
//   chmod             the entry's owner; chgrp: the owner, to a group it belongs to;
//                     chown: admins only
// New entries belong to their creator and take their parent directory's group (the
// directory "inheritance" of BSD and Gfarm), so a group-writable project directory stays
// shared. The root is owned by nobody with mode 0755: only admins create at the top
// (gfmkdir + gfchown give each user a home).
//
// The check reads the entries with the catalog's own calls just before the change runs, not
// in the change's transaction: a chmod that races with a create may let that one create
// through, as if it had come a moment earlier.

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "catalog/catalog.h"

namespace gfrep::catalog {

struct Principal {
  std::string user;
  std::vector<std::string> groups;
  std::string describe;  // how refusals name it: "user alice"
};

// The rwx bits (4 read, 2 write, 1 search/execute) that `a`'s mode gives `p`: the owner's
// if p owns it, else the group's if p is in its group, else the others'.
unsigned PermissionBits(const Attributes& a, const Principal& p);

class NamespaceGuard {
 public:
  NamespaceGuard(Catalog& catalog, Principal who) : catalog_(catalog), who_(std::move(who)) {}

  // Each: OK, or kPermissionDenied "ACTION PATH: user alice may not write /a (owner bob,
  // group -, mode 0755)". A path that does not exist passes (the call itself then says
  // kNotFound), as long as the part that exists may be searched.
  absl::Status MayLookup(std::string_view action, std::string_view path);
  absl::Status MayRead(std::string_view action, std::string_view path);
  absl::Status MayList(std::string_view action, std::string_view path);
  // Create `path`, or, if it exists and `write_existing`, write it. Returns the entry if it
  // exists.
  absl::StatusOr<std::optional<Attributes>> MayCreate(std::string_view action, std::string_view path,
                                                      bool write_existing);
  absl::Status MayRemove(std::string_view action, std::string_view path, bool recursive);
  absl::Status MayRename(std::string_view action, std::string_view from, std::string_view to);
  absl::Status MaySetAttributes(std::string_view action, std::string_view path, const AttributeChange& change);

 private:
  struct Walk {
    std::vector<std::string> parts;
    std::vector<Attributes> chain;  // root, then each component that exists
    bool complete() const { return chain.size() == parts.size() + 1; }
  };
  absl::StatusOr<Walk> WalkPath(std::string_view path);
  // x on chain[0..upto) (the directories searched to reach chain[upto]).
  absl::Status Search(std::string_view action, const Walk& w, std::size_t upto);
  absl::Status Need(std::string_view action, std::string_view path, const Attributes& a, unsigned bits,
                    std::string_view what);
  absl::Status Sticky(std::string_view action, std::string_view path, const Attributes& dir,
                      const Attributes& entry);
  // The rights to take an existing `path` out of its directory (remove it or move it away):
  // search above, w and x on the parent ("VERB PARENT" names it), the sticky rule. Sets
  // `*walk` only when the entry exists and is not the root (else the call decides).
  absl::Status MayUnlink(std::string_view action, std::string_view path, std::string_view verb,
                         std::optional<Walk>* walk);
  absl::Status MayEmpty(std::string_view action, const std::string& dir_path, const Attributes& dir);

  Catalog& catalog_;
  Principal who_;
};

}  // namespace gfrep::catalog
