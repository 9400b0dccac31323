#include "netprobe/disk_probe.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <system_error>
#include <thread>

#include "transfer/units.h"

namespace gfrep::netprobe {

namespace {

using Json = nlohmann::json;
using Clock = std::chrono::steady_clock;

constexpr std::uint64_t kMiB = 1ull << 20;
constexpr std::uint64_t kHeadroom = kMiB;  // metadata and extents beyond the data

std::string Errno(int err) { return std::error_code(err, std::generic_category()).message(); }

absl::Status FromErrno(int err, std::string_view what) {
  std::string msg = fmt::format("{}: {}", what, Errno(err));
  if (err == ENOSPC || err == EDQUOT) return absl::ResourceExhaustedError(msg);
  if (err == EACCES || err == EPERM || err == EROFS) return absl::PermissionDeniedError(msg);
  if (err == ENOENT) return absl::NotFoundError(msg);
  return absl::InternalError(msg);
}

std::string FsType(const std::filesystem::path& dir) {
  struct statfs s {};
  if (::statfs(dir.c_str(), &s) != 0) return "unknown";
  switch (static_cast<std::uint64_t>(s.f_type)) {
    case 0xEF53:
      return "ext2/3/4";
    case 0x01021994:
      return "tmpfs";
    case 0x858458F6:
      return "ramfs";
    case 0x58465342:
      return "xfs";
    case 0x9123683E:
      return "btrfs";
    case 0x6969:
      return "nfs";
    case 0x794C7630:
      return "overlayfs";
    case 0x65735546:
      return "fuse";
    case 0x2FC12FC1:
      return "zfs";
    case 0xF2F52010:
      return "f2fs";
    default:
      return fmt::format("0x{:x}", static_cast<std::uint64_t>(s.f_type));
  }
}

// A file descriptor closed on scope exit.
class Fd {
 public:
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }

