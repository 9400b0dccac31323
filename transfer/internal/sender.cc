#include "transfer/internal/sender.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <deque>
#include <map>
#include <optional>
#include <thread>

#include <boost/asio/experimental/awaitable_operators.hpp>

#include "absl/status/status.h"
#include "transfer/checksum.h"
#include "transfer/internal/loss_response.h"
#include "transfer/internal/mapped_read.h"
#include "transfer/internal/tcp_stats.h"
#include "transfer/internal/token_bucket.h"

namespace gfrep::transfer::internal {
namespace {

using SteadyTime = std::chrono::steady_clock;

std::vector<TcpSample> SampleTcp(const std::vector<ConnPtr>& conns) {
  std::vector<TcpSample> out;
  out.reserve(conns.size());
  for (const ConnPtr& c : conns) out.push_back(ReadTcpSample(c->socket().native_handle()));
  return out;
}

std::string SourceId(const struct stat& st) {
  return fmt::format("{}:{}.{:09}:{}", st.st_size, st.st_mtim.tv_sec, st.st_mtim.tv_nsec,
                     st.st_ino);
}

absl::Status SourceChanged(const SourceFile& src) {
  return absl::AbortedError(
      fmt::format("source changed size during the transfer (no longer {} bytes)", src.size));
}

// kAborted if the source is no longer the version the transfer started with.
absl::Status CheckSourceUnchanged(const SourceFile& src) {
  struct stat st {};
  if (::fstat(src.fd, &st) != 0)
    return ErrnoStatus(errno, fmt::format("stat {}", src.path.string()));
  if (static_cast<std::uint64_t>(st.st_size) != src.size) return SourceChanged(src);
  if (SourceId(st) != src.source_id) {
    return absl::AbortedError("source changed during the transfer (modified since it was opened)");
  }
  return absl::OkStatus();
}

// The whole-file checksum of a resumed transfer, computed on its own thread. The thread owns
// the job (and so the SourceFile); abandoning the job (stop) ends it at its next read.
struct ChecksumJob {
  std::shared_ptr<SourceFile> src;
  ChecksumAlgorithm algorithm;
  std::atomic<bool> stop{false};
  std::atomic<bool> done{false};
  absl::StatusOr<std::string> result = absl::UnknownError("not run");
};

void RunChecksumJob(const std::shared_ptr<ChecksumJob>& job) {
  constexpr std::size_t kChunk = 1 << 20;
  auto buf = std::make_unique_for_overwrite<unsigned char[]>(kChunk);
  FileHasher hasher(job->algorithm);
  absl::Status s;
  for (std::uint64_t off = 0; off < job->src->size && s.ok(); off += kChunk) {
    if (job->stop.load(std::memory_order_relaxed)) {
      s = absl::CancelledError("checksum abandoned");
      break;
    }
    auto n = static_cast<std::size_t>(std::min<std::uint64_t>(kChunk, job->src->size - off));
    s = ReadSource(*job->src, off, buf.get(), n);
    if (s.ok()) hasher.Update(buf.get(), n);
  }
  job->result =
      s.ok() ? absl::StatusOr<std::string>(hasher.Finish()) : absl::StatusOr<std::string>(s);
  job->done.store(true, std::memory_order_release);
}

std::shared_ptr<ChecksumJob> StartChecksum(std::shared_ptr<SourceFile> src,
                                           ChecksumAlgorithm algorithm) {
  auto job = std::make_shared<ChecksumJob>();
  job->src = std::move(src);
  job->algorithm = algorithm;
  std::thread([job] { RunChecksumJob(job); }).detach();  // owns `job`; ends on its own
  return job;
}

// Blocks of `unit` bytes. With `whole_leaves` (xxh3-tree) and a unit of whole leaves, a range
// that starts inside a leaf (a resume after smaller blocks) begins with a short block up to
// the next leaf, so that the blocks after it are tree frames again.
std::vector<ByteRange> SplitBlocks(const std::vector<ByteRange>& ranges, std::uint64_t unit,
                                   bool whole_leaves) {
  std::vector<ByteRange> out;
  const bool align = whole_leaves && unit % kTreeLeafBytes == 0;
  for (const ByteRange& r : ranges) {
    std::uint64_t b = r.begin;
    if (align && b % kTreeLeafBytes != 0) {
      const std::uint64_t head = std::min(r.end, (b / kTreeLeafBytes + 1) * kTreeLeafBytes);
      out.push_back({b, head});
      b = head;
    }
    for (; b < r.end; b += unit) out.push_back({b, std::min(r.end, b + unit)});
  }
  return out;
}

struct SenderState {
  std::deque<ByteRange> queue;
  bool failed = false;
  std::uint64_t sent = 0;
  int corrupt_left = 0;
  // When the whole file is sent in order (no resume), the end-to-end checksum is advanced
  // in the same pass as the block checksums: `file_hasher` covers [0, hashed_upto).
  std::unique_ptr<FileHasher> file_hasher;
  std::uint64_t hashed_upto = 0;
  // With the xxh3-tree checksum every tree frame (IsTreeFrame) is checked by its leaves'
  // digests, and when the whole file is sent those digests make the file checksum (`tree`),
  // in any order: one pass over each byte.
  bool tree_frames = false;
  std::shared_ptr<TreeChecksum> tree;
  // Rate-limit and backlog timers of the running streams, cancelled when the round fails.
  std::vector<asio::steady_timer*> timers;
  void Stop() {
    failed = true;
    for (asio::steady_timer* t : timers) t->cancel();
  }
};

// One stream's buffers: a 256 KiB piece read, hashed and dropped when the payload goes out
// with sendfile; the whole block when it goes out from memory (TLS, test corruption).
struct StreamBuffers {
  static constexpr std::size_t kPiece = 256 * 1024;
  std::unique_ptr<unsigned char[]> piece = std::make_unique_for_overwrite<unsigned char[]>(kPiece);
  std::unique_ptr<unsigned char[]> block;
  std::size_t block_size = 0;
};

// What the block pass feeds each piece to: the block checksum and, when the block is next in
// file order, the end-to-end checksum; or, for a tree frame, its leaves (which make both).
struct BlockHashing {
  BlockHasher* block;
  FileHasher* file;
  unsigned char* copy_to = nullptr;  // where the block goes when it is sent from memory
  static void Visit(void* ctx, const unsigned char* data, std::size_t n) {
    auto* h = static_cast<BlockHashing*>(ctx);
    if (h->copy_to != nullptr) {
      std::memcpy(h->copy_to, data, n);
      h->copy_to += n;
    }
    h->block->Update(data, n);
    if (h->file != nullptr) h->file->Update(data, n);
  }
};

// Computes block `b`'s block checksum and, when it is next in file order, advances the file
// checksum in the same pass. It is hashed in place from a mapping of the page cache
// (mapped_read.h): without `keep`, sendfile then sends the same pages; with `keep` (the block
// goes out from memory: TLS in user space, test corruption), each piece is copied into
// bufs.block as it is hashed (a copy from the mapping costs less than pread's: no page-cache
// lookup per page). Where the file cannot be mapped (or `no_map`), it is read in 256 KiB
// pieces into bufs.piece (or bufs.block with `keep`), each hashed while in cache. A tree
// frame's leaves (BlockHasher) give its block check and, when the whole file is sent, its
// part of the file checksum.
absl::StatusOr<std::uint64_t> ReadAndHashBlock(SenderState& st, const SourceFile& src,
                                               const ByteRange& b, StreamBuffers& bufs, bool keep,
                                               bool no_map, BlockHasher& block, bool tree_frame) {
  constexpr std::uint64_t kPiece = StreamBuffers::kPiece;
  if (keep && bufs.block_size < b.size()) {
    bufs.block = std::make_unique_for_overwrite<unsigned char[]>(b.size());
    bufs.block_size = b.size();
  }
  FileHasher* file =
      st.file_hasher != nullptr && st.hashed_upto == b.begin ? st.file_hasher.get() : nullptr;
  block.Reset(b.size(), tree_frame);  // allocates here, not in the visit
  BlockHashing h{&block, file, keep ? bufs.block.get() : nullptr};
  absl::Status mapped = absl::UnavailableError("not mapped");
  if (!no_map) {
    mapped = MapAndVisit(src.fd, b.begin, b.size(), kPiece, &BlockHashing::Visit, &h);
    // (The file hash saw part of the block: the transfer fails here, nothing uses it again.)
    if (absl::IsAborted(mapped)) return SourceChanged(src);
  }
  if (!mapped.ok()) {
    h.copy_to = nullptr;
    block.Reset(b.size(), tree_frame);
    for (std::uint64_t p = b.begin; p < b.end; p += kPiece) {
      auto n = static_cast<std::size_t>(std::min(kPiece, b.end - p));
      unsigned char* dst = keep ? bufs.block.get() + (p - b.begin) : bufs.piece.get();
      if (absl::Status s = ReadSource(src, p, dst, n); !s.ok()) return s;
      BlockHashing::Visit(&h, dst, n);
    }
  }
  if (file != nullptr) st.hashed_upto = b.end;
  const std::uint64_t check = block.Finish();
  if (tree_frame && st.tree != nullptr) st.tree->Set(b.begin / kTreeLeafBytes, block.leaves());
  return check;
}

// Waits until socket `c` has fewer than `low_water` bytes that TCP has not sent yet. A block
// written into a socket belongs to that stream until TCP sends it: a stream whose window
// shrank (a loss, an RTO backoff) would otherwise sit on megabytes of queued blocks that the
// other streams could have taken, and the file would end with that one stream (32 streams x
// 32 MiB buffers left the last 3 s of a 2 GiB copy to a few slow streams). The wait ends on
// writability (TCP_NOTSENT_LOWAT makes it mean "backlog below low_water"), or after 20 ms
// at the latest to look again, so a lost wakeup only costs a moment.
asio::awaitable<void> WaitForBacklogBelow(Conn& c, std::uint64_t low_water, const SenderState& st,
                                          asio::steady_timer& timer) {
  using namespace asio::experimental::awaitable_operators;
  const int fd = c.socket().native_handle();
  while (!st.failed && UnsentBytes(fd) >= low_water) {
    timer.expires_after(std::chrono::milliseconds(20));
    co_await (c.socket().async_wait(tcp::socket::wait_write, kNoThrow) ||
              timer.async_wait(kNoThrow));
  }
}

// The frame size of a block sent in pieces on a throttled route (SendStream).
constexpr std::uint64_t kThrottledPiece = 64 * 1024;

asio::awaitable<absl::Status> SendStream(Conn& c, SenderState& st, const SourceFile& src,
                                         const TransferOptions& o, BlockChecksumAlgorithm alg,
                                         TokenBucket* bucket, ProgressReporter& progress,
                                         int stream, std::uint64_t low_water) {
  asio::steady_timer timer(co_await asio::this_coro::executor);
  asio::steady_timer drain(co_await asio::this_coro::executor);
  st.timers.push_back(&timer);
  st.timers.push_back(&drain);
  struct Unregister {
    SenderState& st;
    asio::steady_timer* t;
    asio::steady_timer* d;
    ~Unregister() {
      std::erase(st.timers, t);
      std::erase(st.timers, d);
    }
  } unregister{st, &timer, &drain};
  StreamBuffers bufs;
  BlockHasher block(alg);
  LossResponse loss(c.socket().native_handle(), o.route.congestion, c.TakeFirstStream());
  if (static std::atomic<bool> told{false}; !loss.started_from().empty() && !told.exchange(true)) {
    LoggerOf(o.logger)->info("long route: data streams start on {} (the host's default is {})",
                             loss.from(), loss.started_from());
  }
  SetUnsentLowWater(c.socket().native_handle(), low_water);  // ignored if refused: the 20-ms look remains
  while (!st.failed && !st.queue.empty()) {
    // Take the next block only once this stream can send it soon (see WaitForBacklogBelow).
    co_await WaitForBacklogBelow(c, low_water, st, drain);
    if (st.failed || st.queue.empty()) break;
    ByteRange b = st.queue.front();
    st.queue.pop_front();
    if (bucket != nullptr && b.size() > kThrottledPiece &&
        bucket->WouldWait(b.size()) > o.io_timeout / 8) {
      // The route's rate is shared by many copies (a low --route-rate, many small files): a
      // whole block would wait its turn longer than a no-progress watchdog allows (the
      // receiver's, and ours, fire after io_timeout without a byte). Send it as pieces, each
      // a frame of its own, so that every stream moves bytes at its share of the rate.
      st.queue.push_front(ByteRange{b.begin + kThrottledPiece, b.end});
      b.end = b.begin + kThrottledPiece;
    }
    auto len = static_cast<std::uint32_t>(b.size());
    if (bucket != nullptr) {
      auto wait = bucket->Reserve(len);
      if (wait.count() > 0) {
        timer.expires_after(wait);
        co_await timer.async_wait(kNoThrow);
        if (st.failed) break;
      }
    }
    auto corrupt = static_cast<std::uint64_t>(o.test_corrupt_offset);
    bool flip =
        o.test_corrupt_offset >= 0 && st.corrupt_left > 0 && b.begin <= corrupt && corrupt < b.end;
    bool from_memory = !c.CanSendFile() || flip;
    const bool tree_frame = st.tree_frames && IsTreeFrame(b.begin, b.size(), src.size);
    absl::StatusOr<std::uint64_t> sum =
        ReadAndHashBlock(st, src, b, bufs, from_memory, o.test_no_map, block, tree_frame);
    if (!sum.ok()) co_return sum.status();
    FrameHeader h{FrameType::kData, len, b.begin, *sum};
    absl::Status s;
    if (from_memory) {
      if (flip) {
        --st.corrupt_left;
        bufs.block[corrupt - b.begin] ^= 0x5a;
      }
      s = co_await c.WriteData(h, bufs.block.get());
    } else {
      s = co_await c.WriteDataFromFile(h, src.fd);
      if (absl::IsAborted(s)) s = SourceChanged(src);
    }
    if (!s.ok()) co_return s;
    st.sent += len;
    progress.Add(stream, len);
    if (const LossResponse::Verdict v = loss.Check(); v != LossResponse::Verdict::kUnchanged) {
      const TcpSample& seen = loss.seen();
      const std::string why =
          loss.followed_peer()
              ? fmt::format("stream {}: another stream to this peer saw loss without a queue", stream)
              : fmt::format("stream {}: {} bytes re-sent with the round trip at {:.1f} ms against "
                            "{:.1f} ms at least (loss without a queue)",
                            stream, seen.bytes_retrans, seen.srtt_us / 1e3, seen.min_rtt_us / 1e3);
      if (v == LossResponse::Verdict::kTurned) {
        LoggerOf(o.logger)->info("{}: congestion control {} -> {}", why, loss.from(),
                                 kLossTolerantControl);
      } else {
        LoggerOf(o.logger)->warn("{}: could not turn to {} ({}); staying on {}", why,
                                 kLossTolerantControl, std::strerror(loss.error()), loss.from());
      }
    }
  }
  if (st.failed) co_return absl::CancelledError("stream stopped");
  co_return co_await c.SendFrame(FrameType::kEnd, "");
}

// The congestion control most of `data`'s sockets run now; `otherwise` if none says.
std::string MostUsedControl(const std::vector<ConnPtr>& data, const std::string& otherwise) {
  std::map<std::string, int> count;
  for (const ConnPtr& c : data) {
    if (std::string name = ControlOf(c->socket().native_handle()); !name.empty()) ++count[name];
  }
  std::string most = otherwise;
  int most_n = 0;
  for (const auto& [name, n] : count) {
    if (n > most_n) {
      most = name;
      most_n = n;
    }
  }
  return most;
}

// Failures that are about the connection (the peer may know more) rather than ours.
bool IsConnectionFailure(const absl::Status& s) {
  return absl::IsUnavailable(s) || absl::IsDeadlineExceeded(s) || absl::IsCancelled(s);
}

}  // namespace

std::uint64_t BlockSize(std::uint64_t bytes, std::size_t streams, std::uint64_t stripe_unit,
                        bool whole_leaves) {
  constexpr std::uint64_t kFloor = 256 * 1024;
  constexpr std::uint64_t kAlign = 64 * 1024;
  if (streams == 0) return stripe_unit;
  std::uint64_t share = (bytes + streams - 1) / streams;
  const std::uint64_t align = whole_leaves ? std::max(kAlign, kTreeLeafBytes) : kAlign;
  share = (share + align - 1) / align * align;
  return std::clamp(share, std::min(kFloor, stripe_unit), stripe_unit);
}

SourceFile::~SourceFile() {
  if (fd >= 0) ::close(fd);
}

absl::StatusOr<std::shared_ptr<SourceFile>> OpenSource(const std::filesystem::path& path) {
  auto src = std::make_shared<SourceFile>();
  src->path = path;
  src->fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (src->fd < 0) return ErrnoStatus(errno, fmt::format("source {}", path.string()));
  struct stat st {};
  if (::fstat(src->fd, &st) != 0) return ErrnoStatus(errno, fmt::format("stat {}", path.string()));
  if (!S_ISREG(st.st_mode)) {
    return absl::InvalidArgumentError(
        fmt::format("source {} is not a regular file", path.string()));
  }
  src->size = static_cast<std::uint64_t>(st.st_size);
  src->source_id = SourceId(st);
  return src;
}

absl::Status ReadSource(const SourceFile& src, std::uint64_t offset, void* buf, std::size_t n) {
  auto* p = static_cast<unsigned char*>(buf);
  std::size_t got = 0;
  while (got < n) {
    ssize_t r = ::pread(src.fd, p + got, n - got, static_cast<off_t>(offset + got));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return ErrnoStatus(errno, fmt::format("read {}", src.path.string()));
    if (r == 0) return SourceChanged(src);
    got += static_cast<std::size_t>(r);
  }
  return absl::OkStatus();
}

asio::awaitable<absl::StatusOr<TransferStats>> RunSender(Conn& ctrl, std::vector<ConnPtr> data,
                                                         std::shared_ptr<SourceFile> src,
                                                         std::vector<ByteRange> missing,
                                                         const TransferOptions& o,
                                                         std::string congestion,
                                                         std::uint64_t resumed_bytes,
                                                         Pipeline* pipeline) {
  auto log = LoggerOf(o.logger);
  auto ex = co_await asio::this_coro::executor;
  auto start = SteadyTime::now();
  BlockChecksumAlgorithm alg = *ParseBlockChecksumAlgorithm(o.block_checksum);
  ChecksumAlgorithm file_alg = *ParseChecksumAlgorithm(o.checksum);
  SenderState st;
  // The whole file: its checksum is computed in the block pass (ReadAndHashBlock), from the
  // tree frames' leaves (xxh3-tree) or as blocks go out in file order. Otherwise (resume) it
  // is computed beside the sending, on another thread.
  bool inline_sum =
      src->size > 0 && missing.size() == 1 && missing[0].begin == 0 && missing[0].end == src->size;
  st.tree_frames = file_alg == ChecksumAlgorithm::kXxh3Tree;
  std::shared_ptr<ChecksumJob> checksum;
  struct Abandon {  // a job still running when we return stops at its next read
    std::shared_ptr<ChecksumJob>& job;
    ~Abandon() {
      if (job) job->stop = true;
    }
  } abandon{checksum};
  if (inline_sum && st.tree_frames) {
    st.tree = std::make_shared<TreeChecksum>(src->size);
  } else if (inline_sum) {
    st.file_hasher = std::make_unique<FileHasher>(file_alg);
  } else {
    checksum = StartChecksum(src, file_alg);
  }
  std::shared_ptr<TokenBucket> bucket;
  if (o.route.route_rate_bps > 0) {
    bucket = RouteBucket(o.route.route_name, static_cast<double>(o.route.route_rate_bps) / 8);
  }
  WatchdogScope dog = WatchConnections(ex, data, o.io_timeout);

  // Our own failure (the source) goes to the receiver, which otherwise only sees its
  // connections close.
  auto fail = [&](absl::Status s) -> asio::awaitable<absl::Status> {
    if (!IsConnectionFailure(s)) {
      absl::Status w = co_await ctrl.SendControl(ErrorJson(s));
      (void)w;  // ignored: the receiver may be gone already
      co_return s;
    }
    co_return co_await PeerReason(ctrl, s);
  };

  ProgressReporter progress(o, src->size, resumed_bytes, static_cast<int>(data.size()));
  // This file's share of the data connections' TCP counters (a warm session's connections
  // carried earlier files too).
  const std::vector<TcpSample> tcp_before = SampleTcp(data);
  // Who encrypts the data records (all streams of a session get the same from one kernel).
  const std::string tls_path(data.empty() ? std::string_view() : data.front()->TlsPath());
  st.corrupt_left = o.test_corrupt_times;
  int round = 0;
  std::optional<absl::StatusOr<std::string>> file_sum;
  for (;;) {
    std::uint64_t missing_bytes = 0;
    for (const ByteRange& r : missing) missing_bytes += r.size();
    const std::uint64_t block =
        BlockSize(missing_bytes, data.size(), o.route.stripe_unit, st.tree_frames);
    std::vector<ByteRange> blocks = SplitBlocks(missing, block, st.tree_frames);
    // A stream holds at most about this much unsent besides the block it writes.
    const std::uint64_t low_water = std::clamp<std::uint64_t>(block, 256 * 1024, 4 * 1024 * 1024);
    st.queue.assign(blocks.begin(), blocks.end());
    st.failed = false;
    std::vector<std::function<asio::awaitable<absl::Status>()>> tasks;
    for (std::size_t i = 0; i < data.size(); ++i) {
      tasks.push_back([&, c = data[i], i]() {
        return SendStream(*c, st, *src, o, alg, bucket.get(), progress, static_cast<int>(i),
                          low_water);
      });
    }
    absl::Status s = co_await RunConcurrently(std::move(tasks), [&] {
      st.Stop();
      for (const ConnPtr& c : data) c->Close();
    });
    if (!s.ok()) {
      if (dog->fired)
        s = absl::DeadlineExceededError(fmt::format("no progress for {} ms", o.io_timeout.count()));
      co_return co_await fail(s);
    }
    dog->paused = true;
    if (!file_sum.has_value() && st.tree != nullptr) {
      // Leaves that no tree frame covered (blocks smaller than a leaf) are read here.
      std::function<absl::StatusOr<std::string>()> finish =
          [tree = st.tree, src]() -> absl::StatusOr<std::string> {
        if (absl::Status f = tree->FillFromFd(src->fd); !f.ok()) return f;
        return tree->Finish();
      };
      file_sum = co_await OffThread(finish);
    } else if (!file_sum.has_value() && inline_sum) {
      if (st.hashed_upto == src->size) {
        file_sum = st.file_hasher->Finish();
      } else if (checksum == nullptr) {  // not reached when every block went out in order
        checksum = StartChecksum(src, file_alg);
      }
    }
    if (!file_sum.has_value()) {
      while (!checksum->done.load(std::memory_order_acquire)) {
        asio::steady_timer t(ex, std::chrono::milliseconds(5));
        co_await t.async_wait(kNoThrow);
      }
      file_sum = checksum->result;
    }
    const absl::StatusOr<std::string>& sum = *file_sum;
    if (!sum.ok()) co_return co_await fail(sum.status());
    if (absl::Status c = CheckSourceUnchanged(*src); !c.ok()) co_return co_await fail(c);
    const TcpFigures tcp = Difference(tcp_before, SampleTcp(data));
    // A stream may have turned loss-tolerant (loss_response.h): say what most streams run now.
    if (o.route.congestion.empty()) congestion = MostUsedControl(data, congestion);
    Json msg3 = {{"op", "finish"},
                 {"checksum", *sum},
                 {"round", round},
                 {"congestion", congestion},
                 {"tcp", TcpFiguresToJson(tcp)}};
    if (!tls_path.empty()) msg3["tls"] = tls_path;
    if (absl::Status w = co_await ctrl.SendControl(msg3); !w.ok()) co_return w;
    if (pipeline != nullptr && pipeline->previous_pending) {
      // The file sent before this one (this file's get came ahead of its outcome): that
      // outcome comes first.
      absl::StatusOr<Json> before = co_await ctrl.ReadControl();
      if (!before.ok()) co_return before.status();
      absl::StatusOr<std::string> op = GetString(*before, "op");
      if (!op.ok() || *op != "done") {
        co_return absl::DataLossError(
            "expected done of the file before on a pipelined session (a re-send cannot follow "
            "a get sent ahead)");
      }
      pipeline->previous_pending = false;
      if (pipeline->previous_done) pipeline->previous_done();
    }
    absl::StatusOr<Json> reply = co_await ctrl.ReadControl();
    if (!reply.ok()) co_return reply.status();
    absl::StatusOr<std::string> op = GetString(*reply, "op");
    if (!op.ok()) co_return op.status();
    const bool ahead = *op == "get" && pipeline != nullptr;
    if (*op == "resend") {
      absl::StatusOr<const Json*> ranges = GetArray(*reply, "ranges");
      if (!ranges.ok()) co_return ranges.status();
      absl::StatusOr<std::vector<ByteRange>> again = RangesFromJson(**ranges, src->size);
      if (!again.ok()) co_return again.status();
      missing = std::move(*again);
      ++round;
      std::uint64_t bytes = 0;
      for (const ByteRange& r : missing) bytes += r.size();
      log->warn("receiver asks to re-send {} bytes in {} ranges (damaged blocks), round {}", bytes,
                missing.size(), round);
      dog->paused = false;
      continue;
    }
    if (*op != "done" && !ahead) co_return absl::DataLossError("unexpected reply to finish");
    if (ahead) pipeline->ahead = std::move(*reply);
    TransferStats stats;
    stats.bytes = src->size;
    stats.bytes_transferred = st.sent;
    stats.resumed_bytes = resumed_bytes;
    stats.seconds = std::chrono::duration<double>(SteadyTime::now() - start).count();
    stats.streams = static_cast<int>(data.size());
    stats.checksum = *sum;
    stats.congestion = congestion;
    stats.tls = tls_path;
    stats.resend_rounds = round;
    stats.tcp = tcp;
    progress.SetDone(src->size);
    co_return stats;
  }
}

}  // namespace gfrep::transfer::internal
