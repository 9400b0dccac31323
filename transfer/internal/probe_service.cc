#include "transfer/internal/probe_service.h"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>

#include <cerrno>
#include <cstring>
#include <vector>

#include <fmt/format.h>

#include "transfer/congestion.h"
#include "transfer/internal/json_fields.h"

extern char** environ;

namespace gfrep::transfer::internal {

namespace {

using namespace std::chrono_literals;

constexpr std::size_t kMaxHelperOutput = 1 << 20;

// Starts `args` (args[0] is the program) with stdin from /dev/null, stdout into a pipe and
// stderr inherited (the agent's log); no other descriptor of the agent goes along. Returns
// the pid and the pipe's read end.
absl::StatusOr<std::pair<pid_t, int>> Spawn(const std::vector<std::string>& args) {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) return absl::InternalError(fmt::format("pipe: {}", std::strerror(errno)));
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&fa, fds[1], 1);
  posix_spawn_file_actions_addclosefrom_np(&fa, 3);
  std::vector<char*> argv;
  for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  pid_t pid = 0;
  int rc = ::posix_spawn(&pid, args[0].c_str(), &fa, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  ::close(fds[1]);
  if (rc != 0) {
    ::close(fds[0]);
    return absl::InternalError(fmt::format("start {}: {}", args[0], std::strerror(rc)));
  }
  return std::make_pair(pid, fds[0]);
}

// Command lines of the helper (plain functions: GCC 12 miscompiles braced lists of string
// literals inside coroutines).
std::vector<std::string> ServerArgs(const std::filesystem::path& helper, const std::string& bind,
                                    std::uint16_t port, int timeout_s) {
  return {helper.string(), "iperf-server", "--bind", bind, "--port", std::to_string(port),
          "--timeout", std::to_string(timeout_s)};
}

std::vector<std::string> ClientArgs(const std::filesystem::path& helper, const std::string& host, int port,
                                    int rtt_port, int streams, int seconds, int omit, std::uint64_t window,
                                    const std::string& congestion) {
  std::vector<std::string> args{helper.string(), "iperf-client", "--host", host, "--port", std::to_string(port),
                                "--rtt-port", std::to_string(rtt_port), "--streams", std::to_string(streams),
                                "--seconds", std::to_string(seconds), "--omit", std::to_string(omit),
                                "--window", std::to_string(window)};
  if (!congestion.empty()) {
    args.push_back("--cc");
    args.push_back(congestion);
  }
  return args;
}

// The optional "congestion" of a probe request: "" when absent, else a name of [a-z0-9_-]{1,15}.
absl::StatusOr<std::string> CongestionIn(const Json& request) {
  if (!request.contains("congestion")) return std::string();
  absl::StatusOr<std::string> name = GetString(request, "congestion");
  if (!name.ok()) return name.status();
  if (!IsCongestionControlName(*name)) return absl::InvalidArgumentError("probe request: congestion must be [a-z0-9_-]{1,15}");
  return name;
}

Json ReadyJson(std::uint16_t port) { return Json{{"op", "probe_ready"}, {"port", port}}; }
Json ResultJson(Json result) { return Json{{"op", "probe_result"}, {"result", std::move(result)}}; }

// Tells the client why (as the agent's own refusals do) and ends the request with it.
asio::awaitable<absl::Status> Refuse(Conn& conn, absl::Status s) {
  (void)co_await conn.SendControl(ErrorJson(s));  // ignored: the client may have gone
  co_return s;
}

absl::StatusOr<int> IntIn(const Json& j, std::string_view key, int lo, int hi) {
  absl::StatusOr<std::int64_t> v = GetInt(j, key);
  if (!v.ok()) return absl::InvalidArgumentError(fmt::format("probe request: {}", v.status().message()));
  if (*v < lo || *v > hi) {
    return absl::InvalidArgumentError(fmt::format("probe request: {} must be {}..{}", key, lo, hi));
  }
  return static_cast<int>(*v);
}

}  // namespace

absl::StatusOr<std::pair<pid_t, int>> ProbeService::StartHelper(const std::vector<std::string>& args) {
  absl::StatusOr<std::pair<pid_t, int>> child = Spawn(args);
  if (child.ok()) {
    busy_ = true;
    children_.insert(child->first);
  }
  return child;
}

