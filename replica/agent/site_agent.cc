#include "replica/agent/site_agent.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <random>
#include <set>

#include "catalog/event_cursor.h"
#include "replica/agent/in_flight.h"
#include "replica/agent/internal/site_agent_copy.h"
#include "replica/agent/internal/spool_keeper.h"
#include "replica/agent/pull_options.h"
#include "replica/core/route_budget.h"
#include "replica/core/spool.h"
#include "transfer/agent.h"
#include "transfer/checksum.h"
#include "transfer/client.h"
#include "transfer/durable_file.h"
#include "transfer/errno_status.h"
#include "transfer/spool_names.h"

namespace gfrep::replica::agent {
namespace {

namespace fs = std::filesystem;

// Where versions before the engine installed replicas itself staged them; only swept now.
constexpr std::string_view kOldStagingDir = ".gfrep-staging";

// "task-<id>" -> id, or nullopt.
std::optional<std::uint64_t> TaskIdOf(const std::string& name) {
  if (name.rfind("task-", 0) != 0) return std::nullopt;
  std::uint64_t id = 0;
  std::string digits = name.substr(5);
  if (digits.empty() || digits.size() > 19) return std::nullopt;
  for (char c : digits) {
    if (c < '0' || c > '9') return std::nullopt;
    id = id * 10 + static_cast<std::uint64_t>(c - '0');
  }
  return id;
}

}  // namespace

std::size_t ClaimAhead(int workers) {
  const std::size_t w = static_cast<std::size_t>(std::max(1, workers));
  return w + std::min<std::size_t>(w, 128);
}

namespace {
// Completer threads: each commits a batch while the other gathers the next (a commit is a
// catalog round trip, across the WAN for a remote catalog).
constexpr int kCompleters = 2;
// Copies an idle agent claims for (ClaimLoop): 128 tasks.
constexpr int kIdleClaimCopies = 64;
}  // namespace

absl::Status Validate(const SiteAgentOptions& o) {
  const catalog::Roles& c = o.catalog;
  if (c.view == nullptr || c.work == nullptr || c.replicas == nullptr || c.sites == nullptr) {
    return absl::InvalidArgumentError(
        "site agent needs a catalog (view, work, replicas and sites)");
  }
  if (absl::Status s = catalog::ValidateName(o.site); !s.ok()) {
    return absl::InvalidArgumentError(fmt::format("site: {}", std::string(s.message())));
  }
  if (absl::Status s = catalog::ValidateName(o.node); !s.ok()) {
    return absl::InvalidArgumentError(fmt::format("node: {}", std::string(s.message())));
  }
  if (absl::StatusOr<transfer::Endpoint> e = transfer::ParseEndpoint(o.address); !e.ok()) {
    return absl::InvalidArgumentError(fmt::format("address: {}", std::string(e.status().message())));
  }
  if (o.spool.empty()) return absl::InvalidArgumentError("site agent needs a spool directory");
  if (o.workers < 1 || o.workers > kMaxWorkers) {
    return absl::InvalidArgumentError(fmt::format("workers must be 1..{}", kMaxWorkers));
  }
  if (o.initial_in_flight < 1) return absl::InvalidArgumentError("initial copies in flight must be >= 1");
  if (o.tune_period.count() < 10) return absl::InvalidArgumentError("tune period must be >= 10 ms");
  if (o.straggler_after.count() < 0 || (o.straggler_after.count() > 0 && o.straggler_after.count() < 100)) {
    return absl::InvalidArgumentError("straggler window must be 0 (none) or >= 100 ms");
  }
  if (o.slow_source_after.count() < 0 ||
      (o.slow_source_after.count() > 0 && o.slow_source_after.count() < 100)) {
    return absl::InvalidArgumentError("slow-source window must be 0 (none) or >= 100 ms");
  }
  if (!(o.straggler_fraction > 0 && o.straggler_fraction < 1)) {
    return absl::InvalidArgumentError("straggler fraction must be between 0 and 1");
  }
  if (o.io_threads < 1 || o.io_threads > 64) return absl::InvalidArgumentError("io threads must be 1..64");
  if (o.lease.count() < 300) return absl::InvalidArgumentError("lease must be >= 300 ms");
  if (o.heartbeat_interval.count() <= 0 || o.poll_interval.count() <= 0 ||
      o.sweep_interval.count() <= 0 || o.gc_interval.count() <= 0 ||
      o.orphan_grace.count() < 0 || o.check_interval.count() < 0 ||
      o.scrub_period.count() < 0) {
    return absl::InvalidArgumentError("intervals must be positive");
  }
  if (absl::Status s = Validate(o.retry); !s.ok()) return s;
  return transfer::Validate(o.transfer);
}

absl::StatusOr<std::unique_ptr<SiteAgent>> SiteAgent::Create(SiteAgentOptions options) {
  if (absl::Status s = Validate(options); !s.ok()) return s;
  return std::unique_ptr<SiteAgent>(new SiteAgent(std::move(options)));
}

SiteAgent::SiteAgent(SiteAgentOptions options)
    : options_(std::move(options)),
      log_(options_.logger ? options_.logger : spdlog::default_logger()),
      durable_dirs_(options_.spool) {
  std::random_device rd;
  owner_ = fmt::format("{}/{}-{:08x}", options_.node, ::getpid(), rd());
  internal::SpoolKeeperOptions k;
  k.catalog = options_.catalog;
  k.node = options_.node;
  k.spool = options_.spool;
  k.orphan_grace = options_.orphan_grace;
  k.stopping = [this] { return stop_.load(); };
  k.logger = log_;
  keeper_ = std::make_unique<internal::SpoolKeeper>(std::move(k));
  in_flight_limit_ = options_.adapt_in_flight
                         ? std::clamp(options_.initial_in_flight, 1, options_.workers)
                         : options_.workers;
  if (options_.adapt_in_flight) {
    InFlightOptions o;
    o.min = 1;
    o.max = options_.workers;
    o.start = options_.initial_in_flight;
    tuner_.emplace(o);
  }
}

int SiteAgent::LimitLocked() const {
  return options_.reuse_sessions && options_.pipeline_files ? 2 * in_flight_limit_
                                                            : in_flight_limit_;
}

void SiteAgent::ShareSessionsLocked() {
  if (!options_.reuse_sessions || !options_.pipeline_files || copy_io_.empty()) return;
  // The copies at once dealt over the threads (3 over 2: 2 and 1), so that the sessions
  // number the copies at once; a thread with none takes no new copies (LaunchLocked).
  const int limit = std::max(1, in_flight_limit_);
  const int threads = static_cast<int>(copy_io_.size());
  for (int i = 0; i < threads; ++i) {
    CopyIo& c = *copy_io_[static_cast<std::size_t>(i)];
    c.session_share = limit / threads + (i < limit % threads ? 1 : 0);
    const std::size_t share = static_cast<std::size_t>(std::max(1, c.session_share));
    boost::asio::post(c.io, [sessions = &c.sessions, share] { sessions->SetPipelining(share); });
  }
}

const catalog::Route* SiteAgent::CachedRouteLocked(const std::string& src_node) const {
  auto n = node_cache_.find(src_node);
  if (n == node_cache_.end()) return nullptr;
  auto r = route_cache_.find(n->second.value.site);
  return r == route_cache_.end() ? nullptr : &r->second.value;
}

int SiteAgent::BurstStartLocked(const std::vector<catalog::Task>& tasks) const {
  if (tasks.empty() || options_.start_in_flight_bytes == 0) return options_.initial_in_flight;
  return BurstStartCopies(CachedRouteLocked(tasks.front().spec.src_node), tasks,
                          options_.start_in_flight_bytes, options_.initial_in_flight,
                          options_.workers);
}

// Probes beyond what the node's part of the route holds with the files now being copied
// overflow its bottleneck: with two nodes per site each probing to 512 copies of 64 KiB, 1 to
// 2 of every 3 runs re-sent thousands of segments (RESULTS.md, 2026-11-30). Never below
// kMinProbeCeiling, because a copy of a file larger than the route's share keeps only its TCP
// window in flight, not its size (8 copies of 512 MiB), and the tuner probes for those.
constexpr int kMinProbeCeiling = 64;

int SiteAgent::ProbeCeilingLocked() {
  if (options_.start_in_flight_bytes == 0) return 0;
  if (started_.copies > 0) {
    const int copies = RouteShareCopies(
        CachedRouteLocked(started_.src_node), options_.start_in_flight_bytes, started_.share_ppm,
        started_.bytes / started_.copies, options_.initial_in_flight, options_.workers);
    probe_ceiling_ = std::max(copies, kMinProbeCeiling);
    started_ = Started{};
  }
  return probe_ceiling_;
}

SiteAgent::~SiteAgent() { Stop(); }

SiteAgentStats SiteAgent::stats() const {
  absl::MutexLock lock(&mu_);
  SiteAgentStats s = stats_;
  s.in_flight_limit = in_flight_limit_;
  s.disk_write_io_size = disk_write_io_size_.load();
  s.disk_flush_interval = disk_flush_interval_.load();
  return s;
}

catalog::Heartbeat SiteAgent::MakeHeartbeat() const {
  catalog::Heartbeat hb;
  hb.node = options_.node;
  struct statvfs vfs {};
  if (::statvfs(options_.spool.c_str(), &vfs) == 0) {
    hb.free_bytes = static_cast<std::uint64_t>(vfs.f_bavail) * vfs.f_frsize;
  }
  double load[1] = {0};
  if (::getloadavg(load, 1) == 1) hb.load = load[0];
  hb.active_transfers = static_cast<std::uint32_t>(active_.load());
  return hb;
}

absl::Status SiteAgent::Register() {
  const catalog::Roles& cat = options_.catalog;
  if (options_.create_site) {
    absl::StatusOr<std::vector<catalog::Site>> sites = cat.view->ListSites();
    if (!sites.ok()) return sites.status();
    bool found = false;
    for (const catalog::Site& s : *sites) found = found || s.name == options_.site;
    if (!found) {
      catalog::Site site;
      site.name = options_.site;
      if (absl::Status s = cat.sites->PutSite(site); !s.ok()) {
        if (!absl::IsPermissionDenied(s)) return s;
        return absl::FailedPreconditionError(fmt::format(
            "site '{}' is not in the catalog, and this node may not add it ({}): an admin adds it "
            "with gfsite add {}",
            options_.site, std::string(s.message()), options_.site));
      }
    }
  }
  catalog::Heartbeat hb = MakeHeartbeat();
  catalog::Node node;
  node.name = options_.node;
  node.site = options_.site;
  node.address = options_.address;
  node.spool = fs::absolute(options_.spool).string();
  struct statvfs vfs {};
  if (::statvfs(options_.spool.c_str(), &vfs) == 0) {
    node.capacity_bytes = static_cast<std::uint64_t>(vfs.f_blocks) * vfs.f_frsize;
  }
  node.free_bytes = hb.free_bytes;
  node.load = hb.load;
  node.active_transfers = hb.active_transfers;
  node.workers = static_cast<std::uint32_t>(options_.workers);
  node.requires_data_tls = options_.requires_data_tls;
  if (absl::Status r = cat.sites->RegisterNode(node); !r.ok()) return r;
  LoadDiskProfile();
  return absl::OkStatus();
}

void SiteAgent::LoadDiskProfile() {
  absl::StatusOr<catalog::Node> self = options_.catalog.view->GetNode(options_.node);
  if (!self.ok()) {
    log_->warn("disk profile not read: {}", self.status().ToString());
    return;
  }
  const catalog::DiskProfile& d = self->disk;
  if (d.write_io_size_bytes != disk_write_io_size_.load() ||
      d.flush_interval_bytes != disk_flush_interval_.load()) {
    if (d.write_io_size_bytes > 0) {
      log_->info("disk profile of {} ({}): writes of {} bytes, journal flush every {} bytes{}",
                 options_.node, d.dir, d.write_io_size_bytes, d.flush_interval_bytes,
                 d.direct ? " (O_DIRECT recommended; the engine writes buffered)" : "");
    }
    disk_write_io_size_ = d.write_io_size_bytes;
    disk_flush_interval_ = d.flush_interval_bytes;
  }
}

void SiteAgent::CleanTemporaryFiles() {
  catalog::TaskFilter f;
  f.dst_node = options_.node;
  f.limit = catalog::kMaxBatchPaths * 4;
  absl::StatusOr<std::vector<catalog::Task>> tasks = options_.catalog.view->ListTasks(f);
  if (!tasks.ok()) {
    log_->warn("cleanup skipped: cannot list tasks: {}", tasks.status().ToString());
    return;
  }
  std::set<std::uint64_t> open;
  for (const catalog::Task& t : *tasks) {
    if (t.state == catalog::TaskState::kQueued || t.state == catalog::TaskState::kLeased) {
      open.insert(t.id);
    }
  }
  int removed = 0;
  for (std::string_view dir : {kOldStagingDir, kCopyTmpDir}) {
    std::error_code ec;
    fs::path base = options_.spool / dir;
    if (!fs::is_directory(base, ec)) continue;
    for (const fs::directory_entry& e : fs::directory_iterator(base, ec)) {
      std::optional<std::uint64_t> id = TaskIdOf(e.path().filename().string());
      if (!id || open.count(*id)) continue;  // not ours, or still resumable
      std::error_code rm;
      fs::remove_all(e.path(), rm);
      if (!rm) ++removed;
    }
  }
  if (removed > 0) log_->info("removed {} abandoned temporary files", removed);
}

absl::Status SiteAgent::Start() {
  std::error_code ec;
  fs::create_directories(options_.spool, ec);
  if (ec) {
    return absl::FailedPreconditionError(
        fmt::format("spool {}: {}", options_.spool.string(), ec.message()));
  }
  while (true) {
    absl::Status s = Register();
    if (s.ok()) break;
    if (!IsRetryableDaemonCall(s)) return s;
    if (stop_) return absl::CancelledError("stopped before registration");
    log_->warn("register node {}: {} (retrying)", options_.node, s.ToString());
    SleepFor(std::chrono::milliseconds(500));
    if (stop_) return absl::CancelledError("stopped before registration");
  }
  last_heartbeat_ok_ns_ = catalog::SystemNowNs();
  log_->info("registered node={} site={} address={} owner={}", options_.node, options_.site,
             options_.address, owner_);
  while (true) {
    absl::Status s = keeper_->MigrateLegacyLayout();
    if (s.ok()) break;
    if (!IsRetryableDaemonCall(s)) return s;
    if (stop_) return absl::CancelledError("stopped during the spool migration");
    log_->warn("spool migration: {} (retrying)", s.ToString());
    SleepFor(std::chrono::milliseconds(500));
  }
  CleanTemporaryFiles();
  while (true) {
    absl::StatusOr<std::uint64_t> last = options_.catalog.view->LastEventSeq();
    if (last.ok()) {
      watch_from_ = *last;
      break;
    }
    if (!IsRetryableDaemonCall(last.status())) return last.status();
    if (stop_) return absl::CancelledError("stopped before the agent started");
    log_->warn("the event log's end: {} (retrying)", last.status().ToString());
    SleepFor(std::chrono::milliseconds(500));
  }
  // Under mu_ so that a concurrent Stop() either sees every thread or none.
  absl::MutexLock lock(&mu_);
  if (stop_) return absl::CancelledError("stopped before the agent started");
  StartCopyThreads();
  threads_.emplace_back([this] { HeartbeatLoop(); });
  threads_.emplace_back([this] { LookupLoop(); });
  threads_.emplace_back([this] { RenewLoop(); });
  threads_.emplace_back([this] { WatchLoop(); });
  threads_.emplace_back([this] { SweepLoop(); });
  if (options_.check_interval.count() > 0 || options_.scrub_rate_bytes > 0) {
    threads_.emplace_back([this] { CheckLoop(); });
  }
  threads_.emplace_back([this] { ClaimLoop(); });
  for (int i = 0; i < kCompleters; ++i) threads_.emplace_back([this] { CompleteLoop(); });
  if (options_.adapt_in_flight) threads_.emplace_back([this] { TuneLoop(); });
  if (options_.straggler_after.count() > 0 || options_.slow_source_after.count() > 0) {
    threads_.emplace_back([this] { StragglerLoop(); });
  }
  if (options_.telemetry_interval.count() > 0 && options_.telemetry != nullptr)
    threads_.emplace_back([this] { TelemetryLoop(); });
  return absl::OkStatus();
}

void SiteAgent::Stop() {
  // Concurrent callers (a signal thread and main) wait for the first one to finish.
  absl::MutexLock stopping(&stop_mu_);
  std::vector<std::thread> threads;
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
    for (auto& [owner, run] : running_) CancelLocked(*run);
    threads.swap(threads_);
  }
  wake_.SignalAll();
  claim_wake_.SignalAll();
  complete_wake_.SignalAll();
  check_wake_.SignalAll();
  {
    // The copies end at their next operation (the cancellation), and their tasks are failed
    // as retryable or queued for their commit, which the committers make before they end.
    absl::MutexLock lock(&mu_);
    while (copying_ > 0) copies_ended_.Wait(&mu_);
  }
  for (std::thread& t : threads) {
    if (t.joinable()) t.join();
  }
  StopCopyThreads();
  std::deque<Claimed> unstarted;
  {
    absl::MutexLock lock(&mu_);
    unstarted.swap(ready_);
  }
  GiveBack(std::move(unstarted));
}

