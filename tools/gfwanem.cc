// gfwanem: userspace WAN link emulator between two network namespaces (TUN devices).
// See netprobe/README.md. Example (namespaces must exist):
//   gfwanem --ns-a gfrep-jp-rt --ns-b gfrep-us-rt --delay 100ms --rate 1G --loss 1e-5

#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <string>

#include "netprobe/topology.h"
#include "netprobe/wan_emulator.h"
#include "tools/internal/cli.h"

namespace {

using gfrep::tools::Fail;
constexpr std::string_view kProgram = "gfwanem";

struct Flags {
  std::string delay = "0ms", rate = "1G", queue = "0", loss = "0";
  std::string delay_ba, rate_ba, queue_ba, loss_ba;
  std::string stats_file, pidfile, log_file;
  bool daemon = false;
};

absl::Status FillDirection(const std::string& delay, const std::string& rate,
                           const std::string& queue, const std::string& loss,
                           gfrep::netprobe::DirectionOptions& out) {
  auto d = gfrep::netprobe::ParseDuration(delay);
  if (!d.ok()) return d.status();
  out.delay = *d;
  auto r = gfrep::netprobe::ParseBitRate(rate);
  if (!r.ok()) return r.status();
  out.rate_bps = *r;
  auto q = gfrep::netprobe::ParseByteSize(queue);
  if (!q.ok()) return q.status();
  out.queue_bytes = *q;
  try {
    std::size_t used = 0;
    out.loss = std::stod(loss, &used);
    if (used != loss.size()) throw std::invalid_argument(loss);
  } catch (const std::exception&) {
    return absl::InvalidArgumentError("bad loss '" + loss + "'");
  }
  return gfrep::netprobe::Validate(out);
}

absl::Status WriteFileAtomically(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << text << '\n';
    if (!out) return absl::InternalError("cannot write " + tmp);
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    return absl::InternalError("cannot rename " + tmp);
  }
  return absl::OkStatus();
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "Userspace WAN link emulator: TUN devices in two network namespaces, one-way delay,\n"
      "bottleneck rate, drop-tail queue and random loss per direction. Needs root."};
  gfrep::tools::CommonFlags common;
  gfrep::tools::AddCommonFlags(app, common);
  gfrep::netprobe::EmulatorOptions options;
  Flags flags;
  app.add_option("--ns-a", options.netns_a, "namespace of side A (default: ours)");
  app.add_option("--ns-b", options.netns_b, "namespace of side B (default: ours)");
  app.add_option("--dev-a", options.device_a, "TUN device name on side A")->capture_default_str();
  app.add_option("--dev-b", options.device_b, "TUN device name on side B")->capture_default_str();
  app.add_option("--mtu", options.mtu, "MTU of both devices")->capture_default_str();
  app.add_option("--delay", flags.delay, "one-way delay, e.g. 100ms")->capture_default_str();
  app.add_option("--rate", flags.rate, "bottleneck bit/s, e.g. 622M (0 = unlimited)")
      ->capture_default_str();
  app.add_option("--queue", flags.queue, "drop-tail queue bytes, e.g. 8M (0 = one BDP)")
      ->capture_default_str();
  app.add_option("--loss", flags.loss, "random loss probability, e.g. 1e-5")
      ->capture_default_str();
  app.add_option("--delay-ba", flags.delay_ba, "B->A delay (default: --delay)");
  app.add_option("--rate-ba", flags.rate_ba, "B->A rate (default: --rate)");
  app.add_option("--queue-ba", flags.queue_ba, "B->A queue (default: --queue)");
  app.add_option("--loss-ba", flags.loss_ba, "B->A loss (default: --loss)");
  app.add_option("--seed", options.seed, "loss RNG seed")->capture_default_str();
  app.add_option("--stats-file", flags.stats_file,
                 "write counters as JSON here on SIGUSR1 and at exit (default: stdout)");
  app.add_option("--pidfile", flags.pidfile, "write our pid here");
  app.add_flag("--daemon", flags.daemon,
               "detach once both devices exist (exit 0 means the link is ready)");
  app.add_option("--log-file", flags.log_file, "with --daemon: log here (default /dev/null)");
  CLI11_PARSE(app, argc, argv);
  options.logger = gfrep::tools::MakeLogger(std::string(kProgram), common);

  if (absl::Status s = FillDirection(flags.delay, flags.rate, flags.queue, flags.loss,
                                     options.a_to_b);
      !s.ok()) {
    return Fail(kProgram, std::string(s.message()));
  }
  if (absl::Status s = FillDirection(
          flags.delay_ba.empty() ? flags.delay : flags.delay_ba,
          flags.rate_ba.empty() ? flags.rate : flags.rate_ba,
          flags.queue_ba.empty() ? flags.queue : flags.queue_ba,
          flags.loss_ba.empty() ? flags.loss : flags.loss_ba, options.b_to_a);
      !s.ok()) {
    return Fail(kProgram, "b->a: " + std::string(s.message()));
  }
  auto emulator = gfrep::netprobe::WanEmulator::Create(options);
  if (!emulator.ok()) return Fail(kProgram, emulator.status().ToString());
  // Block the signals Run() takes through its signalfd before the pid file says we exist:
  // a SIGUSR1 (gftopo stats) or SIGTERM arriving before Run() would otherwise take the
  // default action and kill us without a stats report. They stay pending until Run().
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGUSR1);
  ::pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  if (flags.daemon) {
    int ready[2];
    if (::pipe(ready) != 0) return Fail(kProgram, "pipe failed");
    const pid_t child = ::fork();
    if (child < 0) return Fail(kProgram, "fork failed");
    if (child > 0) {
      // The parent exits once the child has written its pid file: the link is ready.
      ::close(ready[1]);
      char byte = 0;
      const bool ok = ::read(ready[0], &byte, 1) == 1;
      return ok ? 0 : Fail(kProgram, "daemon failed to start");
    }
    ::close(ready[0]);
    ::setsid();
    const std::string log = flags.log_file.empty() ? "/dev/null" : flags.log_file;
    const int out = ::open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    const int in = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (out < 0 || in < 0) return Fail(kProgram, "cannot open " + log);
    ::dup2(in, 0);
    ::dup2(out, 1);
    ::dup2(out, 2);
    if (!flags.pidfile.empty()) {
      if (absl::Status s = WriteFileAtomically(flags.pidfile, std::to_string(::getpid()));
          !s.ok()) {
        return Fail(kProgram, std::string(s.message()));
      }
    }
    (void)!::write(ready[1], "r", 1);  // ignored: the parent reports a failure itself
    ::close(ready[1]);
  } else if (!flags.pidfile.empty()) {
    if (absl::Status s = WriteFileAtomically(flags.pidfile, std::to_string(::getpid())); !s.ok()) {
      return Fail(kProgram, std::string(s.message()));
    }
  }

  std::uint64_t generation = 0;
  auto report = [&](const gfrep::netprobe::EmulatorStats& stats) {
    const std::string json = gfrep::netprobe::StatsToJson(stats, ++generation);
    if (flags.stats_file.empty()) {
      std::printf("%s\n", json.c_str());
      std::fflush(stdout);
    } else if (absl::Status s = WriteFileAtomically(flags.stats_file, json); !s.ok()) {
      options.logger->error("stats: {}", std::string(s.message()));
    }
  };
  if (!flags.daemon) {
    std::printf("ready\n");
    std::fflush(stdout);
  }
  absl::Status status = (*emulator)->Run(report);
  report((*emulator)->stats());
  if (!status.ok()) return Fail(kProgram, status.ToString());
  return 0;
}
