#include "tests/support/postgres_server.h"

#include <gtest/gtest.h>
#include <fcntl.h>
#include <pwd.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <functional>
#include <fstream>
#include <system_error>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "tests/support/subprocess.h"

namespace gfrep::testing {
namespace {

constexpr const char* kServerUser = "postgres";

bool HasServerPrograms(const std::filesystem::path& bin) {
  return ::access((bin / "initdb").c_str(), X_OK) == 0 &&
         ::access((bin / "pg_ctl").c_str(), X_OK) == 0 &&
         ::access((bin / "psql").c_str(), X_OK) == 0;
}

// $GFREP_PG_BIN if set, else the bin directory of the newest /usr/lib/postgresql/NN with
// initdb, pg_ctl and psql; "" if none. (A $GFREP_PG_BIN without them is kept: Start says so.)
std::string FindBinDir() {
  if (const char* env = std::getenv("GFREP_PG_BIN"); env != nullptr && *env != '\0') {
    return env;
  }
  std::error_code ec;
  std::string best;
  int best_version = -1;
  for (const auto& e : std::filesystem::directory_iterator("/usr/lib/postgresql", ec)) {
    int version = 0;
    if (!absl::SimpleAtoi(e.path().filename().string(), &version)) continue;
    const std::filesystem::path bin = e.path() / "bin";
    if (!HasServerPrograms(bin)) continue;
    if (version > best_version) {
      best_version = version;
      best = bin.string();
    }
  }
  return best;
}

std::string Describe(const std::vector<std::string>& argv, const RunResult& r) {
  return absl::StrCat(absl::StrJoin(argv, " "), ": exit ", r.exit_code, " signal ", r.signal, "\n",
                      r.out, r.err);
}

}  // namespace

PostgresServer::PostgresServer() : bin_dir_(FindBinDir()) {
  // The port only names the socket file inside our private directory; it need not be free
  // on any interface. Varying it keeps servers of parallel tests apart in the server's own
  // shared-memory keys.
  static std::atomic<int> counter{0};
  port_ = 20000 + static_cast<int>((::getpid() * 8 + counter++) % 40000);
}

PostgresServer::~PostgresServer() {
  if (running_) {
    absl::Status s = Stop("fast");
    if (!s.ok()) {
      // Last resort, so that no server outlives the test: the postmaster's pid is the first
      // line of its pid file; its children exit when it does.
      std::ifstream pid_file(data_dir_ + "/postmaster.pid");
      std::string line;
      int pid = 0;
      if (std::getline(pid_file, line) && absl::SimpleAtoi(line, &pid) && pid > 0) {
        ::kill(pid, SIGKILL);
      }
    }
  }
  // dir_ (the cluster, socket and log) goes with it.
}

std::vector<std::string> PostgresServer::AsServerUser(std::vector<std::string> argv) const {
  if (::geteuid() != 0) return argv;
  std::vector<std::string> wrapped = {"/usr/bin/setpriv", absl::StrCat("--reuid=", kServerUser),
                                      absl::StrCat("--regid=", kServerUser), "--init-groups"};
  wrapped.insert(wrapped.end(), argv.begin(), argv.end());
  return wrapped;
}

std::string PostgresServer::ServerLog() const {
  std::string log = ReadFile(log_path_);
  if (log.size() > 4000) log = "..." + log.substr(log.size() - 4000);
  return log;
}

absl::Status PostgresServer::InitDb(const std::string& data_dir) const {
  std::vector<std::string> initdb =
      AsServerUser({bin_dir_ + "/initdb", "-D", data_dir, "--auth=trust", "-U", "gfrep", "-E",
                    "UTF8", "--locale=C",
                    // Only initdb skips fsync (a test cluster); the server fsyncs.
                    "--no-sync"});
  RunResult r = RunCommand(initdb);
  if (r.exit_code != 0) return absl::InternalError(Describe(initdb, r));
  return absl::OkStatus();
}

absl::Status PostgresServer::CopyTemplate(const std::string& tmpl) const {
  // One template per set of binaries (a test may point GFREP_PG_BIN elsewhere), made under
  // an exclusive lock by the first server that needs it; never changed afterwards.
  const std::string dir =
      absl::StrCat(tmpl, "/", absl::Hex(std::hash<std::string>{}(bin_dir_), absl::kZeroPad16));
  std::error_code ec;
  std::filesystem::create_directories(tmpl, ec);
  if (ec) return absl::InternalError(absl::StrCat("mkdir ", tmpl, ": ", ec.message()));
  const std::string lock_path = absl::StrCat(tmpl, ".lock");
  const int fd = ::open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (fd < 0) return absl::InternalError(absl::StrCat("open ", lock_path, ": ", std::strerror(errno)));
  struct Unlock {
    int fd;
    ~Unlock() { ::close(fd); }  // closing drops the lock
  } unlock{fd};
  while (::flock(fd, LOCK_EX) != 0) {
    if (errno != EINTR) return absl::InternalError(absl::StrCat("flock ", lock_path, ": ", std::strerror(errno)));
  }
  const std::string data = dir + "/data";
  const std::string done = dir + "/complete";
  if (!std::filesystem::exists(done)) {
    std::filesystem::remove_all(dir, ec);
    std::filesystem::create_directory(dir, ec);
    if (ec) return absl::InternalError(absl::StrCat("mkdir ", dir, ": ", ec.message()));
    if (::geteuid() == 0) {
      const struct passwd* pw = ::getpwnam(kServerUser);
      if (pw == nullptr || ::chown(tmpl.c_str(), pw->pw_uid, pw->pw_gid) != 0 ||
          ::chown(dir.c_str(), pw->pw_uid, pw->pw_gid) != 0) {
        return absl::InternalError(absl::StrCat("chown ", dir, " to ", kServerUser));
      }
    }
    if (absl::Status s = InitDb(data); !s.ok()) return s;
    std::ofstream(done) << bin_dir_ << "\n";
  }
  // cp -a keeps the owner (the postgres user when we are root) and the cluster's 0700.
  std::vector<std::string> cp = {"/bin/cp", "-a", data, data_dir_};
  RunResult r = RunCommand(cp);
  if (r.exit_code != 0) return absl::InternalError(Describe(cp, r));
  return absl::OkStatus();
}

absl::Status PostgresServer::Start() {
  if (running_) return absl::OkStatus();
  if (bin_dir_.empty()) {
    return absl::FailedPreconditionError(
        "no PostgreSQL server binaries under /usr/lib/postgresql/*/bin (install postgresql-15, "
        "or set GFREP_PG_BIN)");
  }
  if (!HasServerPrograms(bin_dir_)) {
    return absl::FailedPreconditionError(absl::StrCat(
        "GFREP_PG_BIN=", bin_dir_, " has no executable initdb, pg_ctl and psql"));
  }
  if (!initialized_) {
    dir_ = std::make_unique<TempDir>("pg");
    data_dir_ = dir_->Sub("data");
    socket_dir_ = dir_->Sub("sock");
    log_path_ = dir_->Sub("server.log");
    std::error_code ec;
    std::filesystem::create_directory(socket_dir_, ec);
    if (ec) return absl::InternalError(absl::StrCat("mkdir ", socket_dir_, ": ", ec.message()));
    if (::geteuid() == 0) {
      // The server runs as the postgres user: it must own its directory.
      const struct passwd* pw = ::getpwnam(kServerUser);
      if (pw == nullptr || ::access("/usr/bin/setpriv", X_OK) != 0) {
        // The postgresql package makes the user: the binaries are there, the machine is not
        // set up as the tests need (a failure, not a skip).
        return absl::InternalError(
            "running as root needs the postgres system user and setpriv (util-linux)");
      }
      for (const std::string& p : {dir_->path().string(), socket_dir_}) {
        if (::chown(p.c_str(), pw->pw_uid, pw->pw_gid) != 0) {
          return absl::InternalError(absl::StrCat("chown ", p, " to ", kServerUser));
        }
      }
    }
    const char* tmpl = std::getenv("GFREP_PG_TEMPLATE");
    absl::Status made = tmpl != nullptr && *tmpl != '\0' ? CopyTemplate(tmpl) : InitDb(data_dir_);
    if (!made.ok()) return made;
    initialized_ = true;
  }
  std::vector<std::string> start = AsServerUser(
      {bin_dir_ + "/pg_ctl", "-D", data_dir_, "-w", "-t", "60", "-l", log_path_, "start", "-o",
       absl::StrCat("-c listen_addresses='' -k ", socket_dir_, " -p ", port_,
                    " -c fsync=on -c max_connections=200")});
  RunResult r = RunCommand(start);
  if (r.exit_code != 0) {
    return absl::InternalError(absl::StrCat(Describe(start, r), "\nserver log:\n", ServerLog()));
  }
  running_ = true;
  return absl::OkStatus();
}

absl::Status PostgresServer::Stop(std::string_view mode) {
  if (!running_) return absl::OkStatus();
  std::vector<std::string> stop = AsServerUser(
      {bin_dir_ + "/pg_ctl", "-D", data_dir_, "-w", "-t", "60", "-m", std::string(mode), "stop"});
  RunResult r = RunCommand(stop);
  if (r.exit_code != 0) {
    return absl::InternalError(absl::StrCat(Describe(stop, r), "\nserver log:\n", ServerLog()));
  }
  running_ = false;
  return absl::OkStatus();
}

absl::StatusOr<std::string> PostgresServer::CreateDatabase(std::string_view name) {
  if (absl::Status s = Start(); !s.ok()) return s;
  const std::string db = name.empty() ? absl::StrCat("db", ++databases_) : std::string(name);
  absl::StatusOr<std::string> out = Sql("postgres", absl::StrCat("CREATE DATABASE ", db));
  if (!out.ok()) return out.status();
  return absl::StrCat("postgresql:host=", socket_dir_, " port=", port_, " user=gfrep dbname=", db);
}

absl::StatusOr<std::string> PostgresServer::Sql(std::string_view dbname, std::string_view sql) {
  if (!running_) return absl::FailedPreconditionError("the PostgreSQL server is not running");
  // psql of the same installation; the client may run as root.
  std::vector<std::string> argv = {bin_dir_ + "/psql",
                                   "-X",
                                   "-q",
                                   "-A",
                                   "-t",
                                   "-v",
                                   "ON_ERROR_STOP=1",
                                   "-h",
                                   socket_dir_,
                                   "-p",
                                   absl::StrCat(port_),
                                   "-U",
                                   "gfrep",
                                   "-d",
                                   std::string(dbname),
                                   "-c",
                                   std::string(sql)};
  RunResult r = RunCommand(argv);
  if (r.exit_code != 0) return absl::InternalError(Describe(argv, r));
  return r.out;
}

bool PostgresNotInstalled(const absl::Status& s) {
  if (s.code() != absl::StatusCode::kFailedPrecondition) return false;
  const char* require = std::getenv("GFREP_REQUIRE_POSTGRES");
  return require == nullptr || std::string_view(require) != "1";
}

namespace {

std::unique_ptr<PostgresServer>& SharedSlot() {
  // Destroyed at exit if the environment's TearDown did not run.
  static std::unique_ptr<PostgresServer> server;
  return server;
}

class SharedPostgresEnvironment : public ::testing::Environment {
 public:
  void TearDown() override { SharedSlot().reset(); }
};

[[maybe_unused]] ::testing::Environment* const kSharedPostgresEnvironment =
    ::testing::AddGlobalTestEnvironment(new SharedPostgresEnvironment);

}  // namespace

PostgresServer& SharedPostgres() {
  std::unique_ptr<PostgresServer>& server = SharedSlot();
  if (server == nullptr) server = std::make_unique<PostgresServer>();
  return *server;
}

}  // namespace gfrep::testing