void SiteAgent::GiveBack(std::deque<Claimed> tasks) {
  for (const Claimed& c : tasks) {
    absl::StatusOr<catalog::Task> failed = options_.catalog.work->FailTask(
        c.task.id, c.owner, "the agent stopped before the copy began", true,
        std::chrono::milliseconds(0));
    if (!failed.ok()) log_->warn("task={} give back: {}", c.task.id, failed.status().ToString());
  }
}

absl::Time SiteAgent::DeadlineOf(std::chrono::steady_clock::time_point t) {
  return absl::Now() + absl::FromChrono(t - std::chrono::steady_clock::now());
}

void SiteAgent::SleepFor(std::chrono::milliseconds d) {
  absl::MutexLock lock(&mu_);
  const absl::Time deadline = absl::Now() + absl::FromChrono(d);
  while (!stop_ && !wake_.WaitWithDeadline(&mu_, deadline)) {
  }
}

void SiteAgent::TelemetryLoop() {
  constexpr auto kSample = std::chrono::milliseconds(100);
  auto next_send = std::chrono::steady_clock::now() + options_.telemetry_interval;
  auto next_sample = std::chrono::steady_clock::now() + kSample;
  while (!stop_) {
    {
      absl::MutexLock lock(&mu_);
      const absl::Time deadline = DeadlineOf(next_sample);
      while (!stop_ && !wake_.WaitWithDeadline(&mu_, deadline)) {
      }
    }
    next_sample += kSample;
    const auto now = std::chrono::steady_clock::now();
    if (next_sample < now) next_sample = now + kSample;  // fell behind: do not catch up in a burst
    meter_.Sample(catalog::SystemNowNs());
    if (now < next_send) continue;
    next_send = now + options_.telemetry_interval;
    std::optional<catalog::TelemetryBatch> batch = meter_.Take(options_.node, options_.site, catalog::SystemNowNs());
    if (!batch) continue;
    absl::Status s = options_.telemetry->Publish(*batch);
    if (absl::IsUnimplemented(s)) {
      log_->info("telemetry: the catalog serves no dashboard; not sending any ({})", s.ToString());
      return;
    }
    if (!s.ok()) log_->debug("telemetry: {}", s.ToString());  // best effort: the next batch follows
  }
}

