// SiteAgent (site_agent.h): what the agent does for the integrity of its replicas: reporting a
// copy's bad source, and the stat checks and checksum scrub of its own spool
// (replica_check.h).

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "replica/agent/replica_check.h"
#include "replica/agent/site_agent.h"

namespace gfrep::replica::agent {

void SiteAgent::ReportBadSource(const catalog::Task& task, const std::string& note) {
  catalog::ReplicaTransition t = MarkBad(task.inode, task.spec.src_node, task.generation,
                                         catalog::ReplicaState::kCorrupt, note);
  absl::StatusOr<std::vector<absl::Status>> r = options_.catalog.replicas->TransitionReplicas({t});
  absl::Status s = r.ok() ? (r->empty() ? absl::InternalError("no result") : r->front()) : r.status();
  if (s.ok()) {
    log_->warn("task={} source replica of {} on {} reported corrupt: {}", task.id, task.spec.path,
               task.spec.src_node, note);
    absl::MutexLock lock(&mu_);
    stats_.replicas_corrupt += 1;
  } else {
    log_->warn("task={} source replica on {} is bad ({}); report: {}", task.id,
               task.spec.src_node, note, s.ToString());
  }
}

void SiteAgent::CheckLoop() {
  // Scrub reads must not slow the copies or the readers: the idle I/O class for this thread.
  constexpr int kIoprioClassIdle = 3;
  constexpr int kIoprioClassShift = 13;
  constexpr int kIoprioWhoProcess = 1;
  if (::syscall(SYS_ioprio_set, kIoprioWhoProcess, 0, kIoprioClassIdle << kIoprioClassShift) != 0) {
    log_->debug("ioprio_set(idle): {}", std::strerror(errno));
  }
  ReplicaCheckerOptions o;
  o.catalog = options_.catalog;
  o.node = options_.node;
  o.spool = options_.spool;
  o.scrub_rate_bytes = options_.scrub_rate_bytes;
  o.scrub_period = options_.scrub_period;
  o.logger = log_;
  auto next_stat = std::chrono::steady_clock::now();
  auto stat_due = [&] {
    return options_.check_interval.count() > 0 && std::chrono::steady_clock::now() >= next_stat;
  };
  o.stopping = [this] { return stop_.load(); };
  ReplicaChecker checker(o);
  auto add = [&](const CheckSummary& s) {
    absl::MutexLock lock(&mu_);
    stats_.replicas_checked += s.checked;
    stats_.replicas_lost += s.lost;
    stats_.replicas_corrupt += s.corrupt;
    stats_.scrub_bytes += s.bytes_read;
  };
  while (!stop_) {
    if (stat_due()) {
      next_stat = std::chrono::steady_clock::now() + options_.check_interval;
      absl::StatusOr<CheckSummary> s = checker.StatPass();
      if (!s.ok()) {
        log_->warn("replica check: {}", s.status().ToString());
      } else {
        add(*s);
        if (s->lost + s->corrupt > 0) {
          log_->warn("replica check: {} checked, {} lost, {} corrupt ({} reported)", s->checked,
                     s->lost, s->corrupt, s->reported);
        }
      }
    }
    bool scrubbed_all = true;
    if (options_.scrub_rate_bytes > 0 && !stop_) {
      // Ends before its next replica once the next stat check is due; the next pass starts
      // over (replicas verified meanwhile are skipped).
      absl::StatusOr<CheckSummary> s = checker.ScrubPass(
          false, options_.check_interval.count() > 0 ? next_stat
                                                     : std::chrono::steady_clock::time_point::max());
      if (!s.ok()) {
        log_->warn("scrub: {}", s.status().ToString());
      } else {
        add(*s);
        scrubbed_all = !s->partial;
        if (s->checked > 0) {
          log_->info("scrub: {} replicas read ({} bytes), {} good, {} lost, {} corrupt", s->checked,
                     s->bytes_read, s->good, s->lost, s->corrupt);
        }
      }
    }
    if (!scrubbed_all) continue;
    // Nothing left to scrub: sleep until the next stat check (without stat checks, a minute),
    // then the scrub looks again for replicas whose verification has aged. Each look lists the
    // node's records from the catalog: not more often than the stat check does.
    const auto until = options_.check_interval.count() > 0
                           ? next_stat
                           : std::chrono::steady_clock::now() + std::chrono::minutes(1);
    absl::MutexLock lock(&mu_);
    const absl::Time deadline = DeadlineOf(until);
    while (!stop_ && !check_wake_.WaitWithDeadline(&mu_, deadline)) {
    }
  }
}

}  // namespace gfrep::replica::agent