 private:
  int fd_;
};

// Removes the probe file on scope exit, whatever happened.
class Unlinker {
 public:
  explicit Unlinker(std::filesystem::path p) : path_(std::move(p)) {}
  ~Unlinker() { (void)::unlink(path_.c_str()); }  // ignored: best-effort cleanup (may not exist)
  Unlinker(const Unlinker&) = delete;
  Unlinker& operator=(const Unlinker&) = delete;
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

struct AlignedFree {
  void operator()(char* p) const { std::free(p); }
};
using Buffer = std::unique_ptr<char, AlignedFree>;

Buffer AlignedBuffer(std::uint64_t size) {
  // aligned_alloc wants a size that is a multiple of the alignment; Validate made sure.
  Buffer b(static_cast<char*>(std::aligned_alloc(kDiskAlign, size)));
  if (b) {
    // Not zeros: some storage compresses or skips them.
    for (std::uint64_t i = 0; i < size; ++i) b.get()[i] = static_cast<char>((i * 131 + 17) & 0xff);
  }
  return b;
}

std::filesystem::path ProbePath(const std::filesystem::path& dir) {
  static std::atomic<int> counter{0};
  return dir / fmt::format(".gfprobe-disk-{}-{}", ::getpid(), counter.fetch_add(1));
}

int OpenFlags(DiskMode mode, DiskOp op) {
  int flags = O_CLOEXEC | (op == DiskOp::kWrite ? (O_WRONLY | O_CREAT | O_EXCL) : O_RDONLY);
  if (mode == DiskMode::kDirect) flags |= O_DIRECT;
  return flags;
}

// What one stream did.
struct StreamResult {
  std::uint64_t bytes = 0;
  int err = 0;
  const char* what = "";
};

// One stream: io_size calls over [start, start + length) until done or the deadline.
void RunStream(int fd, DiskOp op, std::uint64_t io_size, std::uint64_t start, std::uint64_t length,
               Clock::time_point deadline, StreamResult& out) {
  Buffer buf = AlignedBuffer(io_size);
  if (!buf) {
    out.err = ENOMEM;
    out.what = "aligned_alloc";
    return;
  }
  std::uint64_t done = 0;
  while (done < length) {
    if (op == DiskOp::kWrite && Clock::now() >= deadline) break;
    const std::uint64_t want = std::min(io_size, length - done);
    std::uint64_t got = 0;
    while (got < want) {
      const auto off = static_cast<off_t>(start + done + got);
      ssize_t n = op == DiskOp::kWrite ? ::pwrite(fd, buf.get() + got, want - got, off)
                                       : ::pread(fd, buf.get() + got, want - got, off);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) {
        out.err = errno;
        out.what = op == DiskOp::kWrite ? "pwrite" : "pread";
        out.bytes = done + got;
        return;
      }
      if (n == 0) {
        out.err = EIO;
        out.what = op == DiskOp::kWrite ? "pwrite wrote nothing" : "pread hit the end of the file";
        out.bytes = done + got;
        return;
      }
      got += static_cast<std::uint64_t>(n);
    }
    done += want;
  }
  out.bytes = done;
}

// Runs `parallel` streams over their regions (`lengths[i]` bytes at i x region) and joins
// them. Returns the seconds taken; `lengths` becomes what each stream moved.
absl::StatusOr<double> RunStreams(int fd, DiskOp op, std::uint64_t io_size, std::uint64_t region,
                                  std::vector<std::uint64_t>& lengths, Clock::time_point deadline) {
  std::vector<StreamResult> results(lengths.size());
  std::vector<std::thread> threads;
  threads.reserve(lengths.size());
  const Clock::time_point t0 = Clock::now();
  for (std::size_t i = 0; i < lengths.size(); ++i) {
    threads.emplace_back(RunStream, fd, op, io_size, i * region, lengths[i], deadline,
                         std::ref(results[i]));
  }
  for (std::thread& t : threads) t.join();
  const double seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  for (std::size_t i = 0; i < results.size(); ++i) {
    if (results[i].err != 0) return FromErrno(results[i].err, results[i].what);
    lengths[i] = results[i].bytes;
  }
  return seconds;
}

struct Measurement {
  DiskRow write;
  DiskRow read;
};

// One measurement: write a fresh file with `parallel` streams (+ fdatasync), drop its cache,
// read it back with as many streams; the file is removed on return.
absl::StatusOr<Measurement> Measure(const DiskProbeOptions& o, DiskMode mode, std::uint64_t io_size,
                                    int parallel) {
  const std::uint64_t region = o.bytes / static_cast<std::uint64_t>(parallel) / io_size * io_size;
  Unlinker file(ProbePath(o.dir));
  std::vector<std::uint64_t> lengths(static_cast<std::size_t>(parallel), region);
  Measurement m;
  m.write = {mode, DiskOp::kWrite, io_size, parallel, 0, 0};
  m.read = {mode, DiskOp::kRead, io_size, parallel, 0, 0};
  {
    const Clock::time_point t0 = Clock::now();
    Fd fd(::open(file.path().c_str(), OpenFlags(mode, DiskOp::kWrite), 0600));
    if (fd.get() < 0) {
      const int err = errno;
      return FromErrno(err, fmt::format("create {}", file.path().string()));
    }
    absl::StatusOr<double> s = RunStreams(fd.get(), DiskOp::kWrite, io_size, region, lengths,
                                          Clock::now() + o.max_phase_time);
    if (!s.ok()) {
      return absl::Status(s.status().code(), fmt::format("write {}: {}", file.path().string(),
                                                         std::string(s.status().message())));
    }
    if (::fdatasync(fd.get()) != 0) {
      const int err = errno;
      return FromErrno(err, "fdatasync");
    }
    m.write.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
    for (std::uint64_t n : lengths) m.write.bytes += n;
  }
  Fd fd(::open(file.path().c_str(), OpenFlags(mode, DiskOp::kRead)));
  if (fd.get() < 0) {
    const int err = errno;
    return FromErrno(err, fmt::format("open {}", file.path().string()));
  }
  // The data is on the disk (fdatasync above); drop the clean cached pages so that the reads
  // go to the disk. Advice only: a file system may keep them (tmpfs: memory is the disk).
  (void)::posix_fadvise(fd.get(), 0, 0, POSIX_FADV_DONTNEED);  // ignored: advice only
  absl::StatusOr<double> s =
      RunStreams(fd.get(), DiskOp::kRead, io_size, region, lengths, Clock::time_point::max());
  if (!s.ok()) {
    return absl::Status(s.status().code(), fmt::format("read {}: {}", file.path().string(),
                                                       std::string(s.status().message())));
  }
  m.read.seconds = *s;
  for (std::uint64_t n : lengths) m.read.bytes += n;
  return m;
}

// OK when O_DIRECT works in `dir`: creating, writing and reading one aligned block.
// kUnimplemented with the reason when the file system refuses it (EINVAL); other errors as is.
absl::Status CheckDirect(const std::filesystem::path& dir) {
  Unlinker file(ProbePath(dir));
  Buffer buf = AlignedBuffer(kDiskAlign);
  if (!buf) return absl::ResourceExhaustedError("aligned_alloc");
  auto refuse = [](int err, std::string_view what) {
    if (err == EINVAL || err == EOPNOTSUPP) {
      return absl::UnimplementedError(fmt::format("{} with O_DIRECT: {}", what, Errno(err)));
    }
    return FromErrno(err, fmt::format("{} with O_DIRECT", what));
  };
  Fd w(::open(file.path().c_str(), OpenFlags(DiskMode::kDirect, DiskOp::kWrite), 0600));
  if (w.get() < 0) return refuse(errno, "open");
  if (ssize_t n = ::pwrite(w.get(), buf.get(), kDiskAlign, 0);
      n != static_cast<ssize_t>(kDiskAlign)) {
    return refuse(n < 0 ? errno : EIO, "write");
  }
  Fd r(::open(file.path().c_str(), OpenFlags(DiskMode::kDirect, DiskOp::kRead)));
  if (r.get() < 0) return refuse(errno, "open for reading");
  if (ssize_t n = ::pread(r.get(), buf.get(), kDiskAlign, 0);
      n != static_cast<ssize_t>(kDiskAlign)) {
    return refuse(n < 0 ? errno : EIO, "read");
  }
  return absl::OkStatus();
}

absl::Status CheckDir(const DiskProbeOptions& o, DiskProbeResult& r) {
  struct stat st {};
  if (::stat(o.dir.c_str(), &st) != 0) {
    const int err = errno;
    if (err == ENOENT)
      return absl::NotFoundError(fmt::format("{}: no such directory", o.dir.string()));
    return FromErrno(err, o.dir.string());
  }
  if (!S_ISDIR(st.st_mode)) {
    return absl::FailedPreconditionError(fmt::format("{}: not a directory", o.dir.string()));
  }
  if (::access(o.dir.c_str(), W_OK) != 0) {
    const int err = errno;
    return absl::PermissionDeniedError(
        fmt::format("{}: not writable: {}", o.dir.string(), Errno(err)));
  }
  struct statvfs vfs {};
  if (::statvfs(o.dir.c_str(), &vfs) != 0) {
    const int err = errno;
    return FromErrno(err, fmt::format("statvfs {}", o.dir.string()));
  }
  if (vfs.f_blocks == 0) {
    r.notes.push_back("the file system reports no size (e.g. ramfs): free space not checked");
    return absl::OkStatus();
  }
  r.free_bytes = static_cast<std::uint64_t>(vfs.f_bavail) * vfs.f_frsize;
  if (r.free_bytes < o.bytes + kHeadroom) {
    return absl::ResourceExhaustedError(fmt::format(
        "not enough free space in {}: {} free, the probe writes {} per measurement (+1 MiB); "
        "use a smaller --bytes",
        o.dir.string(), transfer::HumanBytes(r.free_bytes), transfer::HumanBytes(o.bytes)));
  }
  return absl::OkStatus();
}

bool IsPowerOfTwo(std::uint64_t v) { return v != 0 && (v & (v - 1)) == 0; }

}  // namespace

