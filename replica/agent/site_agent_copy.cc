// SiteAgent's copy pipeline (site_agent.h, "The copy pipeline"): ready tasks become copy
// coroutines on the I/O threads; their blocking steps run on a small pool.

#include "replica/agent/internal/site_agent_copy.h"

#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <boost/asio/async_result.hpp>
#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/thread_pool.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <cerrno>
#include <map>
#include <optional>
#include <set>
#include <type_traits>

#include "replica/agent/pull_options.h"
#include "replica/agent/slow_source.h"
#include "replica/agent/straggler.h"
#include "replica/agent/site_agent.h"
#include "replica/core/spool.h"
#include "transfer/agent.h"
#include "transfer/checksum.h"
#include "transfer/client.h"
#include "transfer/errno_status.h"
#include "transfer/spool_names.h"

namespace gfrep::replica::agent {
namespace {

namespace asio = boost::asio;
namespace fs = std::filesystem;

// Threads for the copies' blocking steps: catalog lookups (cached), directory syncs, the
// verification of a file an earlier attempt left in place, FailTask.
constexpr int kBlockingThreads = 4;
// Finished copies waiting for their commit, at most, per copy allowed at once: each holds a
// lease.
constexpr std::size_t kCommitsPerCopy = 4;

// Runs `f` on `pool` and resumes the awaiting coroutine on its own executor with f's result.
template <typename F>
asio::awaitable<std::invoke_result_t<F&>> OnPool(asio::thread_pool& pool, F f) {
  using R = std::invoke_result_t<F&>;
  co_return co_await asio::async_initiate<const asio::use_awaitable_t<>&, void(R)>(
      [&pool](auto handler, F fn) {
        auto resume = asio::get_associated_executor(handler);
        asio::post(pool, [handler = std::move(handler), fn = std::move(fn), resume]() mutable {
          R r = fn();
          asio::post(resume, [handler = std::move(handler), r = std::move(r)]() mutable {
            std::move(handler)(std::move(r));
          });
        });
      },
      asio::use_awaitable, std::move(f));
}

// The replica file's mtime, which the catalog records with the replica (replica_check.h):
// read after the rename and the directory sync, from the file that is the replica.
absl::Status StampOf(const fs::path& file, std::int64_t& mtime_ns) {
  struct stat st {};
  if (::lstat(file.c_str(), &st) != 0) {
    return transfer::ErrnoStatus(errno, fmt::format("stat {}", file.string()));
  }
  mtime_ns = static_cast<std::int64_t>(st.st_mtim.tv_sec) * 1'000'000'000 + st.st_mtim.tv_nsec;
  return absl::OkStatus();
}

}  // namespace

void SiteAgent::StartCopyThreads() {
  blocking_ = std::make_unique<asio::thread_pool>(kBlockingThreads);
  for (int i = 0; i < options_.io_threads; ++i) {
    auto c = std::make_unique<CopyIo>(static_cast<std::size_t>(options_.workers));
    c->thread = std::thread([io = &c->io] { io->run(); });
    copy_io_.push_back(std::move(c));
  }
  ShareSessionsLocked();
}

void SiteAgent::StopCopyThreads() {
  // No copy runs any more: close the warm sessions on their own threads and let them end.
  std::vector<std::unique_ptr<CopyIo>> copy_io;
  {
    absl::MutexLock lock(&mu_);
    copy_io.swap(copy_io_);
  }
  for (std::unique_ptr<CopyIo>& c : copy_io) {
    asio::post(c->io, [sessions = &c->sessions] { sessions->Clear(); });
    c->work.reset();
    if (c->thread.joinable()) c->thread.join();
  }
  if (blocking_) blocking_->join();
}

void SiteAgent::CancelLocked(Running& run) {
  // Emitted on the copy's own thread: cancellation signals are not thread-safe. The copy
  // ends at its next operation; the io_context keeps running until it has, so nothing the
  // engine still does on its blocking pool outlives it. `cancelled` covers the copy's steps
  // that are not on its I/O thread (checked before the pull).
  run.cancelled = true;
  asio::post(run.io.io, [signal = std::weak_ptr<asio::cancellation_signal>(run.cancel)] {
    if (auto s = signal.lock()) s->emit(asio::cancellation_type::terminal);
  });
}

// How far down the ready queue a launch looks for a task from a less busy source. A claim's
// tasks come in the catalog's order, often all of one source node's files before the next
// one's: taken in that order, a site with two source nodes copied from one, then opened new
// sessions to the other and started its connections again from slow start (on the 200 ms
// route the link fell to a tenth for a second between them; RESULTS.md, 2026-11-30).
constexpr std::size_t kSpreadLookahead = 64;

std::deque<SiteAgent::Claimed>::iterator SiteAgent::NextReadyLocked() {
  auto best = ready_.begin();
  if (copying_from_.empty()) return best;
  auto running = [&](const Claimed& c) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    auto it = copying_from_.find(c.task.spec.src_node);
    return it == copying_from_.end() ? 0 : it->second;
  };
  int least = running(*best);
  const auto end = ready_.begin() + static_cast<std::ptrdiff_t>(std::min(ready_.size(), kSpreadLookahead));
  for (auto it = std::next(best); it != end && least > 0; ++it) {
    if (const int n = running(*it); n < least) {
      least = n;
      best = it;
    }
  }
  return best;
}

