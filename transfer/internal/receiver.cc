#include "transfer/internal/receiver.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <map>

#include "absl/status/status.h"
#include "transfer/checksum.h"
#include "transfer/durable_file.h"
#include "transfer/internal/xxh.h"

namespace gfrep::transfer::internal {
namespace {

using SteadyTime = std::chrono::steady_clock;

// Opens `path` and takes the exclusive lock of the inode that is at `path` once locked (the
// holder before us may have renamed or removed the one we opened). -1 and errno
// EWOULDBLOCK when another session holds it.
int OpenLocked(const std::filesystem::path& path) {
  for (int attempt = 0; attempt < 8; ++attempt) {
    int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0644);
    if (fd < 0) return -1;
    if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
      int e = errno;
      ::close(fd);
      errno = e;
      return -1;
    }
    struct stat held {
    }, named{};
    if (::fstat(fd, &held) == 0 && ::stat(path.c_str(), &named) == 0 &&
        held.st_dev == named.st_dev && held.st_ino == named.st_ino) {
      return fd;
    }
    ::close(fd);  // that inode was committed or dropped by its holder: open the name again
  }
  errno = EAGAIN;
  return -1;
}

// Writes [p, p + n) at `off`, in calls of at most `io_size` bytes (0: as few as possible).
absl::Status WriteAt(const DestinationFile& dst, const unsigned char* p, std::size_t n,
                     std::uint64_t off, std::size_t io_size) {
  std::size_t w = 0;
  while (w < n) {
    const std::size_t k = io_size == 0 ? n - w : std::min(io_size, n - w);
    ssize_t r = ::pwrite(dst.fd, p + w, k, static_cast<off_t>(off + w));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0)
      return ErrnoStatus(r < 0 ? errno : ENOSPC, fmt::format("write {}", dst.part_path.string()));
    w += static_cast<std::size_t>(r);
  }
  return absl::OkStatus();
}

// Drops the partial file and its journal (the lock is held, so they are ours).
void Discard(const DestinationFile& dst) {
  std::error_code ec;
  std::filesystem::remove(dst.journal_path, ec);
  std::filesystem::remove(dst.part_path, ec);
  (void)ec;  // ignored: best-effort cleanup of a file that failed its checksum
}

// A page-aligned buffer of `cap` bytes, allocated at its first get().
struct ReadBackBuffer {
  explicit ReadBackBuffer(std::size_t cap) : cap(cap) {}
  unsigned char* get() {
    if (!data) data.reset(static_cast<unsigned char*>(std::aligned_alloc(4096, cap)));
    return data.get();
  }
  const std::size_t cap;
  std::unique_ptr<unsigned char, decltype(&std::free)> data{nullptr, &std::free};
};

struct ReceiverState {
  explicit ReceiverState(const asio::any_io_executor& ex)
      : flush_done(ex, SteadyTime::time_point::max()) {}
  bool failed = false;
  std::uint64_t received_now = 0;
  std::vector<ByteRange> pending;
  std::uint64_t pending_bytes = 0;
  bool flushing = false;
  absl::Status flush_error;
  int bad_blocks = 0;
  asio::steady_timer flush_done;
  // Blocks being received right now (at most one per stream): a frame overlapping one of
  // these, or dst.received, is refused.
  std::vector<ByteRange> in_flight;
  // The end-to-end checksum advances over the received prefix of the file as blocks land:
  // the block at the frontier is hashed from the receive buffer (one pass), blocks that
  // arrived ahead of it (or were resumed) are read back once the frontier reaches them.
  // Null after a damaged frontier block: the whole file is then read back at the end.
  std::unique_ptr<FileHasher> file_hasher;  // covers [0, hashed_upto) of the partial file
  std::uint64_t hashed_upto = 0;
  bool frontier_claimed = false;  // a stream is hashing the block at hashed_upto inline
  // With the xxh3-tree checksum (`tree` set) none of the above (file_hasher is null, no pool):
  // each tree frame (IsTreeFrame) is checked by its leaves' digests, which go into `tree` in
  // any order; leaves no tree frame brought (resumed ranges, small blocks) are read back at
  // the end.
  std::shared_ptr<TreeChecksum> tree;
  // Blocks that passed their block checksum ahead of the frontier, kept in their receive
  // buffers (keyed by offset) until the frontier reaches them; at most pool_limit bytes.
  // A block that does not fit is read back from the partial file instead.
  struct PooledBlock {
    std::unique_ptr<unsigned char[]> data;
    std::uint64_t length = 0;
  };
  std::map<std::uint64_t, PooledBlock> pool;
  std::uint64_t pool_limit = 0;
  std::uint64_t pool_used = 0;  // bytes of the pooled blocks plus blocks being received into one
  // Read-back scratch of the catch-up (used on the receive thread only, one at a time),
  // made at its first read-back: a file whose blocks all arrive in order never needs it.
  ReadBackBuffer scratch{256 * 1024};
  std::vector<std::unique_ptr<unsigned char[]>> spare;  // released stripe-unit buffers, reused
  std::uint64_t spare_size = 0;                         // size of each spare buffer
  std::uint64_t pooled_blocks = 0;                      // stats for tests/logs
  std::uint64_t read_back_bytes = 0;

