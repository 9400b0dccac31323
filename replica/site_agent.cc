#include "replica/site_agent.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <cstdlib>
#include <fstream>
#include <optional>
#include <random>
#include <set>

#include "replica/spool.h"
#include "transfer/checksum.h"
#include "transfer/client.h"

namespace gfrep::replica {
namespace {

namespace asio = boost::asio;
namespace fs = std::filesystem;

constexpr std::string_view kStagingDir = ".gfrep-staging";
constexpr std::string_view kTmpDir = ".gfrep-tmp";
constexpr std::string_view kIndexDir = ".gfrep-index";
constexpr std::size_t kSweepPage = 1000;

bool Transient(const absl::Status& s) {
  return absl::IsUnavailable(s) || absl::IsDeadlineExceeded(s) || absl::IsInternal(s);
}

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

absl::Status Validate(const SiteAgentOptions& o) {
  if (o.catalog == nullptr) return absl::InvalidArgumentError("site agent needs a catalog");
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
  if (o.workers < 1 || o.workers > 256) return absl::InvalidArgumentError("workers must be 1..256");
  if (o.lease.count() < 300) return absl::InvalidArgumentError("lease must be >= 300 ms");
  if (o.heartbeat_interval.count() <= 0 || o.poll_interval.count() <= 0 ||
      o.sweep_interval.count() <= 0) {
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
      log_(options_.logger ? options_.logger : spdlog::default_logger()) {
  std::random_device rd;
  owner_ = fmt::format("{}/{}-{:08x}", options_.node, ::getpid(), rd());
}

SiteAgent::~SiteAgent() { Stop(); }

SiteAgentStats SiteAgent::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
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
  catalog::Catalog& cat = *options_.catalog;
  if (options_.create_site) {
    absl::StatusOr<std::vector<catalog::Site>> sites = cat.ListSites();
    if (!sites.ok()) return sites.status();
    bool found = false;
    for (const catalog::Site& s : *sites) found = found || s.name == options_.site;
    if (!found) {
      catalog::Site site;
      site.name = options_.site;
      if (absl::Status s = cat.PutSite(site); !s.ok()) return s;
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
  return cat.RegisterNode(node);
}

void SiteAgent::CleanTemporaryFiles() {
  catalog::TaskFilter f;
  f.dst_node = options_.node;
  f.limit = catalog::kMaxBatchPaths * 4;
  absl::StatusOr<std::vector<catalog::Task>> tasks = options_.catalog->ListTasks(f);
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
  for (std::string_view dir : {kStagingDir, kTmpDir}) {
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
    if (!Transient(s)) return s;
    if (stop_) return absl::CancelledError("stopped before registration");
    log_->warn("register node {}: {} (retrying)", options_.node, s.ToString());
    SleepFor(std::chrono::milliseconds(500));
    if (stop_) return absl::CancelledError("stopped before registration");
  }
  log_->info("registered node={} site={} address={} owner={}", options_.node, options_.site,
             options_.address, owner_);
  CleanTemporaryFiles();
  // Under mu_ so that a concurrent Stop() either sees every thread or none.
  std::lock_guard<std::mutex> lock(mu_);
  if (stop_) return absl::CancelledError("stopped before the agent started");
  threads_.emplace_back([this] { HeartbeatLoop(); });
  threads_.emplace_back([this] { RenewLoop(); });
  threads_.emplace_back([this] { WatchLoop(); });
  threads_.emplace_back([this] { SweepLoop(); });
  for (int i = 0; i < options_.workers; ++i) threads_.emplace_back([this] { WorkerLoop(); });
  return absl::OkStatus();
}

void SiteAgent::Stop() {
  // Concurrent callers (a signal thread and main) wait for the first one to finish.
  std::lock_guard<std::mutex> stopping(stop_mu_);
  std::vector<std::thread> threads;
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
    for (auto& [id, io] : running_) io->stop();
    threads.swap(threads_);
  }
  wake_.notify_all();
  for (std::thread& t : threads) {
    if (t.joinable()) t.join();
  }
}

void SiteAgent::SleepFor(std::chrono::milliseconds d) {
  std::unique_lock<std::mutex> lock(mu_);
  wake_.wait_for(lock, d, [&] { return stop_.load(); });
}

void SiteAgent::HeartbeatLoop() {
  while (!stop_) {
    absl::Status s = options_.catalog->SendHeartbeat(MakeHeartbeat());
    if (absl::IsNotFound(s)) {
      // The catalog forgot us (restored or rebuilt): register again.
      s = Register();
    }
    if (!s.ok()) log_->warn("heartbeat: {}", s.ToString());
    SleepFor(options_.heartbeat_interval);
  }
}

void SiteAgent::RenewLoop() {
  while (!stop_) {
    SleepFor(options_.lease / 3);
    std::vector<std::uint64_t> ids;
    {
      std::lock_guard<std::mutex> lock(mu_);
      for (const auto& [id, io] : running_) ids.push_back(id);
    }
    for (std::uint64_t id : ids) {
      absl::StatusOr<catalog::Task> t = options_.catalog->RenewLease(id, owner_, options_.lease);
      if (t.ok()) continue;
      if (absl::IsFailedPrecondition(t.status()) || absl::IsNotFound(t.status())) {
        log_->warn("task={} lease lost: {}", id, t.status().ToString());
        std::lock_guard<std::mutex> lock(mu_);
        lease_lost_[id] = true;
        if (auto it = running_.find(id); it != running_.end()) it->second->stop();
      } else {
        log_->warn("task={} renew lease: {}", id, t.status().ToString());
      }
    }
  }
}

void SiteAgent::WatchLoop() {
  std::optional<std::uint64_t> seq;
  while (!stop_) {
    if (!seq) {
      absl::StatusOr<std::uint64_t> last = options_.catalog->LastEventSeq();
      if (!last.ok()) {
        SleepFor(std::chrono::milliseconds(500));
        continue;
      }
      seq = *last;
    }
    absl::StatusOr<std::vector<catalog::Event>> events =
        options_.catalog->ReadEvents(*seq, 1000, std::chrono::milliseconds(1000));
    if (!events.ok()) {
      seq.reset();
      SleepFor(std::chrono::milliseconds(500));
      continue;
    }
    bool ours = false;
    bool deleting = false;
    for (const catalog::Event& e : *events) {
      ours = ours || (e.kind == catalog::EventKind::kTask && e.node == options_.node &&
                      e.state == catalog::ToString(catalog::TaskState::kQueued));
      deleting = deleting || (e.kind == catalog::EventKind::kReplica && e.node == options_.node &&
                              e.state == catalog::ToString(catalog::ReplicaState::kDeleting));
    }
    if (!events->empty()) seq = events->back().seq;
    if (deleting) {
      {
        std::lock_guard<std::mutex> lock(mu_);
        sweep_wanted_ = true;
      }
      wake_.notify_all();
    }
    if (ours) {
      {
        std::lock_guard<std::mutex> lock(mu_);
        ++wake_generation_;
      }
      wake_.notify_all();
    }
  }
}

void SiteAgent::WorkerLoop() {
  while (!stop_) {
    std::uint64_t seen;
    {
      std::lock_guard<std::mutex> lock(mu_);
      seen = wake_generation_;
    }
    absl::StatusOr<catalog::Task> task =
        options_.catalog->ClaimTask(options_.node, owner_, options_.lease);
    if (task.ok()) {
      Execute(*task);
      continue;
    }
    if (!absl::IsNotFound(task.status())) {
      log_->warn("claim: {}", task.status().ToString());
    }
    std::unique_lock<std::mutex> lock(mu_);
    wake_.wait_for(lock, options_.poll_interval,
                   [&] { return stop_.load() || wake_generation_ != seen; });
  }
}

void SiteAgent::SweepLoop() {
  while (!stop_) {
    if (absl::Status s = Sweep(); !s.ok()) log_->warn("sweep: {}", s.ToString());
    std::unique_lock<std::mutex> lock(mu_);
    wake_.wait_for(lock, options_.sweep_interval,
                   [&] { return stop_.load() || sweep_wanted_; });
    sweep_wanted_ = false;
  }
}

fs::path SiteAgent::IndexPath(catalog::InodeId inode) const {
  return options_.spool / kIndexDir / std::to_string(inode);
}

absl::Status SiteAgent::WriteIndex(catalog::InodeId inode, const std::string& relative_path) {
  fs::path path = IndexPath(inode);
  std::error_code ec;
  fs::create_directories(path.parent_path(), ec);
  if (ec) {
    return absl::InternalError(
        fmt::format("create {}: {}", path.parent_path().string(), ec.message()));
  }
  fs::path tmp = path;
  tmp += ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out << relative_path;
    out.close();
    if (!out) return absl::InternalError(fmt::format("write {}", tmp.string()));
  }
  fs::rename(tmp, path, ec);
  if (ec) return absl::InternalError(fmt::format("rename {}: {}", tmp.string(), ec.message()));
  return absl::OkStatus();
}

absl::Status SiteAgent::Sweep() {
  catalog::Catalog& cat = *options_.catalog;
  catalog::InodeId after = 0;
  while (!stop_) {
    absl::StatusOr<std::vector<catalog::Replica>> page =
        cat.ListNodeReplicas(options_.node, after, kSweepPage);
    if (!page.ok()) return page.status();
    for (const catalog::Replica& r : *page) {
      if (stop_) return absl::OkStatus();
      after = r.inode;
      fs::path index = IndexPath(r.inode);
      std::error_code ec;
      if (r.state != catalog::ReplicaState::kDeleting) {
        if (fs::exists(index, ec)) continue;
        absl::StatusOr<std::string> path = cat.PathOf(r.inode);
        if (!path.ok()) continue;  // removed meanwhile: the next pass sees it deleting
        absl::StatusOr<std::string> rel = SpoolRelativePath(*path);
        if (!rel.ok()) continue;
        if (absl::Status s = WriteIndex(r.inode, *rel); !s.ok()) return s;
        continue;
      }
      // Deleting: unlink the bytes (only inside the spool), then forget the replica.
      std::string rel;
      {
        std::ifstream in(index, std::ios::binary);
        if (in) std::getline(in, rel, '\0');
      }
      if (rel.empty()) {
        log_->warn("inode={} deleting: its spool path is unknown (never indexed); bytes left",
                   r.inode);
      } else if (absl::StatusOr<fs::path> file = ReplicaPath(options_.spool, "/" + rel);
                 !file.ok()) {
        log_->warn("inode={} deleting: bad index entry {}: {}", r.inode, index.string(),
                   file.status().ToString());
      } else {
        // The path may already hold a newer file's replica (removed, stored again and
        // copied here before this pass): then the bytes are not ours to unlink. spool_mu_
        // keeps a copy from being moved into place between this check and the unlink.
        std::lock_guard<std::mutex> spool_lock(spool_mu_);
        absl::StatusOr<catalog::Location> now = cat.Locate("/" + rel);
        if (!now.ok() && !absl::IsNotFound(now.status())) return now.status();
        bool reused = false;
        if (now.ok()) {
          for (const catalog::Replica& o : now->replicas) {
            reused = reused || (o.node == options_.node && o.inode != r.inode &&
                                o.state != catalog::ReplicaState::kDeleting);
          }
        }
        if (!reused && !fs::remove(*file, ec) && ec) {
          log_->warn("inode={} unlink {}: {}", r.inode, file->string(), ec.message());
          continue;  // retried on the next pass
        }
      }
      absl::Status s = cat.RemoveReplica(r.inode, options_.node);
      if (!s.ok() && !absl::IsNotFound(s)) return s;
      fs::remove(index, ec);
      log_->info("inode={} replica deleted path={}", r.inode, rel);
      std::lock_guard<std::mutex> lock(mu_);
      stats_.replicas_deleted += 1;
    }
    if (page->size() < kSweepPage) break;
  }
  return absl::OkStatus();
}

void SiteAgent::Execute(const catalog::Task& task) {
  log_->info("task={} claimed path={} from={} attempt={}/{}", task.id, task.spec.path,
             task.spec.src_node, task.attempts, task.spec.max_attempts);
  ++active_;
  asio::io_context io;
  {
    std::lock_guard<std::mutex> lock(mu_);
    running_[task.id] = &io;
    if (stop_) io.stop();
  }
  std::uint64_t bytes = 0;
  absl::Status result = Copy(task, io, bytes);
  bool lost;
  {
    std::lock_guard<std::mutex> lock(mu_);
    running_.erase(task.id);
    lost = lease_lost_.erase(task.id) > 0;
  }
  --active_;
  if (lost) {
    log_->warn("task={} abandoned: lease lost ({})", task.id, result.ToString());
    return;
  }
  catalog::Catalog& cat = *options_.catalog;
  if (result.ok()) {
    // The bytes are in place and verified; make it durable in the catalog. Retry
    // transport errors until the lease would have run out.
    auto deadline = std::chrono::steady_clock::now() + options_.lease;
    while (true) {
      absl::StatusOr<catalog::Task> done = cat.CompleteTask(task.id, owner_);
      if (done.ok()) {
        log_->info("task={} done path={} bytes={}", task.id, task.spec.path, task.size);
        std::lock_guard<std::mutex> lock(mu_);
        stats_.tasks_done += 1;
        stats_.bytes_received += bytes;
        return;
      }
      if (Transient(done.status()) && std::chrono::steady_clock::now() < deadline && !stop_) {
        SleepFor(std::chrono::milliseconds(200));
        continue;
      }
      log_->warn("task={} complete: {}", task.id, done.status().ToString());
      return;
    }
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    stats_.tasks_failed += 1;
  }
  if (absl::IsUnavailable(result) || absl::IsDeadlineExceeded(result)) {
    std::lock_guard<std::mutex> lock(mu_);
    node_cache_.erase(task.spec.src_node);  // it may have restarted at another address
  }
  bool retryable = IsRetryable(result);
  std::chrono::milliseconds delay = BackoffDelay(options_.retry, task.attempts);
  std::string reason = fmt::format("{} (from {})", result.ToString(), task.spec.src_node);
  log_->warn("task={} attempt {} failed path={}: {}{}", task.id, task.attempts, task.spec.path,
             reason, retryable ? fmt::format(" (retry in {} ms)", delay.count()) : "");
  for (int i = 0; i < 20; ++i) {
    absl::StatusOr<catalog::Task> failed =
        cat.FailTask(task.id, owner_, reason, retryable, delay);
    if (failed.ok() || !Transient(failed.status())) break;
    SleepFor(std::chrono::milliseconds(200));
  }
}

namespace {
constexpr std::chrono::seconds kLookupTtl(10);
}  // namespace

absl::StatusOr<catalog::Node> SiteAgent::LookupNode(const std::string& name) {
  auto now = std::chrono::steady_clock::now();
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (auto it = node_cache_.find(name); it != node_cache_.end() && now - it->second.second < kLookupTtl) {
      return it->second.first;
    }
  }
  absl::StatusOr<catalog::Node> n = options_.catalog->GetNode(name);
  if (!n.ok()) return n.status();
  std::lock_guard<std::mutex> lock(mu_);
  node_cache_[name] = {*n, now};
  return n;
}

absl::StatusOr<catalog::Route> SiteAgent::LookupRoute(const std::string& src_site) {
  auto now = std::chrono::steady_clock::now();
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (auto it = route_cache_.find(src_site);
        it != route_cache_.end() && now - it->second.second < kLookupTtl) {
      return it->second.first;
    }
  }
  catalog::Route route;
  if (absl::StatusOr<catalog::Route> r = options_.catalog->GetRoute(src_site, options_.site);
      r.ok()) {
    route = *r;
  } else if (absl::IsNotFound(r.status())) {
    route.src_site = src_site;
    route.dst_site = options_.site;
  } else {
    return r.status();
  }
  std::lock_guard<std::mutex> lock(mu_);
  route_cache_[src_site] = {route, now};
  return route;
}

absl::Status SiteAgent::Copy(const catalog::Task& task, asio::io_context& io,
                             std::uint64_t& bytes_received) {
  catalog::Catalog& cat = *options_.catalog;
  absl::StatusOr<catalog::Attributes> attrs = cat.StatInode(task.inode);
  if (!attrs.ok()) {
    if (absl::IsNotFound(attrs.status())) {
      return absl::FailedPreconditionError("file was removed");
    }
    return attrs.status();
  }
  if (attrs->generation != task.generation) {
    return absl::AbortedError(fmt::format("file changed to generation {} (task is for {})",
                                          attrs->generation, task.generation));
  }
  std::string expected = CatalogChecksum(*attrs);
  if (expected.empty()) {
    return absl::FailedPreconditionError("the catalog has no checksum for this file");
  }
  absl::StatusOr<catalog::Node> src = LookupNode(task.spec.src_node);
  if (!src.ok()) return src.status();
  absl::StatusOr<transfer::Endpoint> endpoint = transfer::ParseEndpoint(src->address);
  if (!endpoint.ok()) {
    return absl::FailedPreconditionError(
        fmt::format("source node {} has a bad address '{}'", src->name, src->address));
  }
  absl::StatusOr<catalog::Route> route = LookupRoute(src->site);
  if (!route.ok()) return route.status();
  absl::StatusOr<std::string> rel = SpoolRelativePath(task.spec.path);
  if (!rel.ok()) return absl::FailedPreconditionError(std::string(rel.status().message()));

  transfer::TransferOptions topts = options_.transfer;
  topts.route = ToRouteOptions(*route, topts.route);
  if (!topts.logger) topts.logger = log_;
  std::string task_name = fmt::format("task-{}", task.id);
  fs::path staging = options_.spool / kStagingDir / task_name;
  fs::path tmp = options_.spool / kTmpDir / task_name;
  fs::path final_path = options_.spool / *rel;
  std::error_code ec;
  fs::create_directories(staging.parent_path(), ec);
  if (ec) return absl::InternalError(fmt::format("create {}: {}", staging.parent_path().string(), ec.message()));

  std::optional<absl::StatusOr<transfer::TransferStats>> result;
  asio::co_spawn(io, transfer::AsyncPull(*endpoint, *rel, staging, tmp, topts),
                 [&](std::exception_ptr e, absl::StatusOr<transfer::TransferStats> r) {
                   if (e) {
                     result = absl::InternalError("bug: exception escaped AsyncPull");
                     return;
                   }
                   result = std::move(r);
                 });
  io.run();
  if (!result) return absl::CancelledError("copy interrupted (agent stopping or lease lost)");
  if (!result->ok()) return result->status();
  const transfer::TransferStats& stats = **result;
  bytes_received = stats.bytes_transferred;

  std::string got = stats.checksum;
  if (got.rfind(attrs->checksum_algo + ":", 0) != 0) {
    absl::StatusOr<transfer::ChecksumAlgorithm> algo =
        transfer::ParseChecksumAlgorithm(attrs->checksum_algo);
    if (!algo.ok()) {
      fs::remove(staging, ec);
      return absl::FailedPreconditionError(
          fmt::format("unknown checksum algorithm '{}' in the catalog", attrs->checksum_algo));
    }
    absl::StatusOr<std::string> sum = transfer::ComputeFileChecksum(staging, *algo);
    if (!sum.ok()) return sum.status();
    got = *sum;
  }
  if (got != expected || stats.bytes != task.size) {
    fs::remove(staging, ec);
    return absl::DataLossError(fmt::format(
        "copy does not match the catalog (generation {}): {} bytes {}, catalog {} bytes {}",
        task.generation, stats.bytes, got, task.size, expected));
  }
  fs::create_directories(final_path.parent_path(), ec);
  if (ec) return absl::InternalError(fmt::format("create {}: {}", final_path.parent_path().string(), ec.message()));
  // Indexed before the rename so that a later removal can always find the bytes.
  if (absl::Status s = WriteIndex(task.inode, *rel); !s.ok()) return s;
  std::unique_lock<std::mutex> spool_lock(spool_mu_);
  fs::rename(staging, final_path, ec);
  spool_lock.unlock();
  if (ec) {
    return absl::InternalError(
        fmt::format("rename {} -> {}: {}", staging.string(), final_path.string(), ec.message()));
  }
  // The rename and any directories made for it must survive a crash before the catalog
  // calls the replica complete.
  if (absl::Status s = SyncDirectoryChain(options_.spool, final_path.parent_path()); !s.ok()) {
    return absl::InternalError(fmt::format("make {} durable: {}", final_path.string(),
                                           std::string(s.message())));
  }
  fs::remove_all(tmp, ec);  // ignored: only leftovers of a finished copy
  return absl::OkStatus();
}

}  // namespace gfrep::replica