absl::Status SiteAgent::Health() const {
  const std::int64_t last = last_heartbeat_ok_ns_.load();
  if (last == 0) return absl::UnavailableError("not registered with the catalog yet");
  const std::int64_t age = catalog::SystemNowNs() - last;
  if (age > 3 * std::chrono::nanoseconds(options_.heartbeat_interval).count()) {
    return absl::UnavailableError(fmt::format("no heartbeat reached the catalog for {:.1f} s", static_cast<double>(age) / 1e9));
  }
  return absl::OkStatus();
}

void AppendMetrics(MetricsText& m, const SiteAgentStats& s) {
  m.Counter("gfrep_agent_tasks_done_total", "Copies this node's agent committed", static_cast<double>(s.tasks_done));
  m.Counter("gfrep_agent_task_failures_total", "Copy attempts that failed (retried or not)",
            static_cast<double>(s.tasks_failed));
  m.Counter("gfrep_agent_received_bytes_total", "Bytes received by this node's copies",
            static_cast<double>(s.bytes_received));
  m.Counter("gfrep_agent_leases_lost_total", "Copy attempts cancelled because their lease was lost",
            static_cast<double>(s.leases_lost));
  m.Counter("gfrep_agent_stragglers_total",
            "Copies given back as too slow, to be planned from another source",
            static_cast<double>(s.stragglers));
  m.Counter("gfrep_agent_slow_sources_total",
            "Source nodes judged slow: their copies given back for a while, to be planned elsewhere",
            static_cast<double>(s.slow_sources));
  m.Counter("gfrep_agent_replicas_deleted_total", "Replicas unlinked and removed from the catalog",
            static_cast<double>(s.replicas_deleted));
  m.Counter("gfrep_agent_replicas_checked_total", "Replicas checked (stat checks and scrubs)",
            static_cast<double>(s.replicas_checked));
  m.Counter("gfrep_agent_replicas_lost_total", "Replicas found missing", static_cast<double>(s.replicas_lost));
  m.Counter("gfrep_agent_replicas_corrupt_total", "Replicas found damaged", static_cast<double>(s.replicas_corrupt));
  m.Counter("gfrep_agent_scrub_read_bytes_total", "Bytes read by the checksum scrub", static_cast<double>(s.scrub_bytes));
  m.Counter("gfrep_agent_garbage_files_total", "Unrecorded files removed from the spool",
            static_cast<double>(s.garbage_files));
  m.Gauge("gfrep_agent_copies_allowed", "Copies the agent allows at once now", s.in_flight_limit);
  m.Gauge("gfrep_agent_copies_peak", "Most copies that ran at once", s.peak_in_flight);
  m.Gauge("gfrep_agent_disk_write_io_bytes",
          "Write size of received copies, from the node's disk profile (0: none)",
          static_cast<double>(s.disk_write_io_size));
}

