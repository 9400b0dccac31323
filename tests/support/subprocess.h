#pragma once

// Subprocess starts a program of ours (a daemon or a command-line tool) as a child,
// with stdout and stderr captured to files, and stops it by pid: never by name.
// The destructor kills (SIGKILL) and reaps a child still running, so a failing
// test leaves nothing behind.
//
// Thread safety: none; owned by one test.

#include <sys/types.h>

#include <chrono>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace gfrep::testing {

// Path of an executable built by this project (build/bin/<name>).
std::string BinPath(const std::string& name);

struct SubprocessOptions {
  // Extra environment variables for the child (added to the parent's).
  std::map<std::string, std::string> env;
  // Written to the child's stdin, then stdin is closed. Empty: /dev/null.
  std::string stdin_data;
  // Where stdout/stderr files go. Empty: a fresh directory under /tmp, removed on destruction.
  std::filesystem::path log_dir;
};

struct RunResult {
  int exit_code = -1;  // -1 when killed by a signal
  int signal = 0;
  std::string out;
  std::string err;
};

class Subprocess {
 public:
  Subprocess() = default;
  ~Subprocess();
  Subprocess(const Subprocess&) = delete;
  Subprocess& operator=(const Subprocess&) = delete;
  Subprocess(Subprocess&& other) noexcept;
  Subprocess& operator=(Subprocess&& other) noexcept;

  // Starts argv[0] (a path) with argv. Returns kInternal if fork/exec fails.
  static absl::StatusOr<Subprocess> Start(const std::vector<std::string>& argv,
                                          const SubprocessOptions& options = {});

  pid_t pid() const { return pid_; }
  bool running();

  // Waits until stdout contains a line matching `needle` (a plain substring) and
  // returns that whole line. kDeadlineExceeded after `timeout`; kUnavailable if the
  // child exits first (its stderr is in the message).
  absl::StatusOr<std::string> WaitForOutput(const std::string& needle,
                                            std::chrono::milliseconds timeout);

  // For daemons that print "listening on HOST:PORT": returns "HOST:PORT".
  absl::StatusOr<std::string> WaitForListen(std::chrono::milliseconds timeout);

  // Sends `sig` to the child (by pid).
  void Signal(int sig);
  // Waits for exit up to `timeout`; kills with SIGKILL past it. Returns the result.
  RunResult Wait(std::chrono::milliseconds timeout = std::chrono::seconds(60));
  // SIGKILL and reap.
  RunResult Kill();

  std::string Stdout() const;
  std::string Stderr() const;
  // The file the child's stdout goes to.
  const std::filesystem::path& out_path() const { return out_path_; }

 private:
  void Reap(int status);

  pid_t pid_ = -1;
  bool exited_ = false;
  int exit_code_ = -1;
  int signal_ = 0;
  std::filesystem::path out_path_;
  std::filesystem::path err_path_;
  std::filesystem::path owned_dir_;
};

// Runs a command to completion (killing it past `timeout`) and returns its result.
// utime + stime of process `pid` so far, in seconds (from /proc/PID/stat); -1 if unreadable.
double ProcessCpuSeconds(pid_t pid);

// Runs `gfca ARGS... --dir ca_dir` for each of `commands` (e.g. {"init"}, {"issue", "node",
// "kek1", "--host", "127.0.0.1"}); the first failure's stderr, or OK.
absl::Status MakeCertificates(const std::string& ca_dir, const std::vector<std::vector<std::string>>& commands);

RunResult RunCommand(const std::vector<std::string>& argv, const SubprocessOptions& options = {},
              std::chrono::milliseconds timeout = std::chrono::seconds(120));

}  // namespace gfrep::testing
