// gfsited and gfcatalogd read their settings from --config FILE (TOML; every option is a key,
// options on the command line win) and log to --log-file: real processes on loopback.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <csignal>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "tests/support/subprocess.h"
#include "tests/support/temp_dir.h"

namespace gfrep {
namespace {

namespace fs = std::filesystem;
using testing::BinPath;
using testing::ReadFile;
using testing::RunCommand;
using testing::RunResult;
using testing::Subprocess;
using testing::TempDir;
using ::testing::HasSubstr;
using ::testing::Not;
using namespace std::chrono_literals;

void WriteText(const fs::path& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
  ASSERT_TRUE(out.good()) << path;
}

// A loopback port free right now (bound to port 0, then closed): the daemon gets it from
// its config file, the way an operator gives a fixed port.
int FreePort() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  EXPECT_GE(fd, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  EXPECT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  socklen_t len = sizeof addr;
  EXPECT_EQ(::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len), 0);
  ::close(fd);
  return ntohs(addr.sin_port);
}

class DaemonConfigTest : public ::testing::Test {
 protected:
  DaemonConfigTest() : dir_("daemon-config") { key_ = dir_.Sub("shared_key"); }

  // Starts `argv`, waits for "listening on"; returns the bound address ("" on failure).
  std::string Start(Subprocess& daemon, const std::vector<std::string>& argv) {
    absl::StatusOr<Subprocess> p = Subprocess::Start(argv);
    EXPECT_TRUE(p.ok()) << p.status();
    if (!p.ok()) return "";
    daemon = std::move(*p);
    absl::StatusOr<std::string> addr = daemon.WaitForListen(20s);
    EXPECT_TRUE(addr.ok()) << addr.status();
    return addr.ok() ? *addr : "";
  }

  // Uploads a small file through the agent at `address` to PATH in its spool.
  void Upload(const std::string& address, const std::string& path, const std::string& content) {
    const fs::path local = dir_.path() / "upload.dat";
    WriteText(local, content);
    RunResult r = RunCommand({BinPath("gfcp"), "--key-file", key_, "--timeout", "10", local.string(),
                              "gf://" + address + "/" + path});
    EXPECT_EQ(r.exit_code, 0) << r.err;
  }

  static void Stop(Subprocess& daemon) {
    daemon.Signal(SIGTERM);
    RunResult r = daemon.Wait(30s);
    EXPECT_EQ(r.exit_code, 0) << r.err;
  }

