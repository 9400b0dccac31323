#include "transfer/remote_file.h"

#include <fmt/format.h>

#include <deque>
#include <future>
#include <map>
#include <optional>
#include <thread>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "transfer/checksum.h"
#include "transfer/internal/engine.h"

namespace gfrep::transfer {
namespace {

using internal::ByteRange;
using internal::ConnPtr;
using internal::Json;
namespace asio = boost::asio;

// The first piece: small enough to arrive in the first round trip of a new connection
// (initial congestion window: 10 segments).
constexpr std::uint64_t kFirstPiece = 8 * 1024;

// How the file is cut into pieces: [0, first), then `block` bytes each.
struct Layout {
  std::uint64_t size = 0;
  std::uint64_t first = kFirstPiece;
  std::uint64_t block = 1 << 20;
  std::uint64_t Count() const {
    if (size == 0) return 0;
    if (size <= first) return 1;
    return 1 + (size - first + block - 1) / block;
  }
  std::uint64_t IndexOf(std::uint64_t offset) const {
    return offset < first ? 0 : 1 + (offset - first) / block;
  }
  ByteRange Range(std::uint64_t i) const {
    if (i == 0) return {0, std::min(size, first)};
    const std::uint64_t b = first + (i - 1) * block;
    return {b, std::min(size, b + block)};
  }
};

}  // namespace

struct RemoteFile::Impl {
  struct Piece {
    bool ready = false;
    std::unique_ptr<unsigned char[]> bytes;
    int resends = 0;
  };

  RemoteReadOptions o;
  BlockChecksumAlgorithm alg = BlockChecksumAlgorithm::kXxh3_64;
  Layout layout;
  std::string source_id;
  std::shared_ptr<spdlog::logger> log;
  std::chrono::steady_clock::time_point opened_at;

  asio::io_context io;
  std::optional<asio::executor_work_guard<asio::io_context::executor_type>> work;
  std::thread thread;
  std::unique_ptr<asio::ssl::context> tls;

  // Connections: set up on the io thread, closed there.
  ConnPtr ctrl;
  std::vector<ConnPtr> data;
  std::deque<std::vector<ByteRange>> outbox;  // fetches to send (io thread)
  bool sending = false;                        // (io thread)

  absl::Mutex mu;
  absl::CondVar cv;  // signalled when a piece arrives, the session fails or closes
  bool closing ABSL_GUARDED_BY(mu) = false;
  absl::Status failed ABSL_GUARDED_BY(mu);
  std::map<std::uint64_t, Piece> pieces ABSL_GUARDED_BY(mu);  // asked for or here, by index
  std::uint64_t cached ABSL_GUARDED_BY(mu) = 0;               // bytes of `pieces`
  std::uint64_t seq_next ABSL_GUARDED_BY(mu) = 0;  // where a sequential reader reads next
  // Whole-file check, over pieces [0, hashed).
  std::unique_ptr<FileHasher> hasher ABSL_GUARDED_BY(mu);
  std::uint64_t hashed ABSL_GUARDED_BY(mu) = 0;
  Stats stats ABSL_GUARDED_BY(mu);

  ~Impl() { Stop(); }

  std::uint64_t CacheCap() const {
    return o.cache_bytes != 0 ? o.cache_bytes : o.readahead_bytes * 2 + 4 * o.block_size;
  }

  // Ends the session: closes every connection on the io thread and joins it.
  void Stop() {
    {
      absl::MutexLock lk(&mu);
      closing = true;
      cv.SignalAll();
    }
    if (!thread.joinable()) return;
    asio::post(io, [this] { CloseAll(); });
    work.reset();
    thread.join();
  }

  void CloseAll() {
    if (ctrl) ctrl->Close();
    for (const ConnPtr& c : data) {
      if (c) c->Close();
    }
  }

  // The session is broken: every read from now on fails with `s` (the first failure).
  void Fail(absl::Status s) {
    bool first;
    {
      absl::MutexLock lk(&mu);
      first = FailLocked(std::move(s));
    }
    if (first) Closed();
  }