  bool InFlightOverlaps(const ByteRange& r) const {
    return std::any_of(in_flight.begin(), in_flight.end(),
                       [&](const ByteRange& f) { return f.begin < r.end && r.begin < f.end; });
  }
  std::unique_ptr<unsigned char[]> TakeBuffer(std::uint64_t length) {
    if (length == spare_size && !spare.empty()) {
      auto b = std::move(spare.back());
      spare.pop_back();
      return b;
    }
    return std::make_unique_for_overwrite<unsigned char[]>(length);
  }
  void ReleaseBuffer(std::unique_ptr<unsigned char[]> b, std::uint64_t length) {
    pool_used -= length;
    if (length == spare_size && b != nullptr) spare.push_back(std::move(b));
  }
  void DropPool() {
    for (auto& [off, blk] : pool) pool_used -= blk.length;
    pool.clear();
  }
};

// Reads back and hashes received bytes from hashed_upto on, at most `limit` bytes.
absl::Status CatchUpHash(ReceiverState& st, DestinationFile& dst, ReadBackBuffer& scratch,
                         std::uint64_t limit) {
  if (st.file_hasher == nullptr || st.frontier_claimed) return absl::OkStatus();
  std::uint64_t budget = limit;
  for (;;) {
    std::uint64_t end = std::min(dst.received.ContiguousEnd(st.hashed_upto), dst.size);
    if (end <= st.hashed_upto || budget == 0) return absl::OkStatus();
    // A pooled block at the frontier is hashed from memory (free of the read-back budget).
    if (auto it = st.pool.find(st.hashed_upto); it != st.pool.end()) {
      std::uint64_t len = it->second.length;
      st.file_hasher->Update(it->second.data.get(), static_cast<std::size_t>(len));
      st.hashed_upto += len;
      st.ReleaseBuffer(std::move(it->second.data), len);
      st.pool.erase(it);
      continue;
    }
    end = std::min(end, st.hashed_upto + budget);
    // Read back only up to the next pooled block.
    if (auto next = st.pool.upper_bound(st.hashed_upto); next != st.pool.end()) {
      end = std::min(end, next->first);
    }
    const std::size_t cap = scratch.cap;
    unsigned char* buf = scratch.get();
    while (st.hashed_upto < end) {
      auto n = static_cast<std::size_t>(std::min<std::uint64_t>(cap, end - st.hashed_upto));
      std::size_t got = 0;
      while (got < n) {
        ssize_t r = ::pread(dst.fd, buf + got, n - got, static_cast<off_t>(st.hashed_upto + got));
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) {
          return r < 0 ? ErrnoStatus(errno, fmt::format("read back {}", dst.part_path.string()))
                       : absl::DataLossError(fmt::format("{} shrank", dst.part_path.string()));
        }
        got += static_cast<std::size_t>(r);
      }
      st.file_hasher->Update(buf, n);
      st.hashed_upto += n;
      st.read_back_bytes += n;
      budget -= n;
    }
  }
}

absl::Status FlushRanges(DestinationFile& dst, const std::vector<ByteRange>& ranges) {
  if (ranges.empty()) return absl::OkStatus();
  if (::fdatasync(dst.fd) != 0) return ErrnoStatus(errno, "sync partial file");
  return dst.journal.Append(ranges);
}