void SiteAgent::HeartbeatLoop() {
  disk_checked_ns_ = catalog::SystemNowNs();  // Register() has just read the disk profile
  while (!stop_) {
    catalog::Heartbeat hb = MakeHeartbeat();
    // What the copies taught of their routes since the last heartbeat (lost with it if it
    // fails: the next one reports what came after).
    hb.routes = learner_.Report();
    absl::Status s = options_.catalog.sites->SendHeartbeat(hb);
    if (absl::IsNotFound(s)) {
      // The catalog forgot us (restored or rebuilt): register again.
      s = Register();
    }
    if (!s.ok()) {
      log_->warn("heartbeat: {}", s.ToString());
    } else {
      last_heartbeat_ok_ns_ = catalog::SystemNowNs();
      if (last_heartbeat_ok_ns_ - disk_checked_ns_ >= 60'000'000'000) {
        disk_checked_ns_ = last_heartbeat_ok_ns_;
        LoadDiskProfile();
      }
    }
    SleepFor(options_.heartbeat_interval);
  }
}

void SiteAgent::RenewLoop() {
  while (!stop_) {
    SleepFor(options_.lease / 3);
    std::vector<catalog::LeaseRenewal> claims;
    {
      absl::MutexLock lock(&mu_);
      for (const auto& [owner, run] : running_) claims.push_back({run->task_id, owner});
      for (const Completion& c : completions_) claims.push_back({c.task.id, c.owner});
      for (const auto& [owner, id] : completing_) claims.push_back({id, owner});
      for (const Claimed& c : ready_) claims.push_back({c.task.id, c.owner});
    }
    if (claims.empty()) continue;
    // Every lease this agent holds (256 copies at once hold about 900 with the tasks claimed
    // ahead and those committing) in one catalog call and one write: one round trip per
    // round, across the WAN for a remote catalog, instead of one per claim.
    absl::StatusOr<std::vector<absl::Status>> renewed =
        options_.catalog.work->RenewLeases(claims, options_.lease);
    if (renewed.ok() && renewed->size() != claims.size()) {
      renewed = absl::InternalError("the catalog answered a renewal batch with another count");
    }
    if (!renewed.ok()) {
      log_->warn("renew {} leases: {}", claims.size(), renewed.status().ToString());
      continue;  // the next round tries again, well inside the lease
    }
    absl::MutexLock lock(&mu_);
    for (std::size_t i = 0; i < claims.size(); ++i) {
      const absl::Status& r = (*renewed)[i];
      if (r.ok()) continue;
      const std::string& owner = claims[i].owner;
      auto it = running_.find(owner);
      const bool pending = std::any_of(completions_.begin(), completions_.end(),
                                       [&](const Completion& c) { return c.owner == owner; }) ||
                           completing_.count(owner) > 0 ||
                           std::any_of(ready_.begin(), ready_.end(),
                                       [&](const Claimed& c) { return c.owner == owner; });
      if (it == running_.end() && !pending) continue;  // it ended meanwhile (done, say)
      if (absl::IsFailedPrecondition(r) || absl::IsNotFound(r)) {
        log_->warn("task={} owner={} lease lost: {}", claims[i].id, owner, r.ToString());
        // A copy given back as a straggler gave its lease up itself.
        if (it != running_.end() && !it->second->lease_lost && it->second->straggler.empty()) {
          it->second->lease_lost = true;
          stats_.leases_lost += 1;
          CancelLocked(*it->second);
        }
      } else {
        log_->warn("task={} renew lease: {}", claims[i].id, r.ToString());
      }
    }
  }
}