const char* ToString(DiskMode mode) { return mode == DiskMode::kDirect ? "direct" : "buffered"; }
const char* ToString(DiskOp op) { return op == DiskOp::kRead ? "read" : "write"; }

absl::Status Validate(const DiskProbeOptions& o) {
  if (o.dir.empty()) return absl::InvalidArgumentError("no directory to measure");
  if (o.bytes < kDiskAlign || o.bytes > (1ull << 40)) {
    return absl::InvalidArgumentError("bytes must be 4 KiB..1 TiB");
  }
  if (!o.buffered && !o.direct) return absl::InvalidArgumentError("neither buffered nor direct");
  if (o.io_sizes.empty() && o.parallel.empty())
    return absl::InvalidArgumentError("no sizes and no parallel streams");
  for (std::uint64_t s : o.io_sizes) {
    if (s == 0 || s % kDiskAlign != 0 || s > catalog::kMaxDiskIoSize) {
      return absl::InvalidArgumentError(
          fmt::format("I/O size {} must be a multiple of 4 KiB, at most 1 GiB", s));
    }
    if (s > o.bytes) {
      return absl::InvalidArgumentError(
          fmt::format("I/O size {} is larger than the bytes per measurement ({})", transfer::HumanBytes(s),
                      transfer::HumanBytes(o.bytes)));
    }
  }
  if (!o.parallel.empty()) {
    if (o.parallel_io_size == 0 || o.parallel_io_size % kDiskAlign != 0 ||
        o.parallel_io_size > catalog::kMaxDiskIoSize) {
      return absl::InvalidArgumentError(
          "the parallel sweep's I/O size must be a multiple of 4 KiB, at most 1 GiB");
    }
  }
  for (int p : o.parallel) {
    if (p < 1 || p > 64)
      return absl::InvalidArgumentError(fmt::format("parallel {} must be 1..64", p));
    if (static_cast<std::uint64_t>(p) * o.parallel_io_size > o.bytes) {
      return absl::InvalidArgumentError(
          fmt::format("{} streams of {} I/Os need at least {} per measurement", p,
                      transfer::HumanBytes(o.parallel_io_size),
                      transfer::HumanBytes(static_cast<std::uint64_t>(p) * o.parallel_io_size)));
    }
  }
  if (o.max_phase_time.count() <= 0)
    return absl::InvalidArgumentError("max_phase_time must be positive");
  return absl::OkStatus();
}