void SiteAgent::LaunchLocked() {
  const std::size_t commits = kCommitsPerCopy * static_cast<std::size_t>(options_.workers);
  while (!stop_ && !ready_.empty() && copying_ < LimitLocked() && completions_.size() < commits &&
         !copy_io_.empty()) {
    const auto pick = NextReadyLocked();
    Claimed next = std::move(*pick);
    ready_.erase(pick);
    ++copying_;
    ++copying_from_[next.task.spec.src_node];
    ++started_.copies;
    if (started_.src_node != next.task.spec.src_node) started_.src_node = next.task.spec.src_node;
    started_.bytes += static_cast<double>(next.task.size);
    started_.share_ppm = next.task.spec.dst_share_ppm;
    stats_.peak_in_flight = std::max(stats_.peak_in_flight, copying_);
    // The I/O thread with the fewest copies: a copy that ends leaves its warm session to the
    // next one there (dealt in turn, a thread could get a new copy while the other had a
    // free session).
    // With pipelined files, by the threads' shares of the sessions (copies per session).
    const bool pipelined = options_.reuse_sessions && options_.pipeline_files;
    auto load = [pipelined](const CopyIo& c) {
      if (!pipelined) return static_cast<double>(c.copies);
      return c.session_share > 0 ? static_cast<double>(c.copies) / c.session_share : 1e18;
    };
    CopyIo& io = **std::min_element(copy_io_.begin(), copy_io_.end(),
                                    [&](const auto& a, const auto& b) { return load(*a) < load(*b); });
    ++io.copies;
    auto run = std::make_shared<Running>(next.task.id, io);
    run->src_node = next.task.spec.src_node;
    running_[next.owner] = run;
    // Posted, so that the coroutine never starts inside this lock.
    asio::post(io.io, [this, next = std::move(next), run]() mutable {
      asio::co_spawn(run->io.io, RunCopy(std::move(next), run),
                     asio::bind_cancellation_slot(
                         run->cancel->slot(), [this, signal = run->cancel](std::exception_ptr e) {
                           signal->slot().clear();
                           if (e) log_->error("bug: an exception escaped a copy");
                         }));
    });
  }
  // TuneLoop: tasks still wait and every copy allowed runs, so more could have run.
  if (!ready_.empty() && copying_ >= LimitLocked()) limit_binding_ = true;
  if (ready_.size() <= ClaimAhead(LimitLocked()) / 2) claim_wake_.Signal();
}

