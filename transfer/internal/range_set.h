#pragma once

// RangeSet: a set of half-open byte ranges [begin, end), kept merged and sorted. Used for
// the ranges a receiver holds (restart markers) and the ranges still missing.
// Not thread-safe; owned by one transfer.

#include <cstdint>
#include <map>
#include <utility>
#include <vector>

namespace gfrep::transfer::internal {

struct ByteRange {
  std::uint64_t begin = 0;
  std::uint64_t end = 0;  // exclusive
  std::uint64_t size() const { return end - begin; }
  friend bool operator==(const ByteRange&, const ByteRange&) = default;
};

class RangeSet {
 public:
  // Adds [begin, end); merges with touching or overlapping ranges. Empty ranges are ignored.
  void Add(std::uint64_t begin, std::uint64_t end);
  void Add(const ByteRange& r) { Add(r.begin, r.end); }
  bool Contains(std::uint64_t begin, std::uint64_t end) const;
  // True if some byte of [begin, end) is in the set (touching ranges do not overlap).
  bool Overlaps(std::uint64_t begin, std::uint64_t end) const;
  // The end of the range that covers byte `from`, or `from` when no range covers it.
  std::uint64_t ContiguousEnd(std::uint64_t from) const;
  // Total bytes covered.
  std::uint64_t Bytes() const { return bytes_; }
  std::vector<ByteRange> Ranges() const;
  // [0, total) minus this set.
  std::vector<ByteRange> Missing(std::uint64_t total) const;
  bool empty() const { return map_.empty(); }
  void Clear() {
    map_.clear();
    bytes_ = 0;
  }

 private:
  std::map<std::uint64_t, std::uint64_t> map_;  // begin -> end
  std::uint64_t bytes_ = 0;
};

}  // namespace gfrep::transfer::internal
