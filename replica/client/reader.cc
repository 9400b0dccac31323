#include "replica/client/reader.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <algorithm>
#include <cstring>
#include <random>

#include <spdlog/spdlog.h>

#include "replica/core/replica_file.h"
#include "replica/core/retry.h"
#include "replica/core/spool.h"
#include "transfer/checksum.h"
#include "transfer/client.h"
#include "transfer/errno_status.h"
#include "transfer/spool_names.h"

namespace gfrep::replica::client {
namespace {

namespace fs = std::filesystem;

absl::Status Errno(std::string_view what, int err) { return transfer::ErrnoStatus(err, what); }

// Opens `file`, checks it is a regular file of `size` bytes and, if `mtime_ns` is not 0,
// that its mtime is that stamp.
absl::StatusOr<int> OpenChecked(const fs::path& file, std::uint64_t size,
                                std::int64_t mtime_ns = 0) {
  int fd = ::open(file.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) return Errno(fmt::format("open {}", file.string()), errno);
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) ||
      static_cast<std::uint64_t>(st.st_size) != size) {
    ::close(fd);
    return absl::DataLossError(fmt::format("{}: not a regular file of {} bytes", file.string(), size));
  }
  const std::int64_t mtime =
      static_cast<std::int64_t>(st.st_mtim.tv_sec) * 1'000'000'000 + st.st_mtim.tv_nsec;
  if (mtime_ns != 0 && mtime != mtime_ns) {
    ::close(fd);
    return absl::DataLossError(fmt::format(
        "{}: modified after it was committed (mtime {} ns, recorded {} ns)", file.string(), mtime,
        mtime_ns));
  }
  return fd;
}

// Tells the catalog that this node's replica `r` is not what its record says.
void ReportLocal(const ReaderCatalog& catalog, const catalog::Replica& r, const absl::Status& why) {
  catalog::ReplicaTransition t =
      MarkBad(r.inode, r.node, r.generation,
              absl::IsNotFound(why) ? catalog::ReplicaState::kLost : catalog::ReplicaState::kCorrupt,
              fmt::format("found by a reader: {}", std::string(why.message())));
  // Best effort: the reader goes on with a remote replica either way, and the node's own
  // checks find the same again.
  (void)catalog.replicas->TransitionReplicas({t});
}

// Checks the checksum of the open replica `fd` against the catalog's (kDataLoss if not).
absl::Status VerifyOpenFile(int fd, const catalog::Attributes& attributes) {
  absl::StatusOr<transfer::ChecksumAlgorithm> algo =
      transfer::ParseChecksumAlgorithm(attributes.checksum_algo);
  if (!algo.ok()) return algo.status();
  absl::StatusOr<std::string> sum = transfer::ComputeFdChecksum(fd, attributes.size, *algo);
  if (!sum.ok()) return absl::DataLossError(sum.status().message());
  const std::string expected = CatalogChecksum(attributes);
  if (*sum != expected) {
    return absl::DataLossError(fmt::format("checksum {}, the catalog says {}", *sum, expected));
  }
  return absl::OkStatus();
}

}  // namespace

std::uint64_t ReadaheadFor(const catalog::Route* route) {
  constexpr std::uint64_t kMiB = 1 << 20;
  if (route == nullptr || route->rtt_ms <= 0) return 32 * kMiB;
  std::uint64_t bps = route->bandwidth_bps;
  if (route->route_rate_bps != 0 && (bps == 0 || route->route_rate_bps < bps)) bps = route->route_rate_bps;
  if (bps == 0) return 32 * kMiB;
  const double bdp = static_cast<double>(bps) / 8 * route->rtt_ms / 1000;
  return std::clamp(static_cast<std::uint64_t>(2 * bdp), 8 * kMiB, 256 * kMiB);
}

FileReader::~FileReader() {
  if (fd_ >= 0) ::close(fd_);
}

absl::StatusOr<std::size_t> FileReader::Read(void* buffer, std::size_t n) {
  if (remote_ != nullptr) {
    absl::StatusOr<std::size_t> got = ReadAt(position_, buffer, n);
    if (got.ok()) position_ += *got;
    return got;
  }
  while (true) {
    ssize_t got = ::read(fd_, buffer, n);
    if (got >= 0) return static_cast<std::size_t>(got);
    if (errno != EINTR) return Errno("read", errno);
  }
}