asio::awaitable<void> SiteAgent::RunCopy(Claimed claimed, std::shared_ptr<Running> run) {
  // Cancellation ends the operation in progress (the pull); nothing throws.
  co_await asio::this_coro::throw_if_cancelled(false);
  const catalog::Task& task = claimed.task;
  log_->info("task={} claimed path={} from={} attempt={}/{} owner={}", task.id, task.spec.path,
             task.spec.src_node, task.attempts, task.spec.max_attempts, claimed.owner);
  ++active_;
  CopyResult out;
  absl::Status result;
  bool given_back = false;
  // From a source judged slow (StragglerLoop): given back before it starts, unless the catalog
  // keeps it (no other replica), then copied from it anyway.
  if (std::string slow = SlowSourceReason(task.spec.src_node); !slow.empty()) {
    absl::StatusOr<catalog::Task> yielded = co_await OnPool(*blocking_, [&] {
      return options_.catalog.work->YieldTask(task.id, claimed.owner, slow);
    });
    if (yielded.ok()) {
      log_->info("task={} path={} from={} given back ({}): to be copied from another source",
                 task.id, task.spec.path, task.spec.src_node, slow);
      absl::MutexLock lock(&mu_);
      stats_.slow_source_yields += 1;
      run->straggler = slow;
      run->discard_partial = yielded->state == catalog::TaskState::kCancelled;
      given_back = true;
    }
  }
  if (!given_back) result = co_await Copy(task, *run, out);
  --active_;
  bool lost;
  std::string straggler;
  bool discard_partial;
  {
    absl::MutexLock lock(&mu_);
    running_.erase(claimed.owner);
    lost = run->lease_lost;
    straggler = run->straggler;
    discard_partial = run->discard_partial;
    // Committed by a committer thread with others; the lease is renewed meanwhile. A copy
    // given back as a straggler is no longer this agent's task.
    if (!lost && straggler.empty() && result.ok()) {
      completions_.push_back(Completion{task, claimed.owner, out.bytes, out.mtime_ns});
    }
  }
  if (lost) {
    // Someone else holds the task now (or it was cancelled): any word from this attempt
    // would be refused by the catalog anyway.
    log_->warn("task={} attempt abandoned: lease lost ({})", task.id, result.ToString());
  } else if (!straggler.empty()) {
    // Given back (StragglerLoop): its partial file will not be resumed, the new task has its
    // own (an older catalog queued it again instead: then it resumes).
    if (discard_partial) {
      co_await OnPool(*blocking_, [&] {
        std::error_code ec;
        fs::remove_all(CopyTmpDir(options_.spool, task.id), ec);
        return true;
      });
    }
  } else if (result.ok()) {
    complete_wake_.Signal();
  } else {
    co_await OnPool(*blocking_, [&] {
      FailAttempt(task, claimed.owner, result);
      return true;
    });
  }
  absl::MutexLock lock(&mu_);
  --copying_;
  if (auto it = copying_from_.find(task.spec.src_node); it != copying_from_.end() && --it->second == 0) {
    copying_from_.erase(it);
  }
  --run->io.copies;
  LaunchLocked();
  if (copying_ == 0) {
    copies_ended_.SignalAll();
    complete_wake_.SignalAll();  // stopping: the committers may end now
  }
}

asio::awaitable<absl::Status> SiteAgent::Copy(const catalog::Task& task, Running& run,
                                              CopyResult& out) {
  absl::StatusOr<PullPlan> plan = co_await OnPool(*blocking_, [&] { return PlanCopy(task, out); });
  if (!plan.ok() || plan->in_place) co_return plan.status();
  bool cancelled;
  {
    absl::MutexLock lock(&mu_);
    cancelled = run.cancelled;
    run.metered = plan->metered;
    run.src_site = plan->src_site;
  }
  if (cancelled) {
    meter_.End(task.id);
    co_return absl::CancelledError("copy cancelled before its pull (agent stopping or lease lost)");
  }
  // The engine checks the bytes against the catalog's checksum and size, and installs them
  // at the replica's own name, durably and create-only: nothing else finishes the copy.
  absl::StatusOr<transfer::TransferStats> pulled = co_await transfer::AsyncPull(
      plan->endpoint, transfer::ReplicaRelativePath(task.inode, task.generation), plan->final_path,
      plan->tmp, plan->options, options_.reuse_sessions ? &run.io.sessions : nullptr);
  meter_.End(task.id);
  co_return co_await OnPool(*blocking_,
                            [&] { return FinishCopy(task, run, *plan, std::move(pulled), out); });
}

