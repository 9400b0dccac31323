#include "transfer/internal/range_set.h"

#include <gtest/gtest.h>

#include <random>
#include <vector>

namespace gfrep::transfer::internal {
namespace {

TEST(RangeSetTest, MergesOverlappingAndTouchingRanges) {
  RangeSet s;
  s.Add(10, 20);
  s.Add(30, 40);
  s.Add(20, 30);
  EXPECT_EQ(s.Ranges(), (std::vector<ByteRange>{{10, 40}}));
  EXPECT_EQ(s.Bytes(), 30u);
  s.Add(5, 12);
  s.Add(35, 50);
  EXPECT_EQ(s.Ranges(), (std::vector<ByteRange>{{5, 50}}));
  EXPECT_EQ(s.Bytes(), 45u);
}

TEST(RangeSetTest, IgnoresEmptyRanges) {
  RangeSet s;
  s.Add(5, 5);
  s.Add(7, 3);
  EXPECT_TRUE(s.empty());
}

TEST(RangeSetTest, MissingIsTheComplement) {
  RangeSet s;
  s.Add(0, 10);
  s.Add(20, 30);
  EXPECT_EQ(s.Missing(40), (std::vector<ByteRange>{{10, 20}, {30, 40}}));
  EXPECT_EQ(s.Missing(25), (std::vector<ByteRange>{{10, 20}}));
  EXPECT_EQ(RangeSet().Missing(7), (std::vector<ByteRange>{{0, 7}}));
  EXPECT_TRUE(RangeSet().Missing(0).empty());
}

TEST(RangeSetTest, ContainsChecksWholeRange) {
  RangeSet s;
  s.Add(10, 20);
  EXPECT_TRUE(s.Contains(10, 20));
  EXPECT_TRUE(s.Contains(12, 13));
  EXPECT_FALSE(s.Contains(9, 12));
  EXPECT_FALSE(s.Contains(19, 21));
  EXPECT_FALSE(s.Contains(30, 31));
}

TEST(RangeSetTest, OverlapsMeansSharingAByte) {
  RangeSet s;
  s.Add(10, 20);
  s.Add(30, 40);
  EXPECT_TRUE(s.Overlaps(10, 20));
  EXPECT_TRUE(s.Overlaps(5, 11));
  EXPECT_TRUE(s.Overlaps(19, 25));
  EXPECT_TRUE(s.Overlaps(15, 35));
  EXPECT_TRUE(s.Overlaps(0, 100));
  EXPECT_FALSE(s.Overlaps(0, 10));   // touching
  EXPECT_FALSE(s.Overlaps(20, 30));  // between, touching both
  EXPECT_FALSE(s.Overlaps(40, 50));
  EXPECT_FALSE(s.Overlaps(15, 15));  // empty
  EXPECT_FALSE(RangeSet().Overlaps(0, 1));
}

TEST(RangeSetTest, ContiguousEndFollowsTheCoveringRange) {
  RangeSet s;
  s.Add(10, 20);
  s.Add(30, 40);
  EXPECT_EQ(s.ContiguousEnd(0), 0u);
  EXPECT_EQ(s.ContiguousEnd(10), 20u);
  EXPECT_EQ(s.ContiguousEnd(19), 20u);
  EXPECT_EQ(s.ContiguousEnd(20), 20u);
  EXPECT_EQ(s.ContiguousEnd(25), 25u);
  EXPECT_EQ(s.ContiguousEnd(30), 40u);
  EXPECT_EQ(s.ContiguousEnd(40), 40u);
  EXPECT_EQ(RangeSet().ContiguousEnd(5), 5u);
}

TEST(RangeSetTest, MatchesABitmapUnderRandomAdds) {
  std::mt19937 rng(7);
  constexpr int kSize = 500;
  for (int round = 0; round < 50; ++round) {
    RangeSet s;
    std::vector<bool> bits(kSize, false);
    for (int i = 0; i < 30; ++i) {
      int b = static_cast<int>(rng() % kSize), len = static_cast<int>(rng() % 40);
      int e = std::min(kSize, b + len);
      s.Add(b, e);
      for (int k = b; k < e; ++k) bits[k] = true;
    }
    std::uint64_t count = 0;
    for (bool b : bits) count += b;
    EXPECT_EQ(s.Bytes(), count);
    for (const ByteRange& r : s.Missing(kSize)) {
      for (std::uint64_t k = r.begin; k < r.end; ++k) EXPECT_FALSE(bits[k]);
    }
    for (const ByteRange& r : s.Ranges()) {
      for (std::uint64_t k = r.begin; k < r.end; ++k) EXPECT_TRUE(bits[k]);
    }
    for (int i = 0; i < 30; ++i) {
      int b = static_cast<int>(rng() % kSize), e = std::min(kSize, b + static_cast<int>(rng() % 40));
      bool any = false;
      for (int k = b; k < e; ++k) any = any || bits[k];
      EXPECT_EQ(s.Overlaps(b, e), any) << b << " " << e;
    }
  }
}

}  // namespace
}  // namespace gfrep::transfer::internal