  // Records the session's failure; true if it is the first (then call Closed() after
  // unlocking). Used where the failure must be visible together with the state that caused
  // it: no reader may see the last piece without its mismatch.
  bool FailLocked(absl::Status s) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    if (closing || !failed.ok()) return false;
    failed = std::move(s);
    log->debug("read session failed: {}", failed.ToString());
    return true;
  }

  // Wakes the readers and closes the connections after a failure. The failure was recorded
  // under mu before (FailLocked): a reader either saw it or is already waiting, so the signal
  // needs no lock.
  void Closed() {
    cv.SignalAll();
    asio::post(io, [this] { CloseAll(); });
  }

  // Marks piece `i` asked for (not in `pieces`).
  void Ask(std::uint64_t i, std::vector<ByteRange>& out) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    const ByteRange r = layout.Range(i);
    pieces.emplace(i, Piece{});
    cached += r.size();
    out.push_back(r);
  }

  // Drops pieces that are here (never those being fetched) until `need` more bytes fit the
  // cache: first those behind the read [first, last], lowest first, then those farthest
  // ahead.
  void MakeRoom(std::uint64_t need, std::uint64_t first, std::uint64_t last)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    const std::uint64_t cap = CacheCap();
    for (auto it = pieces.begin(); it != pieces.end() && it->first < first && cached + need > cap;) {
      it = it->second.ready ? Drop(it) : std::next(it);
    }
    while (cached + need > cap) {
      auto it = pieces.end();
      for (auto r = pieces.rbegin(); r != pieces.rend() && r->first > last; ++r) {
        if (r->second.ready) {
          it = std::prev(r.base());
          break;
        }
      }
      if (it == pieces.end()) return;
      Drop(it);
    }
  }

  // Drops a piece that is here from the cache.
  std::map<std::uint64_t, Piece>::iterator Drop(std::map<std::uint64_t, Piece>::iterator it)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    if (it->first >= hashed && hasher) {
      hasher.reset();  // the whole-file hash cannot reach this piece any more
      log->debug("remote read: whole-file check given up (random access beyond the cache)");
    }
    cached -= layout.Range(it->first).size();
    return pieces.erase(it);
  }

  // Asks for the pieces [first, last] of a read that are neither here nor on their way
  // (another reader's read may have dropped one from the cache meanwhile); true if all are
  // here.
  bool AskMissing(std::uint64_t first, std::uint64_t last, std::vector<ByteRange>& want)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    bool all = true;
    for (std::uint64_t i = first; i <= last; ++i) {
      auto it = pieces.find(i);
      if (it == pieces.end()) {
        MakeRoom(layout.Range(i).size(), first, last);
        Ask(i, want);
        all = false;
      } else if (!it->second.ready) {
        all = false;
      }
    }
    return all;
  }

  // RemoteFile::ReadAt under the lock; `timed_out` is set when this read found the session
  // dead (nothing arrived for io_timeout) and failed it first: the caller calls Closed().
  absl::StatusOr<std::size_t> Read(std::uint64_t offset, void* buffer, std::size_t n,
                                   bool& timed_out) {
    absl::MutexLock lk(&mu);
    if (offset >= layout.size || n == 0) {
      // The end of the file: still an error after a whole-file mismatch (a caller reading
      // to the end must not take a short read for success).
      if (stats.whole_file_mismatch) {
        return failed.ok()
                   ? absl::DataLossError("the file read does not match its expected checksum")
                   : failed;
      }
      return 0;
    }
    n = static_cast<std::size_t>(std::min<std::uint64_t>(n, layout.size - offset));
    const std::uint64_t first = layout.IndexOf(offset);
    const std::uint64_t last = layout.IndexOf(offset + n - 1);
    ++stats.reads;
    std::vector<ByteRange> want;
    if (!failed.ok()) return failed;
    bool all = AskMissing(first, last, want);
    // A sequential reader gets the next readahead_bytes fetched ahead, as far as the cache
    // has room. Sequential: this read starts about where the last one ended, or the piece
    // before it was fetched (the kernel's read-ahead through a mount sends reads slightly out
    // of order).
    const bool sequential =
        offset == 0 || (first > 0 && pieces.count(first - 1) != 0) ||
        (offset <= seq_next + o.block_size && offset + o.block_size >= seq_next);
    if (sequential) {
      const std::uint64_t ahead =
          layout.IndexOf(std::min(layout.size - 1, offset + n - 1 + o.readahead_bytes));
      for (std::uint64_t i = last + 1; i <= ahead; ++i) {
        if (pieces.count(i) != 0) continue;
        const std::uint64_t bytes = layout.Range(i).size();
        MakeRoom(bytes, first, i - 1);
        if (cached + bytes > CacheCap()) break;
        Ask(i, want);
      }
    }
    seq_next = offset + n;
    if (!all) ++stats.reads_waited;
    std::uint64_t seen = stats.pieces_fetched + stats.pieces_damaged;
    while (failed.ok() && !closing) {
      if (!want.empty()) Fetch(std::exchange(want, {}));
      if (all) break;
      if (cv.WaitWithTimeout(&mu, absl::FromChrono(o.transfer.io_timeout)) &&
          stats.pieces_fetched + stats.pieces_damaged == seen) {
        // Nothing at all arrived for io_timeout: a dead session.
        timed_out = FailLocked(absl::DeadlineExceededError(fmt::format(
            "nothing arrived on the read session for {} ms", o.transfer.io_timeout.count())));
      }
      seen = stats.pieces_fetched + stats.pieces_damaged;
      all = AskMissing(first, last, want);
    }
    if (!failed.ok()) return failed;
    if (closing) return absl::CancelledError("the file is being closed");
    auto* out = static_cast<unsigned char*>(buffer);
    std::size_t done = 0;
    for (std::uint64_t i = first; i <= last; ++i) {
      const ByteRange r = layout.Range(i);
      const std::uint64_t from = std::max(r.begin, offset);
      const std::uint64_t to = std::min(r.end, offset + n);
      std::memcpy(out + done, pieces[i].bytes.get() + (from - r.begin), to - from);
      done += to - from;
    }
    return done;
  }

  // Sends `ranges` as a fetch (from any thread).
  void Fetch(std::vector<ByteRange> ranges) {
    asio::post(io, [this, ranges = std::move(ranges)]() mutable {
      outbox.push_back(std::move(ranges));
      if (sending) return;
      sending = true;
      asio::co_spawn(io, Drain(), asio::detached);
    });
  }

  asio::awaitable<void> Drain() {
    while (!outbox.empty()) {
      std::vector<ByteRange> r = std::move(outbox.front());
      outbox.pop_front();
      Json m{{"op", "fetch"}, {"ranges", internal::RangesToJson(r)}};
      if (absl::Status s = co_await ctrl->SendControl(m); !s.ok()) {
        Fail(s);
        break;
      }
    }
    sending = false;
  }

  // A piece arrived (io thread): checked against its block checksum, then kept.
  void Deliver(const internal::FrameHeader& h, std::unique_ptr<unsigned char[]> bytes) {
    const bool intact = BlockChecksum(alg, bytes.get(), h.length) == h.checksum;
    mu.Lock();
    const std::uint64_t i = layout.IndexOf(h.offset);
    const ByteRange r = layout.Range(i);
    auto it = pieces.find(i);
    if (r.begin != h.offset || r.size() != h.length || it == pieces.end() || it->second.ready) {
      mu.Unlock();
      Fail(absl::DataLossError(fmt::format(
          "the agent sent bytes [{}, {}) that were not asked for", h.offset, h.offset + h.length)));
      return;
    }
    if (!intact) {
      ++stats.pieces_damaged;
      const int resends = ++it->second.resends;
      mu.Unlock();
      if (resends > o.transfer.max_resend_rounds) {
        Fail(absl::DataLossError(
            fmt::format("bytes [{}, {}) arrived damaged {} times", r.begin, r.end, resends)));
        return;
      }
      Fetch({r});  // ask again
      return;
    }
    it->second.ready = true;
    it->second.bytes = std::move(bytes);
    stats.bytes_fetched += h.length;
    ++stats.pieces_fetched;
    bool mismatch = false;
    while (hasher && hashed < layout.Count()) {
      auto next = pieces.find(hashed);
      if (next == pieces.end() || !next->second.ready) break;
      hasher->Update(next->second.bytes.get(), layout.Range(hashed).size());
      if (++hashed == layout.Count()) {
        const std::string sum = hasher->Finish();
        hasher.reset();
        if (sum == o.expected_checksum) {
          stats.whole_file_verified = true;
        } else {
          stats.whole_file_mismatch = true;
          // Under the lock that made the last piece ready: a reader sees both or neither.
          mismatch = FailLocked(absl::DataLossError(fmt::format(
              "the file read has checksum {}, expected {}", sum, o.expected_checksum)));
        }
      }
    }
    cv.SignalAll();
    mu.Unlock();
    if (mismatch) Closed();
  }

  // Reads one piece from `c` (data frames only). kUnavailable when `c` closes.
  asio::awaitable<absl::Status> ReadPiece(internal::Conn& c) {
    absl::StatusOr<internal::FrameHeader> h =
        co_await c.ReadHeader(static_cast<std::uint32_t>(o.block_size));
    if (!h.ok()) co_return h.status();
    if (h->type != internal::FrameType::kData) {
      co_return absl::DataLossError("expected a data frame on a read session");
    }
    auto bytes = std::make_unique_for_overwrite<unsigned char[]>(std::max<std::uint32_t>(h->length, 1));
    if (absl::Status s = co_await c.ReadExact(bytes.get(), h->length); !s.ok()) co_return s;
    Deliver(*h, std::move(bytes));
    co_return absl::OkStatus();
  }

  asio::awaitable<void> DataLoop(ConnPtr c) {
    for (;;) {
      absl::Status s = co_await ReadPiece(*c);
      if (!s.ok()) {
        {
          absl::MutexLock lk(&mu);
          if (closing || !failed.ok()) co_return;  // we closed it, or the session failed already
        }
        if (absl::IsUnavailable(s)) {
          // The agent closes its data connections when it ends the session for a reason (the
          // file changed, say), which it then sends on the control connection: give that a
          // moment to arrive first.
          // (Looked at every 50 ms: a close, or the reason arriving, ends the wait early.)
          asio::steady_timer t(io);
          for (int i = 0; i < 20; ++i) {
            t.expires_after(std::chrono::milliseconds(50));
            co_await t.async_wait(internal::kNoThrow);
            absl::MutexLock lk(&mu);
            if (closing || !failed.ok()) co_return;
          }
          s = absl::UnavailableError(fmt::format("read session lost a data connection: {}", s.message()));
        }
        Fail(s);
        co_return;
      }
    }
  }

  // After the setup the control connection only carries the agent's errors.
  asio::awaitable<void> ControlLoop() {
    absl::StatusOr<Json> m = co_await ctrl->ReadControl();
    if (m.ok()) {
      Fail(absl::DataLossError("unexpected message on a read session"));
    } else {
      Fail(absl::IsUnavailable(m.status())
               ? absl::UnavailableError("the agent closed the read session")
               : m.status());
    }
  }

  // Joins the data connections to session `token`, then reads pieces from them.
  asio::awaitable<void> JoinAndRead(std::vector<internal::ClientConnection> connected,
                                    std::string token) {
    const std::string key = internal::JoinKey(*ctrl, o.transfer.shared_key);
    std::vector<std::function<asio::awaitable<absl::Status>()>> tasks;
    for (const internal::ClientConnection& c : connected) {
      tasks.push_back([&c, &token, &key]() { return internal::SendJoin(c, token, key); });
    }
    if (absl::Status s = co_await internal::RunConcurrently(std::move(tasks)); !s.ok()) {
      Fail(s);
      co_return;
    }
    for (const internal::ClientConnection& c : connected) {
      internal::TuneSocket(c.conn->socket(), o.transfer.route, *log);
      asio::co_spawn(io, DataLoop(c.conn), asio::detached);
    }
  }

  // Connects, asks for the read session and takes the first piece; the data connections
  // connect beside it and join afterwards, while the caller already reads.
  asio::awaitable<absl::Status> Setup(Endpoint agent, std::string path) {
    const std::size_t n = static_cast<std::size_t>(o.transfer.route.streams);
    std::vector<internal::ClientConnection> connected(n);
    std::string token;
    std::vector<std::function<asio::awaitable<absl::Status>()>> tasks;
    tasks.push_back([&]() -> asio::awaitable<absl::Status> {
      Json req{{"op", "read"}, {"path", path}, {"options", internal::RouteToJson(o.transfer)},
               {"first", kFirstPiece}};
      // The request goes right behind the authentication (one round trip less).
      absl::StatusOr<internal::ClientConnection> c =
          co_await internal::ConnectTo(agent, "control", o.transfer, tls.get(), *log, &req);
      if (!c.ok()) co_return c.status();
      ctrl = c->conn;
      if (!c->request_sent) {
        if (absl::Status s = co_await ctrl->SendControl(req); !s.ok()) co_return s;
      }
      absl::StatusOr<Json> ok = co_await ctrl->ReadControl();
      if (!ok.ok()) {
        if (absl::IsInvalidArgument(ok.status()) &&
            std::string(ok.status().message()).find("unknown request") != std::string::npos) {
          co_return absl::InvalidArgumentError(fmt::format(
              "agent {} does not serve streaming reads (built before 2026-11-25): {}",
              agent.ToString(), ok.status().message()));
        }
        co_return ok.status();
      }
      absl::StatusOr<std::string> op = internal::GetString(*ok, "op");
      absl::StatusOr<std::uint64_t> size = internal::GetUint(*ok, "size");
      absl::StatusOr<std::string> id = internal::GetString(*ok, "source_id");
      absl::StatusOr<std::string> t = internal::GetString(*ok, "token");
      if (!op.ok() || *op != "read_ok" || !size.ok() || !id.ok() || !t.ok()) {
        co_return absl::DataLossError("unexpected reply to read");
      }
      if (o.expected_size != 0 && *size != o.expected_size) {
        co_return absl::DataLossError(fmt::format("{} on {} has {} bytes, expected {}", path,
                                                  agent.ToString(), *size, o.expected_size));
      }
      {
        absl::MutexLock lk(&mu);
        layout.size = *size;
        source_id = *id;
        token = *t;
        if (layout.Count() > 0) {
          std::vector<ByteRange> ignored;
          Ask(0, ignored);  // sent at once, on this connection
        }
      }
      if (layout.Count() > 0) {
        if (absl::Status s = co_await ReadPiece(*ctrl); !s.ok()) co_return s;
      }
      co_return absl::OkStatus();
    });
    for (std::size_t i = 0; i < n; ++i) {
      tasks.push_back([&, i]() -> asio::awaitable<absl::Status> {
        absl::StatusOr<internal::ClientConnection> c =
            co_await internal::ConnectTo(agent, "data", o.transfer, tls.get(), *log);
        if (!c.ok()) co_return c.status();
        connected[i] = std::move(*c);
        co_return absl::OkStatus();
      });
    }
    absl::Status s = co_await internal::RunConcurrently(std::move(tasks));
    if (s.ok()) {
      absl::MutexLock lk(&mu);
      s = failed;  // e.g. the first piece was damaged beyond repair
    }
    if (!s.ok()) {
      CloseAll();
      for (const internal::ClientConnection& c : connected) {
        if (c.conn) c.conn->Close();
      }
      co_return s;
    }
    for (const internal::ClientConnection& c : connected) data.push_back(c.conn);
    asio::co_spawn(io, ControlLoop(), asio::detached);
    asio::co_spawn(io, JoinAndRead(std::move(connected), std::move(token)), asio::detached);
    co_return absl::OkStatus();
  }
};

