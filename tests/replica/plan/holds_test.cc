// HoldIndex (replica/plan/holds.h) over a real RocksDB catalog: which requests hold which
// files, directories of recursive requests expanded (core/walk.h), repairs and cancelled
// requests holding nothing, releases remembered.
#include "replica/plan/holds.h"

#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

#include "replica/plan/repairer.h"
#include "tests/support/scratch_catalog.h"
#include "tests/support/temp_dir.h"

namespace gfrep::replica::plan {
namespace {

class HoldIndexTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto c = gfrep::testing::OpenScratchCatalog(dir_.Sub("db"));
    ASSERT_TRUE(c.ok()) << c.status();
    cat_ = std::move(*c);
    catalog::MkdirOptions parents;
    parents.parents = true;
    ASSERT_TRUE(cat_->Mkdir("/d/sub", parents).ok());
    for (const char* p : {"/d/a", "/d/sub/b", "/x"}) {
      absl::StatusOr<catalog::Attributes> a = cat_->CreateFile(p, {});
      ASSERT_TRUE(a.ok()) << a.status();
      inode_[p] = a->inode;
    }
  }

  std::uint64_t Request(std::vector<std::string> paths, bool recursive, const std::string& owner,
                        std::uint32_t copies = 2,
                        catalog::RequestOrigin origin = catalog::RequestOrigin::kUser) {
    catalog::RequestSpec spec;
    spec.paths = std::move(paths);
    spec.recursive = recursive;
    spec.owner = owner;
    spec.origin = origin;
    spec.copies = copies;
    absl::StatusOr<catalog::Request> r = cat_->CreateRequest(spec);
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? r->id : 0;
  }

  static std::vector<std::uint64_t> Ids(const std::vector<const HoldRequest*>& holds) {
    std::vector<std::uint64_t> out;
    for (const HoldRequest* h : holds) out.push_back(h->id);
    return out;
  }

  gfrep::testing::TempDir dir_{"holds"};
  std::unique_ptr<catalog::Catalog> cat_;
  std::map<std::string, catalog::InodeId> inode_;
};

TEST_F(HoldIndexTest, ARecursiveRequestHoldsEveryFileBelowItsDirectories) {
  const std::uint64_t dir = Request({"/d"}, true, "alice", 3);
  const std::uint64_t one = Request({"/x"}, false, "bob");
  HoldIndex holds(cat_.get());
  ASSERT_TRUE(holds.Update().ok());
  EXPECT_EQ(Ids(holds.Of(inode_["/d/a"])), (std::vector<std::uint64_t>{dir}));
  EXPECT_EQ(Ids(holds.Of(inode_["/d/sub/b"])), (std::vector<std::uint64_t>{dir})) << "below a subdirectory too";
  EXPECT_EQ(Ids(holds.Of(inode_["/x"])), (std::vector<std::uint64_t>{one}));
  ASSERT_NE(holds.Request(dir), nullptr);
  EXPECT_EQ(holds.Request(dir)->copies, 3u);
  EXPECT_EQ(holds.Request(dir)->rule, "") << "a user's request is no rule's";
  EXPECT_EQ(holds.files(), 3u);
}

TEST_F(HoldIndexTest, RepairsAndCancelledRequestsHoldNothingAndLaterRequestsAreAdded) {
  Request({"/x"}, false, kRepairOwner, 2, catalog::RequestOrigin::kRepair);
  const std::uint64_t cancelled = Request({"/d/a"}, false, "carol");
  ASSERT_TRUE(cat_->CancelRequest(cancelled).ok());
  HoldIndex holds(cat_.get());
  ASSERT_TRUE(holds.Update().ok());
  EXPECT_TRUE(holds.Of(inode_["/x"]).empty()) << "a repair restores what others hold";
  EXPECT_TRUE(holds.Of(inode_["/d/a"]).empty()) << "a cancelled request lets go";
  EXPECT_EQ(holds.requests(), 0u);
  const std::uint64_t later = Request({"/x"}, false, "dave");
  ASSERT_TRUE(holds.Update().ok());
  EXPECT_EQ(Ids(holds.Of(inode_["/x"])), (std::vector<std::uint64_t>{later}));
}

