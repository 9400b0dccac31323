// gfcatalogd: the shared catalog of a gfrep federation (RocksDB or PostgreSQL, + gRPC), with
// the planner, the repairer, the policy engine and the dashboard (replica/daemon/catalogd.h
// is the daemon; this main parses flags, guards gRPC's listener, handles signals and waits).
//   gfcatalogd --db DIR|postgresql://... --listen HOST:PORT [--tls-cert PEM --tls-key PEM]
// Prints "listening on HOST:PORT" once bound; stops cleanly on SIGINT/SIGTERM; SIGHUP
// stores the --policies file again.
#include <csignal>
#include <cstdio>
#include <cstdlib>

#include "replica/core/heap.h"
#include "replica/daemon/catalogd.h"
#include "tools/internal/accept_guard.h"
#include "tools/internal/catalogd_flags.h"
#include "tools/internal/cli.h"
#include "tools/internal/listener_watchdog.h"

int main(int argc, char** argv) {
  using namespace gfrep;
  constexpr const char* kProgram = "gfcatalogd";
  CLI::App app{"gfcatalogd: the gfrep catalog service (namespace, replicas, topology, tasks)"};
  tools::CommonFlags common;
  tools::AddCommonFlags(app, common);
  tools::AddLogFileFlags(app, common);
  tools::CatalogdFlags flags;
  tools::AddCatalogdFlags(app, flags);
  CLI11_PARSE(app, argc, argv);
  absl::StatusOr<std::shared_ptr<spdlog::logger>> made_log =
      tools::MakeLoggerOrError(kProgram, common);
  if (!made_log.ok()) return tools::Fail(kProgram, std::string(made_log.status().message()), 2);
  std::shared_ptr<spdlog::logger> log = *made_log;
  // Large blocks in their own mappings, returned when freed (replica/core/heap.h).
  if (!replica::KeepLargeBlocksOutOfTheArenas()) {
    log->warn("the allocator refused a fixed mmap threshold; RSS may keep bursts' peaks");
  }
  absl::StatusOr<replica::daemon::CatalogdOptions> options = tools::CatalogdOptionsOf(flags, log);
  if (!options.ok()) return tools::Fail(kProgram, options.status().ToString(), 2);
  // gRPC's connections closed at accept by the guard below, on /metrics.
  options->extra_metrics = [](replica::MetricsText& m) {
    m.Counter("gfrep_catalog_connections_shed_total",
              "gRPC connections closed at accept to keep --fd-reserve file descriptors free",
              static_cast<double>(tools::GetAcceptGuardCounters().shed));
  };

  // Signals are taken synchronously by sigwait below; block them before any thread starts.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGHUP);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  // Each client connection is a file descriptor: the usual soft limit of 1024 would let a
  // thousand idle connections lock everyone else out.
  if (absl::Status s = tools::RaiseOpenFileLimit(1u << 20, *log); !s.ok() && absl::IsInternal(s)) {
    log->warn("{}", s.ToString());
  }
  // Before gRPC accepts its first connection: connections that would leave fewer than
  // --fd-reserve descriptors are closed at accept (tools/internal/accept_guard.h).
  if (!flags.test_no_accept_guard) {
    tools::InstallAcceptGuard(flags.fd_reserve);
    if (!tools::AcceptGuardInterposed()) {
      log->error(
          "the accept guard is not in effect (accept4 not exported by this binary): running "
          "out of descriptors may stop the gRPC listener until a restart");
    }
  }
  absl::StatusOr<std::unique_ptr<replica::daemon::Catalogd>> started =
      replica::daemon::Catalogd::Start(std::move(*options));
  if (!started.ok()) return tools::Fail(kProgram, started.status().ToString());
  replica::daemon::Catalogd& daemon = **started;
  std::printf("listening on %s\n", daemon.address().c_str());
  if (!daemon.http_address().empty())
    std::printf("dashboard on http://%s/\n", daemon.http_address().c_str());
  std::fflush(stdout);

  // The net under the accept guard: a listener that stopped accepting anyway ends the
  // process, for its supervisor to start it again (tools/internal/listener_watchdog.h). Its
  // tick also reports what the guard shed, at most every 10 s.
  tools::ListenerWatchdogOptions wopt;
  wopt.port = daemon.port();
  wopt.stall =
      std::chrono::milliseconds(static_cast<std::int64_t>(flags.listener_watchdog_s * 1000));
  wopt.accept_calls = [](int fd) { return tools::AcceptCallsOn(fd); };
  wopt.on_dead = [log](const std::string& what) {
    log->critical("the gRPC listener stopped accepting: {}; exiting with status {} to be restarted",
                  what, tools::kListenerDeadExitStatus);
    log->flush();
    // Nothing to shut down gracefully: gRPC's shutdown would wait for the dead listener, and
    // every acknowledged write is already durable (README "What is guaranteed").
    std::_Exit(tools::kListenerDeadExitStatus);
  };
  wopt.on_tick = [log, fd_reserve = flags.fd_reserve, reported = tools::AcceptGuardCounters{},
                  at = std::chrono::steady_clock::time_point{}]() mutable {
    const auto now = std::chrono::steady_clock::now();
    if (now - at < std::chrono::seconds(10)) return;
    const tools::AcceptGuardCounters c = tools::GetAcceptGuardCounters();
    if (c.shed != reported.shed || c.dropped != reported.dropped) {
      log->warn(
          "gRPC connections closed at accept to keep {} descriptors free: {} (+{} since the "
          "last report); {} that failed while queued skipped",
          fd_reserve, c.shed, c.shed - reported.shed, c.dropped);
      reported = c;
      at = now;
    }
  };
  absl::StatusOr<std::unique_ptr<tools::ListenerWatchdog>> watchdog =
      tools::ListenerWatchdog::Start(wopt);
  if (!watchdog.ok()) log->error("no listener watchdog: {}", watchdog.status().ToString());

  int sig = 0;
  for (;;) {
    if (flags.shared) {
      // Signals, and a look at the leadership every 500 ms.
      const timespec tick{0, 500'000'000};
      sig = sigtimedwait(&signals, nullptr, &tick);
      if (sig < 0) {
        if (absl::Status s = daemon.CheckLeadership(); !s.ok())
          log->error("starting the planner: {}", s.ToString());
        continue;
      }
    } else {
      sigwait(&signals, &sig);
    }
    if (sig != SIGHUP) break;
    if (flags.policies.empty()) {
      log->info("SIGHUP: no --policies file to reload");
      continue;
    }
    absl::StatusOr<std::string> text = replica::daemon::ReadPolicyFile(flags.policies);
    absl::StatusOr<catalog::PolicyDocument> put =
        text.ok() ? daemon.PutPolicies(*text, flags.policies) : text.status();
    if (!put.ok()) {
      log->error("SIGHUP: {} refused, the rules in force stay: {}", flags.policies,
                 put.status().ToString());
      continue;
    }
    log->info("SIGHUP: policies reloaded from {} (version {})", flags.policies, put->version);
  }
  log->info("signal {}: shutting down", sig);
  if (watchdog.ok()) watchdog->reset();
  daemon.Stop();
  return 0;
}
