#pragma once

// PostgresServer is a private PostgreSQL server for a test: a fresh cluster (initdb, trust
// authentication, superuser "gfrep") in a temporary directory, listening only on a Unix
// socket in that directory. It uses the server binaries of Debian's postgresql-NN package
// (/usr/lib/postgresql/NN/bin, the highest NN). PostgreSQL refuses to run as root, so as
// root the directory belongs to the "postgres" system user and initdb/pg_ctl run as that
// user (setpriv). The destructor stops the server (pg_ctl stop -m fast) and removes the
// directory, also when the test failed.
//
// Where the binaries are: $GFREP_PG_BIN if set (a directory with initdb, pg_ctl and psql),
// else the bin directory of the newest /usr/lib/postgresql/NN.
//
// Skip or fail: a test skips only when PostgreSQL is not installed (PostgresNotInstalled), and
// not even then with GFREP_REQUIRE_POSTGRES=1 (CI sets it): a server that is installed but
// does not start, or a database that cannot be made, fails the test with the server log's last
// lines. GFREP_SKIP_OR_FAIL_WITHOUT_POSTGRES(status) says so in one line of a SetUp.
//
// SharedPostgres() is one server for a whole test binary (initdb costs about a second): each
// test takes a fresh database of it with CreateDatabase(). CTest runs each test in its own
// process, so it also sets $GFREP_PG_TEMPLATE (tests/CMakeLists.txt): a directory where the
// first server's initdb leaves a cluster (under a lock file beside it) that later servers copy.
//
// Thread safety: none; used by the test's main thread.

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "tests/support/temp_dir.h"

namespace gfrep::testing {

class PostgresServer {
 public:
  PostgresServer();
  ~PostgresServer();
  PostgresServer(const PostgresServer&) = delete;
  PostgresServer& operator=(const PostgresServer&) = delete;

  // Creates the cluster on the first call, then starts the server and waits until it accepts
  // connections. kFailedPrecondition if the PostgreSQL binaries are not installed (where
  // tests may skip: PostgresNotInstalled), kInternal if initdb or pg_ctl fail or the server
  // user is missing (their output and the server log's last lines are in the message).
  absl::Status Start();

  // pg_ctl stop with `mode`: "fast" (a clean shutdown) or "immediate" (a crash: the next
  // Start recovers from the WAL).
  absl::Status Stop(std::string_view mode = "fast");

  bool running() const { return running_; }

  // Creates database `name` (empty: a fresh name, "db1", "db2", ...) and returns its
  // conninfo for the catalog: "postgresql:host=SOCKET_DIR port=PORT user=gfrep dbname=NAME".
  // Starts the server first if it is not running (Start's errors).
  // REQUIRES: `name` is empty or a plain identifier ([a-z0-9_]) not used before.
  absl::StatusOr<std::string> CreateDatabase(std::string_view name = "");

  // Runs `sql` (psql -c, stopping at the first error) in database `dbname`; its output
  // (unaligned, tuples only: one row per line, columns separated by '|').
  absl::StatusOr<std::string> Sql(std::string_view dbname, std::string_view sql);

  // The socket directory and port (libpq's host= and port=).
  const std::string& socket_dir() const { return socket_dir_; }
  int port() const { return port_; }

 private:
  // argv run as the postgres user when we are root.
  std::vector<std::string> AsServerUser(std::vector<std::string> argv) const;
  std::string ServerLog() const;
  // initdb of a new cluster in `data_dir`.
  absl::Status InitDb(const std::string& data_dir) const;
  // data_dir_ as a copy of the template cluster under `tmpl`, made first if missing.
  absl::Status CopyTemplate(const std::string& tmpl) const;

  int databases_ = 0;

  std::unique_ptr<TempDir> dir_;
  std::string bin_dir_;  // empty: binaries not found
  std::string data_dir_;
  std::string socket_dir_;
  std::string log_path_;
  int port_ = 0;
  bool initialized_ = false;
  bool running_ = false;
};

// Whether `s` (from Start or CreateDatabase) means the tests should skip: PostgreSQL's binaries
// are not installed and $GFREP_REQUIRE_POSTGRES is not "1". Everything else is a failure.
bool PostgresNotInstalled(const absl::Status& s);

// In a test body or SetUp: skips when PostgresNotInstalled(status), else fails (fatally) with
// the status. Use after a failed CreateDatabase/Start.
#define GFREP_SKIP_OR_FAIL_WITHOUT_POSTGRES(status)                                   \
  do {                                                                                \
    const ::absl::Status gfrep_pg_status_ = (status);                                 \
    if (::gfrep::testing::PostgresNotInstalled(gfrep_pg_status_)) {                   \
      GTEST_SKIP() << "PostgreSQL is not installed: " << gfrep_pg_status_;            \
    }                                                                                 \
    FAIL() << "PostgreSQL is installed but unusable: " << gfrep_pg_status_;           \
  } while (false)

// The server shared by the tests of this binary: made (not started) on first use, stopped
// and removed after the last test (a gtest Environment's TearDown) or at exit.
PostgresServer& SharedPostgres();

}  // namespace gfrep::testing