absl::StatusOr<SiteAgent::PullPlan> SiteAgent::PlanCopy(const catalog::Task& task,
                                                        CopyResult& out) {
  PullPlan plan;
  // What the copy is checked against: the file's checksum at the task's generation, which
  // the claim brought along (ClaimTasks); a catalog that predates that is asked here.
  if (!task.checksum.empty()) {
    plan.attrs.inode = task.inode;
    plan.attrs.generation = task.generation;
    plan.attrs.size = task.size;
    plan.attrs.checksum_algo = task.checksum_algo;
    plan.attrs.checksum = task.checksum;
  } else {
    absl::StatusOr<catalog::Attributes> a = options_.catalog.view->StatInode(task.inode);
    if (absl::IsNotFound(a.status())) return absl::FailedPreconditionError("file was removed");
    if (!a.ok()) return a.status();
    plan.attrs = *a;
  }
  if (plan.attrs.generation != task.generation) {
    return absl::AbortedError(fmt::format("file changed to generation {} (task is for {})",
                                          plan.attrs.generation, task.generation));
  }
  if (CatalogChecksum(plan.attrs).empty()) {
    return absl::FailedPreconditionError("the catalog has no checksum for this file");
  }
  plan.final_path = ReplicaFile(options_.spool, task.inode, task.generation);
  std::error_code ec;
  if (fs::exists(fs::symlink_status(plan.final_path, ec))) {
    // An earlier attempt got as far as the install (then the agent died or the catalog call
    // failed): keep the bytes if they are right, else start over.
    if (absl::Status v = VerifyFile(plan.final_path, plan.attrs); v.ok()) {
      log_->info("task={} already in place: {}", task.id, plan.final_path.string());
      if (absl::Status s =
              transfer::SyncDirectoryChain(options_.spool, plan.final_path.parent_path());
          !s.ok()) {
        return s;
      }
      plan.in_place = true;
      if (absl::Status s = StampOf(plan.final_path, out.mtime_ns); !s.ok()) return s;
      return plan;
    } else {
      log_->warn("task={} {} (removed, copying again)", task.id, v.ToString());
      fs::remove(plan.final_path, ec);
    }
  }
  absl::StatusOr<catalog::Node> src = LookupNode(task.spec.src_node);
  if (!src.ok()) return src.status();
  absl::StatusOr<transfer::Endpoint> endpoint = transfer::ParseEndpoint(src->address);
  if (!endpoint.ok()) {
    return absl::FailedPreconditionError(
        fmt::format("source node {} has a bad address '{}'", src->name, src->address));
  }
  plan.endpoint = *endpoint;
  plan.src_site = src->site;
  absl::StatusOr<catalog::Route> route = LookupRoute(src->site);
  if (!route.ok()) return route.status();
  int at_once;  // sessions to a source at once: the tuned copies at once
  {
    absl::MutexLock lock(&mu_);
    at_once = in_flight_limit_;
  }
  PullSettings settings =
      PullOptionsFor(options_.transfer, task, *route, *src,
                     {disk_write_io_size_.load(), disk_flush_interval_.load()}, at_once);
  plan.options = std::move(settings.options);
  transfer::TransferOptions& topts = plan.options;
  if (settings.streams_cut_from > 0 && !warned_stream_cap_.exchange(true)) {
    log_->warn(
        "route {}->{} asks for {} streams; using {} so that {} copies x (streams + 1) "
        "connections stay within a source agent's limit of {} per peer",
        route->src_site, route->dst_site, settings.streams_cut_from, topts.route.streams, at_once,
        transfer::kDefaultMaxConnectionsPerPeer);
  }
  if (!topts.logger) topts.logger = log_;
  topts.expected_checksum = CatalogChecksum(plan.attrs);
  topts.expected_size = task.size;
  // The dashboard's counters of this copy (telemetry.h), ended when its pull returns.
  std::shared_ptr<CopyCounters> metered = plan.metered =
      meter_.Begin({task.id, task.spec.request_id, src->name, src->site, task.size,
                    static_cast<std::uint32_t>(std::max(1, topts.route.streams)), 0});
  // What the copies from this source received, for StragglerLoop's SlowSourceWatch.
  std::shared_ptr<std::atomic<std::uint64_t>> from_source;
  {
    absl::MutexLock lock(&mu_);
    auto& counter = source_bytes_[src->name];
    if (!counter) counter = std::make_shared<std::atomic<std::uint64_t>>(0);
    from_source = counter;
  }
  // Received bytes as the engine reports them (every 100 ms and at the end), for TuneLoop's
  // goodput, the route's learnt goodput, the slow-source watch and the dashboard (in all and
  // per stream).
  topts.progress = [this, site = route->src_site, metered, from_source, counted = std::uint64_t{0},
                    counted_streams = std::vector<std::uint64_t>(metered->stream.size(), 0)](
                       const transfer::Progress& p) mutable {
    const std::uint64_t now = p.bytes_done > p.resumed_bytes ? p.bytes_done - p.resumed_bytes : 0;
    if (now > counted) {
      live_bytes_.fetch_add(now - counted);
      learner_.AddBytes(site, now - counted, RouteLearner::Clock::now());
      metered->received.fetch_add(now - counted, std::memory_order_relaxed);
      from_source->fetch_add(now - counted, std::memory_order_relaxed);
    }
    counted = std::max(counted, now);
    for (std::size_t k = 0; k < std::min(p.stream_bytes.size(), counted_streams.size()); ++k) {
      if (p.stream_bytes[k] > counted_streams[k]) {
        metered->stream[k].fetch_add(p.stream_bytes[k] - counted_streams[k],
                                     std::memory_order_relaxed);
        counted_streams[k] = p.stream_bytes[k];
      }
    }
  };
  // The directories down to the replica's must survive a crash before its name does (the
  // engine syncs the final directory after its rename; one made by an attempt that died
  // before it synced its parent would not be). Each chain once per process.
  if (absl::Status s = durable_dirs_.Prepare(plan.final_path.parent_path()); !s.ok()) {
    meter_.End(task.id);
    return s;
  }
  plan.tmp = CopyTmpDir(options_.spool, task.id);
  return plan;
}