absl::StatusOr<std::size_t> FileReader::ReadAt(std::uint64_t offset, void* buffer, std::size_t n) {
  if (remote_ != nullptr) {
    for (;;) {
      absl::StatusOr<std::size_t> got = remote_->ReadAt(offset, buffer, n);
      if (got.ok()) return got;
      // The whole-file check failed: bytes of this replica were returned already, so no
      // other source can make this read right.
      if (remote_->stats().whole_file_mismatch) return got.status();
      if (!AnotherSourceMayServe(got.status())) return got.status();
      // Fail over: the next source, at the same offset. A session the agent closed while
      // idle (kUnavailable) may reopen on the same source; one that failed otherwise not.
      const std::size_t from = absl::IsUnavailable(got.status()) && !retried_same_
                                   ? source_index_
                                   : source_index_ + 1;
      retried_same_ = from == source_index_;
      spdlog::warn("reading {} from {}: {}; {}", rel_, source_node_, got.status().ToString(),
                   from < sources_.size() ? "going on with another source" : "no source left");
      remote_.reset();
      ++failovers_;
      if (absl::Status s = OpenStream(from, got.status()); !s.ok()) return s;
    }
  }
  while (true) {
    ssize_t got = ::pread(fd_, buffer, n, static_cast<off_t>(offset));
    if (got >= 0) return static_cast<std::size_t>(got);
    if (errno != EINTR) return Errno("pread", errno);
  }
}

transfer::RemoteFile::Stats FileReader::stream_stats() const {
  return remote_ != nullptr ? remote_->stats() : transfer::RemoteFile::Stats{};
}

absl::Status FileReader::OpenStream(std::size_t from, absl::Status last) {
  for (std::size_t i = from; i < sources_.size(); ++i) {
    const SourceChoice& src = sources_[i];
    absl::StatusOr<transfer::Endpoint> ep = transfer::ParseEndpoint(src.node.address);
    if (!ep.ok()) {
      last = ep.status();
      continue;
    }
    transfer::RemoteReadOptions ro;
    ro.transfer = options_.transfer;
    if (src.has_route) ro.transfer.route = ToRouteOptions(src.route, ro.transfer.route);
    ro.block_size = options_.block_size;
    ro.readahead_bytes = options_.readahead_bytes != 0
                             ? options_.readahead_bytes
                             : ReadaheadFor(src.has_route ? &src.route : nullptr);
    ro.expected_size = size_;
    ro.expected_checksum = expected_checksum_;
    absl::StatusOr<std::unique_ptr<transfer::RemoteFile>> f =
        transfer::RemoteFile::Open(*ep, rel_, ro);
    if (!f.ok()) {
      last = f.status();
      continue;
    }
    if (i != source_index_) retried_same_ = false;
    remote_ = std::move(*f);
    source_index_ = i;
    source_node_ = src.node.name;
    return absl::OkStatus();
  }
  return absl::UnavailableError(
      fmt::format("{}: every source failed; last: {}", rel_, last.ToString()));
}

