#include "transfer/options.h"

#include <gtest/gtest.h>

namespace gfrep::transfer {
namespace {

TransferOptions Good() {
  TransferOptions o;
  o.shared_key = std::string(32, 'k');
  return o;
}

TEST(OptionsTest, DefaultsWithAKeyAreValid) { EXPECT_TRUE(Validate(Good()).ok()); }

TEST(OptionsTest, RejectsOutOfRangeValues) {
  TransferOptions o = Good();
  o.route.streams = 0;
  EXPECT_TRUE(absl::IsInvalidArgument(Validate(o)));
  o = Good();
  o.route.streams = kMaxStreams + 1;
  EXPECT_FALSE(Validate(o).ok());
  o = Good();
  o.route.stripe_unit = kMaxStripeUnit + 1;
  EXPECT_FALSE(Validate(o).ok());
  o = Good();
  o.checksum = "md5";
  EXPECT_FALSE(Validate(o).ok());
  o = Good();
  o.shared_key.clear();
  EXPECT_FALSE(Validate(o).ok());
  o = Good();
  o.write_io_size = 100;  // below a page
  EXPECT_TRUE(absl::IsInvalidArgument(Validate(o)));
  o.write_io_size = (1ull << 30) + 1;
  EXPECT_TRUE(absl::IsInvalidArgument(Validate(o)));
  o.write_io_size = 1 << 20;
  EXPECT_TRUE(Validate(o).ok());
}

}  // namespace
}  // namespace gfrep::transfer
