#pragma once

// ForEachRequestFile: a request's files (WorkView::ListRequestFiles) read page by page, for
// those who show them (gfrep, the dashboard, gfpolicy).
//
// Thread safety: a function. Blocking: one catalog call per page.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <limits>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "catalog/catalog.h"

namespace gfrep::catalog {

// Calls `row` for each of request `request_id`'s files that `filter` selects, in id order from
// filter.after, reading filter.limit rows a call, until `row` returns false or `max_rows` were
// read. The first error of a call is returned (the rows before it were seen).
inline absl::Status ForEachRequestFile(
    WorkView& catalog, std::uint64_t request_id, RequestFileFilter filter,
    const std::function<bool(const RequestFile&)>& row,
    std::size_t max_rows = std::numeric_limits<std::size_t>::max()) {
  if (filter.limit == 0) filter.limit = 1000;
  std::size_t read = 0;
  while (read < max_rows) {
    filter.limit = std::min(filter.limit, max_rows - read);
    absl::StatusOr<std::vector<RequestFile>> page = catalog.ListRequestFiles(request_id, filter);
    if (!page.ok()) return page.status();
    read += page->size();
    for (const RequestFile& f : *page) {
      if (!row(f)) return absl::OkStatus();
    }
    if (page->size() < filter.limit) break;
    filter.after = page->back().id;
  }
  return absl::OkStatus();
}

}  // namespace gfrep::catalog
