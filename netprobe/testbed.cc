#include "netprobe/testbed.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <signal.h>
#include <spdlog/spdlog.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <thread>
#include <vector>

namespace gfrep::netprobe {
namespace {

namespace fs = std::filesystem;

constexpr int kTableBase = 100;
constexpr auto kPollInterval = std::chrono::milliseconds(10);

struct Output {
  int exit_code = -1;
  std::string text;  // stdout + stderr
};

// Runs argv (argv[0] looked up in PATH) and waits; stdout and stderr are captured.
absl::StatusOr<Output> Spawn(const std::vector<std::string>& argv) {
  int pipe_fds[2];
  if (::pipe2(pipe_fds, O_CLOEXEC) != 0) return absl::InternalError("pipe2 failed");
  // Built before fork: the child of a threaded process may only make async-signal-safe
  // calls (no allocation) until exec.
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  const pid_t pid = ::fork();
  if (pid < 0) {
    ::close(pipe_fds[0]);
    ::close(pipe_fds[1]);
    return absl::InternalError("fork failed");
  }
  if (pid == 0) {
    ::dup2(pipe_fds[1], 1);
    ::dup2(pipe_fds[1], 2);
    const int devnull = ::open("/dev/null", O_RDONLY);
    if (devnull >= 0) ::dup2(devnull, 0);
    ::execvp(args[0], args.data());
    ::_exit(127);
  }
  ::close(pipe_fds[1]);
  Output out;
  char buf[4096];
  for (;;) {
    const ssize_t n = ::read(pipe_fds[0], buf, sizeof buf);
    if (n > 0) {
      if (out.text.size() < 65536) out.text.append(buf, static_cast<std::size_t>(n));
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    break;
  }
  ::close(pipe_fds[0]);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  out.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  while (!out.text.empty() && out.text.back() == '\n') out.text.pop_back();
  return out;
}

std::string Join(const std::vector<std::string>& argv) {
  std::string s;
  for (const std::string& a : argv) {
    if (!s.empty()) s += ' ';
    s += a;
  }
  return s;
}

// Runs a command that must succeed.
absl::Status Run(const std::vector<std::string>& argv, spdlog::logger& log) {
  log.debug("run {}", Join(argv));
  absl::StatusOr<Output> out = Spawn(argv);
  if (!out.ok()) return out.status();
  if (out->exit_code != 0) {
    return absl::InternalError(fmt::format("'{}' failed ({}): {}", Join(argv), out->exit_code,
                                           out->text));
  }
  return absl::OkStatus();
}

bool NamespaceExists(const std::string& ns) { return fs::exists("/run/netns/" + ns); }

std::vector<std::string> AllNamespaces(const Topology& t) {
  std::vector<std::string> names;
  for (const SiteSpec& site : t.sites) {
    names.push_back(RouterNamespace(site.name));
    for (int i = 1; i <= site.nodes; ++i) names.push_back(NodeNamespace(site.name, i));
  }
  return names;
}

std::string SiteSubnet(int site_index) { return fmt::format("10.99.{}.0/24", site_index); }

fs::path TopologyDir(const Topology& t, const TestbedOptions& o) { return o.state_dir / t.name; }
fs::path PidFile(const Topology& t, const TestbedOptions& o, const RouteSpec& r) {
  return TopologyDir(t, o) / (r.name + ".pid");
}
fs::path StatsFile(const Topology& t, const TestbedOptions& o, const RouteSpec& r) {
  return TopologyDir(t, o) / (r.name + ".stats.json");
}
fs::path HostSysctlFile(const TestbedOptions& o) { return o.state_dir / "host-sysctl.saved"; }

// True while `pid` exists and is not a zombie (a daemonised emulator is reaped by
// whoever adopted it, maybe late).
bool ProcessRunning(pid_t pid) {
  std::ifstream stat(fmt::format("/proc/{}/stat", pid));
  std::string line;
  if (!std::getline(stat, line)) return false;
  const std::size_t paren = line.rfind(')');
  return paren != std::string::npos && paren + 2 < line.size() && line[paren + 2] != 'Z' &&
         line[paren + 2] != 'X';
}

// The pid in `pidfile` if that process is alive and is a gfwanem; 0 otherwise.
pid_t LiveEmulator(const fs::path& pidfile) {
  std::ifstream in(pidfile);
  long pid = 0;
  if (!(in >> pid) || pid <= 1 || pid > 1 << 22) return 0;
  std::ifstream comm(fmt::format("/proc/{}/comm", pid));
  std::string name;
  if (!(comm >> name) || name != "gfwanem") return 0;
  return ProcessRunning(static_cast<pid_t>(pid)) ? static_cast<pid_t>(pid) : 0;
}

absl::StatusOr<std::uint64_t> ReadProcNumber(const std::string& path) {
  std::ifstream in(path);
  std::uint64_t value = 0;
  if (!(in >> value)) return absl::InternalError(fmt::format("cannot read {}", path));
  return value;
}

absl::Status WriteProc(const std::string& path, std::uint64_t value) {
  std::ofstream out(path);
  out << value << '\n';
  out.close();
  if (!out) return absl::InternalError(fmt::format("cannot write {} to {}", value, path));
  return absl::OkStatus();
}

const char* const kHostSysctls[] = {"/proc/sys/net/core/rmem_max", "/proc/sys/net/core/wmem_max"};

// Saves the host's socket-buffer limits once (the first topology up) and raises them.
absl::Status RaiseHostBuffers(std::uint64_t bytes, const TestbedOptions& o, spdlog::logger& log) {
  const fs::path saved = HostSysctlFile(o);
  if (!fs::exists(saved)) {
    std::ostringstream text;
    for (const char* path : kHostSysctls) {
      absl::StatusOr<std::uint64_t> value = ReadProcNumber(path);
      if (!value.ok()) return value.status();
      text << path << ' ' << *value << '\n';
    }
    const fs::path tmp = saved.string() + ".tmp";
    std::ofstream(tmp) << text.str();
    fs::rename(tmp, saved);
  }
  for (const char* path : kHostSysctls) {
    absl::StatusOr<std::uint64_t> value = ReadProcNumber(path);
    if (!value.ok()) return value.status();
    if (*value < bytes) {
      log.info("raising {} from {} to {}", path, *value, bytes);
      if (absl::Status s = WriteProc(path, bytes); !s.ok()) return s;
    }
  }
  return absl::OkStatus();
}

// Restores the saved host limits when no topology remains up.
absl::Status RestoreHostBuffers(const TestbedOptions& o, spdlog::logger& log) {
  const fs::path saved = HostSysctlFile(o);
  if (!fs::exists(saved)) return absl::OkStatus();
  std::error_code ec;
  for (const fs::directory_entry& entry : fs::directory_iterator(o.state_dir, ec)) {
    if (entry.is_directory()) {
      log.info("leaving host socket-buffer limits raised: topology {} is still up",
               entry.path().filename().string());
      return absl::OkStatus();
    }
  }
  std::ifstream in(saved);
  std::string path;
  std::uint64_t value = 0;
  while (in >> path >> value) {
    if (path != kHostSysctls[0] && path != kHostSysctls[1]) {
      return absl::DataLossError(fmt::format("unexpected entry '{}' in {}", path, saved.string()));
    }
    log.info("restoring {} to {}", path, value);
    if (absl::Status s = WriteProc(path, value); !s.ok()) return s;
  }
  fs::remove(saved, ec);
  return absl::OkStatus();
}

absl::Status BuildSite(const Topology& t, int s, spdlog::logger& log) {
  const SiteSpec& site = t.sites[s - 1];
  const std::string router = RouterNamespace(site.name);
  const std::string mtu = std::to_string(t.mtu);
  const std::string buffer = std::to_string(t.buffer_bytes);
  std::vector<std::vector<std::string>> commands = {
      {"ip", "netns", "add", router},
      {"ip", "-n", router, "link", "set", "lo", "up"},
      {"ip", "netns", "exec", router, "sysctl", "-q", "-w", "net.ipv4.ip_forward=1",
       "net.ipv4.conf.all.rp_filter=0", "net.ipv4.conf.default.rp_filter=0"},
      {"ip", "-n", router, "link", "add", "br0", "type", "bridge"},
  };
  for (int i = 1; i <= site.nodes; ++i) {
    const std::string node = NodeNamespace(site.name, i);
    const std::string port = fmt::format("n{}", i);
    const std::string address = fmt::format("10.99.{}.{}/24", s, 10 + i);
    std::vector<std::vector<std::string>> node_commands = {
        {"ip", "netns", "add", node},
        {"ip", "-n", node, "link", "set", "lo", "up"},
        {"ip", "-n", router, "link", "add", port, "type", "veth", "peer", "name", "eth0", "netns",
         node},
        {"ip", "-n", router, "link", "set", port, "mtu", mtu, "master", "br0", "up"},
        {"ip", "-n", node, "link", "set", "eth0", "mtu", mtu, "up"},
        {"ip", "-n", node, "addr", "add", address, "dev", "eth0"},
        {"ip", "-n", node, "route", "add", "default", "via", fmt::format("10.99.{}.1", s)},
        {"ip", "netns", "exec", node, "sysctl", "-q", "-w",
         fmt::format("net.ipv4.tcp_rmem=4096 131072 {}", buffer),
         fmt::format("net.ipv4.tcp_wmem=4096 16384 {}", buffer), "net.ipv4.tcp_no_metrics_save=1"},
    };
    if (!t.congestion_control.empty()) {
      node_commands.push_back(
          {"ip", "netns", "exec", node, "sysctl", "-q", "-w",
           fmt::format("net.ipv4.tcp_congestion_control={}", t.congestion_control)});
    }
    commands.insert(commands.end(), node_commands.begin(), node_commands.end());
  }
  commands.push_back({"ip", "-n", router, "link", "set", "br0", "mtu", mtu, "up"});
  commands.push_back(
      {"ip", "-n", router, "addr", "add", fmt::format("10.99.{}.1/24", s), "dev", "br0"});
  for (const auto& argv : commands) {
    if (absl::Status s = Run(argv, log); !s.ok()) return s;
  }
  return absl::OkStatus();
}

absl::Status BuildRoute(const Topology& t, int r, const TestbedOptions& o, spdlog::logger& log,
                        std::set<std::pair<int, int>>& default_pairs) {
  const RouteSpec& route = t.routes[r - 1];
  const int a = SiteIndex(t, route.site_a);
  const int b = SiteIndex(t, route.site_b);
  const std::string ns_a = RouterNamespace(route.site_a);
  const std::string ns_b = RouterNamespace(route.site_b);
  const std::string dev = RouteDevice(route.name);
  const auto delay_us = route.rtt.count() / 2;
  std::vector<std::string> emulator = {
      o.emulator.string(), "--daemon",
      "--ns-a", ns_a, "--ns-b", ns_b, "--dev-a", dev, "--dev-b", dev,
      "--delay", fmt::format("{}us", delay_us),
      "--rate", std::to_string(route.rate_bps),
      "--loss", fmt::format("{}", route.loss),
      "--mtu", std::to_string(t.mtu),
      "--seed", std::to_string(r),
      "--pidfile", PidFile(t, o, route).string(),
      "--stats-file", StatsFile(t, o, route).string(),
      "--log-file", (TopologyDir(t, o) / (route.name + ".log")).string(),
      "--log-level", "info"};
  if (route.queue_bytes != 0) {
    emulator.insert(emulator.end(), {"--queue", std::to_string(route.queue_bytes)});
  }
  if (absl::Status s = Run(emulator, log); !s.ok()) return s;
  const std::string table = std::to_string(kTableBase + r);
  const std::string addr_a = fmt::format("10.98.{}.1", r);
  const std::string addr_b = fmt::format("10.98.{}.2", r);
  std::vector<std::vector<std::string>> commands = {
      {"ip", "-n", ns_a, "addr", "add", addr_a, "peer", addr_b, "dev", dev},
      {"ip", "-n", ns_b, "addr", "add", addr_b, "peer", addr_a, "dev", dev},
      {"ip", "-n", ns_a, "route", "add", SiteSubnet(b), "dev", dev, "table", table},
      {"ip", "-n", ns_b, "route", "add", SiteSubnet(a), "dev", dev, "table", table},
  };
  // The first route listed between two sites carries their traffic by default.
  if (default_pairs.insert({std::min(a, b), std::max(a, b)}).second) {
    commands.push_back({"ip", "-n", ns_a, "route", "add", SiteSubnet(b), "dev", dev});
    commands.push_back({"ip", "-n", ns_b, "route", "add", SiteSubnet(a), "dev", dev});
  }
  for (const auto& argv : commands) {
    if (absl::Status s = Run(argv, log); !s.ok()) return s;
  }
  return absl::OkStatus();
}

absl::Status BuildPins(const Topology& t, spdlog::logger& log) {
  for (const PinSpec& pin : t.pins) {
    absl::StatusOr<NodeInfo> node = FindNode(t, pin.node);
    if (!node.ok()) return node.status();
    const std::vector<std::string> argv = {
        "ip", "-n", RouterNamespace(node->site), "rule", "add", "from", node->address,
        "lookup", std::to_string(kTableBase + RouteIndex(t, pin.route)), "pref", "1000"};
    if (absl::Status s = Run(argv, log); !s.ok()) return s;
  }
  return absl::OkStatus();
}

// kFailedPrecondition if another topology that is up owns one of our namespaces.
absl::Status CheckNoOverlap(const Topology& t, const TestbedOptions& o) {
  const std::vector<std::string> ours = AllNamespaces(t);
  const std::set<std::string> mine(ours.begin(), ours.end());
  std::error_code ec;
  for (const fs::directory_entry& entry : fs::directory_iterator(o.state_dir, ec)) {
    if (!entry.is_directory() || entry.path().filename() == t.name) continue;
    std::ifstream in(entry.path() / "namespaces");
    std::string ns;
    while (in >> ns) {
      if (mine.contains(ns) && NamespaceExists(ns)) {
        return absl::FailedPreconditionError(
            fmt::format("namespace {} belongs to topology {}, which is up: take it down first",
                        ns, entry.path().filename().string()));
      }
    }
  }
  return absl::OkStatus();
}

absl::Status Preconditions() {
  if (::geteuid() != 0) {
    return absl::FailedPreconditionError("needs root (network namespaces, TUN devices)");
  }
  if (!fs::exists("/dev/net/tun")) {
    return absl::FailedPreconditionError("/dev/net/tun is missing (try: modprobe tun)");
  }
  return absl::OkStatus();
}

}  // namespace

TestbedStatus GetTestbedStatus(const Topology& t, const TestbedOptions& o) {
  TestbedStatus status;
  int present = 0;
  int expected = 0;
  std::string& text = status.text;
  text += fmt::format("topology {}\n", t.name);
  for (const std::string& ns : AllNamespaces(t)) {
    ++expected;
    const bool exists = NamespaceExists(ns);
    present += exists ? 1 : 0;
    text += fmt::format("  netns {:<20} {}\n", ns, exists ? "present" : "missing");
  }
  for (const RouteSpec& route : t.routes) {
    ++expected;
    const pid_t pid = LiveEmulator(PidFile(t, o, route));
    present += pid != 0 ? 1 : 0;
    text += fmt::format(
        "  route {:<12} {}<->{} rtt={}us rate={}bit/s loss={} emulator={}\n", route.name,
        route.site_a, route.site_b, route.rtt.count(), route.rate_bps, route.loss,
        pid != 0 ? fmt::format("running pid {}", pid) : std::string("not running"));
  }
  for (const NodeInfo& node : Nodes(t)) {
    text += fmt::format("  node  {:<12} {:<12} netns {}\n", node.name, node.address, node.netns);
  }
  status.up = present == expected;
  status.partial = present > 0 && present < expected;
  text += fmt::format("state: {}", status.up ? "up" : (status.partial ? "partial" : "down"));
  return status;
}

absl::Status TestbedUp(const Topology& t, const TestbedOptions& options) {
  spdlog::logger& log = options.logger ? *options.logger : *spdlog::default_logger();
  if (absl::Status s = Preconditions(); !s.ok()) return s;
  if (absl::Status s = CheckNoOverlap(t, options); !s.ok()) return s;
  TestbedStatus current = GetTestbedStatus(t, options);
  if (current.up) {
    log.info("topology {} is already up", t.name);
    return absl::OkStatus();
  }
  if (current.partial || fs::exists(TopologyDir(t, options))) {
    log.info("topology {} is partly up: tearing it down first", t.name);
    if (absl::Status s = TestbedDown(t, options); !s.ok()) return s;
  }
  auto build = [&]() -> absl::Status {
    std::error_code ec;
    fs::create_directories(TopologyDir(t, options), ec);
    if (ec) {
      return absl::InternalError(
          fmt::format("cannot create {}: {}", TopologyDir(t, options).string(), ec.message()));
    }
    {
      std::ofstream list(TopologyDir(t, options) / "namespaces");
      for (const std::string& ns : AllNamespaces(t)) list << ns << '\n';
    }
    if (absl::Status s = RaiseHostBuffers(t.buffer_bytes, options, log); !s.ok()) return s;
    for (int s = 1; s <= static_cast<int>(t.sites.size()); ++s) {
      if (absl::Status st = BuildSite(t, s, log); !st.ok()) return st;
    }
    std::set<std::pair<int, int>> default_pairs;
    for (int r = 1; r <= static_cast<int>(t.routes.size()); ++r) {
      if (absl::Status st = BuildRoute(t, r, options, log, default_pairs); !st.ok()) return st;
    }
    return BuildPins(t, log);
  };
  if (absl::Status s = build(); !s.ok()) {
    log.error("topology {} up failed, tearing down: {}", t.name, s.ToString());
    (void)TestbedDown(t, options);  // ignored: best-effort cleanup, the first error wins
    return s;
  }
  log.info("topology {} is up", t.name);
  return absl::OkStatus();
}

absl::Status TestbedDown(const Topology& t, const TestbedOptions& options) {
  spdlog::logger& log = options.logger ? *options.logger : *spdlog::default_logger();
  if (absl::Status s = Preconditions(); !s.ok()) return s;
  if (absl::Status s = CheckNoOverlap(t, options); !s.ok()) return s;
  absl::Status first = absl::OkStatus();
  for (const RouteSpec& route : t.routes) {
    const pid_t pid = LiveEmulator(PidFile(t, options, route));
    if (pid == 0) continue;
    ::kill(pid, SIGTERM);
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    while (ProcessRunning(pid) && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(kPollInterval);  // not our child: no wait() possible
    }
    if (ProcessRunning(pid)) {
      log.warn("emulator pid {} ignored SIGTERM: killing", pid);
      ::kill(pid, SIGKILL);
    }
  }
  for (const std::string& ns : AllNamespaces(t)) {
    if (!NamespaceExists(ns)) continue;
    absl::StatusOr<Output> pids = Spawn({"ip", "netns", "pids", ns});
    if (pids.ok() && !pids->text.empty()) {
      log.warn("processes still in {} (not ours to kill): {}", ns, pids->text);
    }
    if (absl::Status s = Run({"ip", "netns", "del", ns}, log); !s.ok() && first.ok()) first = s;
  }
  std::error_code ec;
  fs::remove_all(TopologyDir(t, options), ec);
  if (absl::Status s = RestoreHostBuffers(options, log); !s.ok() && first.ok()) first = s;
  return first;
}

absl::StatusOr<std::string> TestbedStats(const Topology& t, const TestbedOptions& options) {
  nlohmann::json all = nlohmann::json::object();
  for (const RouteSpec& route : t.routes) {
    const pid_t pid = LiveEmulator(PidFile(t, options, route));
    if (pid == 0) {
      return absl::FailedPreconditionError(
          fmt::format("route {}: emulator not running (is topology {} up?)", route.name, t.name));
    }
    const fs::path file = StatsFile(t, options, route);
    auto read_stats = [&]() -> nlohmann::json {
      std::ifstream in(file);
      nlohmann::json j = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
      return j.is_object() ? j : nlohmann::json::object();
    };
    const std::uint64_t before = read_stats().value("generation", std::uint64_t{0});
    ::kill(pid, SIGUSR1);
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    for (;;) {
      nlohmann::json j = read_stats();
      if (j.value("generation", std::uint64_t{0}) > before) {
        all[route.name] = std::move(j);
        break;
      }
      if (std::chrono::steady_clock::now() > deadline) {
        return absl::DeadlineExceededError(
            fmt::format("route {}: emulator pid {} wrote no stats", route.name, pid));
      }
      std::this_thread::sleep_for(kPollInterval);  // the emulator signals only via the file
    }
  }
  return all.dump(2);
}

}  // namespace gfrep::netprobe