absl::Status SiteAgent::FinishCopy(const catalog::Task& task, const Running& run,
                                   const PullPlan& plan,
                                   absl::StatusOr<transfer::TransferStats> pulled,
                                   CopyResult& out) {
  if (!pulled.ok()) {
    const absl::Status& failed = pulled.status();
    {
      absl::MutexLock lock(&mu_);
      if (run.cancelled) {
        return absl::CancelledError(
            fmt::format("copy cancelled (agent stopping or lease lost): {}", failed.ToString()));
      }
    }
    if (transfer::IsExpectedChecksumMismatch(failed)) {
      // The engine checked end to end that these are the bytes the source read from its
      // replica file: the source's replica is what is wrong. Report it, and fail this task
      // for good: the planner copies the file again from a good replica.
      std::string note = fmt::format("{} (to {}, generation {})", std::string(failed.message()),
                                     options_.node, task.generation);
      ReportBadSource(task, note);
      return absl::FailedPreconditionError(fmt::format(
          "source replica on {} does not match the catalog: {}", task.spec.src_node, note));
    }
    if (!absl::IsAlreadyExists(failed)) return failed;
    // Another attempt put the replica there meanwhile: keep it if it is right.
    if (absl::Status v = VerifyFile(plan.final_path, plan.attrs); !v.ok()) {
      std::error_code rm;
      fs::remove(plan.final_path, rm);
      return absl::UnavailableError(
          fmt::format("{} was in place but wrong ({}): removed, copying again",
                      plan.final_path.string(), v.ToString()));
    }
    return StampOf(plan.final_path, out.mtime_ns);
  }
  out.bytes = pulled->bytes_transferred;
  learner_.AddCopy(plan.src_site, pulled->tcp, pulled->congestion);
  {
    absl::MutexLock lock(&mu_);
    (pulled->reused_session ? stats_.pulls_on_warm_sessions : stats_.pulls_on_new_sessions) += 1;
  }
  // Empty now but for leftovers of an earlier attempt (the engine renamed the partial file
  // into place and removed its journal): usually one rmdir.
  if (::rmdir(plan.tmp.c_str()) != 0 && errno != ENOENT) {
    std::error_code ec;
    fs::remove_all(plan.tmp, ec);  // ignored: only leftovers of a finished copy
  }
  return StampOf(plan.final_path, out.mtime_ns);
}

