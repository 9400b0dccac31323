#pragma once

// The inodes of the files a path names: the file itself, or every file below a directory
// when `recursive` (kInvalidArgument "is a directory (use -r)" otherwise). Shared by gfsck
// (replica/agent/fsck.h) and the hold index (replica/plan/holds.h).

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "catalog/catalog.h"

namespace gfrep::replica {

absl::Status CollectInodes(catalog::NamespaceView& cat, const std::string& path, bool recursive,
                           std::vector<catalog::InodeId>& out);

}  // namespace gfrep::replica