void StartFlush(const std::shared_ptr<ReceiverState>& st,
                const std::shared_ptr<DestinationFile>& dst, const asio::any_io_executor& ex) {
  st->flushing = true;
  std::vector<ByteRange> ranges = std::move(st->pending);
  st->pending.clear();
  st->pending_bytes = 0;
  asio::co_spawn(
      BlockingPool(),
      [held = std::make_shared<std::shared_ptr<DestinationFile>>(dst),
       ranges = std::move(ranges)]() -> asio::awaitable<absl::Status> {
        absl::Status s = FlushRanges(**held, ranges);
        held->reset();  // before the completion runs (see OffThread)
        co_return s;
      },
      asio::bind_executor(ex, [st](std::exception_ptr e, absl::Status s) {
        if (e) s = absl::InternalError("bug: exception in a journal flush");
        st->flushing = false;
        if (!s.ok() && st->flush_error.ok()) st->flush_error = s;
        st->flush_done.cancel();
      }));
}

asio::awaitable<absl::Status> WaitFlush(std::shared_ptr<ReceiverState> st) {
  while (st->flushing) co_await st->flush_done.async_wait(kNoThrow);
  co_return st->flush_error;
}

// Makes everything received so far durable in the journal (for resume after a failure).
asio::awaitable<void> FinalFlush(std::shared_ptr<ReceiverState> st,
                                 std::shared_ptr<DestinationFile> dst) {
  co_await WaitFlush(st);
  std::function<absl::Status()> job = [dst, ranges = std::move(st->pending)] {
    return FlushRanges(*dst, ranges);
  };
  st->pending.clear();
  absl::Status s = co_await OffThread(job);
  (void)s;  // ignored: best effort while already failing
}

// One verified block of a stream being written to the partial file on BlockingPool(), while
// the stream receives its next block: the receive thread only receives and hashes, the
// writes (on this kind of machine the page allocation of a new file costs more than the
// receive itself) run on the pool's threads beside it.
struct BlockWrite {
  BlockWrite(const asio::any_io_executor& ex, std::shared_ptr<ReceiverState> st,
             std::shared_ptr<DestinationFile> dst, const TransferOptions& o,
             ProgressReporter& progress, int stream)
      : done(ex, SteadyTime::time_point::max()),
        st(std::move(st)),
        dst(std::move(dst)),
        o(&o),
        progress(&progress),
        stream(stream) {}
  bool busy = false;    // a write is in flight
  absl::Status status;  // of the last write and its booking
  asio::steady_timer done;
  std::unique_ptr<unsigned char[]> data;  // the block; the stream's own buffer comes back here
  ByteRange range;
  bool pooled = false;  // `data` came from the receive pool (else it is the stream's own)
  // What the booking updates. `o` and `progress` belong to RunReceiver, which outlives the
  // stream, and a stream never ends with its write in flight (ReceiveStream).
  std::shared_ptr<ReceiverState> st;
  std::shared_ptr<DestinationFile> dst;
  const TransferOptions* o;
  ProgressReporter* progress;
  int stream;
};

// Books a finished write at once, on the receive thread: the range counts as received
// (journal, progress, the end-to-end checksum's read-back) as soon as its bytes are in the
// partial file, and not before. A pooled buffer goes back to the pool (or stays pooled for
// the frontier); the stream's own stays in `w.data` for the stream to take back.
void BookWrite(BlockWrite& w, const asio::any_io_executor& ex) {
  ReceiverState& st = *w.st;
  std::erase(st.in_flight, w.range);
  const std::uint64_t len = w.range.size();
  if (w.pooled) {
    if (w.status.ok() && st.file_hasher != nullptr && w.range.begin >= st.hashed_upto) {
      st.pool[w.range.begin] = ReceiverState::PooledBlock{std::move(w.data), len};
      ++st.pooled_blocks;
    } else {  // the frontier passed it (or the hasher was dropped, or the write failed)
      st.ReleaseBuffer(std::move(w.data), len);
    }
  }
  if (!w.status.ok()) return;
  w.dst->received.Add(w.range);
  // Blocks that arrived ahead of the frontier, while they are recent (bounded per block
  // so a long resumed prefix does not stall the streams; the rest is read at the end).
  w.status = CatchUpHash(st, *w.dst, st.scratch, 4 * len);
  if (!w.status.ok()) return;
  st.pending.push_back(w.range);
  st.pending_bytes += len;
  st.received_now += len;
  w.progress->Add(w.stream, len);
  if (!st.flush_error.ok()) {
    w.status = st.flush_error;
    return;
  }
  if (st.pending_bytes >= w.o->journal_interval && !st.flushing) StartFlush(w.st, w.dst, ex);
}