void SiteAgent::FailAttempt(const catalog::Task& task, const std::string& owner,
                            const absl::Status& result) {
  {
    absl::MutexLock lock(&mu_);
    stats_.tasks_failed += 1;
    if (IsRetryableCall(result)) node_cache_.erase(task.spec.src_node);  // it may have moved
  }
  const bool retryable = IsRetryableCopy(result);
  const std::chrono::milliseconds delay = BackoffDelay(options_.retry, task.attempts);
  const std::string reason = fmt::format("{} (from {})", result.ToString(), task.spec.src_node);
  log_->warn("task={} attempt {} failed path={}: {}{}", task.id, task.attempts, task.spec.path,
             reason, retryable ? fmt::format(" (retry in {} ms)", delay.count()) : "");
  for (int i = 0; i < 20; ++i) {
    absl::StatusOr<catalog::Task> failed =
        options_.catalog.work->FailTask(task.id, owner, reason, retryable, delay);
    if (failed.ok() || !IsRetryableDaemonCall(failed.status())) break;
    SleepFor(std::chrono::milliseconds(200));
  }
}

void SiteAgent::StragglerLoop() {
  const bool copies_judged = options_.straggler_after.count() > 0;
  const bool sources_judged = options_.slow_source_after.count() > 0;
  StragglerWatch watch({options_.straggler_after, options_.straggler_fraction});
  SlowSourceWatch sources(options_.slow_source_after, options_.straggler_fraction);
  std::chrono::milliseconds tick = std::chrono::seconds(1);
  if (copies_judged) tick = std::min(tick, options_.straggler_after / 4);
  if (sources_judged) tick = std::min(tick, options_.slow_source_after / 4);
  while (!stop_) {
    SleepFor(tick);
    if (stop_) return;
    std::vector<StragglerWatch::Copy> copies;
    std::vector<SlowSourceWatch::Source> by_source;
    {
      absl::MutexLock lock(&mu_);
      std::map<std::string, int> running_from;
      for (const auto& [owner, run] : running_) {
        if (!run->metered || !run->straggler.empty()) continue;
        ++running_from[run->src_node];
        // Judged from its first byte: a copy waiting ahead on a session in use (pipelined
        // files) has not begun.
        if (const std::uint64_t received = run->metered->received.load(); received > 0) {
          copies.push_back({run->task_id, received});
        }
      }
      for (const auto& [node, bytes] : source_bytes_) {
        auto n = running_from.find(node);
        by_source.push_back({node, n != running_from.end() ? n->second : 0, bytes->load()});
      }
    }
    const auto now = std::chrono::steady_clock::now();
    if (copies_judged) {
      for (const StragglerWatch::Verdict& v : watch.Tick(now, copies)) {
        GiveBackRunning(v.id, v.reason, /*slow_source=*/false);
      }
    }
    if (!sources_judged) continue;
    for (const SlowSourceWatch::Verdict& v : sources.Tick(now, by_source)) {
      std::vector<std::uint64_t> from;
      {
        absl::MutexLock lock(&mu_);
        slow_sources_[v.source] = SlowSource{now + 3 * options_.slow_source_after, v.reason};
        stats_.slow_sources += 1;
        for (const auto& [owner, run] : running_) {
          if (run->src_node == v.source && run->straggler.empty()) from.push_back(run->task_id);
        }
      }
      log_->warn("{}: its {} running copies, and those that would start from it in the next {} s, "
                 "are given back to be copied from another source",
                 v.reason, from.size(),
                 std::chrono::duration_cast<std::chrono::seconds>(3 * options_.slow_source_after).count());
      for (std::uint64_t id : from) GiveBackRunning(id, v.reason, /*slow_source=*/true);
    }
  }
}