void SiteAgent::WatchLoop() {
  catalog::EventCursor cursor(*options_.catalog.view, 1000);
  cursor.Seek(watch_from_);  // before the first listing of the routes (Start)
  bool missed = false;
  while (!stop_) {
    absl::StatusOr<std::vector<catalog::Event>> events = cursor.Read(std::chrono::milliseconds(1000));
    if (!events.ok()) {
      cursor.Reset();  // from the log's end again: the sweep and the claims look by themselves
      missed = true;   // and the routes are read again
      SleepFor(std::chrono::milliseconds(500));
      continue;
    }
    bool ours = false;
    bool deleting = false;
    bool routes = missed;
    missed = false;
    for (const catalog::Event& e : *events) {
      routes = routes || (e.kind == catalog::EventKind::kRoute && e.node == options_.site);
      ours = ours || catalog::QueuesTaskFor(e, options_.node);
      deleting = deleting || (e.kind == catalog::EventKind::kReplica && e.node == options_.node &&
                              e.state == catalog::ToString(catalog::ReplicaState::kDeleting));
    }
    if (routes) {
      // An operator changed a route into this site (or the events that would say so were
      // missed): the copies claimed from now on (the claim below comes after this) look it
      // up again, and a listing or lookup read before now is not cached.
      absl::MutexLock lock(&mu_);
      route_cache_.clear();
      ++route_epoch_;
    }
    if (deleting) {
      {
        absl::MutexLock lock(&mu_);
        sweep_wanted_ = true;
      }
      wake_.SignalAll();
    }
    if (ours) {
      {
        absl::MutexLock lock(&mu_);
        ++wake_generation_;
      }
      claim_wake_.Signal();
    }
  }
}