void StartWrite(const std::shared_ptr<BlockWrite>& w, std::size_t io_size,
                const asio::any_io_executor& ex) {
  w->busy = true;
  asio::co_spawn(
      BlockingPool(),
      [held = std::make_shared<std::shared_ptr<DestinationFile>>(w->dst),
       data = w->data.get(), range = w->range, io_size]() -> asio::awaitable<absl::Status> {
        absl::Status s = WriteAt(**held, data, range.size(), range.begin, io_size);
        held->reset();  // before the completion runs (see OffThread)
        co_return s;
      },
      asio::bind_executor(ex, [w, ex](std::exception_ptr e, absl::Status s) {
        if (e) s = absl::InternalError("bug: exception in a block write");
        w->status = std::move(s);
        BookWrite(*w, ex);
        w->busy = false;
        w->done.cancel();
      }));
}

// Waits for the stream's write in flight (if any; it was booked when it finished) and takes
// its buffer back into `own` when it is the stream's. Returns the write's status.
asio::awaitable<absl::Status> FinishWrite(BlockWrite& w,
                                          std::vector<std::unique_ptr<unsigned char[]>>& own) {
  while (w.busy) co_await w.done.async_wait(kNoThrow);
  if (!w.pooled && w.data != nullptr) own.push_back(std::move(w.data));
  co_return w.status;
}

asio::awaitable<absl::Status> ReceiveBlocks(Conn& c, const std::shared_ptr<ReceiverState>& st,
                                            const std::shared_ptr<DestinationFile>& dst,
                                            const TransferOptions& o, BlockChecksumAlgorithm alg,
                                            const std::shared_ptr<BlockWrite>& w,
                                            std::vector<std::unique_ptr<unsigned char[]>>& own,
                                            std::size_t own_limit) {
  constexpr std::size_t kPiece = 256 * 1024;
  auto ex = co_await asio::this_coro::executor;
  std::size_t own_made = 0;  // the stream's own block buffers (own_limit at most)
  BlockHasher block_check(alg);
  auto log = LoggerOf(o.logger);
  for (;;) {
    absl::StatusOr<FrameHeader> h =
        co_await c.ReadHeader(static_cast<std::uint32_t>(o.route.stripe_unit));
    if (!h.ok()) co_return h.status();
    if (h->type == FrameType::kEnd) co_return absl::OkStatus();
    if (h->type != FrameType::kData)
      co_return absl::DataLossError("unexpected frame type on a data connection");
    if (h->length == 0 || h->offset > dst->size || h->length > dst->size - h->offset) {
      co_return absl::DataLossError(fmt::format("data frame [{}, +{}) outside the file of {} bytes",
                                                h->offset, h->length, dst->size));
    }
    const ByteRange range{h->offset, h->offset + h->length};
    if (dst->received.Overlaps(range.begin, range.end) || st->InFlightOverlaps(range)) {
      co_return absl::DataLossError(fmt::format(
          "peer sent an overlapping block [{}, {}) (those bytes were already received); refused",
          range.begin, range.end));
    }
    st->in_flight.push_back(range);
    struct InFlight {  // ends the claim if the block ends before its write starts
      ReceiverState* st;
      ByteRange r;
      bool handed = false;  // the write took the claim over (BookWrite ends it)
      ~InFlight() {
        if (!handed) std::erase(st->in_flight, r);
      }
    } in_flight{st.get(), range};
    const bool tree_frame = st->tree != nullptr && IsTreeFrame(h->offset, h->length, dst->size);
    block_check.Reset(h->length, tree_frame);
    bool inline_file =
        st->file_hasher != nullptr && !st->frontier_claimed && h->offset == st->hashed_upto;
    if (inline_file) st->frontier_claimed = true;
    // A block ahead of the frontier is received into a pool buffer when one fits.
    std::unique_ptr<unsigned char[]> pooled;
    if (!inline_file && st->file_hasher != nullptr && h->offset > st->hashed_upto &&
        st->pool_used + h->length <= st->pool_limit && !st->pool.contains(h->offset)) {
      pooled = st->TakeBuffer(h->length);
      st->pool_used += h->length;
    }
    struct PoolGuard {  // gives the reservation back if the stream fails mid-block
      ReceiverState* st;
      std::unique_ptr<unsigned char[]>* b;
      std::uint64_t length;
      ~PoolGuard() {
        if (*b != nullptr) st->ReleaseBuffer(std::move(*b), length);
      }
    } pool_guard{st.get(), &pooled, h->length};
    std::unique_ptr<unsigned char[]> block;  // the stream's own buffer, when not pooled
    if (pooled == nullptr) {
      if (own.empty() && own_made >= own_limit) {
        // Both of the stream's buffers are taken: the one in flight comes back first.
        if (absl::Status f = co_await FinishWrite(*w, own); !f.ok()) {
          co_return f;
        }
      }
      if (!own.empty()) {
        block = std::move(own.back());
        own.pop_back();
      } else {
        // No larger than the file: a small file's block is all of it.
        block = std::make_unique_for_overwrite<unsigned char[]>(
            std::min<std::uint64_t>(o.route.stripe_unit, dst->size));
        ++own_made;
      }
    }
    unsigned char* data = pooled != nullptr ? pooled.get() : block.get();
    for (std::uint64_t done = 0; done < h->length;) {
      // In 256 KiB pieces, each hashed (block and file checksum) while it is in cache.
      auto n = static_cast<std::size_t>(std::min<std::uint64_t>(kPiece, h->length - done));
      unsigned char* piece = data + done;
      if (absl::Status s = co_await c.ReadExact(piece, n); !s.ok()) {
        if (block != nullptr) own.push_back(std::move(block));
        co_return s;
      }
      block_check.Update(piece, n);
      if (inline_file) st->file_hasher->Update(piece, n);
      done += n;
    }
    const std::uint64_t sum = block_check.Finish();
    if (inline_file) st->frontier_claimed = false;
    if (sum != h->checksum) {
      if (inline_file) {  // the file hash saw damaged bytes: read everything back at the end
        st->file_hasher.reset();
        st->DropPool();
      }
      ++st->bad_blocks;
      log->warn("block [{}, +{}) failed its {} checksum; it will be re-sent", h->offset, h->length,
                BlockChecksumAlgorithmName(alg));
      if (block != nullptr) own.push_back(std::move(block));
      continue;  // nothing of it was written
    }
    // The file hash has these bytes now (they reach the partial file before they count as
    // received, see BookWrite).
    if (inline_file) st->hashed_upto = range.end;
    if (tree_frame) st->tree->Set(h->offset / kTreeLeafBytes, block_check.leaves());
    // One write in flight per stream: the previous one has finished before this one starts.
    if (absl::Status f = co_await FinishWrite(*w, own); !f.ok()) {
      if (block != nullptr) own.push_back(std::move(block));
      co_return f;
    }
    w->range = range;
    w->pooled = pooled != nullptr;
    w->data = pooled != nullptr ? std::move(pooled) : std::move(block);
    in_flight.handed = true;
    StartWrite(w, static_cast<std::size_t>(o.write_io_size), ex);
  }
}

