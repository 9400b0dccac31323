// Integration: the catalog on PostgreSQL with real processes. gfcatalogd serves a private
// PostgreSQL database (tests/support/postgres_server.h); gfcatalog-migrate moves a catalog
// RocksDB -> PostgreSQL -> RocksDB, verified; a second gfcatalogd on the same database is
// refused; a gfcatalogd killed with SIGKILL loses nothing it acknowledged. Skipped, saying
// why, where PostgreSQL cannot start.
#include <csignal>

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <fmt/format.h>

#include "catalog/client.h"
#include "tests/support/postgres_server.h"
#include "tests/support/subprocess.h"
#include "tests/support/temp_dir.h"

namespace gfrep {
namespace {

using namespace std::chrono_literals;
using testing::BinPath;
using testing::RunCommand;
using testing::RunResult;
using testing::Subprocess;

class CatalogPostgresTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<std::string> db = testing::SharedPostgres().CreateDatabase();
    if (!db.ok()) GFREP_SKIP_OR_FAIL_WITHOUT_POSTGRES(db.status());
    pg_ = *db;
  }

  // gfcatalogd --db `db`; sets address_ and the tools' environment.
  absl::StatusOr<Subprocess> StartCatalog(const std::string& db) {
    absl::StatusOr<Subprocess> d =
        Subprocess::Start({BinPath("gfcatalogd"), "--db", db, "--listen", "127.0.0.1:0",
                           "--policy-state", dir_.Sub("policy-state.json")});
    if (!d.ok()) return d.status();
    absl::StatusOr<std::string> addr = d->WaitForListen(30s);
    if (!addr.ok()) {
      RunResult r = d->Kill();
      return absl::InternalError(fmt::format("{}; stderr: {}", addr.status().ToString(), r.err));
    }
    env_.env["GFREP_CATALOG"] = *addr;
    return d;
  }

  RunResult Run(const std::string& tool, std::vector<std::string> args) {
    args.insert(args.begin(), BinPath(tool));
    return RunCommand(args, env_, 120s);
  }

  std::string pg_;
  testing::TempDir dir_{"catalog-pg"};
  testing::SubprocessOptions env_;
};

TEST_F(CatalogPostgresTest, MigratesRocksToPostgresAndBackVerifiedAndServesTheSameNamespace) {
  const std::string rocks = dir_.Sub("rocks");
  {
    absl::StatusOr<Subprocess> d = StartCatalog(rocks);
    ASSERT_TRUE(d.ok()) << d.status();
    ASSERT_EQ(Run("gfmkdir", {"-p", "/data/run1", "/data/run2"}).exit_code, 0);
    ASSERT_EQ(Run("gfsite", {"add", "jp"}).exit_code, 0);
    for (int i = 0; i < 30; ++i) {
      RunResult r = Run("gfmkdir", {fmt::format("/data/run1/d{:02}", i)});
      ASSERT_EQ(r.exit_code, 0) << r.err;
    }
    d->Signal(SIGTERM);
    ASSERT_EQ(d->Wait(30s).exit_code, 0);
  }
  RunResult m = Run("gfcatalog-migrate", {"--from", rocks, "--to", pg_, "--json"});
  ASSERT_EQ(m.exit_code, 0) << m.err;
  nlohmann::json j = nlohmann::json::parse(m.out);
  EXPECT_EQ(j["tables"]["dentries"]["rows"].get<int>(), 1 + 3 + 30);  // root, data, run1, run2, d*
  EXPECT_EQ(j["tables"]["sites"]["rows"].get<int>(), 1);
  EXPECT_EQ(j["tables"]["inodes"]["rows"].get<int>(), 1 + 3 + 30);  // one per entry
  EXPECT_GE(j["tables"]["default"]["rows"].get<int>(), 1);       // the inode id mark

  // Copying into a database that is no longer empty is refused and changes nothing.
  RunResult again = Run("gfcatalog-migrate", {"--from", rocks, "--to", pg_});
  EXPECT_EQ(again.exit_code, 1);
  EXPECT_NE(again.err.find("is not empty"), std::string::npos) << again.err;
  EXPECT_EQ(Run("gfcatalog-migrate", {"--verify", "--from", rocks, "--to", pg_}).exit_code, 0);

  // The migrated catalog, served from PostgreSQL, lists what RocksDB had.
  absl::StatusOr<Subprocess> d = StartCatalog(pg_);
  ASSERT_TRUE(d.ok()) << d.status();
  RunResult ls = Run("gfls", {"/data/run1"});
  ASSERT_EQ(ls.exit_code, 0) << ls.err;
  EXPECT_EQ(std::count(ls.out.begin(), ls.out.end(), '\n'), 30) << ls.out;
  EXPECT_NE(ls.out.find("d29"), std::string::npos);
  // New writes take new inode ids (the id marks came along).
  ASSERT_EQ(Run("gfmkdir", {"/data/after"}).exit_code, 0);
  d->Signal(SIGTERM);
  ASSERT_EQ(d->Wait(30s).exit_code, 0);

  // Back to a new RocksDB directory: equal table by table.
  const std::string back = dir_.Sub("back");
  RunResult b = Run("gfcatalog-migrate", {"--from", pg_, "--to", back});
  ASSERT_EQ(b.exit_code, 0) << b.err;
  EXPECT_EQ(Run("gfcatalog-migrate", {"--verify", "--from", pg_, "--to", back}).exit_code, 0);
  // ... and not equal to the first RocksDB catalog, which has no /data/after.
  RunResult diff = Run("gfcatalog-migrate", {"--verify", "--from", rocks, "--to", back});
  EXPECT_EQ(diff.exit_code, 1);
  EXPECT_NE(diff.err.find("differs"), std::string::npos) << diff.err;
}