asio::awaitable<absl::Status> ProbeService::Serve(ConnPtr conn, const Json& request, spdlog::logger& log) {
  absl::StatusOr<std::string> op = GetString(request, "op");
  absl::Status refused;
  if (helper_.empty()) {
    refused = absl::UnimplementedError("this agent has no probe helper (gfprobe next to gfsited)");
  } else if (busy_ || stopping_) {
    refused = absl::UnavailableError("busy: this agent is running another probe");
  }
  if (refused.ok()) {
    if (*op == "probe_serve") co_return co_await ServeServer(conn, request, log);
    co_return co_await ServeRun(conn, request, log);
  }
  co_return co_await Refuse(*conn, refused);
}

asio::awaitable<absl::Status> ProbeService::ServeServer(ConnPtr conn, const Json& request, spdlog::logger& log) {
  absl::StatusOr<int> seconds = IntIn(request, "seconds", 1, 120);
  if (!seconds.ok()) {
    co_return co_await Refuse(*conn, seconds.status());
  }
  absl::StatusOr<std::string> congestion = CongestionIn(request);
  if (!congestion.ok()) {
    co_return co_await Refuse(*conn, congestion.status());
  }
  if (!congestion->empty()) {
    // The iperf3 server sends, with the client's choice of algorithm: have it here first, on
    // the blocking pool (a BPF load takes milliseconds, a modprobe a child process).
    const std::function<absl::StatusOr<CongestionControl>()> ensure = [name = *congestion] {
      return EnsureCongestionControl(name);
    };
    absl::StatusOr<CongestionControl> cc = co_await OffThread(ensure);
    if (!cc.ok()) {
      co_return co_await Refuse(*conn, cc.status());
    }
    log.info("probe: congestion control {}", cc->detail);
  }
  auto ex = co_await asio::this_coro::executor;
  // A free port on the agent's address (a race with another program taking it in the
  // next milliseconds only fails this probe).
  std::uint16_t port = 0;
  {
    boost::system::error_code ec;
    tcp::acceptor a(ex);
    tcp::endpoint at(asio::ip::make_address(bind_host_, ec), 0);
    if (!ec) a.open(at.protocol(), ec);
    if (!ec) a.bind(at, ec);
    if (!ec) port = a.local_endpoint(ec).port();
    if (ec || port == 0) {
      absl::Status s = absl::InternalError(fmt::format("no free port on {}: {}", bind_host_, ec.message()));
      co_return co_await Refuse(*conn, s);
    }
  }
  const std::vector<std::string> args = ServerArgs(helper_, bind_host_, port, *seconds + 30);
  absl::StatusOr<std::pair<pid_t, int>> child = Spawn(args);
  if (!child.ok()) {
    co_return co_await Refuse(*conn, child.status());
  }
  busy_ = true;
  children_.insert(child->first);
  log.info("probe: iperf3 server on {}:{} (pid {})", bind_host_, port, child->first);
  asio::co_spawn(
      ex,
      [this, pid = child->first, fd = child->second, limit = std::chrono::seconds(*seconds + 35),
       &log]() -> asio::awaitable<void> {
        absl::StatusOr<std::string> out = co_await Collect(pid, fd, limit);
        if (!out.ok()) log.warn("probe: iperf3 server: {}", out.status().ToString());
        busy_ = false;
      },
      asio::detached);
  // Time for the helper to listen; the measuring side also retries its connection.
  asio::steady_timer settle(ex, 300ms);
  co_await settle.async_wait(kNoThrow);
  const Json ready = ReadyJson(port);
  co_return co_await conn->SendControl(ready);
}