absl::StatusOr<DiskProbeResult> ProbeDisk(const DiskProbeOptions& o) {
  if (absl::Status s = Validate(o); !s.ok()) return s;
  DiskProbeResult r;
  r.dir = o.dir.string();
  r.bytes_per_measurement = o.bytes;
  if (absl::Status s = CheckDir(o, r); !s.ok()) return s;
  r.fs_type = FsType(o.dir);

  std::vector<DiskMode> modes;
  if (o.buffered) modes.push_back(DiskMode::kBuffered);
  if (o.direct) {
    absl::Status s = CheckDirect(o.dir);
    if (s.ok()) {
      modes.push_back(DiskMode::kDirect);
      r.direct_measured = true;
    } else if (absl::IsUnimplemented(s)) {
      r.direct_note = fmt::format("unsupported: {}", std::string(s.message()));
    } else {
      return s;
    }
  } else {
    r.direct_note = "not measured";
  }

  // The size sweep at one stream, then the stream sweep at one size (its one-stream point is
  // in the size sweep already when that size is).
  std::vector<std::pair<std::uint64_t, int>> points;
  for (std::uint64_t s : o.io_sizes) points.emplace_back(s, 1);
  for (int p : o.parallel) {
    if (std::find(points.begin(), points.end(), std::pair{o.parallel_io_size, p}) == points.end()) {
      points.emplace_back(o.parallel_io_size, p);
    }
  }
  for (DiskMode mode : modes) {
    for (const auto& [size, parallel] : points) {
      absl::StatusOr<Measurement> m = Measure(o, mode, size, parallel);
      if (!m.ok()) {
        return absl::Status(
            m.status().code(),
            fmt::format("{} I/O of {} x {} streams: {}", ToString(mode), transfer::HumanBytes(size), parallel,
                        std::string(m.status().message())));
      }
      r.rows.push_back(m->write);
      r.rows.push_back(m->read);
    }
  }
  r.notes.push_back("writes include the fdatasync at the end (the page cache cannot flatter them)");
  r.notes.push_back(
      "reads follow fdatasync + posix_fadvise(DONTNEED) of the file, so buffered reads measure the "
      "disk" +
      std::string(r.fs_type == "tmpfs" || r.fs_type == "ramfs" ? " (here memory is the disk)"
                                                               : ""));
  r.measured_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(
                      std::chrono::system_clock::now().time_since_epoch())
                      .count();
  return r;
}