absl::StatusOr<std::unique_ptr<FileReader>> Open(const ReaderCatalog& catalog,
                                                 std::string_view path,
                                                 const ReaderOptions& options) {
  absl::StatusOr<catalog::Location> loc = catalog.view->Locate(path);
  if (!loc.ok()) return loc.status();
  if (loc->attributes.type != catalog::FileType::kFile) {
    return absl::FailedPreconditionError(fmt::format("{}: is a directory", path));
  }
  if (loc->attributes.generation == 0) {
    return absl::FailedPreconditionError(fmt::format("{}: file has no content", path));
  }
  std::unique_ptr<FileReader> reader(new FileReader());
  reader->size_ = loc->attributes.size;
  reader->inode_ = loc->attributes.inode;
  reader->generation_ = loc->attributes.generation;
  const std::string rel =
      transfer::ReplicaRelativePath(loc->attributes.inode, loc->attributes.generation);

  const std::vector<catalog::Replica> current = CurrentReplicas(*loc);
  if (!options.identity.node.empty()) {
    for (const catalog::Replica& r : current) {
      if (r.node != options.identity.node) continue;
      absl::StatusOr<catalog::Node> self = catalog.view->GetNode(r.node);
      if (!self.ok()) break;
      absl::StatusOr<int> fd = OpenChecked(
          ReplicaFile(self->spool, loc->attributes.inode, loc->attributes.generation),
          reader->size_, r.mtime_ns);
      if (fd.ok() && options.verify_local) {
        absl::Status v = VerifyOpenFile(*fd, loc->attributes);
        if (!v.ok()) {
          ::close(*fd);
          fd = v;
        }
      }
      if (!fd.ok()) {
        // Not the bytes the catalog vouches for (or gone): never served; fall back to a
        // remote replica.
        if (absl::IsNotFound(fd.status()) || absl::IsDataLoss(fd.status())) {
          ReportLocal(catalog, r, fd.status());
        }
        break;
      }
      reader->fd_ = *fd;
      reader->local_ = true;
      reader->source_node_ = r.node;
      return reader;
    }
  }

  Topology topology;
  absl::StatusOr<std::vector<catalog::Node>> nodes = catalog.view->ListNodes("");
  if (!nodes.ok()) return nodes.status();
  topology.nodes = std::move(*nodes);
  absl::StatusOr<std::vector<catalog::Route>> routes = catalog.view->ListRoutes();
  if (!routes.ok()) return routes.status();
  topology.routes = std::move(*routes);
  LivenessOptions liveness;
  liveness.now_ns = catalog::SystemNowNs();
  liveness.heartbeat_timeout = options.heartbeat_timeout;
  std::vector<SourceChoice> sources = RankSources(*loc, options.identity, topology, liveness);
  if (sources.empty()) {
    absl::StatusOr<SourceChoice> why = SelectSource(*loc, options.identity, topology, liveness);
    return why.ok() ? absl::InternalError("no source") : why.status();
  }
  const std::string expected = CatalogChecksum(loc->attributes);
  if (options.replicate_on_read && !options.identity.site.empty()) {
    catalog::RequestSpec spec;
    spec.paths = {std::string(path)};
    spec.copies = 1;
    spec.dst_sites = {options.identity.site};
    spec.owner = fmt::format("read:{}", options.identity.node);
    absl::StatusOr<catalog::Request> req = catalog.work->CreateRequest(spec);
    if (req.ok()) {
      reader->replication_request_ = req->id;
    } else {
      spdlog::warn("replicate on read of {} to site {}: {}", path, options.identity.site,
                   req.status().ToString());
    }
  }
  absl::Status last = absl::UnavailableError("no source tried");
  if (options.stream) {
    // This node's own replica was refused above (or it has none): never stream it through
    // its own agent either.
    std::erase_if(sources, [&](const SourceChoice& c) {
      return !options.identity.node.empty() && c.node.name == options.identity.node;
    });
    if (sources.empty()) {
      return absl::UnavailableError(
          fmt::format("{}: no replica to read but this node's own, which was refused", path));
    }
    reader->sources_ = sources;
    reader->rel_ = rel;
    reader->expected_checksum_ = expected;
    reader->options_ = options;
    absl::Status s = reader->OpenStream(0, last);
    if (s.ok()) return reader;
    // Agents that cannot stream (built before 2026-11-25) are still read the old way.
    if (s.message().find("does not serve streaming reads") == absl::string_view::npos) return s;
    last = s;
    reader->sources_.clear();
  }
  fs::path base = options.tmp_dir.empty() ? fs::temp_directory_path() : options.tmp_dir;
  std::random_device rd;
  fs::path work = base / fmt::format(".gfrep-read-{}-{:08x}", ::getpid(), rd());
  for (const SourceChoice& src : sources) {
    absl::StatusOr<transfer::Endpoint> ep = transfer::ParseEndpoint(src.node.address);
    if (!ep.ok()) {
      last = ep.status();
      continue;
    }
    transfer::TransferOptions topts = options.transfer;
    if (src.has_route) topts.route = ToRouteOptions(src.route, topts.route);
    fs::path file = work / "data";
    absl::StatusOr<transfer::TransferStats> stats;
    {
      // AsyncPull with explicit places: the partial file and journal stay in `work`.
      stats = transfer::Pull(*ep, rel, file, topts);
    }
    std::error_code ec;
    if (!stats.ok()) {
      last = stats.status();
      fs::remove_all(work, ec);
      continue;
    }
    if (stats->checksum != expected) {
      absl::StatusOr<transfer::ChecksumAlgorithm> algo =
          transfer::ParseChecksumAlgorithm(loc->attributes.checksum_algo);
      std::string got = stats->checksum;
      if (algo.ok() && got.rfind(loc->attributes.checksum_algo + ":", 0) != 0) {
        absl::StatusOr<std::string> sum = transfer::ComputeFileChecksum(file, *algo);
        if (sum.ok()) got = *sum;
      }
      if (got != expected) {
        last = absl::DataLossError(fmt::format("{} from {}: checksum {} != catalog {}", path,
                                               src.node.name, got, expected));
        fs::remove_all(work, ec);
        continue;
      }
    }
    absl::StatusOr<int> fd = OpenChecked(file, reader->size_);
    fs::remove_all(work, ec);  // the open descriptor keeps the bytes alive
    if (!fd.ok()) {
      last = fd.status();
      continue;
    }
    reader->fd_ = *fd;
    reader->source_node_ = src.node.name;
    return reader;
  }
  return absl::UnavailableError(
      fmt::format("{}: every source failed; last: {}", path, last.ToString()));
}

}  // namespace gfrep::replica::client