void SiteAgent::ClaimLoop() {
  // Claims are made when the ready tasks fall to half of ClaimAhead (so a claim leases many
  // tasks at once, not one per finished copy), up to ClaimAhead of them; again at once while
  // the catalog had as many as asked for, else when a task for this node is queued (event),
  // or after poll_interval (a task whose backoff ended makes no event). Each claim is a long
  // poll of up to poll_interval: with nothing claimable the catalog answers as a task is
  // queued for this node, half a round trip later, not after the watch's event (half a
  // round trip) and another claim (a whole one). A catalog older than the long poll answers
  // at once and the event or the timer makes the next claim.
  std::uint64_t seen = 0;
  bool more = true;  // the last claim got all it asked for: the catalog may have more
  auto last_claim = std::chrono::steady_clock::now() - options_.poll_interval;
  while (true) {
    std::size_t want = 0;
    {
      absl::MutexLock lock(&mu_);
      // Follows the copies allowed at once, which TuneLoop changes. An idle agent does not
      // know its next burst's files: it claims for the copies a burst of small files starts
      // with (kIdleClaimCopies), not for the few that large files leave it at; the burst
      // start then sets L from the tasks claimed (a claim of 8 tasks, then one for the rest,
      // cost a burst of 64 KiB files a catalog round trip before most copies began).
      auto high = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        const bool idle = tuner_ && ready_.empty() && copying_ == 0;
        return ClaimAhead(idle ? std::max(LimitLocked(), kIdleClaimCopies) : LimitLocked());
      };
      auto due = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return more || wake_generation_ != seen ||
               std::chrono::steady_clock::now() - last_claim >= options_.poll_interval;
      };
      auto room = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        // A copy waiting for its catalog commit holds a lease: do not run far ahead of them.
        return ready_.size() <= high() / 2 &&
               completions_.size() < static_cast<std::size_t>(4 * options_.workers);
      };
      while (!stop_ && !(room() && due())) {
        if (room()) {
          claim_wake_.WaitWithDeadline(&mu_, DeadlineOf(last_claim + options_.poll_interval));
        } else {
          claim_wake_.Wait(&mu_);
        }
      }
      if (stop_) return;
      seen = wake_generation_;
      want = std::min(high() - ready_.size(), catalog::kMaxBatchPaths);
    }
    std::vector<std::string> owners;
    owners.reserve(want);
    for (std::size_t i = 0; i < want; ++i) owners.push_back(fmt::format("{}#{}", owner_, ++claims_));
    last_claim = std::chrono::steady_clock::now();
    absl::StatusOr<std::vector<catalog::Task>> claimed =
        options_.catalog.work->ClaimTasks(options_.node, owners, options_.lease,
                                          options_.poll_interval);
    if (!claimed.ok()) {
      log_->warn("claim: {}", claimed.status().ToString());
      more = false;
      continue;
    }
    more = claimed->size() == want;
    if (claimed->empty()) continue;
    log_->info("claimed {} task(s) in one call", claimed->size());
    {
      absl::MutexLock lock(&mu_);
      stats_.claim_calls += 1;
      // Work for an idle agent: a burst whose files may want another level than the last.
      if (tuner_ && ready_.empty() && copying_ == 0) {
        const int start = BurstStartLocked(*claimed);
        tuner_->Restart(start);
        if (start != in_flight_limit_) {
          log_->info("copies at once {} -> {}: new work ({} tasks claimed)", in_flight_limit_,
                     tuner_->limit(), claimed->size());
          in_flight_limit_ = tuner_->limit();
          ShareSessionsLocked();
        }
      }
      for (std::size_t i = 0; i < claimed->size(); ++i) {
        ready_.push_back(Claimed{std::move((*claimed)[i]), owners[i]});
      }
      if (copying_ >= LimitLocked()) limit_binding_ = true;  // for TuneLoop
      LaunchLocked();
    }
  }
}