asio::awaitable<absl::Status> ReceiveStream(Conn& c, std::shared_ptr<ReceiverState> st,
                                            std::shared_ptr<DestinationFile> dst,
                                            const TransferOptions& o, BlockChecksumAlgorithm alg,
                                            ProgressReporter& progress, int stream,
                                            std::size_t own_limit) {
  std::vector<std::unique_ptr<unsigned char[]>> own;  // the stream's free block buffers
  auto w = std::make_shared<BlockWrite>(co_await asio::this_coro::executor, st, dst, o, progress,
                                        stream);
  absl::Status s = co_await ReceiveBlocks(c, st, dst, o, alg, w, own, own_limit);
  // Never end with a write in flight (its booking uses `progress` and `o`), also after a
  // failure (its bytes are good: a resume keeps them).
  absl::Status last = co_await FinishWrite(*w, own);
  co_return s.ok() ? last : s;
}

// The name of a destination's partial file and journal: a function of the final path, so a
// rerun finds them.
std::string PartialKey(const std::filesystem::path& final_path) {
  return fmt::format("{:016x}", XXH3_64bits(final_path.string().data(), final_path.string().size()));
}

struct FinishMessage {
  std::string checksum;    // the sender's end-to-end checksum
  std::string congestion;  // the sender's congestion control ("" if not said)
  std::string tls;         // who encrypted the sender's data records ("" if not said)
  TcpFigures tcp;          // the sender's TCP figures for the file (zeros if not said)
};

