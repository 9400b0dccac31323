#include "catalog/event_cursor.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tests/support/temp_dir.h"

namespace gfrep::catalog {
namespace {

class EventCursorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    CatalogOptions o;
    o.path = dir_.Sub("db");
    o.sync = false;
    absl::StatusOr<std::unique_ptr<Catalog>> c = OpenRocksCatalog(o);
    ASSERT_TRUE(c.ok()) << c.status();
    cat_ = std::move(*c);
    ASSERT_TRUE(cat_->PutSite({"S", {}}).ok());
  }
  // One "node registered" event each.
  void Register(const std::string& name) {
    Node n;
    n.name = name;
    n.site = "S";
    n.address = "127.0.0.1:1";
    n.spool = "/s";
    ASSERT_TRUE(cat_->RegisterNode(n).ok());
  }
  static std::vector<std::string> Nodes(const std::vector<Event>& events) {
    std::vector<std::string> out;
    for (const Event& e : events) {
      if (e.kind == EventKind::kNode) out.push_back(e.node);
    }
    return out;
  }

  gfrep::testing::TempDir dir_{"eventcursor"};
  std::unique_ptr<Catalog> cat_;
};

TEST_F(EventCursorTest, StartsAtTheLogsEndAndMovesPastWhatItReturns) {
  Register("before");
  EventCursor cursor(*cat_);
  absl::StatusOr<std::vector<Event>> first = cursor.Read();
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_TRUE(Nodes(*first).empty()) << "events before the first read are not followed";
  Register("a");
  Register("b");
  absl::StatusOr<std::vector<Event>> next = cursor.Read();
  ASSERT_TRUE(next.ok()) << next.status();
  EXPECT_EQ(Nodes(*next), (std::vector<std::string>{"a", "b"}));
  absl::StatusOr<std::vector<Event>> again = cursor.Read();
  ASSERT_TRUE(again.ok());
  EXPECT_TRUE(again->empty()) << "nothing is returned twice";
}

TEST_F(EventCursorTest, DrainReadsBatchAfterBatchUntilOneIsNotFull) {
  EventCursor cursor(*cat_, 2);
  ASSERT_TRUE(cursor.Start().ok());
  for (const char* n : {"n1", "n2", "n3", "n4", "n5"}) Register(n);
  std::vector<std::string> seen;
  ASSERT_TRUE(cursor.Drain([&](const Event& e) {
                      if (e.kind == EventKind::kNode) seen.push_back(e.node);
                    }).ok());
  EXPECT_EQ(seen, (std::vector<std::string>{"n1", "n2", "n3", "n4", "n5"}));
}

TEST_F(EventCursorTest, SeekAndResetChooseWhereTheNextReadStarts) {
  Register("old");
  EventCursor cursor(*cat_);
  cursor.Seek(0);
  absl::StatusOr<std::vector<Event>> all = cursor.Read();
  ASSERT_TRUE(all.ok());
  EXPECT_EQ(Nodes(*all), (std::vector<std::string>{"old"})) << "from the log's beginning";
  Register("missed");
  cursor.Reset();
  absl::StatusOr<std::vector<Event>> after_reset = cursor.Read();
  ASSERT_TRUE(after_reset.ok());
  EXPECT_TRUE(Nodes(*after_reset).empty()) << "a reset starts at the log's end again";
  EXPECT_TRUE(cursor.started());
}

}  // namespace
}  // namespace gfrep::catalog
