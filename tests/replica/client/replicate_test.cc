// Replicate (replica/client/replicate.h) against a real federation on loopback: gfcatalogd (planner)
// and two gfsited site agents (tests/support/federation.h), the library call in place of gfrep.
#include "replica/client/replicate.h"

#include <gtest/gtest.h>

#include <chrono>
#include <string>

#include "tests/support/federation.h"

namespace gfrep::replica::client {
namespace {

using namespace std::chrono_literals;

class ReplicateTest : public testing::FederationTest {
 protected:
  ReplicateTest() : FederationTest("replicate") {}
  void SetUp() override { StartFederation({{"a1", "A"}, {"b1", "B"}}); }
};

TEST_F(ReplicateTest, WaitsUntilTheCopiesExistWithTheSameBytes) {
  const std::string bytes = Store("/lib/f.dat", (2 << 20) + 7, 77, "a1");
  ASSERT_EQ(Replica("b1", "/lib/f.dat"), "");
  int calls = 0;
  catalog::Request last;
  ReplicateOptions o;
  o.copies = 2;
  o.timeout = 120s;
  o.progress = [&](const catalog::Request& r) {
    ++calls;
    last = r;
  };
  absl::StatusOr<catalog::Request> r = Replicate(*client_, "/lib/f.dat", o);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->state, catalog::RequestState::kDone);
  EXPECT_EQ(r->files_done, 1u);
  EXPECT_EQ(r->files_failed, 0u);
  EXPECT_GE(calls, 1);
  EXPECT_EQ(last.state, catalog::RequestState::kDone);
  EXPECT_EQ(Replica("b1", "/lib/f.dat"), bytes);
  EXPECT_EQ(States("/lib/f.dat"),
            (std::map<std::string, std::string>{{"a1", "complete"}, {"b1", "complete"}}));
  // Waiting again for the finished request returns at once with the same outcome.
  absl::StatusOr<catalog::Request> again = WaitForRequest(*client_, r->id, o);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->id, r->id);
}

TEST_F(ReplicateTest, ErrorsAreStatusCodes) {
  ReplicateOptions o;
  o.timeout = 60s;
  EXPECT_TRUE(absl::IsInvalidArgument(Replicate(*client_, "relative/path", o).status()));
  ReplicateOptions none = o;
  none.copies = 0;
  EXPECT_TRUE(absl::IsInvalidArgument(Replicate(*client_, "/lib/x", none).status()));
  absl::StatusOr<catalog::Request> missing = Replicate(*client_, "/no/such/file", o);
  EXPECT_FALSE(missing.ok());
  // The catalog takes the request and its planner fails it: the request ended failed.
  EXPECT_TRUE(absl::IsAborted(missing.status())) << missing.status();
  EXPECT_NE(missing.status().message().find("failed"), absl::string_view::npos) << missing.status();
  EXPECT_TRUE(absl::IsNotFound(WaitForRequest(*client_, 987654321, o).status()));
}

}  // namespace
}  // namespace gfrep::replica::client