absl::StatusOr<FinishMessage> ParseFinish(const absl::StatusOr<Json>& fin) {
  if (!fin.ok()) return fin.status();
  absl::StatusOr<std::string> op = GetString(*fin, "op");
  absl::StatusOr<std::string> checksum = GetString(*fin, "checksum");
  absl::StatusOr<std::string> congestion = GetOptionalString(*fin, "congestion", "");
  absl::StatusOr<std::string> tls = GetOptionalString(*fin, "tls", "");
  absl::StatusOr<TcpFigures> tcp = TcpFiguresFromJson(*fin);
  if (!op.ok() || *op != "finish" || !checksum.ok() || !congestion.ok() || !tls.ok() || !tcp.ok()) {
    return absl::DataLossError("expected finish on the control connection");
  }
  return FinishMessage{*checksum, *congestion, *tls, *tcp};
}

TransferStats MakeStats(const DestinationFile& dst, const ReceiverState& st,
                        SteadyTime::time_point start, std::size_t streams,
                        const std::string& checksum, const std::string& congestion, int round) {
  TransferStats stats;
  stats.bytes = dst.size;
  stats.bytes_transferred = st.received_now;
  stats.resumed_bytes = dst.resumed_bytes;
  stats.seconds = std::chrono::duration<double>(SteadyTime::now() - start).count();
  stats.streams = static_cast<int>(streams);
  stats.checksum = checksum;
  stats.congestion = congestion;
  stats.resend_rounds = round;
  stats.checksum_read_back_bytes = st.read_back_bytes;
  return stats;
}

}  // namespace

bool HasRestartJournal(const std::filesystem::path& final_path, const std::filesystem::path& tmp_dir) {
  struct stat st {};
  return ::lstat((tmp_dir / (PartialKey(final_path) + ".journal")).c_str(), &st) == 0 || errno != ENOENT;
}

DestinationFile::~DestinationFile() {
  if (fd >= 0) ::close(fd);  // releases the lock
}

absl::StatusOr<std::shared_ptr<DestinationFile>> OpenDestination(const DestinationSpec& spec) {
  auto d = std::make_shared<DestinationFile>();
  d->final_path = spec.final_path;
  d->name = spec.name.empty() ? spec.final_path.string() : spec.name;
  d->create_only = spec.create_only;
  d->size = spec.size;
  if (spec.create_only) {
    struct stat st {};
    if (::lstat(spec.final_path.c_str(), &st) == 0) {
      return absl::AlreadyExistsError(
          fmt::format("{} already exists (replica files are written once)", d->name));
    }
    if (errno != ENOENT)
      return ErrnoStatus(errno, fmt::format("stat {}", spec.final_path.string()));
  }
  // Usually one mkdir: the parents are there (the spool's temporary directory).
  if (::mkdir(spec.tmp_dir.c_str(), 0755) != 0 && errno != EEXIST) {
    std::error_code ec;
    std::filesystem::create_directories(spec.tmp_dir, ec);
    if (ec)
      return absl::InternalError(fmt::format("create {}: {}", spec.tmp_dir.string(), ec.message()));
  }
  std::string key = PartialKey(spec.final_path);
  d->part_path = spec.tmp_dir / (key + ".part");
  d->journal_path = spec.tmp_dir / (key + ".journal");
  // The lock comes before the journal or the partial file is read or changed.
  d->fd = OpenLocked(d->part_path);
  if (d->fd < 0) {
    if (errno == EWOULDBLOCK || errno == EAGAIN) {
      return absl::UnavailableError(fmt::format("another transfer is writing {}", d->name));
    }
    return ErrnoStatus(errno, fmt::format("open {}", d->part_path.string()));
  }
  absl::StatusOr<Journal> j =
      Journal::Open(d->journal_path, JournalHeader{spec.size, spec.source_id, spec.checksum});
  if (!j.ok()) return j.status();
  d->journal = std::move(*j);
  if (!d->journal.resumed() && ::ftruncate(d->fd, 0) != 0) {
    return ErrnoStatus(errno, fmt::format("truncate {}", d->part_path.string()));
  }
  // Check room up front for a clear error (a later ENOSPC on write is reported the same
  // way). No fallocate: on tmpfs it would zero every page once more before we write it.
  std::uint64_t need = spec.size - (d->journal.resumed() ? d->journal.ranges().Bytes() : 0);
  struct statvfs vfs {};
  if (::fstatvfs(d->fd, &vfs) == 0) {
    std::uint64_t avail = static_cast<std::uint64_t>(vfs.f_bavail) * vfs.f_frsize;
    if (avail < need) {
      return absl::ResourceExhaustedError(fmt::format(
          "disk full: {} bytes needed, {} available in {}", need, avail, spec.tmp_dir.string()));
    }
  }
  if (::ftruncate(d->fd, static_cast<off_t>(spec.size)) != 0) {
    return ErrnoStatus(errno, fmt::format("size {}", d->part_path.string()));
  }
  if (d->journal.resumed()) {
    d->received = d->journal.ranges();
    d->resumed_bytes = d->received.Bytes();
  }
  return d;
}