bool SiteAgent::GiveBackRunning(std::uint64_t id, const std::string& reason, bool slow_source) {
  std::string owner;
  {
    absl::MutexLock lock(&mu_);
    for (const auto& [o, run] : running_) {
      if (run->task_id == id && !run->lease_lost && run->straggler.empty()) owner = o;
    }
  }
  if (owner.empty()) return false;  // it ended meanwhile
  // The task is given back first, and the copy cancelled only if the catalog took it: with
  // no other replica to copy from, the slow copy goes on (it is not judged again).
  absl::StatusOr<catalog::Task> yielded = options_.catalog.work->YieldTask(id, owner, reason);
  if (!yielded.ok()) {
    log_->info("task={} {}; not given back: {}", id, reason, yielded.status().ToString());
    return false;
  }
  log_->warn("task={} path={} from={} given back ({}): to be copied from another source", id,
             yielded->spec.path, yielded->spec.src_node, reason);
  absl::MutexLock lock(&mu_);
  if (slow_source) {
    stats_.slow_source_yields += 1;
  } else {
    stats_.stragglers += 1;
  }
  if (auto it = running_.find(owner); it != running_.end()) {
    it->second->straggler = reason;
    it->second->discard_partial = yielded->state == catalog::TaskState::kCancelled;
    CancelLocked(*it->second);
  }
  return true;
}

std::string SiteAgent::SlowSourceReason(const std::string& node) {
  absl::MutexLock lock(&mu_);
  auto it = slow_sources_.find(node);
  if (it == slow_sources_.end()) return "";
  if (std::chrono::steady_clock::now() >= it->second.until) {
    slow_sources_.erase(it);  // judged again from its copies
    return "";
  }
  return it->second.reason;
}

absl::StatusOr<catalog::Node> SiteAgent::LookupNode(const std::string& name) {
  auto now = std::chrono::steady_clock::now();
  {
    absl::MutexLock lock(&mu_);
    if (auto it = node_cache_.find(name);
        it != node_cache_.end() && now - it->second.fetched < options_.lookup_ttl) {
      it->second.used = now;
      return it->second.value;
    }
  }
  absl::StatusOr<catalog::Node> n = options_.catalog.view->GetNode(name);
  if (!n.ok()) return n.status();
  absl::MutexLock lock(&mu_);
  node_cache_[name] = {*n, now, now};
  return n;
}

absl::StatusOr<catalog::Route> SiteAgent::LookupRoute(const std::string& src_site) {
  auto now = std::chrono::steady_clock::now();
  std::uint64_t epoch = 0;
  {
    absl::MutexLock lock(&mu_);
    if (auto it = route_cache_.find(src_site);
        it != route_cache_.end() && now - it->second.fetched < options_.lookup_ttl) {
      it->second.used = now;
      return it->second.value;
    }
    epoch = route_epoch_;
  }
  catalog::Route route;
  if (absl::StatusOr<catalog::Route> r = options_.catalog.view->GetRoute(src_site, options_.site);
      r.ok()) {
    route = *r;
  } else if (absl::IsNotFound(r.status())) {
    route.src_site = src_site;
    route.dst_site = options_.site;
  } else {
    return r.status();
  }
  absl::MutexLock lock(&mu_);
  if (route_epoch_ == epoch) route_cache_[src_site] = {route, now, now};
  return route;
}

