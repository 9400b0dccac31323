#pragma once

// `gfprobe disk DIR`: the storage "standard characteristic" of a node. Measures how fast the
// file system holding DIR writes and reads against the size of each I/O call (at one stream)
// and against the number of parallel streams (at one I/O size), buffered and with O_DIRECT,
// and recommends how the engine should write there (RecommendDisk: pure, unit-tested).
//
// Method, per measurement: a fresh file DIR/.gfprobe-disk-<pid>-<n>; P threads each pwrite
// their own region of it (one I/O size, increasing offsets), then one fdatasync. The time
// includes the fdatasync, so the page cache cannot make writes look faster than the disk.
// Then the file's cached pages are dropped (posix_fadvise DONTNEED after the fdatasync) and P
// threads pread the same regions back, so buffered reads come from the disk too (on tmpfs
// and ramfs memory is the disk). The file is removed after each measurement and on every
// error path. O_DIRECT uses 4096-aligned buffers; a file system that refuses it (EINVAL, e.g.
// ramfs, or tmpfs before Linux 6.6) makes that mode "unsupported", never a failure.
//
// Thread safety: ProbeDisk blocks the calling thread and starts (and joins) up to
// max(parallel) threads of its own; call it from a tool's main thread or a blocking pool.

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "catalog/types.h"

namespace gfrep::netprobe {

inline constexpr std::uint64_t kDiskAlign = 4096;

struct DiskProbeOptions {
  // The directory whose file system is measured (the node's spool). Must exist, writable.
  std::filesystem::path dir;
  // Bytes written (then read) by each measurement, over all its streams. Free space for it
  // is checked (statvfs) before anything is written.
  std::uint64_t bytes = 256ull << 20;
  // I/O sizes of the sweep at one stream; multiples of 4096, at most `bytes`.
  std::vector<std::uint64_t> io_sizes = {4ull << 10, 64ull << 10, 256ull << 10,
                                         1ull << 20, 4ull << 20,  16ull << 20};
  // Stream counts of the sweep at `parallel_io_size` (1..64).
  std::vector<int> parallel = {1, 2, 4, 8, 16};
  // I/O size of the parallel sweep; `bytes` must hold one I/O per stream.
  std::uint64_t parallel_io_size = 1ull << 20;
  bool buffered = true;  // measure buffered I/O
  bool direct = true;    // measure O_DIRECT (reported unsupported where refused)
  // A write phase stops after this long (slow disks, 4 KiB direct writes); the bytes it
  // managed are measured and then read back.
  std::chrono::milliseconds max_phase_time{20'000};
};

// kInvalidArgument naming the option.
absl::Status Validate(const DiskProbeOptions& options);

enum class DiskMode { kBuffered, kDirect };
enum class DiskOp { kWrite, kRead };
const char* ToString(DiskMode mode);  // "buffered", "direct"
const char* ToString(DiskOp op);      // "write", "read"

struct DiskRow {
  DiskMode mode = DiskMode::kBuffered;
  DiskOp op = DiskOp::kWrite;
  std::uint64_t io_size = 0;
  int parallel = 1;
  std::uint64_t bytes = 0;  // moved (writes: fdatasync included in seconds)
  double seconds = 0;
  double MBps() const { return seconds > 0 ? static_cast<double>(bytes) / seconds / 1e6 : 0; }
};

struct DiskProbeResult {
  std::string dir;
  std::string fs_type;           // "ext2/3/4", "tmpfs", ... or the statfs magic in hex
  std::uint64_t free_bytes = 0;  // before the probe; 0 with a file system of no size
  std::uint64_t bytes_per_measurement = 0;
  bool direct_measured = false;    // O_DIRECT rows are present
  std::string direct_note;         // why not: "unsupported: <reason>" or "not measured"
  std::vector<DiskRow> rows;       // in the order measured
  std::vector<std::string> notes;  // how to read the figures
  std::int64_t measured_ns = 0;    // Unix time of the end
};

// kNotFound: DIR does not exist; kFailedPrecondition: not a directory; kPermissionDenied:
// not writable; kResourceExhausted: less free space than options.bytes (+1 MiB), or the
// disk filled up meanwhile; kInvalidArgument from Validate; kInternal for other I/O errors.
// The probe's files are gone when it returns, whatever it returns.
absl::StatusOr<DiskProbeResult> ProbeDisk(const DiskProbeOptions& options);

struct DiskAdvice {
  catalog::DiskProfile profile;      // ready for Catalog::PutNodeDisk
  int parallel = 1;                  // the stream count of the chosen row
  std::vector<std::string> reasons;  // one line per setting
};

// Share of the best write rate a smaller I/O size must reach to be chosen.
inline constexpr double kDiskGoodEnough = 0.9;

// The write I/O size: the smallest size whose write rate is within kDiskGoodEnough of the
// best write rate among the rows with 1..`streams` parallel streams (both modes); O_DIRECT
// when the best row of that size is a direct one. The flush interval: about one second of
// writing at the chosen row's rate, a power of two, 8 MiB..1 GiB and at least the I/O size.
// write_mbps / read_mbps are the best of all rows. Pure.
// kFailedPrecondition: no write row with 1..streams streams.
absl::StatusOr<DiskAdvice> RecommendDisk(const DiskProbeResult& result, int streams);

// One JSON object: dir, fs_type, bytes_per_measurement, free_bytes, "direct" ("supported",
// "unsupported: <reason>" or "not measured"), notes, rows [{mode, op, io_size, parallel,
// bytes, seconds, mb_per_s}] and "recommendation" (or "recommendation_error").
std::string ToJson(const DiskProbeResult& result, const absl::StatusOr<DiskAdvice>& advice);
// The same as a table for people.
std::string FormatTable(const DiskProbeResult& result, const absl::StatusOr<DiskAdvice>& advice);

}  // namespace gfrep::netprobe