absl::StatusOr<DiskAdvice> RecommendDisk(const DiskProbeResult& result, int streams) {
  const DiskRow* best = nullptr;
  for (const DiskRow& row : result.rows) {
    if (row.op != DiskOp::kWrite || row.parallel < 1 || row.parallel > streams || !(row.MBps() > 0))
      continue;
    if (best == nullptr || row.MBps() > best->MBps()) best = &row;
  }
  if (best == nullptr) {
    return absl::FailedPreconditionError(
        fmt::format("no write measurement with 1..{} streams to recommend from", streams));
  }
  const double threshold = kDiskGoodEnough * best->MBps();
  const DiskRow* chosen = nullptr;
  for (const DiskRow& row : result.rows) {
    if (row.op != DiskOp::kWrite || row.parallel < 1 || row.parallel > streams ||
        !(row.MBps() >= threshold)) {
      continue;
    }
    if (chosen == nullptr || row.io_size < chosen->io_size ||
        (row.io_size == chosen->io_size && row.MBps() > chosen->MBps())) {
      chosen = &row;
    }
  }
  DiskAdvice a;
  catalog::DiskProfile& p = a.profile;
  p.dir = result.dir;
  p.measured_ns = result.measured_ns;
  p.write_io_size_bytes = chosen->io_size;
  p.direct = chosen->mode == DiskMode::kDirect;
  a.parallel = chosen->parallel;
  for (const DiskRow& row : result.rows) {
    double& best_rate = row.op == DiskOp::kWrite ? p.write_mbps : p.read_mbps;
    best_rate = std::max(best_rate, row.MBps());
  }
  // About one second of writing between flushes: bounded dirty data, short flush stalls.
  const double per_second = chosen->MBps() * 1e6;
  std::uint64_t flush = 8 * kMiB;
  while (static_cast<double>(flush * 2) <= per_second && flush < (1ull << 30)) flush *= 2;
  while (flush < chosen->io_size) flush *= 2;
  if (!IsPowerOfTwo(chosen->io_size))
    flush = (flush + chosen->io_size - 1) / chosen->io_size * chosen->io_size;
  p.flush_interval_bytes = flush;

  a.reasons.push_back(fmt::format(
      "write I/O size {}: the smallest within {:.0f} % of the best write rate with 1..{} streams "
      "({:.0f} MB/s: {} {} with {} stream{}); it reached {:.0f} MB/s with {} stream{}",
      transfer::HumanBytes(chosen->io_size), kDiskGoodEnough * 100, streams, best->MBps(),
      transfer::HumanBytes(best->io_size), ToString(best->mode), best->parallel,
      best->parallel == 1 ? "" : "s", chosen->MBps(), chosen->parallel,
      chosen->parallel == 1 ? "" : "s"));
  if (p.direct) {
    a.reasons.push_back(
        "O_DIRECT: its rows were the faster at that size; data bypasses the page cache "
        "(aligned 4 KiB buffers)");
  } else if (result.direct_measured) {
    a.reasons.push_back("buffered: faster than O_DIRECT at that size");
  } else {
    a.reasons.push_back(fmt::format(
        "buffered: O_DIRECT {}", result.direct_note.empty() ? "not measured" : result.direct_note));
  }
  a.reasons.push_back(
      fmt::format("flush every {}: about one second of writing at {:.0f} MB/s (8 MiB..1 GiB)",
                  transfer::HumanBytes(flush), chosen->MBps()));
  return a;
}

