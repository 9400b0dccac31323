#include "replica/reader.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <random>

#include "replica/replica_check.h"
#include "replica/spool.h"
#include "transfer/checksum.h"
#include "transfer/client.h"
#include "transfer/spool_names.h"

namespace gfrep::replica {
namespace {

namespace fs = std::filesystem;

absl::Status Errno(std::string_view what, int err) {
  std::string msg = fmt::format("{}: {}", what, std::strerror(err));
  if (err == ENOENT) return absl::NotFoundError(msg);
  if (err == EACCES || err == EPERM) return absl::PermissionDeniedError(msg);
  return absl::InternalError(msg);
}

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
void ReportLocal(catalog::Catalog& catalog, const catalog::Replica& r, const absl::Status& why) {
  catalog::ReplicaTransition t =
      MarkBad(r.inode, r.node, r.generation,
              absl::IsNotFound(why) ? catalog::ReplicaState::kLost : catalog::ReplicaState::kCorrupt,
              fmt::format("found by a reader: {}", std::string(why.message())));
  // Best effort: the reader goes on with a remote replica either way, and the node's own
  // checks find the same again.
  (void)catalog.TransitionReplicas({t});
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

FileReader::~FileReader() {
  if (fd_ >= 0) ::close(fd_);
}

absl::StatusOr<std::size_t> FileReader::Read(void* buffer, std::size_t n) {
  while (true) {
    ssize_t got = ::read(fd_, buffer, n);
    if (got >= 0) return static_cast<std::size_t>(got);
    if (errno != EINTR) return Errno("read", errno);
  }
}

absl::StatusOr<std::size_t> FileReader::ReadAt(std::uint64_t offset, void* buffer, std::size_t n) {
  while (true) {
    ssize_t got = ::pread(fd_, buffer, n, static_cast<off_t>(offset));
    if (got >= 0) return static_cast<std::size_t>(got);
    if (errno != EINTR) return Errno("pread", errno);
  }
}

absl::StatusOr<std::unique_ptr<FileReader>> Open(catalog::Catalog& catalog, std::string_view path,
                                                 const ReaderOptions& options) {
  absl::StatusOr<catalog::Location> loc = catalog.Locate(path);
  if (!loc.ok()) return loc.status();
  if (loc->attributes.type != catalog::FileType::kFile) {
    return absl::FailedPreconditionError(fmt::format("{}: is a directory", path));
  }
  if (loc->attributes.generation == 0) {
    return absl::FailedPreconditionError(fmt::format("{}: file has no content", path));
  }
  std::unique_ptr<FileReader> reader(new FileReader());
  reader->size_ = loc->attributes.size;
  reader->generation_ = loc->attributes.generation;
  const std::string rel =
      transfer::ReplicaRelativePath(loc->attributes.inode, loc->attributes.generation);

  const std::vector<catalog::Replica> current = CurrentReplicas(*loc);
  if (!options.identity.node.empty()) {
    for (const catalog::Replica& r : current) {
      if (r.node != options.identity.node) continue;
      absl::StatusOr<catalog::Node> self = catalog.GetNode(r.node);
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
  absl::StatusOr<std::vector<catalog::Node>> nodes = catalog.ListNodes("");
  if (!nodes.ok()) return nodes.status();
  topology.nodes = std::move(*nodes);
  absl::StatusOr<std::vector<catalog::Route>> routes = catalog.ListRoutes();
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
  fs::path base = options.tmp_dir.empty() ? fs::temp_directory_path() : options.tmp_dir;
  std::random_device rd;
  fs::path work = base / fmt::format(".gfrep-read-{}-{:08x}", ::getpid(), rd());
  absl::Status last = absl::UnavailableError("no source tried");
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

}  // namespace gfrep::replica
