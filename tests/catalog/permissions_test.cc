// The namespace's POSIX-like permissions (catalog/permissions.h) against a real RocksDB
// catalog: owner, group and others' bits, search rights on every directory above, the
// sticky bit, recursive removal, renames, and who may chmod/chown.
#include "catalog/permissions.h"

#include <gtest/gtest.h>

#include "catalog/internal/kv_catalog.h"
#include "tests/support/temp_dir.h"

namespace gfrep::catalog {
namespace {

class PermissionsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    CatalogOptions o;
    o.path = dir_.Sub("db");
    absl::StatusOr<std::unique_ptr<Catalog>> c = OpenRocksCatalog(o);
    ASSERT_TRUE(c.ok()) << c.status();
    catalog_ = std::move(*c);
    // As an admin would set it up: /home/alice (alice's, 0755), /proj (alice's, group
    // phys, 0770), /scratch (nobody's, 01777), /locked (alice's, 0700) with a file inside.
    Dir("/home", "", "", 0755);
    Dir("/home/alice", "alice", "", 0755);
    Dir("/proj", "alice", "phys", 0770);
    Dir("/scratch", "", "", 01777);
    Dir("/locked", "alice", "", 0700);
    File("/locked/secret", "alice", 0644);
    File("/home/alice/notes", "alice", 0600);
  }

  void Dir(const std::string& path, const std::string& owner, const std::string& group, std::uint32_t mode) {
    MkdirOptions o;
    o.owner = owner;
    o.mode = mode;
    ASSERT_TRUE(catalog_->Mkdir(path, o).ok()) << path;
    AttributeChange g;
    g.group = group;
    ASSERT_TRUE(catalog_->SetAttributes(path, g).ok());
  }
  void File(const std::string& path, const std::string& owner, std::uint32_t mode) {
    FileContent c;
    c.owner = owner;
    c.mode = mode;
    ASSERT_TRUE(catalog_->CreateFile(path, c).ok()) << path;
  }
  NamespaceGuard As(const std::string& user, std::vector<std::string> groups = {}) {
    return NamespaceGuard(*catalog_, Principal{user, std::move(groups), "user " + user});
  }
  static void Denied(const absl::Status& s, const std::string& words) {
    EXPECT_TRUE(absl::IsPermissionDenied(s)) << s;
    EXPECT_NE(s.message().find(words), absl::string_view::npos) << s;
  }

  testing::TempDir dir_{"perm"};
  std::unique_ptr<Catalog> catalog_;
};

TEST_F(PermissionsTest, BitsComeFromOwnerThenGroupThenOthers) {
  Attributes a;
  a.owner = "alice";
  a.group = "phys";
  a.mode = 0751;
  EXPECT_EQ(PermissionBits(a, {"alice", {}, ""}), 7u);
  EXPECT_EQ(PermissionBits(a, {"bob", {"phys"}, ""}), 5u);
  EXPECT_EQ(PermissionBits(a, {"bob", {"chem"}, ""}), 1u);
  a.owner = "";  // nobody's: nobody gets the owner's bits
  EXPECT_EQ(PermissionBits(a, {"", {}, ""}), 1u);
}

TEST_F(PermissionsTest, CreatingNeedsWriteOnTheDirectory) {
  EXPECT_TRUE(As("alice").MayCreate("Mkdir", "/home/alice/data", false).ok());
  Denied(As("bob").MayCreate("Mkdir", "/home/alice/data", false).status(),
         "Mkdir /home/alice/data: user bob may not create in /home/alice (owner alice, group -, mode 0755)");
  Denied(As("alice").MayCreate("Mkdir", "/top", false).status(), "may not create in / (owner -");
  // mkdir -p: the deepest directory that exists decides.
  EXPECT_TRUE(As("alice").MayCreate("Mkdir", "/home/alice/a/b/c", false).ok());
  Denied(As("bob").MayCreate("Mkdir", "/home/alice/a/b/c", false).status(), "create in /home/alice");
  // The group's bits: a member of phys may create in /proj, others may not even search it.
  EXPECT_TRUE(As("bob", {"phys"}).MayCreate("CreateFile", "/proj/run1", false).ok());
  Denied(As("carol").MayCreate("CreateFile", "/proj/run1", false).status(), "create in /proj");
  // Anyone may create in the sticky world-writable /scratch.
  EXPECT_TRUE(As("carol").MayCreate("CreateFile", "/scratch/c", false).ok());
}

