#include "replica/core/walk.h"

#include <fmt/format.h>

namespace gfrep::replica {

absl::Status CollectInodes(catalog::NamespaceView& cat, const std::string& path, bool recursive,
                           std::vector<catalog::InodeId>& out) {
  absl::StatusOr<catalog::Attributes> a = cat.Stat(path);
  if (!a.ok()) return a.status();
  if (a->type == catalog::FileType::kFile) {
    out.push_back(a->inode);
    return absl::OkStatus();
  }
  if (!recursive) return absl::InvalidArgumentError(fmt::format("{}: is a directory (use -r)", path));
  catalog::ListOptions list;
  for (;;) {
    absl::StatusOr<std::vector<catalog::DirEntry>> page = cat.List(path, list);
    if (!page.ok()) return page.status();
    for (const catalog::DirEntry& e : *page) {
      const std::string child = path == "/" ? "/" + e.name : path + "/" + e.name;
      if (e.attributes.type == catalog::FileType::kFile) {
        out.push_back(e.attributes.inode);
      } else if (absl::Status s = CollectInodes(cat, child, true, out); !s.ok() && !absl::IsNotFound(s)) {
        return s;  // (a directory removed meanwhile is skipped, not the rest of the walk)
      }
    }
    if (page->size() < list.limit) break;
    list.start_after = page->back().name;
  }
  return absl::OkStatus();
}

}  // namespace gfrep::replica
