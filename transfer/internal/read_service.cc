#include "transfer/internal/read_service.h"

#include <sys/stat.h>

#include <deque>

#include "transfer/checksum.h"

namespace gfrep::transfer::internal {
namespace {

// What the control loop and the streams of one read session share (one executor thread).
struct ReadQueue {
  explicit ReadQueue(const asio::any_io_executor& ex) : idle_timer(ex) {}
  std::deque<ByteRange> ranges;
  bool closed = false;
  std::uint64_t messages = 0;   // fetches received
  int corrupt_left = 0;         // test hook: pieces still to damage (test_corrupt_offset)
  int sending = 0;              // ranges being sent now
  std::vector<asio::steady_timer*> waiting;  // streams waiting for work
  asio::steady_timer idle_timer;
  void Wake() {
    for (asio::steady_timer* t : waiting) t->cancel();
  }
  void Close() {
    closed = true;
    Wake();
    idle_timer.cancel();
  }
};

// Ends the session (closes the control connection) once no fetch came for `idle` and
// nothing is queued or being sent; returns when the session closed.
asio::awaitable<void> WatchIdle(std::shared_ptr<ReadQueue> q, ConnPtr ctrl,
                                std::chrono::milliseconds idle) {
  std::uint64_t seen = q->messages;
  while (!q->closed) {
    q->idle_timer.expires_after(idle);
    co_await q->idle_timer.async_wait(kNoThrow);
    if (q->closed) break;
    if (q->messages == seen && q->ranges.empty() && q->sending == 0) {
      ctrl->Close();
      break;
    }
    seen = q->messages;
  }
}

// kAborted if `src` is no longer the version the session opened.
absl::Status SourceUnchanged(const SourceFile& src) {
  struct stat st {};
  if (::fstat(src.fd, &st) != 0) return ErrnoStatus(errno, "stat of the source");
  const std::string id = fmt::format("{}:{}.{:09}:{}", st.st_size, st.st_mtim.tv_sec,
                                     st.st_mtim.tv_nsec, st.st_ino);
  if (id != src.source_id) {
    return absl::AbortedError("the file changed while it was being read (reopen it)");
  }
  return absl::OkStatus();
}

// One data connection: sends the queued ranges it takes, one frame each.
asio::awaitable<absl::Status> ReadStream(Conn& c, ReadQueue& q, const SourceFile& src,
                                         BlockChecksumAlgorithm alg, std::uint64_t max_range,
                                         std::int64_t corrupt_offset) {
  asio::steady_timer wait(co_await asio::this_coro::executor);
  auto buf = std::make_unique_for_overwrite<unsigned char[]>(max_range);
  for (;;) {
    while (q.ranges.empty() && !q.closed) {
      wait.expires_at(asio::steady_timer::time_point::max());
      q.waiting.push_back(&wait);
      co_await wait.async_wait(kNoThrow);
      std::erase(q.waiting, &wait);
    }
    if (q.closed) co_return absl::OkStatus();
    const ByteRange r = q.ranges.front();
    q.ranges.pop_front();
    const auto n = static_cast<std::size_t>(r.size());
    if (absl::Status s = ReadSource(src, r.begin, buf.get(), n); !s.ok()) co_return s;
    FrameHeader h{FrameType::kData, static_cast<std::uint32_t>(n), r.begin,
                  BlockChecksum(alg, buf.get(), n)};
    const auto corrupt = static_cast<std::uint64_t>(corrupt_offset);
    if (corrupt_offset >= 0 && q.corrupt_left > 0 && r.begin <= corrupt && corrupt < r.end) {
      --q.corrupt_left;
      buf[corrupt - r.begin] ^= 0x5a;  // after the checksum: the reader must notice
    }
    ++q.sending;
    absl::Status s = co_await c.WriteData(h, buf.get());
    --q.sending;
    if (!s.ok()) co_return s;
  }
}

}  // namespace

absl::StatusOr<std::vector<ByteRange>> ReadRangesFromJson(const Json& list, std::uint64_t size,
                                                          std::uint64_t max_range,
                                                          std::size_t max_count) {
  if (!list.is_array()) return absl::InvalidArgumentError("field 'ranges' must be an array");
  if (list.size() > max_count) {
    return absl::ResourceExhaustedError(
        fmt::format("{} ranges asked at once (at most {})", list.size(), max_count));
  }
  std::vector<ByteRange> out;
  out.reserve(list.size());
  for (const Json& r : list) {
    if (!r.is_array() || r.size() != 2 || !r[0].is_number_unsigned() ||
        !r[1].is_number_unsigned()) {
      return absl::InvalidArgumentError("bad range in list");
    }
    const auto b = r[0].get<std::uint64_t>(), e = r[1].get<std::uint64_t>();
    if (b >= e || e > size || e - b > max_range) {
      return absl::InvalidArgumentError(fmt::format(
          "range [{}, {}) invalid for a file of {} bytes read in pieces of at most {}", b, e,
          size, max_range));
    }
    out.push_back({b, e});
  }
  return out;
}

asio::awaitable<absl::Status> SendRanges(Conn& conn, const SourceFile& src,
                                         const std::vector<ByteRange>& ranges,
                                         BlockChecksumAlgorithm alg) {
  if (absl::Status s = SourceUnchanged(src); !s.ok()) co_return s;
  std::string buf;
  for (const ByteRange& r : ranges) {
    buf.resize(r.size());
    if (absl::Status s = ReadSource(src, r.begin, buf.data(), buf.size()); !s.ok()) co_return s;
    FrameHeader h{FrameType::kData, static_cast<std::uint32_t>(buf.size()), r.begin,
                  BlockChecksum(alg, buf.data(), buf.size())};
    if (absl::Status s = co_await conn.WriteData(h, buf.data()); !s.ok()) co_return s;
  }
  co_return absl::OkStatus();
}

asio::awaitable<absl::Status> ServeReadSession(ConnPtr ctrl, std::vector<ConnPtr> data,
                                               std::shared_ptr<SourceFile> src,
                                               const TransferOptions& o,
                                               std::chrono::milliseconds idle) {
  const BlockChecksumAlgorithm alg = *ParseBlockChecksumAlgorithm(o.block_checksum);
  const std::uint64_t max_range = o.route.stripe_unit;
  auto ex = co_await asio::this_coro::executor;
  auto q = std::make_shared<ReadQueue>(ex);
  q->corrupt_left = o.test_corrupt_offset >= 0 ? o.test_corrupt_times : 0;
  // A session nobody asks anything of for `idle` ends; a client that comes back opens a new one.
  asio::co_spawn(ex, WatchIdle(q, ctrl, idle), asio::detached);
  bool reported = false;  // our error was sent on the control connection already
  std::vector<std::function<asio::awaitable<absl::Status>()>> tasks;
  tasks.push_back([&]() -> asio::awaitable<absl::Status> {
    for (;;) {
      absl::StatusOr<Json> m = co_await ctrl->ReadControl();
      if (!m.ok() && (absl::IsUnavailable(m.status()) || absl::IsCancelled(m.status()))) {
        q->Close();  // the client closed the session (or it was idle): the normal end
        co_return absl::OkStatus();
      }
      if (!m.ok()) co_return m.status();
      absl::StatusOr<std::string> op = GetString(*m, "op");
      if (op.ok() && *op == "close") {
        q->Close();
        co_return absl::OkStatus();
      }
      if (!op.ok() || *op != "fetch") {
        co_return absl::InvalidArgumentError("expected fetch or close on a read session");
      }
      absl::StatusOr<const Json*> list = GetArray(*m, "ranges");
      if (!list.ok()) co_return list.status();
      absl::StatusOr<std::vector<ByteRange>> ranges =
          ReadRangesFromJson(**list, src->size, max_range, kMaxReadQueue - q->ranges.size());
      if (!ranges.ok()) co_return ranges.status();
      if (absl::Status s = SourceUnchanged(*src); !s.ok()) {
        // Said before the data connections close, so the client learns why.
        reported = true;
        absl::Status w = co_await ctrl->SendControl(ErrorJson(s));
        (void)w;
        co_return s;
      }
      ++q->messages;
      for (const ByteRange& r : *ranges) q->ranges.push_back(r);
      q->Wake();
    }
  });
  for (const ConnPtr& c : data) {
    tasks.push_back([q, src, c, alg, max_range, corrupt = o.test_corrupt_offset]() {
      return ReadStream(*c, *q, *src, alg, max_range, corrupt);
    });
  }
  absl::Status s = co_await RunConcurrently(std::move(tasks), [&] {
    q->Close();
    for (const ConnPtr& c : data) c->Close();
  });
  q->Close();
  for (const ConnPtr& c : data) c->Close();
  if (!s.ok() && !reported && !absl::IsUnavailable(s) && !absl::IsCancelled(s)) {
    absl::Status w = co_await ctrl->SendControl(ErrorJson(s));
    (void)w;  // the client may be gone already
  }
  co_return s;
}

}  // namespace gfrep::transfer::internal
