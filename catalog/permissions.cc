#include "catalog/permissions.h"

#include <algorithm>
#include <deque>

#include <fmt/format.h>

namespace gfrep::catalog {
namespace {

constexpr unsigned kRead = 4, kWrite = 2, kSearch = 1;
constexpr std::uint32_t kSticky = 01000;
constexpr std::size_t kListPage = 10000;

std::string Prefix(const std::vector<std::string>& parts, std::size_t n) {
  return JoinPath(std::vector<std::string>(parts.begin(), parts.begin() + static_cast<std::ptrdiff_t>(n)));
}

}  // namespace

unsigned PermissionBits(const Attributes& a, const Principal& p) {
  if (!a.owner.empty() && a.owner == p.user) return (a.mode >> 6) & 7;
  if (!a.group.empty() && std::find(p.groups.begin(), p.groups.end(), a.group) != p.groups.end()) {
    return (a.mode >> 3) & 7;
  }
  return a.mode & 7;
}

absl::StatusOr<NamespaceGuard::Walk> NamespaceGuard::WalkPath(std::string_view path) {
  absl::StatusOr<std::vector<std::string>> parts = SplitPath(path);
  if (!parts.ok()) return parts.status();
  Walk w;
  w.parts = std::move(*parts);
  for (std::size_t i = 0; i <= w.parts.size(); ++i) {
    if (i > 0 && w.chain.back().type != FileType::kDirectory) break;
    absl::StatusOr<Attributes> a = catalog_.Stat(Prefix(w.parts, i));
    if (absl::IsNotFound(a.status())) break;
    if (!a.ok()) return a.status();
    w.chain.push_back(std::move(*a));
  }
  if (w.chain.empty()) return absl::InternalError("the catalog has no root directory");
  return w;
}

absl::Status NamespaceGuard::Need(std::string_view action, std::string_view path, const Attributes& a,
                                  unsigned bits, std::string_view what) {
  if ((PermissionBits(a, who_) & bits) == bits) return absl::OkStatus();
  return absl::PermissionDeniedError(fmt::format("{} {}: {} may not {} (owner {}, group {}, mode {:04o})", action,
                                                 path, who_.describe, what, a.owner.empty() ? "-" : a.owner,
                                                 a.group.empty() ? "-" : a.group, a.mode));
}

absl::Status NamespaceGuard::Search(std::string_view action, const Walk& w, std::size_t upto) {
  for (std::size_t i = 0; i < upto && i < w.chain.size(); ++i) {
    if (w.chain[i].type != FileType::kDirectory) break;
    if (absl::Status s = Need(action, Prefix(w.parts, w.parts.size()), w.chain[i], kSearch,
                              fmt::format("search {}", Prefix(w.parts, i)));
        !s.ok()) {
      return s;
    }
  }
  return absl::OkStatus();
}

absl::Status NamespaceGuard::Sticky(std::string_view action, std::string_view path, const Attributes& dir,
                                    const Attributes& entry) {
  if ((dir.mode & kSticky) == 0) return absl::OkStatus();
  if ((!entry.owner.empty() && entry.owner == who_.user) || (!dir.owner.empty() && dir.owner == who_.user)) {
    return absl::OkStatus();
  }
  return absl::PermissionDeniedError(
      fmt::format("{} {}: {} may not remove or move it (its directory is sticky and it belongs to {})", action, path,
                  who_.describe, entry.owner.empty() ? "nobody (admin)" : entry.owner));
}

absl::Status NamespaceGuard::MayLookup(std::string_view action, std::string_view path) {
  absl::StatusOr<Walk> w = WalkPath(path);
  if (!w.ok()) return w.status();
  return Search(action, *w, w->chain.size() - (w->complete() ? 1 : 0));
}

absl::Status NamespaceGuard::MayRead(std::string_view action, std::string_view path) {
  absl::StatusOr<Walk> w = WalkPath(path);
  if (!w.ok()) return w.status();
  if (!w->complete()) return Search(action, *w, w->chain.size());
  if (absl::Status s = Search(action, *w, w->chain.size() - 1); !s.ok()) return s;
  return Need(action, path, w->chain.back(), kRead, "read it");
}

absl::Status NamespaceGuard::MayList(std::string_view action, std::string_view path) {
  absl::StatusOr<Walk> w = WalkPath(path);
  if (!w.ok()) return w.status();
  if (!w->complete()) return Search(action, *w, w->chain.size());
  if (absl::Status s = Search(action, *w, w->chain.size() - 1); !s.ok()) return s;
  if (w->chain.back().type != FileType::kDirectory) return Need(action, path, w->chain.back(), kRead, "read it");
  return Need(action, path, w->chain.back(), kRead | kSearch, "list it");
}

absl::StatusOr<std::optional<Attributes>> NamespaceGuard::MayCreate(std::string_view action, std::string_view path,
                                                                    bool write_existing) {
  absl::StatusOr<Walk> w = WalkPath(path);
  if (!w.ok()) return w.status();
  if (w->complete() && !w->parts.empty()) {
    if (absl::Status s = Search(action, *w, w->chain.size() - 1); !s.ok()) return s;
    if (write_existing) {
      if (absl::Status s = Need(action, path, w->chain.back(), kWrite, "write it"); !s.ok()) return s;
    }
    return std::optional<Attributes>(w->chain.back());
  }
  if (w->complete()) return std::optional<Attributes>(w->chain.back());  // the root
  if (absl::Status s = Search(action, *w, w->chain.size() - 1); !s.ok()) return s;
  const Attributes& deepest = w->chain.back();
  if (deepest.type != FileType::kDirectory) return std::optional<Attributes>();  // the call says why
  if (absl::Status s = Need(action, path, deepest, kWrite | kSearch,
                            fmt::format("create in {}", Prefix(w->parts, w->chain.size() - 1)));
      !s.ok()) {
    return s;
  }
  return std::optional<Attributes>();
}

absl::Status NamespaceGuard::MayEmpty(std::string_view action, const std::string& top, const Attributes& top_dir) {
  std::deque<std::pair<std::string, Attributes>> dirs{{top, top_dir}};
  while (!dirs.empty()) {
    auto [path, dir] = std::move(dirs.front());
    dirs.pop_front();
    if (absl::Status s = Need(action, top, dir, kRead | kWrite | kSearch, fmt::format("empty {}", path)); !s.ok()) {
      return s;
    }
    ListOptions o;
    o.limit = kListPage;
    for (;;) {
      absl::StatusOr<std::vector<DirEntry>> page = catalog_.List(path, o);
      if (absl::IsNotFound(page.status())) break;  // removed meanwhile
      if (!page.ok()) return page.status();
      for (const DirEntry& e : *page) {
        const std::string child = path == "/" ? "/" + e.name : path + "/" + e.name;
        if (absl::Status s = Sticky(action, child, dir, e.attributes); !s.ok()) return s;
        if (e.attributes.type == FileType::kDirectory) dirs.emplace_back(child, e.attributes);
      }
      if (page->size() < kListPage) break;
      o.start_after = page->back().name;
    }
  }
  return absl::OkStatus();
}

absl::Status NamespaceGuard::MayUnlink(std::string_view action, std::string_view path, std::string_view verb,
                                       std::optional<Walk>* walk) {
  absl::StatusOr<Walk> w = WalkPath(path);
  if (!w.ok()) return w.status();
  if (!w->complete() || w->parts.empty()) return Search(action, *w, w->chain.size());
  const std::size_t n = w->chain.size();
  if (absl::Status s = Search(action, *w, n - 2); !s.ok()) return s;
  if (absl::Status s = Need(action, path, w->chain[n - 2], kWrite | kSearch,
                            fmt::format("{} {}", verb, Prefix(w->parts, n - 2)));
      !s.ok()) {
    return s;
  }
  if (absl::Status s = Sticky(action, path, w->chain[n - 2], w->chain[n - 1]); !s.ok()) return s;
  *walk = std::move(*w);
  return absl::OkStatus();
}

absl::Status NamespaceGuard::MayRemove(std::string_view action, std::string_view path, bool recursive) {
  std::optional<Walk> w;
  if (absl::Status s = MayUnlink(action, path, "remove from", &w); !s.ok() || !w) return s;
  const Attributes& entry = w->chain.back();
  if (recursive && entry.type == FileType::kDirectory) return MayEmpty(action, JoinPath(w->parts), entry);
  return absl::OkStatus();
}

absl::Status NamespaceGuard::MayRename(std::string_view action, std::string_view from, std::string_view to) {
  std::optional<Walk> src;
  if (absl::Status s = MayUnlink(action, from, "move out of", &src); !s.ok() || !src) return s;
  const Attributes& src_parent = src->chain[src->chain.size() - 2];
  const Attributes& entry = src->chain.back();
  absl::StatusOr<Walk> dst = WalkPath(to);
  if (!dst.ok()) return dst.status();
  if (dst->parts.empty()) return absl::OkStatus();  // the call refuses it
  const std::size_t m = dst->chain.size();
  if (dst->complete()) return absl::OkStatus();  // the call says it exists
  if (m < dst->parts.size()) return Search(action, *dst, m);  // no parent: the call says so
  if (absl::Status s = Search(action, *dst, m - 1); !s.ok()) return s;
  const Attributes& dst_parent = dst->chain[m - 1];
  if (dst_parent.type == FileType::kDirectory) {
    if (absl::Status s = Need(action, to, dst_parent, kWrite | kSearch,
                              fmt::format("move into {}", Prefix(dst->parts, m - 1)));
        !s.ok()) {
      return s;
    }
  }
  if (entry.type == FileType::kDirectory && dst_parent.inode != src_parent.inode) {
    return Need(action, from, entry, kWrite, "move this directory to another parent");
  }
  return absl::OkStatus();
}

absl::Status NamespaceGuard::MaySetAttributes(std::string_view action, std::string_view path,
                                              const AttributeChange& change) {
  absl::StatusOr<Walk> w = WalkPath(path);
  if (!w.ok()) return w.status();
  if (!w->complete()) return Search(action, *w, w->chain.size());
  if (absl::Status s = Search(action, *w, w->chain.size() - 1); !s.ok()) return s;
  const Attributes& a = w->chain.back();
  auto refuse = [&](std::string_view why) {
    return absl::PermissionDeniedError(fmt::format("{} {}: {} may not {}", action, path, who_.describe, why));
  };
  if (change.owner && *change.owner != a.owner) return refuse("change its owner (admins only)");
  const bool owns = !a.owner.empty() && a.owner == who_.user;
  if (change.mode && *change.mode != a.mode && !owns) {
    return refuse(fmt::format("change its mode (only its owner, {}, may)", a.owner.empty() ? "nobody" : a.owner));
  }
  if (change.group && *change.group != a.group) {
    if (!owns) return refuse(fmt::format("change its group (only its owner, {}, may)", a.owner.empty() ? "nobody" : a.owner));
    if (!change.group->empty() &&
        std::find(who_.groups.begin(), who_.groups.end(), *change.group) == who_.groups.end()) {
      return refuse(fmt::format("give it to group {} (not one of its groups)", *change.group));
    }
  }
  return absl::OkStatus();
}

}  // namespace gfrep::catalog