void SiteAgent::CompleteLoop() {
  const catalog::Roles& cat = options_.catalog;
  for (;;) {
    std::vector<Completion> batch;
    {
      absl::MutexLock lock(&mu_);
      // Stopping, the committers end once no copy runs (a copy ending then still queues its
      // commit) and nothing waits.
      while (completions_.empty() && !(stop_ && copying_ == 0)) complete_wake_.Wait(&mu_);
      if (completions_.empty()) return;
      while (!completions_.empty() && batch.size() < catalog::kMaxBatchPaths) {
        completing_[completions_.front().owner] = completions_.front().task.id;
        batch.push_back(std::move(completions_.front()));
        completions_.pop_front();
      }
      LaunchLocked();  // copies may have waited for room in the queue
    }
    claim_wake_.Signal();  // and the claim loop too
    std::vector<catalog::TaskCompletion> items;
    items.reserve(batch.size());
    for (const Completion& c : batch) items.push_back({c.task.id, c.owner, c.mtime_ns});
    // The bytes are in place and verified; make them durable in the catalog. Retry transport
    // errors until the lease would have run out (once only when stopping: the next claim
    // of the task finds the file in place).
    auto deadline = std::chrono::steady_clock::now() + options_.lease;
    std::vector<absl::StatusOr<catalog::Task>> results;
    while (true) {
      absl::StatusOr<std::vector<absl::StatusOr<catalog::Task>>> done =
          cat.work->CompleteTasks(items);
      if (done.ok() && done->size() != items.size()) {
        done = absl::InternalError("the catalog answered a commit batch with another count");
      }
      if (done.ok()) {
        results = std::move(*done);
        break;
      }
      if (IsRetryableDaemonCall(done.status()) && std::chrono::steady_clock::now() < deadline &&
          !stop_) {
        SleepFor(std::chrono::milliseconds(200));
        continue;
      }
      results.assign(items.size(), done.status());
      break;
    }
    std::size_t committed = 0;
    for (std::size_t i = 0; i < batch.size(); ++i) {
      const Completion& c = batch[i];
      if (results[i].ok()) {
        ++committed;
        log_->info("task={} done path={} bytes={}", c.task.id, c.task.spec.path, c.task.size);
      } else {
        log_->warn("task={} complete: {}", c.task.id, results[i].status().ToString());
      }
    }
    log_->info("committed {} of {} copies in one call", committed, batch.size());
    absl::MutexLock lock(&mu_);
    stats_.complete_calls += 1;
    for (std::size_t i = 0; i < batch.size(); ++i) {
      if (results[i].ok()) {
        stats_.tasks_done += 1;
        stats_.bytes_received += batch[i].bytes;
      }
      completing_.erase(batch[i].owner);
    }
  }
}