TEST_F(HoldIndexTest, AReleasedHoldIsGoneButRemembered) {
  const std::uint64_t id = Request({"/x"}, false, "r", 2, catalog::RequestOrigin::kPolicy);
  HoldIndex holds(cat_.get());
  ASSERT_TRUE(holds.Update().ok());
  EXPECT_EQ(holds.Request(id)->rule, "r");
  EXPECT_FALSE(holds.EverHeld(inode_["/d/a"], "r"));
  holds.Release(inode_["/x"], id);
  EXPECT_TRUE(holds.Of(inode_["/x"]).empty());
  EXPECT_TRUE(holds.EverHeld(inode_["/x"], "r")) << "a lifetime applies once per file";
}

// The origin is a field, not a name: a user called "repair" holds what it asks for, and a user
// named like a rule is no rule (before, owner "repair" meant the repairer's request and
// "policy:r" rule r's, whoever had asked).
TEST_F(HoldIndexTest, AUserNamedLikeTheRepairerOrARuleIsAUser) {
  const std::uint64_t user_repair = Request({"/x"}, false, "repair");
  const std::uint64_t user_rule = Request({"/d/a"}, false, "policy:r");
  HoldIndex holds(cat_.get());
  ASSERT_TRUE(holds.Update().ok());
  EXPECT_EQ(Ids(holds.Of(inode_["/x"])), (std::vector<std::uint64_t>{user_repair}))
      << "the user \"repair\" holds its file";
  ASSERT_NE(holds.Request(user_rule), nullptr);
  EXPECT_EQ(holds.Request(user_rule)->rule, "");
  EXPECT_FALSE(holds.EverHeld(inode_["/d/a"], "r"));
}

// Removed files and the requests that held only them leave the index (they stayed for the
// catalog's lifetime before: the soak's catalog grew about 2 MiB in 10 minutes).
TEST_F(HoldIndexTest, RemovedFilesAndRequestsHoldingOnlyThemAreForgotten) {
  const std::uint64_t dir = Request({"/d"}, true, "alice");  // /d/a and /d/sub/b
  const std::uint64_t x = Request({"/x"}, false, "bob");
  const std::uint64_t a = Request({"/d/a"}, false, "carol");
  HoldIndex holds(cat_.get());
  ASSERT_TRUE(holds.Update().ok());
  EXPECT_EQ(holds.files(), 3u);
  EXPECT_EQ(holds.requests(), 3u);

  ASSERT_TRUE(cat_->Remove("/x", false).ok());
  ASSERT_TRUE(cat_->Remove("/d/a", false).ok());
  ASSERT_TRUE(holds.ForgetRemoved(1000).ok());  // one pass over every file: all looked at
  ASSERT_TRUE(holds.ForgetRemoved(1000).ok());
  EXPECT_EQ(holds.files(), 1u) << "only /d/sub/b is left";
  EXPECT_EQ(holds.requests(), 1u);
  EXPECT_EQ(holds.Request(x), nullptr) << "bob's request held only /x";
  EXPECT_EQ(holds.Request(a), nullptr) << "carol's held only /d/a";
  ASSERT_NE(holds.Request(dir), nullptr) << "alice's still holds /d/sub/b";
  EXPECT_EQ(Ids(holds.Of(inode_["/d/sub/b"])), (std::vector<std::uint64_t>{dir}));
  EXPECT_TRUE(holds.Of(inode_["/x"]).empty());

  // Update forgets a few at a time by itself.
  ASSERT_TRUE(cat_->Remove("/d/sub/b", false).ok());
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(holds.Update().ok());
  EXPECT_EQ(holds.files(), 0u);
  EXPECT_EQ(holds.requests(), 0u);
}

}  // namespace
}  // namespace gfrep::replica::plan
