#include "transfer/units.h"

#include <gtest/gtest.h>

namespace gfrep::transfer {
namespace {

TEST(HumanBytesTest, ExactUnitsWithoutDecimalsOthersWithOne) {
  EXPECT_EQ(HumanBytes(0), "0 B");
  EXPECT_EQ(HumanBytes(1023), "1023 B");
  EXPECT_EQ(HumanBytes(1024), "1 KiB");
  EXPECT_EQ(HumanBytes(1536), "1.5 KiB");
  EXPECT_EQ(HumanBytes(4ull << 20), "4 MiB");
  EXPECT_EQ(HumanBytes((3ull << 30) / 2), "1.5 GiB");
  EXPECT_EQ(HumanBytes((1ull << 20) - 1), "1.0 MiB") << "not 1024.0 KiB";
  EXPECT_EQ(HumanBytes(5ull << 40), "5 TiB");
  EXPECT_EQ(HumanBytes(3ull << 50), "3 PiB");
  EXPECT_EQ(HumanBytes(2048ull << 50), "2048 PiB") << "no unit above PiB";
}

}  // namespace
}  // namespace gfrep::transfer