void SiteAgent::SweepLoop() {
  std::optional<std::chrono::steady_clock::time_point> last_gc;  // none yet: collect at once
  while (!stop_) {
    absl::StatusOr<std::uint64_t> deleted = keeper_->SweepDeleting();
    if (!deleted.ok()) {
      log_->warn("sweep: {}", deleted.status().ToString());
    } else if (*deleted > 0) {
      absl::MutexLock lock(&mu_);
      stats_.replicas_deleted += *deleted;
    }
    if (!last_gc || std::chrono::steady_clock::now() - *last_gc >= options_.gc_interval) {
      absl::StatusOr<std::uint64_t> removed = keeper_->CollectGarbage();
      if (!removed.ok()) {
        log_->warn("garbage collection: {}", removed.status().ToString());
      } else {
        last_gc = std::chrono::steady_clock::now();
        absl::MutexLock lock(&mu_);
        stats_.garbage_files += *removed;
      }
    }
    absl::MutexLock lock(&mu_);
    const absl::Time deadline = absl::Now() + absl::FromChrono(options_.sweep_interval);
    while (!stop_ && !sweep_wanted_ && !wake_.WaitWithDeadline(&mu_, deadline)) {
    }
    sweep_wanted_ = false;
  }
}

void SiteAgent::TuneLoop() {
  std::uint64_t last_bytes = live_bytes_.load();
  auto last = std::chrono::steady_clock::now();
  while (!stop_) {
    SleepFor(options_.tune_period);
    if (stop_) return;
    const auto now = std::chrono::steady_clock::now();
    const std::uint64_t bytes = live_bytes_.load();
    const std::uint64_t received = bytes - last_bytes;
    const double seconds = std::chrono::duration<double>(now - last).count();
    const double goodput = seconds > 0 ? static_cast<double>(received) / seconds : 0;
    last = now;
    last_bytes = bytes;
    InFlightSample sample;
    sample.goodput = goodput;
    // The senders' TCP figures of the copies that ended in the period: congestion signals.
    const TcpTally tcp = learner_.TakeRecent();
    sample.loss = tcp.loss();
    sample.rtt_inflation = tcp.rtt_inflation();
    sample.min_rtt_ms = tcp.min_rtt_ms();
    {
      absl::MutexLock lock(&mu_);
      // Held back now, or a ready task waited for a slot during the period.
      sample.limited = limit_binding_ || (!ready_.empty() && copying_ >= LimitLocked());
      limit_binding_ = false;
      sample.ceiling = ProbeCeilingLocked();
      // No bytes at all (sessions still being set up, or nothing to do): nothing learnt.
      if (received == 0) continue;
      const int was = in_flight_limit_;
      const int next = tuner_->Update(sample);
      if (next == was) continue;
      log_->info("copies at once {} -> {}: {}", was, next, tuner_->reason());
      in_flight_limit_ = next;
      ShareSessionsLocked();
      LaunchLocked();  // a higher limit starts ready tasks now
    }
    claim_wake_.Signal();
  }
}

}  // namespace gfrep::replica::agent