TEST_F(CatalogPostgresTest, ASecondCatalogOnOneDatabaseIsRefusedAndAKilledOneLosesNothing) {
  absl::StatusOr<Subprocess> d = StartCatalog(pg_);
  ASSERT_TRUE(d.ok()) << d.status();
  RunResult second = RunCommand({BinPath("gfcatalogd"), "--db", pg_, "--listen", "127.0.0.1:0",
                                 "--no-policies"},
                                {}, 60s);
  EXPECT_EQ(second.exit_code, 1);
  EXPECT_NE(second.err.find("another gfcatalogd"), std::string::npos) << second.err;

  // Every acknowledged mkdir survives SIGKILL of the server.
  std::vector<std::string> made;
  for (int i = 0; i < 40; ++i) {
    std::string p = fmt::format("/k{:02}", i);
    if (Run("gfmkdir", {p}).exit_code == 0) made.push_back(p);
  }
  ASSERT_EQ(made.size(), 40u);
  d->Kill();
  absl::StatusOr<Subprocess> again = StartCatalog(pg_);
  ASSERT_TRUE(again.ok()) << again.status() << " (the killed server's database lock must go with it)";
  std::vector<std::string> args = made;
  args.insert(args.begin(), "--json");
  RunResult st = Run("gfstat", args);
  EXPECT_EQ(st.exit_code, 0) << st.err;
  EXPECT_EQ(static_cast<std::size_t>(std::count(st.out.begin(), st.out.end(), '\n')), made.size())
      << st.out;
}

TEST_F(CatalogPostgresTest, ABadAddressOrAMissingPolicyStateIsAClearError) {
  RunResult r = RunCommand({BinPath("gfcatalogd"), "--db", pg_, "--listen", "127.0.0.1:0"}, {}, 30s);
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("--policy-state"), std::string::npos) << r.err;
  r = RunCommand({BinPath("gfcatalogd"), "--db", "postgresql:host=" + dir_.Sub("nowhere") +
                                             " dbname=x connect_timeout=3",
                  "--listen", "127.0.0.1:0", "--no-policies"},
                 {}, 60s);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("UNAVAILABLE"), std::string::npos) << r.err;
  r = RunCommand({BinPath("gfcatalog-migrate"), "--from", dir_.Sub("no-such-catalog"), "--to", pg_},
                 {}, 30s);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("no RocksDB catalog there"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace gfrep
