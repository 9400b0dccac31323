#include "transfer/options.h"

#include <gtest/gtest.h>

#include "transfer/client.h"

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

TEST(OptionsTest, ParsesGfUrls) {
  absl::StatusOr<GfUrl> u = ParseGfUrl("gf://127.0.0.1:7000/run/a.dat");
  ASSERT_TRUE(u.ok());
  EXPECT_EQ(u->endpoint.host, "127.0.0.1");
  EXPECT_EQ(u->endpoint.port, 7000);
  EXPECT_EQ(u->path, "run/a.dat");
  absl::StatusOr<GfUrl> v6 = ParseGfUrl("gf://[::1]:9/x");
  ASSERT_TRUE(v6.ok());
  EXPECT_EQ(v6->endpoint.host, "::1");
  for (const char* bad : {"gf://host/x", "gf://host:99999/x", "gf://host:1", "gf://host:1/", "http://h:1/x"}) {
    EXPECT_FALSE(ParseGfUrl(bad).ok()) << bad;
  }
}

}  // namespace
}  // namespace gfrep::transfer