TEST_F(PermissionsTest, WritingAFileNeedsWriteOnTheFile) {
  absl::StatusOr<std::optional<Attributes>> a = As("alice").MayCreate("BeginWrite", "/home/alice/notes", true);
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_TRUE(a->has_value());
  EXPECT_EQ((*a)->owner, "alice");
  Denied(As("bob").MayCreate("BeginWrite", "/home/alice/notes", true).status(), "may not write it");
}

TEST_F(PermissionsTest, ReadingNeedsSearchAboveAndReadOnTheEntry) {
  EXPECT_TRUE(As("bob").MayLookup("Stat", "/home/alice/notes").ok()) << "stat needs only search rights";
  Denied(As("bob").MayRead("Locate", "/home/alice/notes"), "Locate /home/alice/notes: user bob may not read it");
  EXPECT_TRUE(As("alice").MayRead("Locate", "/home/alice/notes").ok());
  // /locked is 0700: bob may not search it, so not even stat what is inside, nor list it.
  Denied(As("bob").MayLookup("Stat", "/locked/secret"), "may not search /locked");
  Denied(As("bob").MayRead("Locate", "/locked/secret"), "may not search /locked");
  Denied(As("bob").MayList("List", "/locked"), "may not list it");
  EXPECT_TRUE(As("bob").MayList("List", "/home/alice").ok());
  // A missing entry below a directory one may search is the call's NOT_FOUND, not a refusal.
  EXPECT_TRUE(As("bob").MayRead("Locate", "/home/alice/missing").ok());
  Denied(As("bob").MayRead("Locate", "/locked/missing"), "may not search /locked");
}

TEST_F(PermissionsTest, RemovingNeedsWriteOnTheParentAndHonoursTheStickyBit) {
  Denied(As("bob").MayRemove("Remove", "/home/alice/notes", false), "may not remove from /home/alice");
  EXPECT_TRUE(As("alice").MayRemove("Remove", "/home/alice/notes", false).ok());
  File("/scratch/alices", "alice", 0666);
  Denied(As("bob").MayRemove("Remove", "/scratch/alices", false), "its directory is sticky and it belongs to alice");
  EXPECT_TRUE(As("alice").MayRemove("Remove", "/scratch/alices", false).ok());
  // Recursively: every directory inside must be the remover's to empty.
  Dir("/home/alice/shared", "alice", "", 0777);
  Dir("/home/alice/shared/bobs", "bob", "", 0755);
  File("/home/alice/shared/bobs/f", "bob", 0644);
  Denied(As("alice").MayRemove("Remove", "/home/alice/shared", true), "may not empty /home/alice/shared/bobs");
  EXPECT_TRUE(As("bob").MayRemove("Remove", "/home/alice/shared/bobs", true).ok()) << "w on /home/alice/shared";
  Denied(As("alice").MayRemove("Remove", "/locked", true), "may not remove from / ");
}

TEST_F(PermissionsTest, RenamingNeedsWriteOnBothParents) {
  EXPECT_TRUE(As("alice").MayRename("Rename", "/home/alice/notes", "/home/alice/notes2").ok());
  Denied(As("bob").MayRename("Rename", "/home/alice/notes", "/scratch/stolen"), "may not move out of /home/alice");
  Denied(As("alice").MayRename("Rename", "/home/alice/notes", "/notes"), "may not move into /");
  // A directory moved to another parent needs w on itself (its ".." changes).
  Dir("/scratch/bobdir", "bob", "", 0555);
  Denied(As("bob").MayRename("Rename", "/scratch/bobdir", "/home/alice/x"), "move into /home/alice");
  Dir("/scratch/mine", "bob", "", 0755);
  Denied(As("bob").MayRename("Rename", "/scratch/bobdir", "/scratch/mine/x"), "move this directory to another parent");
  EXPECT_TRUE(As("bob").MayRename("Rename", "/scratch/bobdir", "/scratch/bobdir2").ok()) << "same parent";
}