namespace {

std::string DirectText(const DiskProbeResult& r) {
  if (r.direct_measured) return "supported";
  return r.direct_note.empty() ? "not measured" : r.direct_note;
}

}  // namespace

std::string ToJson(const DiskProbeResult& r, const absl::StatusOr<DiskAdvice>& advice) {
  Json j;
  j["dir"] = r.dir;
  j["fs_type"] = r.fs_type;
  j["bytes_per_measurement"] = r.bytes_per_measurement;
  j["free_bytes"] = r.free_bytes;
  j["direct"] = DirectText(r);
  j["notes"] = r.notes;
  j["measured_ns"] = r.measured_ns;
  Json rows = Json::array();
  for (const DiskRow& row : r.rows) {
    rows.push_back({{"mode", ToString(row.mode)},
                    {"op", ToString(row.op)},
                    {"io_size", row.io_size},
                    {"parallel", row.parallel},
                    {"bytes", row.bytes},
                    {"seconds", row.seconds},
                    {"mb_per_s", row.MBps()}});
  }
  j["rows"] = rows;
  if (advice.ok()) {
    const catalog::DiskProfile& p = advice->profile;
    j["recommendation"] = {{"write_io_size_bytes", p.write_io_size_bytes},
                           {"direct", p.direct},
                           {"flush_interval_bytes", p.flush_interval_bytes},
                           {"parallel", advice->parallel},
                           {"write_mbps", p.write_mbps},
                           {"read_mbps", p.read_mbps},
                           {"reasons", advice->reasons}};
  } else {
    j["recommendation_error"] = std::string(advice.status().message());
  }
  return j.dump();
}

std::string FormatTable(const DiskProbeResult& r, const absl::StatusOr<DiskAdvice>& advice) {
  std::string out =
      fmt::format("disk {} ({}): {} per measurement, {} free\n", r.dir, r.fs_type,
                  transfer::HumanBytes(r.bytes_per_measurement),
                  r.free_bytes > 0 ? transfer::HumanBytes(r.free_bytes) : std::string("unknown"));
  out += fmt::format("O_DIRECT: {}\n", DirectText(r));
  out += fmt::format("{:<9} {:<6} {:>9} {:>8} {:>10} {:>9} {:>9}\n", "MODE", "OP", "IO SIZE",
                     "PARALLEL", "BYTES", "SECONDS", "MB/s");
  for (const DiskRow& row : r.rows) {
    out += fmt::format("{:<9} {:<6} {:>9} {:>8} {:>10} {:>9.3f} {:>9.1f}\n", ToString(row.mode),
                       ToString(row.op), transfer::HumanBytes(row.io_size), row.parallel,
                       transfer::HumanBytes(row.bytes), row.seconds, row.MBps());
  }
  if (!r.direct_measured && !r.direct_note.empty()) {
    out += fmt::format("direct    -      (O_DIRECT {})\n", r.direct_note);
  }
  for (const std::string& n : r.notes) out += fmt::format("note: {}\n", n);
  if (advice.ok()) {
    const catalog::DiskProfile& p = advice->profile;
    out += fmt::format(
        "recommended: write I/O size {}, {}, flush every {} (best write {:.0f} MB/s, read "
        "{:.0f} MB/s)\n",
        transfer::HumanBytes(p.write_io_size_bytes), p.direct ? "O_DIRECT" : "buffered",
        transfer::HumanBytes(p.flush_interval_bytes), p.write_mbps, p.read_mbps);
    for (const std::string& line : advice->reasons) out += fmt::format("  {}\n", line);
  } else {
    out += fmt::format("no recommendation: {}\n", std::string(advice.status().message()));
  }
  return out;
}

}  // namespace gfrep::netprobe