asio::awaitable<absl::StatusOr<TransferStats>> RunReceiver(Conn& ctrl, std::vector<ConnPtr> data,
                                                           std::shared_ptr<DestinationFile> dst,
                                                           const TransferOptions& o,
                                                           std::string congestion,
                                                           std::function<bool()> ahead_sent) {
  auto log = LoggerOf(o.logger);
  auto ex = co_await asio::this_coro::executor;
  auto start = SteadyTime::now();
  BlockChecksumAlgorithm alg = *ParseBlockChecksumAlgorithm(o.block_checksum);
  ChecksumAlgorithm file_alg = *ParseChecksumAlgorithm(o.checksum);
  auto st = std::make_shared<ReceiverState>(ex);
  const bool tree = file_alg == ChecksumAlgorithm::kXxh3Tree;
  if (tree) {
    st->tree = std::make_shared<TreeChecksum>(dst->size);
  } else if (dst->size > 0) {
    st->file_hasher = std::make_unique<FileHasher>(file_alg);
  }
  st->spare_size = o.route.stripe_unit;
  st->pool_limit =
      tree ? 0
           : std::min<std::uint64_t>(o.receive_pool_bytes, 2 * data.size() * o.route.stripe_unit);
  // A stream receives its next block while the last one is written: two buffers of its own
  // when that fits the receive memory budget, else one (the write then ends before the next
  // block is received; the other streams go on meanwhile).
  const std::size_t own_limit =
      2 * data.size() * o.route.stripe_unit <= o.receive_pool_bytes ? 2 : 1;
  WatchdogScope dog = WatchConnections(ex, data, o.io_timeout);
  ProgressReporter progress(o, dst->size, dst->resumed_bytes, static_cast<int>(data.size()));
  int round = 0;
  bool keep_partial = true;  // false once the partial file was committed or discarded
  for (;;) {
    std::vector<std::function<asio::awaitable<absl::Status>()>> tasks;
    for (std::size_t i = 0; i < data.size(); ++i) {
      tasks.push_back([&, c = data[i], i]() {
        return ReceiveStream(*c, st, dst, o, alg, progress, static_cast<int>(i), own_limit);
      });
    }
    absl::Status s = co_await RunConcurrently(std::move(tasks), [&] {
      st->failed = true;
      for (const ConnPtr& c : data) c->Close();
    });
    absl::StatusOr<FinishMessage> fin = absl::UnknownError("not read");
    if (s.ok()) {
      absl::StatusOr<Json> m = co_await ctrl.ReadControl();
      fin = ParseFinish(m);
    }
    if (s.ok()) {
      if (!fin.ok()) {
        s = fin.status();
      } else if (std::vector<ByteRange> missing = dst->received.Missing(dst->size);
                 !missing.empty()) {
        if (ahead_sent && ahead_sent()) {
          // The sender started the next file's get (pipelined) right after its finish: a
          // re-send cannot follow now. The copy fails (its caller retries) and so does the
          // session, with nothing put in place.
          s = absl::DataLossError(fmt::format(
              "{} bytes damaged ({} bad blocks) on a pipelined session; nothing was put in place",
              dst->size - dst->received.Bytes(), st->bad_blocks));
        } else if (round >= o.max_resend_rounds) {
          s = absl::DataLossError(
              fmt::format("{} bytes still damaged after {} re-send rounds ({} bad blocks); nothing "
                          "was put in place",
                          dst->size - dst->received.Bytes(), round, st->bad_blocks));
        } else {
          ++round;
          log->warn("asking the sender to re-send {} ranges (round {})", missing.size(), round);
          Json msg4 = {{"op", "resend"}, {"ranges", RangesToJson(missing)}};
          if (absl::Status w = co_await ctrl.SendControl(msg4); !w.ok()) {
            s = w;
          } else {
            continue;
          }
        }
      } else {
        if (!fin->congestion.empty()) congestion = fin->congestion;
        dog->paused = true;
        if (absl::Status f = co_await WaitFlush(st); !f.ok()) {
          s = f;
        } else {
          std::function<absl::StatusOr<std::string>()> verify =
              [dst, st, file_alg]() -> absl::StatusOr<std::string> {
            if (::fdatasync(dst->fd) != 0) return ErrnoStatus(errno, "sync partial file");
            if (st->tree != nullptr) {
              st->read_back_bytes += st->tree->missing_bytes();
              if (absl::Status f = st->tree->FillFromFd(dst->fd); !f.ok()) return f;
              return st->tree->Finish();
            }
            if (st->file_hasher != nullptr) {
              ReadBackBuffer b{1 << 20};
              absl::Status c = CatchUpHash(*st, *dst, b, dst->size);
              if (!c.ok()) return c;
              if (st->hashed_upto == dst->size) return st->file_hasher->Finish();
            }
            st->read_back_bytes += dst->size;
            return ComputeFdChecksum(dst->fd, dst->size, file_alg);
          };
          absl::StatusOr<std::string> got = co_await OffThread(verify);
          if (!got.ok()) {
            s = got.status();
          } else if (*got != fin->checksum) {
            Discard(*dst);
            keep_partial = false;
            s = absl::DataLossError(fmt::format(
                "end-to-end checksum mismatch: sender {} receiver {}; partial file discarded",
                fin->checksum, *got));
          } else if (!o.expected_checksum.empty() &&
                     (*got != o.expected_checksum ||
                      (o.expected_size && dst->size != *o.expected_size))) {
            Discard(*dst);
            keep_partial = false;
            s = ExpectedChecksumMismatch(fmt::format(
                "the source sent {} bytes {}; expected {} bytes {}", dst->size, *got,
                o.expected_size ? fmt::format("{}", *o.expected_size) : std::string("any"),
                o.expected_checksum));
          } else if (co_await CancellationRequested()) {
            s = absl::CancelledError("transfer cancelled before the commit");
          } else {
            // The journal goes first: it must never describe an inode that is not our
            // partial file any more (a later session reuses its name).
            std::function<absl::Status()> commit = [dst]() -> absl::Status {
              if (dst->journal.on_disk()) {
                dst->journal.Close();
                if (::unlink(dst->journal_path.c_str()) != 0 && errno != ENOENT) {
                  return ErrnoStatus(errno, fmt::format("remove {}", dst->journal_path.string()));
                }
              }
              absl::Status c = InstallFile(dst->part_path, dst->final_path, dst->create_only);
              if (absl::IsAlreadyExists(c)) {
                return absl::AlreadyExistsError(
                    fmt::format("{} already exists (replica files are written once)", dst->name));
              }
              return c;
            };
            absl::Status r = co_await OffThread(commit);
            keep_partial = false;
            if (!r.ok()) {
              s = r;
            } else {
              TransferStats stats =
                  MakeStats(*dst, *st, start, data.size(), *got, congestion, round);
              stats.tcp = fin->tcp;
              stats.tls = fin->tls;
              log->debug(
                  "end-to-end checksum: {} blocks hashed from the receive pool, {} bytes read back",
                  st->pooled_blocks, st->read_back_bytes);
              progress.SetDone(dst->size);
              Json msg5 = {
                  {"op", "done"}, {"checksum", *got}, {"bytes_transferred", st->received_now}};
              absl::Status w = co_await ctrl.SendControl(msg5);
              (void)w;  // ignored: the file is in place; a lost reply only makes the peer retry
              co_return stats;
            }
          }
        }
      }
    }
    // Failure: keep what arrived durable for a resume, tell the peer, report.
    if (dog->fired)
      s = absl::DeadlineExceededError(fmt::format("no progress for {} ms", o.io_timeout.count()));
    for (const ConnPtr& c : data) c->Close();
    // A sender that failed on its side (its source changed, say) closed the data connections
    // and says why on the control connection.
    if (absl::IsUnavailable(s)) s = co_await PeerReason(ctrl, s);
    if (keep_partial) co_await FinalFlush(st, dst);
    if (absl::IsUnavailable(s) && s.message().find("peer:") == std::string_view::npos) {
      s = absl::UnavailableError(
          fmt::format("sender connection lost ({}); rerun to resume", s.message()));
    }
    absl::Status w = co_await ctrl.SendControl(ErrorJson(s));
    (void)w;  // ignored: the peer may be gone
    co_return s;
  }
}

}  // namespace gfrep::transfer::internal
