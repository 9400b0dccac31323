#include "tests/support/subprocess.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <thread>

#include "absl/strings/str_cat.h"
#include "tests/support/temp_dir.h"

extern char** environ;

namespace gfrep::testing {

std::string BinPath(const std::string& name) { return std::string(GFREP_BIN_DIR) + "/" + name; }

Subprocess::~Subprocess() {
  if (pid_ > 0 && !exited_) Kill();
  if (!owned_dir_.empty()) {
    std::error_code ec;
    std::filesystem::remove_all(owned_dir_, ec);
    (void)ec;  // ignored: best-effort cleanup of captured output
  }
}

Subprocess::Subprocess(Subprocess&& other) noexcept { *this = std::move(other); }

Subprocess& Subprocess::operator=(Subprocess&& other) noexcept {
  if (this != &other) {
    if (pid_ > 0 && !exited_) Kill();
    if (!owned_dir_.empty()) {
      // The process this object held is gone: so are its captured outputs (a restarted
      // daemon used to leave a /tmp/gfrep-proc-* directory behind per restart).
      std::error_code ec;
      std::filesystem::remove_all(owned_dir_, ec);
    }
    pid_ = other.pid_;
    exited_ = other.exited_;
    exit_code_ = other.exit_code_;
    signal_ = other.signal_;
    out_path_ = std::move(other.out_path_);
    err_path_ = std::move(other.err_path_);
    owned_dir_ = std::move(other.owned_dir_);
    other.pid_ = -1;
    other.owned_dir_.clear();
  }
  return *this;
}

absl::StatusOr<Subprocess> Subprocess::Start(const std::vector<std::string>& argv,
                                             const SubprocessOptions& options) {
  if (argv.empty()) return absl::InvalidArgumentError("empty argv");
  Subprocess p;
  std::filesystem::path dir = options.log_dir;
  if (dir.empty()) {
    char tmpl[] = "/tmp/gfrep-proc-XXXXXX";
    if (mkdtemp(tmpl) == nullptr) return absl::InternalError("mkdtemp failed");
    dir = tmpl;
    p.owned_dir_ = dir;
  }
  static int counter = 0;
  std::string base = absl::StrCat(std::filesystem::path(argv[0]).filename().string(), ".",
                                  getpid(), ".", counter++);
  p.out_path_ = dir / (base + ".out");
  p.err_path_ = dir / (base + ".err");

  int in_pipe[2] = {-1, -1};
  if (!options.stdin_data.empty() && pipe2(in_pipe, O_CLOEXEC) != 0) {
    return absl::InternalError(absl::StrCat("pipe: ", std::strerror(errno)));
  }
  std::vector<std::string> env_strings;
  for (char** e = environ; *e != nullptr; ++e) {
    std::string kv(*e);
    std::string key = kv.substr(0, kv.find('='));
    if (options.env.count(key) == 0) env_strings.push_back(kv);
  }
  for (const auto& [k, v] : options.env) env_strings.push_back(k + "=" + v);
  std::vector<char*> envp;
  for (auto& s : env_strings) envp.push_back(s.data());
  envp.push_back(nullptr);
  std::vector<std::string> args = argv;
  std::vector<char*> cargv;
  for (auto& s : args) cargv.push_back(s.data());
  cargv.push_back(nullptr);

  pid_t pid = fork();
  if (pid < 0) return absl::InternalError(absl::StrCat("fork: ", std::strerror(errno)));
  if (pid == 0) {
    // Child: own process group so a test can signal the daemon and its children.
    setpgid(0, 0);
    int in = in_pipe[0] >= 0 ? in_pipe[0] : open("/dev/null", O_RDONLY);
    int out = open(p.out_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    int err = open(p.err_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (in < 0 || out < 0 || err < 0) _exit(127);
    dup2(in, 0);
    dup2(out, 1);
    dup2(err, 2);
    execve(cargv[0], cargv.data(), envp.data());
    dprintf(2, "exec %s: %s\n", cargv[0], std::strerror(errno));
    _exit(127);
  }
  p.pid_ = pid;
  if (in_pipe[0] >= 0) {
    close(in_pipe[0]);
    const std::string& data = options.stdin_data;
    std::size_t off = 0;
    while (off < data.size()) {
      ssize_t n = write(in_pipe[1], data.data() + off, data.size() - off);
      if (n <= 0) break;
      off += static_cast<std::size_t>(n);
    }
    close(in_pipe[1]);
  }
  return p;
}

void Subprocess::Reap(int status) {
  exited_ = true;
  if (WIFEXITED(status)) {
    exit_code_ = WEXITSTATUS(status);
  } else if (WIFSIGNALED(status)) {
    signal_ = WTERMSIG(status);
    exit_code_ = -1;
  }
}

bool Subprocess::running() {
  if (pid_ <= 0 || exited_) return false;
  int status = 0;
  pid_t r = waitpid(pid_, &status, WNOHANG);
  if (r == pid_) {
    Reap(status);
    return false;
  }
  return true;
}

std::string Subprocess::Stdout() const { return ReadFile(out_path_); }
std::string Subprocess::Stderr() const { return ReadFile(err_path_); }

absl::StatusOr<std::string> Subprocess::WaitForOutput(const std::string& needle,
                                                      std::chrono::milliseconds timeout) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  while (true) {
    std::string out = Stdout();
    std::size_t hit = out.find(needle);
    if (hit != std::string::npos) {
      std::size_t begin = out.rfind('\n', hit);
      begin = begin == std::string::npos ? 0 : begin + 1;
      std::size_t end = out.find('\n', hit);
      if (end != std::string::npos) return out.substr(begin, end - begin);
    }
    if (!running()) {
      return absl::UnavailableError(absl::StrCat("process exited (code ", exit_code_, " signal ",
                                                 signal_, ") before printing '", needle,
                                                 "'; stderr: ", Stderr()));
    }
    if (std::chrono::steady_clock::now() > deadline) {
      return absl::DeadlineExceededError(
          absl::StrCat("timed out waiting for '", needle, "'; stderr: ", Stderr()));
    }
    // Polling a file the child writes; there is no event to wait on.
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

absl::StatusOr<std::string> Subprocess::WaitForListen(std::chrono::milliseconds timeout) {
  absl::StatusOr<std::string> line = WaitForOutput("listening on ", timeout);
  if (!line.ok()) return line.status();
  std::string_view rest = *line;
  rest.remove_prefix(rest.find("listening on ") + std::strlen("listening on "));
  std::size_t end = rest.find_first_of(" \t\r");
  return std::string(rest.substr(0, end));
}

void Subprocess::Signal(int sig) {
  if (pid_ > 0 && !exited_) kill(pid_, sig);
}

RunResult Subprocess::Wait(std::chrono::milliseconds timeout) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  while (running()) {
    if (std::chrono::steady_clock::now() > deadline) {
      return Kill();
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return RunResult{exit_code_, signal_, Stdout(), Stderr()};
}

RunResult Subprocess::Kill() {
  if (pid_ > 0 && !exited_) {
    kill(pid_, SIGKILL);
    int status = 0;
    if (waitpid(pid_, &status, 0) == pid_) Reap(status);
  }
  return RunResult{exit_code_, signal_, Stdout(), Stderr()};
}

RunResult RunCommand(const std::vector<std::string>& argv, const SubprocessOptions& options,
              std::chrono::milliseconds timeout) {
  absl::StatusOr<Subprocess> p = Subprocess::Start(argv, options);
  if (!p.ok()) return RunResult{-1, 0, "", std::string(p.status().message())};
  return p->Wait(timeout);
}

double ProcessCpuSeconds(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string stat((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const std::size_t paren = stat.rfind(')');
  if (paren == std::string::npos || paren + 2 > stat.size()) return -1;
  // Fields after the parenthesised command name: state is field 3, utime 14, stime 15.
  std::istringstream rest(stat.substr(paren + 2));
  std::vector<std::string> f;
  std::string x;
  while (rest >> x) f.push_back(x);
  if (f.size() < 13) return -1;
  return static_cast<double>(std::stoull(f[11]) + std::stoull(f[12])) /
         static_cast<double>(::sysconf(_SC_CLK_TCK));
}

absl::Status MakeCertificates(const std::string& ca_dir, const std::vector<std::vector<std::string>>& commands) {
  for (std::vector<std::string> args : commands) {
    args.insert(args.begin(), BinPath("gfca"));
    args.insert(args.end(), {"--dir", ca_dir});
    RunResult r = RunCommand(args);
    if (r.exit_code != 0) return absl::InternalError(absl::StrCat("gfca ", args[1], ": ", r.err));
  }
  return absl::OkStatus();
}

}  // namespace gfrep::testing
