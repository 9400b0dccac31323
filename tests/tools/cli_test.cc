#include "tools/internal/cli.h"

#include <gtest/gtest.h>

namespace gfrep::tools {
namespace {

TEST(ParseSizeTest, AcceptsBinarySuffixes) {
  EXPECT_EQ(*ParseSize("4096"), 4096u);
  EXPECT_EQ(*ParseSize("64K"), 64u * 1024);
  EXPECT_EQ(*ParseSize("128k"), 128u * 1024);
  EXPECT_EQ(*ParseSize("1.5M"), 1536u * 1024);
  EXPECT_EQ(*ParseSize("2G"), 2ull << 30);
  EXPECT_EQ(*ParseSize("2GiB"), 2ull << 30);
  EXPECT_EQ(*ParseSize("610KB"), 610u * 1024);
}

// Between 2^63 and 2^64 (found by tests/fuzz/units_fuzz.cc: "9000000T" came back as 2^63).
TEST(ParseSizeTest, ValuesAbove2To63AreExactAndAbove2To64Refused) {
  EXPECT_EQ(*ParseSize("9000000T"), 9'000'000ull << 40);
  EXPECT_EQ(*ParseSize("16000000T"), 16'000'000ull << 40);
  EXPECT_EQ(ParseSize("17000000T").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(*ParseRate("18000000000G"), 18'000'000'000'000'000'000ull);
}

TEST(ParseSizeTest, RejectsGarbage) {
  for (const char* bad : {"", "abc", "-1", "12Q", "1..2M", "M", "nan", "1e400"}) {
    auto r = ParseSize(bad);
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << bad;
  }
}

TEST(ParseRateTest, AcceptsDecimalSuffixesAndUnits) {
  EXPECT_EQ(*ParseRate("50M"), 50'000'000u);
  EXPECT_EQ(*ParseRate("28.5M"), 28'500'000u);
  EXPECT_EQ(*ParseRate("1g"), 1'000'000'000u);
  EXPECT_EQ(*ParseRate("622Mbit"), 622'000'000u);
  EXPECT_EQ(*ParseRate("100kbps"), 100'000u);
}

TEST(ParseRateTest, RejectsGarbage) {
  EXPECT_FALSE(ParseRate("fast").ok());
  EXPECT_FALSE(ParseRate("-5M").ok());
}

}  // namespace
}  // namespace gfrep::tools