  TempDir dir_;
  std::string key_;
};

TEST_F(DaemonConfigTest, GfsitedTakesListenSpoolAndLogFileFromTheFile) {
  const int port = FreePort();
  const fs::path spool = dir_.path() / "spool-from-file";
  const fs::path log = dir_.path() / "logs" / "gfsited.log";  // its directory is created
  fs::create_directories(spool);
  const fs::path config = dir_.path() / "gfsited.toml";
  WriteText(config, "# a comment\n"
                    "listen = \"127.0.0.1:" + std::to_string(port) + "\"  # trailing comment\n"
                    "spool = '" + spool.string() + "'\n"
                    "key-file = \"" + key_ + "\"\n"
                    "log-level = \"info\"\n"
                    "log-file = \"" + log.string() + "\"\n"
                    "workers = 4\n"
                    "session-reuse = false\n");
  Subprocess agent;
  const std::string address = Start(agent, {BinPath("gfsited"), "--config", config.string()});
  EXPECT_EQ(address, "127.0.0.1:" + std::to_string(port));
  Upload(address, "in/a.dat", "bytes through the configured agent");
  EXPECT_EQ(ReadFile(spool / "in" / "a.dat"), "bytes through the configured agent");
  Stop(agent);
  // The log lines went to the file, not to stderr.
  const std::string lines = ReadFile(log);
  EXPECT_THAT(lines, HasSubstr("serving spool=" + spool.string()));
  EXPECT_THAT(lines, HasSubstr("gfsited: signal"));
  EXPECT_THAT(agent.Stderr(), Not(HasSubstr("serving spool=")));
}

TEST_F(DaemonConfigTest, AFlagOverridesTheFilesKey) {
  const fs::path file_spool = dir_.path() / "file-spool";
  const fs::path flag_spool = dir_.path() / "flag-spool";
  fs::create_directories(file_spool);
  fs::create_directories(flag_spool);
  const fs::path config = dir_.path() / "gfsited.toml";
  WriteText(config, "listen = \"127.0.0.1:0\"\nspool = \"" + file_spool.string() + "\"\nkey-file = \"" +
                        key_ + "\"\nworkers = 4\n");
  // --print-config shows the settings in force: the file's, the flag's where both are given.
  RunResult printed = RunCommand({BinPath("gfsited"), "--config", config.string(), "--spool",
                                  flag_spool.string(), "--print-config"});
  EXPECT_EQ(printed.exit_code, 0) << printed.err;
  EXPECT_THAT(printed.out, HasSubstr("spool=\"" + flag_spool.string() + "\""));
  EXPECT_THAT(printed.out, HasSubstr("workers=4"));
  EXPECT_THAT(printed.out, Not(HasSubstr(file_spool.string())));

  Subprocess agent;
  const std::string address =
      Start(agent, {BinPath("gfsited"), "--config", config.string(), "--spool", flag_spool.string()});
  Upload(address, "b.dat", "overridden");
  EXPECT_EQ(ReadFile(flag_spool / "b.dat"), "overridden");
  EXPECT_FALSE(fs::exists(file_spool / "b.dat"));
  Stop(agent);
}

TEST_F(DaemonConfigTest, GfcatalogdTakesDbListenAndLogFileFromTheFile) {
  const int port = FreePort();
  const fs::path db = dir_.path() / "catalog-db";
  const fs::path log = dir_.path() / "gfcatalogd.log";
  const fs::path config = dir_.path() / "gfcatalogd.toml";
  WriteText(config, "db = \"" + db.string() + "\"\nlisten = \"127.0.0.1:" + std::to_string(port) +
                        "\"\nlog-level = \"info\"\nlog-file = \"" + log.string() +
                        "\"\nno-planner = true\nworkers = 2\n");
  Subprocess catalog;
  const std::string address = Start(catalog, {BinPath("gfcatalogd"), "--config", config.string()});
  EXPECT_EQ(address, "127.0.0.1:" + std::to_string(port));
  RunResult mk = RunCommand({BinPath("gfmkdir"), "--catalog", address, "/configured"});
  EXPECT_EQ(mk.exit_code, 0) << mk.err;
  RunResult ls = RunCommand({BinPath("gfls"), "--catalog", address, "/"});
  EXPECT_EQ(ls.exit_code, 0) << ls.err;
  EXPECT_THAT(ls.out, HasSubstr("configured"));
  Stop(catalog);
  EXPECT_TRUE(fs::is_directory(db));
  const std::string lines = ReadFile(log);
  EXPECT_THAT(lines, HasSubstr("serving db=rocksdb " + db.string()));
  EXPECT_THAT(catalog.Stderr(), Not(HasSubstr("serving db=")));
}

// Each refused file names itself and what is wrong in it, and nothing starts.
TEST_F(DaemonConfigTest, BadFilesAreRefusedNamingTheKeyOrLine) {
  struct Case {
    std::string program, text, expected;
  };
  const std::string spool = dir_.Sub("spool");
  const std::vector<Case> cases = {
      {"gfsited", "listen = \"127.0.0.1:0\"\nbogus-key = 1\n", "unknown key 'bogus-key'"},
      {"gfcatalogd", "listen = \"127.0.0.1:0\"\nno-such-setting = true\n", "unknown key 'no-such-setting'"},
      {"gfsited", "# ok\nlisten = \"127.0.0.1:0\n", "line 2: key 'listen': unterminated string"},
      {"gfsited", "listen \"127.0.0.1:0\"\n", "line 1: expected 'key = value'"},
      {"gfcatalogd", "workers = many\n", "line 1: key 'workers': 'many' is not a TOML string"},
      {"gfsited", "buffer = \"4M\"\nbuffer = \"8M\"\n", "line 2: key 'buffer' given twice"},
      {"gfsited", "[agent]\nworkers = 2\n", "unknown section [agent]"},
      {"gfcatalogd", "config = \"other.toml\"\n", "config: This option is not allowed in a configuration file"},
  };
  int n = 0;
  for (const Case& c : cases) {
    const fs::path config = dir_.path() / ("bad" + std::to_string(n++) + ".toml");
    WriteText(config, c.text);
    std::vector<std::string> argv{BinPath(c.program), "--config", config.string()};
    if (c.program == "gfsited") {
      argv.insert(argv.end(), {"--spool", spool, "--key-file", key_});
    } else {
      argv.insert(argv.end(), {"--db", dir_.Sub("db")});
    }
    RunResult r = RunCommand(argv, {}, 30s);
    EXPECT_NE(r.exit_code, 0) << c.text;
    EXPECT_THAT(r.err, HasSubstr("config file " + config.string() + ": ")) << c.text;
    EXPECT_THAT(r.err, HasSubstr(c.expected)) << c.text;
    EXPECT_THAT(r.out, Not(HasSubstr("listening on"))) << c.text;
  }
  // A bad value is the option's own error, pointing at the file too.
  const fs::path config = dir_.path() / "bad-value.toml";
  WriteText(config, "workers = 0\n");
  RunResult r = RunCommand({BinPath("gfcatalogd"), "--config", config.string(), "--db", dir_.Sub("db")});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_THAT(r.err, HasSubstr("--workers: Value 0 not in range"));
  EXPECT_THAT(r.err, HasSubstr("config file " + config.string()));
  // A missing file is an error, not an empty configuration.
  RunResult missing = RunCommand({BinPath("gfsited"), "--config", dir_.Sub("absent.toml"), "--spool", spool});
  EXPECT_NE(missing.exit_code, 0);
  EXPECT_THAT(missing.err, HasSubstr(dir_.Sub("absent.toml")));
}

// A log file over --log-max-mb is rotated at the next line (spdlog's names: gfsited.log ->
// gfsited.1.log -> gfsited.2.log); --log-files 1 keeps one rotated file.
TEST_F(DaemonConfigTest, TheLogFileRotatesBySize) {
  const fs::path log = dir_.path() / "gfsited.log";
  const std::string old_lines(std::size_t{1} << 20, 'x');  // 1 MiB: full at --log-max-mb 1
  WriteText(log, old_lines);
  WriteText(dir_.path() / "gfsited.1.log", "older still\n");
  Subprocess agent;
  Start(agent, {BinPath("gfsited"), "--listen", "127.0.0.1:0", "--spool", dir_.Sub("spool"), "--key-file", key_,
                "--log-level", "info", "--log-file", log.string(), "--log-max-mb", "1", "--log-files", "1"});
  Stop(agent);
  // (Compared as booleans: a failure must not print a megabyte.)
  EXPECT_TRUE(ReadFile(dir_.path() / "gfsited.1.log") == old_lines) << "the full file was not rotated";
  EXPECT_FALSE(fs::exists(dir_.path() / "gfsited.2.log"));
  const std::string lines = ReadFile(log);
  EXPECT_LT(lines.size(), 100'000u);
  EXPECT_THAT(lines.substr(0, 100'000), HasSubstr("serving spool="));
}

TEST_F(DaemonConfigTest, AnUnwritableLogFileIsAClearError) {
  const fs::path blocker = dir_.path() / "a-file";
  WriteText(blocker, "not a directory");
  const std::string log = (blocker / "gfsited.log").string();
  RunResult r = RunCommand({BinPath("gfsited"), "--listen", "127.0.0.1:0", "--spool", dir_.Sub("spool"),
                            "--key-file", key_, "--log-file", log},
                           {}, 30s);
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_THAT(r.err, HasSubstr("gfsited: --log-file " + log));
}

// 512 copies at once by default, up to 1,024: on a 200 ms route a session carries about one
// small file per round trip, and 256 (the old limit) held 64 KiB files to ~1,030 a second.
TEST_F(DaemonConfigTest, AnAgentRunsUpTo1024CopiesAtOnceAnd512ByDefault) {
  const fs::path spool = dir_.path() / "spool";
  fs::create_directories(spool);
  const std::vector<std::string> base{BinPath("gfsited"), "--spool", spool.string(), "--key-file",
                                      key_, "--print-config"};
  RunResult by_default = RunCommand(base);
  EXPECT_EQ(by_default.exit_code, 0) << by_default.err;
  EXPECT_THAT(by_default.out, HasSubstr("\nworkers=512\n"));
  std::vector<std::string> most = base;
  most.insert(most.end(), {"--workers", "1024"});
  RunResult at_most = RunCommand(most);
  EXPECT_EQ(at_most.exit_code, 0) << at_most.err;
  EXPECT_THAT(at_most.out, HasSubstr("\nworkers=1024\n"));
  std::vector<std::string> over = base;
  over.insert(over.end(), {"--workers", "1025"});
  RunResult too_many = RunCommand(over);
  EXPECT_NE(too_many.exit_code, 0);
  EXPECT_THAT(too_many.err, HasSubstr("--workers"));
}

// The shipped examples (tools/packaging/*.toml) use only real keys: with every commented key
// uncommented too, each daemon reads them.
TEST_F(DaemonConfigTest, ShippedExamplesUseOnlyRealKeys) {
  for (const std::string program : {"gfsited", "gfcatalogd"}) {
    const std::string example = ReadFile(fs::path(GFREP_SOURCE_DIR) / "tools" / "packaging" / (program + ".toml"));
    ASSERT_FALSE(example.empty()) << program;
    RunResult as_shipped = RunCommand({BinPath(program), "--config",
                                       std::string(GFREP_SOURCE_DIR) + "/tools/packaging/" + program + ".toml",
                                       "--print-config"});
    EXPECT_EQ(as_shipped.exit_code, 0) << as_shipped.err;
    EXPECT_THAT(as_shipped.out, HasSubstr("listen="));
    // Uncomment "# key = value" lines (the descriptions are "# Words ..." and stay).
    std::string all;
    int keys = 0;
    std::istringstream lines(example);
    for (std::string line; std::getline(lines, line);) {
      const std::size_t eq = line.find(" = ");
      if (line.starts_with("# ") && eq != std::string::npos &&
          line.find_first_not_of("abcdefghijklmnopqrstuvwxyz0123456789-", 2) == eq) {
        line.erase(0, 2);
      }
      if (!line.empty() && line.front() != '#') ++keys;
      all += line + "\n";
    }
    EXPECT_GT(keys, 25) << program << " example has few keys:\n" << all;
    const fs::path config = dir_.path() / (program + "-all.toml");
    WriteText(config, all);
    RunResult r = RunCommand({BinPath(program), "--config", config.string(), "--print-config"});
    EXPECT_EQ(r.exit_code, 0) << program << ": " << r.err;
  }
}

}  // namespace
}  // namespace gfrep
