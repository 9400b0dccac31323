#include "tests/support/postgres_server.h"

#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <optional>
#include <string>

#include "tests/support/temp_dir.h"

namespace gfrep::testing {
namespace {

// Sets an environment variable for one test and restores it after.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name); old != nullptr) old_ = old;
    if (value == nullptr) {
      ::unsetenv(name);
    } else {
      ::setenv(name, value, 1);
    }
  }
  ~ScopedEnv() {
    if (old_) {
      ::setenv(name_, old_->c_str(), 1);
    } else {
      ::unsetenv(name_);
    }
  }

 private:
  const char* name_;
  std::optional<std::string> old_;
};

void WriteScript(const std::filesystem::path& path, const std::string& body) {
  std::ofstream(path) << "#!/bin/sh\n" << body << "\n";
  ::chmod(path.c_str(), 0755);
}

TEST(PostgresServerTest, MissingBinariesAreNotInstalledAndSkipUnlessRequired) {
  ScopedEnv bin("GFREP_PG_BIN", "/nonexistent");
  ScopedEnv require("GFREP_REQUIRE_POSTGRES", nullptr);
  PostgresServer server;
  absl::Status s = server.Start();
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  EXPECT_NE(std::string(s.message()).find("/nonexistent"), std::string::npos) << s;
  EXPECT_TRUE(PostgresNotInstalled(s));
  EXPECT_FALSE(server.CreateDatabase().ok());
}

TEST(PostgresServerTest, RequiredPostgresTurnsTheSkipIntoAFailure) {
  ScopedEnv bin("GFREP_PG_BIN", "/nonexistent");
  ScopedEnv require("GFREP_REQUIRE_POSTGRES", "1");
  PostgresServer server;
  absl::Status s = server.Start();
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  EXPECT_FALSE(PostgresNotInstalled(s));
}

TEST(PostgresServerTest, AnInstalledServerThatFailsToStartIsAFailureWithItsOutput) {
  // Programs that exist but fail, as a broken installation's would.
  TempDir dir("pgbin");
  ::chmod(dir.path().c_str(), 0755);  // as root the programs run as the postgres user
  WriteScript(dir.path() / "initdb", "echo 'initdb: could not create directory' >&2; exit 1");
  WriteScript(dir.path() / "pg_ctl", "exit 1");
  WriteScript(dir.path() / "psql", "exit 1");
  ScopedEnv bin("GFREP_PG_BIN", dir.path().c_str());
  ScopedEnv require("GFREP_REQUIRE_POSTGRES", nullptr);
  PostgresServer server;
  absl::Status s = server.Start();
  EXPECT_EQ(s.code(), absl::StatusCode::kInternal) << s;
  EXPECT_NE(std::string(s.message()).find("could not create directory"), std::string::npos) << s;
  EXPECT_FALSE(PostgresNotInstalled(s));
}

TEST(PostgresServerTest, OtherErrorsNeverSkip) {
  ScopedEnv require("GFREP_REQUIRE_POSTGRES", nullptr);
  EXPECT_FALSE(PostgresNotInstalled(absl::InternalError("pg_ctl start: exit 1")));
  EXPECT_FALSE(PostgresNotInstalled(absl::UnavailableError("connection refused")));
  EXPECT_FALSE(PostgresNotInstalled(absl::OkStatus()));
}

}  // namespace
}  // namespace gfrep::testing