RemoteFile::RemoteFile(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
RemoteFile::~RemoteFile() = default;

absl::StatusOr<std::unique_ptr<RemoteFile>> RemoteFile::Open(const Endpoint& agent,
                                                             std::string_view path,
                                                             const RemoteReadOptions& options) {
  if (options.block_size < 64 * 1024 || options.block_size > 16ull * 1024 * 1024) {
    return absl::InvalidArgumentError(
        fmt::format("block_size {} outside 64 KiB..16 MiB", options.block_size));
  }
  auto impl = std::make_unique<Impl>();
  impl->o = options;
  impl->o.transfer.route.stripe_unit = options.block_size;
  impl->o.readahead_bytes = std::max(options.readahead_bytes, options.block_size);
  if (impl->o.transfer.route.route_name.empty()) impl->o.transfer.route.route_name = agent.ToString();
  if (absl::Status s = Validate(impl->o.transfer); !s.ok()) return s;
  absl::StatusOr<BlockChecksumAlgorithm> alg =
      ParseBlockChecksumAlgorithm(impl->o.transfer.block_checksum);
  if (!alg.ok()) return alg.status();
  impl->alg = *alg;
  if (!options.expected_checksum.empty()) {
    const std::size_t colon = options.expected_checksum.find(':');
    absl::StatusOr<ChecksumAlgorithm> file_alg =
        ParseChecksumAlgorithm(options.expected_checksum.substr(0, colon));
    if (colon == std::string::npos || !file_alg.ok()) {
      return absl::InvalidArgumentError(
          fmt::format("expected_checksum '{}': want ALGORITHM:HEX", options.expected_checksum));
    }
    absl::MutexLock lk(&impl->mu);
    impl->hasher = std::make_unique<FileHasher>(*file_alg);
  }
  impl->layout.block = options.block_size;
  impl->log = internal::LoggerOf(options.transfer.logger);
  if (impl->o.transfer.tls || impl->o.transfer.tls_control) {
    auto ctx = internal::MakeTlsContext(impl->o.transfer.tls_options, false);
    if (!ctx.ok()) return ctx.status();
    impl->tls = std::move(*ctx);
  }
  impl->opened_at = std::chrono::steady_clock::now();
  impl->work.emplace(impl->io.get_executor());
  Impl* raw = impl.get();
  std::promise<absl::Status> setup;
  std::future<absl::Status> result = setup.get_future();
  asio::co_spawn(raw->io,
                 internal::CatchExceptions(raw->Setup(agent, std::string(path)), "read setup"),
                 [&setup](std::exception_ptr e, absl::Status s) {
                   setup.set_value(e ? absl::InternalError("bug: exception in read setup") : s);
                 });
  raw->thread = std::thread([raw] { raw->io.run(); });
  absl::Status s = result.get();
  if (!s.ok()) return s;  // ~Impl stops the thread
  absl::MutexLock lk(&raw->mu);
  raw->stats.open_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - raw->opened_at).count();
  return std::unique_ptr<RemoteFile>(new RemoteFile(std::move(impl)));
}

absl::StatusOr<std::size_t> RemoteFile::ReadAt(std::uint64_t offset, void* buffer, std::size_t n) {
  bool timed_out = false;
  absl::StatusOr<std::size_t> read = impl_->Read(offset, buffer, n, timed_out);
  if (timed_out) impl_->Closed();  // the first failure: wakes the readers, closes the connections
  return read;
}

std::uint64_t RemoteFile::size() const { return impl_->layout.size; }
const std::string& RemoteFile::source_id() const { return impl_->source_id; }
RemoteFile::Stats RemoteFile::stats() const {
  absl::MutexLock lk(&impl_->mu);
  return impl_->stats;
}

}  // namespace gfrep::transfer
