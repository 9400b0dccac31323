#include "transfer/internal/range_set.h"

#include <algorithm>

namespace gfrep::transfer::internal {

void RangeSet::Add(std::uint64_t begin, std::uint64_t end) {
  if (begin >= end) return;
  auto it = map_.upper_bound(begin);
  if (it != map_.begin()) {
    auto prev = std::prev(it);
    if (prev->second >= begin) {
      begin = prev->first;
      end = std::max(end, prev->second);
      bytes_ -= prev->second - prev->first;
      it = map_.erase(prev);
    }
  }
  while (it != map_.end() && it->first <= end) {
    end = std::max(end, it->second);
    bytes_ -= it->second - it->first;
    it = map_.erase(it);
  }
  map_.emplace(begin, end);
  bytes_ += end - begin;
}

std::uint64_t RangeSet::ContiguousEnd(std::uint64_t from) const {
  auto it = map_.upper_bound(from);
  if (it == map_.begin()) return from;
  --it;
  return it->second > from ? it->second : from;
}

bool RangeSet::Contains(std::uint64_t begin, std::uint64_t end) const {
  if (begin >= end) return true;
  auto it = map_.upper_bound(begin);
  if (it == map_.begin()) return false;
  --it;
  return it->first <= begin && it->second >= end;
}

bool RangeSet::Overlaps(std::uint64_t begin, std::uint64_t end) const {
  if (begin >= end) return false;
  auto it = map_.upper_bound(begin);  // first range starting after `begin`
  if (it != map_.end() && it->first < end) return true;
  if (it == map_.begin()) return false;
  return std::prev(it)->second > begin;
}

std::vector<ByteRange> RangeSet::Ranges() const {
  std::vector<ByteRange> out;
  out.reserve(map_.size());
  for (const auto& [b, e] : map_) out.push_back({b, e});
  return out;
}

std::vector<ByteRange> RangeSet::Missing(std::uint64_t total) const {
  std::vector<ByteRange> out;
  std::uint64_t pos = 0;
  for (const auto& [b, e] : map_) {
    if (b >= total) break;
    if (b > pos) out.push_back({pos, b});
    pos = std::max(pos, e);
  }
  if (pos < total) out.push_back({pos, total});
  return out;
}

}  // namespace gfrep::transfer::internal