asio::awaitable<absl::Status> ProbeService::ServeRun(ConnPtr conn, const Json& request, spdlog::logger& log) {
  absl::StatusOr<std::string> host = GetString(request, "host");
  absl::StatusOr<int> port = IntIn(request, "port", 1, 65535);
  absl::StatusOr<int> rtt_port = IntIn(request, "rtt_port", 1, 65535);
  absl::StatusOr<int> streams = IntIn(request, "streams", 1, 64);
  absl::StatusOr<int> seconds = IntIn(request, "seconds", 1, 60);
  absl::StatusOr<int> omit = IntIn(request, "omit", 0, 10);
  absl::StatusOr<std::uint64_t> window = GetUint(request, "window");
  absl::StatusOr<std::string> congestion = CongestionIn(request);
  absl::Status bad;
  for (const absl::Status& s : {host.status(), port.status(), rtt_port.status(), streams.status(),
                                seconds.status(), omit.status(), window.status(), congestion.status()}) {
    if (!s.ok() && bad.ok()) bad = s;
  }
  boost::system::error_code ec;
  if (bad.ok()) (void)asio::ip::make_address(*host, ec);
  if (bad.ok() && ec) bad = absl::InvalidArgumentError("probe request: host must be an IP address");
  if (bad.ok() && *window > (1ull << 30)) bad = absl::InvalidArgumentError("probe request: window must be <= 1 GiB");
  if (!bad.ok()) {
    co_return co_await Refuse(*conn, bad);
  }
  const std::vector<std::string> args =
      ClientArgs(helper_, *host, *port, *rtt_port, *streams, *seconds, *omit, *window, *congestion);
  absl::StatusOr<std::pair<pid_t, int>> child = Spawn(args);
  if (!child.ok()) {
    co_return co_await Refuse(*conn, child.status());
  }
  busy_ = true;
  children_.insert(child->first);
  log.info("probe: measuring {}:{} with {} stream(s) for {}+{} s, congestion control {} (pid {})", *host, *port,
           *streams, *omit, *seconds, congestion->empty() ? "default" : *congestion, child->first);
  absl::StatusOr<std::string> out =
      co_await Collect(child->first, child->second, std::chrono::seconds(*seconds + *omit + 40));
  busy_ = false;
  absl::StatusOr<Json> result = absl::InternalError("no result");
  if (!out.ok()) result = out.status();
  if (out.ok()) {
    Json j = Json::parse(*out, nullptr, false);
    result = j.is_object() ? absl::StatusOr<Json>(std::move(j))
                           : absl::InternalError("probe helper printed no JSON result");
  }
  if (!result.ok()) {
    co_return co_await Refuse(*conn, result.status());
  }
  const Json answer = ResultJson(std::move(*result));
  co_return co_await conn->SendControl(answer);
}

asio::awaitable<absl::StatusOr<std::string>> ProbeService::Collect(pid_t pid, int out_fd,
                                                                 std::chrono::seconds limit) {
  auto ex = co_await asio::this_coro::executor;
  asio::posix::stream_descriptor pipe(ex, out_fd);
  auto timed_out = std::make_shared<bool>(false);
  asio::steady_timer deadline(ex, limit);
  deadline.async_wait([pid, timed_out](boost::system::error_code ec) {
    if (ec) return;
    *timed_out = true;
    ::kill(pid, SIGKILL);
  });
  std::string out;
  std::vector<char> buf(4096);
  for (;;) {
    auto [ec, n] = co_await pipe.async_read_some(asio::buffer(buf), kNoThrow);
    out.append(buf.data(), n);
    if (ec) break;
    if (out.size() > kMaxHelperOutput) ::kill(pid, SIGKILL);
  }
  deadline.cancel();
  // The pipe ended: the helper exited or is about to. Reap it (at most 2 s more, then kill).
  int status = 0;
  asio::steady_timer poll(ex);
  for (int i = 0;; ++i) {
    pid_t r = ::waitpid(pid, &status, WNOHANG);
    if (r == pid || (r < 0 && errno != EINTR)) break;
    if (i == 100) ::kill(pid, SIGKILL);
    poll.expires_after(20ms);
    co_await poll.async_wait(kNoThrow);
  }
  children_.erase(pid);
  if (*timed_out) co_return absl::DeadlineExceededError(fmt::format("probe helper ran past {} s", limit.count()));
  if (stopping_) co_return absl::CancelledError("the agent is stopping");
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    // A helper that failed says why as {"error": "..."} on stdout.
    Json j = Json::parse(out, nullptr, false);
    if (j.is_object() && j.contains("error") && j["error"].is_string()) {
      co_return absl::InternalError(j["error"].get<std::string>());
    }
    co_return absl::InternalError(fmt::format("probe helper failed ({}); see the agent's log",
                                              WIFEXITED(status) ? fmt::format("exit {}", WEXITSTATUS(status))
                                                                : fmt::format("signal {}", WTERMSIG(status))));
  }
  co_return out;
}

void ProbeService::KillAll() {
  stopping_ = true;
  for (pid_t pid : children_) ::kill(pid, SIGKILL);
}

}  // namespace gfrep::transfer::internal