TEST_F(PermissionsTest, OnlyTheOwnerChangesModeAndGroupAndNobodyTheOwner) {
  AttributeChange chmod;
  chmod.mode = 0700;
  EXPECT_TRUE(As("alice").MaySetAttributes("SetAttributes", "/home/alice", chmod).ok());
  Denied(As("bob").MaySetAttributes("SetAttributes", "/home/alice", chmod), "change its mode (only its owner, alice");
  AttributeChange chgrp;
  chgrp.group = "phys";
  EXPECT_TRUE(As("alice", {"phys"}).MaySetAttributes("SetAttributes", "/home/alice", chgrp).ok());
  Denied(As("alice").MaySetAttributes("SetAttributes", "/home/alice", chgrp), "not one of its groups");
  AttributeChange chown;
  chown.owner = "bob";
  Denied(As("alice").MaySetAttributes("SetAttributes", "/home/alice", chown), "change its owner (admins only)");
}

TEST_F(PermissionsTest, NewEntriesTakeTheirDirectorysGroup) {
  MkdirOptions o;
  o.owner = "bob";
  absl::StatusOr<Attributes> d = catalog_->Mkdir("/proj/run", o);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->group, "phys");
  FileContent c;
  c.owner = "bob";
  absl::StatusOr<Attributes> f = catalog_->CreateFile("/proj/run/out", c);
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(f->group, "phys");
  absl::StatusOr<WriteReservation> w = catalog_->BeginWrite("/proj/run/out2", c);
  ASSERT_TRUE(w.ok()) << w.status();
  EXPECT_EQ(catalog_->Stat("/proj/run/out2")->group, "phys");
  absl::StatusOr<std::vector<Attributes>> many = catalog_->CreateFiles({{"/proj/run/m1", c}});
  ASSERT_TRUE(many.ok()) << many.status();
  EXPECT_EQ(many->front().group, "phys");
  // And survive a reopen (the group is stored with the entry).
  catalog_.reset();
  CatalogOptions opts;
  opts.path = dir_.Sub("db");
  catalog_ = std::move(*OpenRocksCatalog(opts));
  EXPECT_EQ(catalog_->Stat("/proj/run/out")->group, "phys");
  EXPECT_EQ(catalog_->Stat("/proj")->mode, 0770u);
}

TEST_F(PermissionsTest, SetAttributesValidatesItsInput) {
  AttributeChange bad;
  bad.mode = 04755;  // setuid means nothing here
  EXPECT_TRUE(absl::IsInvalidArgument(catalog_->SetAttributes("/proj", bad).status()));
  AttributeChange root;
  root.mode = 01777;
  absl::StatusOr<Attributes> r = catalog_->SetAttributes("/", root);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(catalog_->Stat("/")->mode, 01777u);
  EXPECT_TRUE(absl::IsNotFound(catalog_->SetAttributes("/nope", root).status()));
}

// Until 2026-11-24 Mkdir and the create calls stored any mode they were given.
TEST_F(PermissionsTest, CreatingWithAModeAbove1777IsRefused) {
  MkdirOptions dir;
  dir.mode = 04755;
  absl::Status s = catalog_->Mkdir("/proj/setuid-dir", dir).status();
  EXPECT_TRUE(absl::IsInvalidArgument(s)) << s;
  EXPECT_NE(s.message().find("at most 1777"), absl::string_view::npos) << s;
  dir.parents = true;
  EXPECT_TRUE(absl::IsInvalidArgument(catalog_->Mkdir("/proj/a/b", dir).status()));
  FileContent file;
  file.mode = 0100644;  // a stat() st_mode, file type bits included
  EXPECT_TRUE(absl::IsInvalidArgument(catalog_->CreateFile("/proj/typed", file).status()));
  EXPECT_TRUE(absl::IsInvalidArgument(catalog_->BeginWrite("/proj/typed", file).status()));
  EXPECT_TRUE(absl::IsNotFound(catalog_->Stat("/proj/setuid-dir").status()));
  EXPECT_TRUE(absl::IsNotFound(catalog_->Stat("/proj/a").status()));
  EXPECT_TRUE(absl::IsNotFound(catalog_->Stat("/proj/typed").status()));
  file.mode = 01777;
  EXPECT_TRUE(catalog_->CreateFile("/proj/sticky", file).ok());
}

}  // namespace
}  // namespace gfrep::catalog
