#pragma once

// Splitting std::string_view text (absl::StrSplit takes Debian's absl::string_view, which is
// not std::string_view).

#include <string_view>
#include <vector>

namespace gfrep::replica {

// The pieces of `text` between `sep`s; empty pieces dropped when `skip_empty`.
inline std::vector<std::string_view> Split(std::string_view text, char sep, bool skip_empty) {
  std::vector<std::string_view> out;
  std::size_t start = 0;
  while (start <= text.size()) {
    std::size_t end = text.find(sep, start);
    if (end == std::string_view::npos) end = text.size();
    std::string_view piece = text.substr(start, end - start);
    if (!piece.empty() || !skip_empty) out.push_back(piece);
    start = end + 1;
  }
  return out;
}

}  // namespace gfrep::replica