void SiteAgent::LookupLoop() {
  bool listed = false;  // every node, once (until a listing succeeds)
  while (!stop_) {
    listed = RefreshLookups(!listed) || listed;
    SleepFor(options_.lookup_ttl / 2);
  }
}

bool SiteAgent::RefreshLookups(bool all_nodes) {
  const auto now = std::chrono::steady_clock::now();
  // What a copy used in the last minute is kept fresh; the rest ages out.
  constexpr std::chrono::seconds kRecent(60);
  std::vector<std::string> recent_nodes;
  std::vector<std::string> recent_sites;
  std::uint64_t epoch = 0;  // a listing read before a route event is not kept after it
  {
    absl::MutexLock lock(&mu_);
    epoch = route_epoch_;
    for (const auto& [name, c] : node_cache_) {
      if (now - c.used < kRecent) recent_nodes.push_back(name);
    }
    for (const auto& [site, c] : route_cache_) {
      if (now - c.used < kRecent) recent_sites.push_back(site);
    }
  }
  // Nodes: where their agents listen, which changes only when one restarts. Listed whole
  // once, so that a source's first copy finds its address here.
  std::vector<catalog::Node> nodes;
  if (all_nodes) {
    absl::StatusOr<std::vector<catalog::Node>> listed = options_.catalog.view->ListNodes("");
    if (listed.ok()) {
      nodes = std::move(*listed);
    } else {
      log_->debug("listing nodes ahead of the copies: {}", listed.status().ToString());
      all_nodes = false;
    }
  }
  if (!all_nodes) {
    for (const std::string& name : recent_nodes) {
      if (stop_) return false;
      absl::StatusOr<catalog::Node> n = options_.catalog.view->GetNode(name);
      if (n.ok()) nodes.push_back(std::move(*n));
    }
  }
  // Routes: every route into this site, from one listing, each pass: the first copy from a
  // site needs no route lookup either, and an operator's change (data TLS, a rate) reaches
  // every copy within `lookup_ttl` / 2, used lately or not. A site with no record has the
  // default route (the sites of the nodes known here, and those copies used lately).
  std::map<std::string, catalog::Route> routes;
  bool routes_listed = false;
  if (!stop_) {
    absl::StatusOr<std::vector<catalog::Route>> listed = options_.catalog.view->ListRoutes();
    if (listed.ok()) {
      routes_listed = true;
      std::set<std::string> sites(recent_sites.begin(), recent_sites.end());
      for (const catalog::Node& n : nodes) sites.insert(n.site);
      {
        absl::MutexLock lock(&mu_);
        for (const auto& [name, c] : node_cache_) sites.insert(c.value.site);
      }
      for (const std::string& site : sites) {
        if (site.empty() || site == options_.site) continue;
        catalog::Route& r = routes[site];
        r.src_site = site;  // the default route unless there is a record
        r.dst_site = options_.site;
      }
      for (catalog::Route& r : *listed) {
        if (r.dst_site == options_.site && r.src_site != options_.site) {
          routes[r.src_site] = std::move(r);
        }
      }
    } else {
      log_->debug("listing routes ahead of the copies: {}", listed.status().ToString());
    }
  }
  absl::MutexLock lock(&mu_);
  for (catalog::Node& n : nodes) {
    auto [it, fresh] = node_cache_.try_emplace(n.name);
    const Stamp used = fresh ? Stamp() : it->second.used;
    it->second = {std::move(n), now, used};
  }
  if (routes_listed && route_epoch_ == epoch) {
    for (auto& [site, r] : routes) {
      auto [it, fresh] = route_cache_.try_emplace(site);
      const Stamp used = fresh ? Stamp() : it->second.used;
      it->second = {std::move(r), now, used};
    }
  }
  return all_nodes;
}

}  // namespace gfrep::replica::agent
