// gfsited: a site agent. Serves the files of its spool directory to authenticated peers,
// receives files into it, and performs third-party pulls from other agents; with --site,
// --node and --catalog it joins a federation (replica/daemon/sited.h is the daemon; this main
// parses flags, handles signals and waits).
//   gfsited --listen 127.0.0.1:0 --spool /data/spool

#include <signal.h>
#include <unistd.h>

#include <csignal>
#include <cstdio>
#include <thread>

#include "replica/core/heap.h"
#include "replica/daemon/sited.h"
#include "tools/internal/cli.h"
#include "tools/internal/sited_flags.h"

namespace {
std::string Msg(const absl::Status& s) { return std::string(s.message()); }
}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "gfsited: gfrep site agent (serves and receives striped transfers for a spool directory)"};
  gfrep::tools::CommonFlags common;
  gfrep::tools::AddCommonFlags(app, common);
  gfrep::tools::AddLogFileFlags(app, common);
  gfrep::tools::SitedFlags flags;
  gfrep::tools::AddSitedFlags(app, flags);
  CLI11_PARSE(app, argc, argv);
  absl::StatusOr<std::shared_ptr<spdlog::logger>> log =
      gfrep::tools::MakeLoggerOrError("gfsited", common);
  if (!log.ok()) return gfrep::tools::Fail("gfsited", Msg(log.status()), 2);
  // Copies' stripe-unit buffers in their own mappings, so a burst's memory goes back to the
  // system (replica/core/heap.h).
  if (!gfrep::replica::KeepLargeBlocksOutOfTheArenas()) {
    (*log)->warn("the allocator refused a fixed mmap threshold; RSS may keep bursts' peaks");
  }
  absl::StatusOr<gfrep::replica::daemon::SitedOptions> options =
      gfrep::tools::SitedOptionsOf(flags, *log);
  if (!options.ok()) return gfrep::tools::Fail("gfsited", Msg(options.status()), 2);

  // Every connection served and every data stream of a copy is a file descriptor: a soft
  // limit of 1024 (the usual default) would make accept fail long before --max-connections.
  const int max_connections = options->agent.max_connections;
  if (absl::Status s = gfrep::tools::RaiseOpenFileLimit(
          static_cast<std::uint64_t>(max_connections) + 4096, **log);
      !s.ok()) {
    (*log)->warn("{}: --max-connections {} may not all be served", s.ToString(), max_connections);
  }
  // Signals are taken by a dedicated thread (sigwait) so the daemon stops cleanly.
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGHUP);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  std::signal(SIGPIPE, SIG_IGN);

  auto sited = gfrep::replica::daemon::Sited::Create(std::move(*options));
  if (!sited.ok()) return gfrep::tools::Fail("gfsited", Msg(sited.status()));
  gfrep::replica::daemon::Sited& daemon = **sited;
  std::printf("listening on %s\n", daemon.bound().ToString().c_str());
  std::fflush(stdout);

  // Started before the site agent registers: registration retries while the catalog is
  // unreachable, and a signal must stop that too.
  std::thread waiter([&set, &daemon, &flags, log = *log] {
    int sig = 0;
    // SIGHUP: read the TLS files again (certificate rotation without a restart).
    while (sigwait(&set, &sig) == 0 && sig == SIGHUP) {
      if (absl::Status r = daemon.ReloadTls(); r.ok()) {
        log->info("SIGHUP: TLS certificate, key and CA reloaded; new sessions use them");
      } else {
        log->error("SIGHUP: TLS files not reloaded, the ones in force stay: {}", r.ToString());
      }
      if (!daemon.catalog_tls()) continue;
      // The catalog connection's credentials, read again (all three or none changes).
      absl::StatusOr<std::vector<std::string>> pems = gfrep::tools::ReadCatalogPems(flags);
      absl::Status c = pems.ok()
                           ? daemon.ReloadCatalogCredentials((*pems)[0], (*pems)[1], (*pems)[2])
                           : pems.status();
      if (!c.ok()) {
        log->error(
            "SIGHUP: the catalog connection's TLS files not reloaded, the ones in force stay: {}",
            c.ToString());
      } else {
        log->info("SIGHUP: the catalog connection's TLS files reloaded; new calls use them");
      }
    }
    log->info("signal {}: stopping", sig);
    daemon.Stop();
  });
  if (absl::Status s = daemon.Start(); !s.ok() && !absl::IsCancelled(s)) {
    ::kill(::getpid(), SIGTERM);  // wakes the waiter, which stops the daemon
    waiter.join();
    return gfrep::tools::Fail("gfsited", Msg(s));
  }
  if (!daemon.http_address().empty()) {
    std::printf("metrics on http://%s/metrics\n", daemon.http_address().c_str());
    std::fflush(stdout);
  }
  daemon.Run();
  // Run() only returns after Stop(), i.e. after the waiter fired.
  waiter.join();
  return 0;
}
