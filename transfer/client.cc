#include "transfer/client.h"

#include <fmt/format.h>

#include <algorithm>

#include "transfer/checksum.h"
#include "transfer/internal/engine.h"
#include "transfer/internal/pull.h"
#include "transfer/internal/receiver.h"
#include "transfer/internal/sender.h"
#include "transfer/internal/session_cache.h"
#include "transfer/internal/tcp_stats.h"

namespace gfrep::transfer {

using internal::ConnPtr;
using internal::GetString;
using internal::GetUint;
using internal::Json;
using internal::kNoThrow;
namespace asio = boost::asio;

namespace {

// Closes `conn` if the setup phase does not finish before `timeout`.
class SetupDeadline {
 public:
  SetupDeadline(const asio::any_io_executor& ex, ConnPtr conn, std::chrono::milliseconds timeout)
      : timer_(std::make_shared<asio::steady_timer>(ex, timeout)) {
    timer_->async_wait([conn](boost::system::error_code ec) {
      if (!ec) conn->Close();
    });
  }
  ~SetupDeadline() { timer_->cancel(); }

 private:
  std::shared_ptr<asio::steady_timer> timer_;
};

template <class T>
T RunBlocking(std::function<asio::awaitable<T>()> make) {
  asio::io_context io;
  std::optional<T> result;
  asio::co_spawn(io, make(), [&](std::exception_ptr e, T r) {
    if (e) {
      result = absl::InternalError("bug: exception escaped the transfer");
    } else {
      result = std::move(r);
    }
  });
  io.run();
  return std::move(*result);
}

struct Prepared {
  TransferOptions options;
  std::shared_ptr<asio::ssl::context> tls;  // shared with the warm sessions it opens
};

absl::StatusOr<Prepared> Prepare(const TransferOptions& options, const Endpoint& peer) {
  if (absl::Status s = Validate(options); !s.ok()) return s;
  Prepared p{options, nullptr};
  if (p.options.route.route_name.empty()) p.options.route.route_name = peer.ToString();
  if (options.tls || options.tls_control) {
    auto ctx = internal::MakeTlsContext(options.tls_options, false);
    if (!ctx.ok()) return ctx.status();
    p.tls = std::move(*ctx);
  }
  return p;
}

// Connects the session's data connections (TCP and hello) all at once, before the session
// they will join exists: a pull does this while its control connection authenticates and
// asks for the file.
asio::awaitable<absl::StatusOr<std::vector<internal::ClientConnection>>> ConnectData(
    const Endpoint& agent, const Prepared& p) {
  auto log = internal::LoggerOf(p.options.logger);
  const auto n = static_cast<std::size_t>(p.options.route.streams);
  std::vector<internal::ClientConnection> data(n);
  std::vector<std::function<asio::awaitable<absl::Status>()>> tasks;
  for (std::size_t i = 0; i < n; ++i) {
    tasks.push_back([&, i]() -> asio::awaitable<absl::Status> {
      absl::StatusOr<internal::ClientConnection> c =
          co_await internal::ConnectTo(agent, "data", p.options, p.tls.get(), *log);
      if (!c.ok()) co_return c.status();
      data[i] = std::move(*c);
      co_return absl::OkStatus();
    });
  }
  // On a failure the other connects end by themselves (refused, or their io_timeout).
  absl::Status s = co_await internal::RunConcurrently(std::move(tasks));
  if (!s.ok()) {
    for (const internal::ClientConnection& c : data) {
      if (c.conn) c.conn->Close();
    }
    co_return s;
  }
  co_return data;
}

// Joins connected data connections to session `token` with `join_key`, all at once
// (`early`: see SendJoin), and tunes their sockets; on a failure closes them all.
asio::awaitable<absl::StatusOr<std::vector<ConnPtr>>> JoinAll(
    const std::vector<internal::ClientConnection>& connected, const std::string& token,
    const std::string& join_key, bool early, const Prepared& p, std::string& congestion) {
  auto log = internal::LoggerOf(p.options.logger);
  std::vector<std::function<asio::awaitable<absl::Status>()>> tasks;
  for (const internal::ClientConnection& c : connected) {
    tasks.push_back([&]() { return internal::SendJoin(c, token, join_key, early); });
  }
  absl::Status s = co_await internal::RunConcurrently(std::move(tasks));
  std::vector<ConnPtr> data;
  for (const internal::ClientConnection& c : connected) data.push_back(c.conn);
  if (!s.ok()) {
    for (const ConnPtr& c : data) c->Close();
    co_return s;
  }
  for (const ConnPtr& c : data) congestion = internal::TuneSocket(c->socket(), p.options.route, *log);
  co_return data;
}

// Joins connected data connections to session `token`, named by the agent's reply.
// `control` is the session's control connection (its TLS session keys the joins).
asio::awaitable<absl::StatusOr<std::vector<ConnPtr>>> JoinConnected(
    const std::vector<internal::ClientConnection>& connected, const std::string& token,
    internal::Conn& control, const Prepared& p, std::string& congestion) {
  co_return co_await JoinAll(connected, token, internal::JoinKey(control, p.options.shared_key),
                             false, p, congestion);
}

// A new session whose token the client chose (a get's "token"): its data connections join
// beside the request instead of after the reply, one round trip less to the first byte.
struct EarlyJoin {
  EarlyJoin(const asio::any_io_executor& ex, std::string token)
      : token(std::move(token)), key_known(ex, asio::steady_timer::time_point::max()) {}
  std::string token;
  std::string key;                 // the join key, once known (JoinKey of the control)
  bool control_failed = false;     // nothing to join: the control connection failed
  asio::steady_timer key_known;    // cancelled when `key` is set or the control failed
  std::vector<ConnPtr> data;       // joined (all of them), else empty
  std::string congestion;          // of the joined connections
};

// Runs `control` (connect, request, reply on the control connection) while the session's
// data connections connect beside it, so that they only have to join once the reply names
// the session. `connected` holds them when both succeeded; a failure of either is returned
// (the control's first: it carries the agent's answer). With `early` (the control's request
// names the token) and an agent that joins early, they also join beside it, as soon as
// `early->key` is known (`control` sets it when its connection is secured, else fails);
// `early->data` then holds them.
asio::awaitable<absl::Status> ControlBesideData(const Endpoint& agent, const Prepared& p,
                                                std::function<asio::awaitable<absl::Status>()> control,
                                                std::vector<internal::ClientConnection>& connected,
                                                EarlyJoin* early = nullptr) {
  absl::Status control_status = absl::OkStatus();
  std::vector<std::function<asio::awaitable<absl::Status>()>> setup;
  setup.push_back([&]() -> asio::awaitable<absl::Status> {
    control_status = co_await control();
    if (!control_status.ok() && early != nullptr) {
      // Joins held by the agent for a get that failed would wait for its timeout.
      early->control_failed = true;
      early->key_known.cancel();
      for (const internal::ClientConnection& c : connected) c.conn->Close();
    }
    co_return absl::OkStatus();  // reported first, below
  });
  setup.push_back([&]() -> asio::awaitable<absl::Status> {
    absl::StatusOr<std::vector<internal::ClientConnection>> c = co_await ConnectData(agent, p);
    if (!c.ok()) co_return c.status();
    connected = std::move(*c);
    if (early == nullptr || connected.empty() ||
        !std::all_of(connected.begin(), connected.end(),
                     [](const internal::ClientConnection& d) { return d.joins_early; })) {
      co_return absl::OkStatus();  // they join once the reply names the session
    }
    while (early->key.empty() && !early->control_failed) {
      co_await early->key_known.async_wait(kNoThrow);
    }
    if (early->control_failed) co_return absl::OkStatus();
    absl::StatusOr<std::vector<ConnPtr>> joined =
        co_await JoinAll(connected, early->token, early->key, true, p, early->congestion);
    if (!joined.ok()) co_return joined.status();
    early->data = std::move(*joined);
    co_return absl::OkStatus();
  });
  absl::Status s = co_await internal::RunConcurrently(std::move(setup));
  if (!control_status.ok() || !s.ok()) {
    for (const internal::ClientConnection& c : connected) c.conn->Close();
    connected.clear();
    if (early != nullptr) early->data.clear();
  }
  co_return control_status.ok() ? s : control_status;
}

asio::awaitable<absl::StatusOr<TransferStats>> AsyncPush(std::filesystem::path local,
                                                         Endpoint agent, std::string remote_path,
                                                         TransferOptions options) {
  absl::StatusOr<Prepared> p = Prepare(options, agent);
  if (!p.ok()) co_return p.status();
  auto log = internal::LoggerOf(p->options.logger);
  absl::StatusOr<std::shared_ptr<internal::SourceFile>> src = internal::OpenSource(local);
  if (!src.ok()) co_return src.status();
  auto ex = co_await asio::this_coro::executor;
  ConnPtr ctrl_conn;
  std::optional<SetupDeadline> deadline;
  absl::StatusOr<Json> session = absl::UnknownError("no reply");
  std::vector<internal::ClientConnection> connected;
  absl::Status setup = co_await ControlBesideData(
      agent, *p,
      [&]() -> asio::awaitable<absl::Status> {
        Json req{{"op", "put"}, {"path", remote_path}, {"size", (*src)->size},
                 {"source_id", (*src)->source_id}, {"options", internal::RouteToJson(p->options)}};
        absl::StatusOr<internal::ClientConnection> ctrl =
            co_await internal::ConnectTo(agent, "control", p->options, p->tls.get(), *log, &req);
        if (!ctrl.ok()) co_return ctrl.status();
        ctrl_conn = ctrl->conn;
        deadline.emplace(ex, ctrl_conn, p->options.io_timeout);
        if (!ctrl->request_sent) {
          if (absl::Status s = co_await ctrl_conn->SendControl(req); !s.ok()) co_return s;
        }
        session = co_await ctrl_conn->ReadControl();
        co_return session.status();
      },
      connected);
  if (!setup.ok()) co_return setup;
  absl::StatusOr<std::string> op = GetString(*session, "op");
  absl::StatusOr<const Json*> missing_json = internal::GetArray(*session, "missing");
  absl::StatusOr<std::uint64_t> resumed = GetUint(*session, "resumed_bytes");
  absl::StatusOr<std::string> token = GetString(*session, "token");
  if (!op.ok() || *op != "session" || !missing_json.ok() || !resumed.ok() || !token.ok()) {
    co_return absl::DataLossError("unexpected reply to put");
  }
  absl::StatusOr<std::vector<internal::ByteRange>> missing = internal::RangesFromJson(**missing_json, (*src)->size);
  if (!missing.ok()) co_return missing.status();
  if (*resumed > 0) log->info("resuming: the agent already holds {} of {} bytes", *resumed, (*src)->size);
  std::string congestion;
  absl::StatusOr<std::vector<ConnPtr>> data = co_await JoinConnected(connected, *token, *ctrl_conn, *p, congestion);
  if (!data.ok()) co_return data.status();
  deadline.reset();
  co_return co_await internal::RunSender(*ctrl_conn, *data, *src, *missing, p->options, congestion, *resumed);
}

// The destination agent's progress and done messages, read field by field.
absl::StatusOr<Progress> ParseProgress(const Json& m) {
  absl::StatusOr<std::uint64_t> done = GetUint(m, "bytes_done");
  absl::StatusOr<std::uint64_t> total = GetUint(m, "bytes_total");
  absl::StatusOr<std::uint64_t> resumed = GetUint(m, "resumed_bytes");
  absl::StatusOr<double> seconds = internal::GetDouble(m, "seconds");
  absl::StatusOr<std::int64_t> streams = internal::GetInt(m, "streams");
  for (const absl::Status& s : {done.status(), total.status(), resumed.status(), seconds.status(), streams.status()}) {
    if (!s.ok()) return s;
  }
  Progress p;
  p.bytes_done = *done;
  p.bytes_total = *total;
  p.resumed_bytes = *resumed;
  p.seconds = *seconds;
  p.streams = static_cast<int>(std::clamp<std::int64_t>(*streams, 0, kMaxStreams));
  return p;
}

absl::StatusOr<TransferStats> ParseDone(const Json& m) {
  absl::StatusOr<std::uint64_t> bytes = GetUint(m, "bytes");
  absl::StatusOr<std::uint64_t> transferred = GetUint(m, "bytes_transferred");
  absl::StatusOr<std::uint64_t> resumed = GetUint(m, "resumed_bytes");
  absl::StatusOr<double> seconds = internal::GetDouble(m, "seconds");
  absl::StatusOr<std::int64_t> streams = internal::GetInt(m, "streams");
  absl::StatusOr<std::string> checksum = GetString(m, "checksum");
  absl::StatusOr<std::string> congestion = GetString(m, "congestion");
  absl::StatusOr<std::string> tls = internal::GetOptionalString(m, "tls", "");
  absl::StatusOr<std::int64_t> rounds = internal::GetInt(m, "resend_rounds");
  absl::StatusOr<TcpFigures> tcp = internal::TcpFiguresFromJson(m);
  for (const absl::Status& s : {bytes.status(), transferred.status(), resumed.status(), seconds.status(),
                                streams.status(), checksum.status(), congestion.status(), tls.status(),
                                rounds.status(), tcp.status()}) {
    if (!s.ok()) return s;
  }
  TransferStats st;
  st.bytes = *bytes;
  st.bytes_transferred = *transferred;
  st.resumed_bytes = *resumed;
  st.seconds = *seconds;
  st.streams = static_cast<int>(std::clamp<std::int64_t>(*streams, 0, kMaxStreams));
  st.checksum = *checksum;
  st.congestion = *congestion;
  st.tls = *tls;
  st.resend_rounds = static_cast<int>(std::clamp<std::int64_t>(*rounds, 0, 100));
  st.tcp = *tcp;
  return st;
}

asio::awaitable<absl::StatusOr<TransferStats>> ThirdPartyAsync(Endpoint src, std::string src_path,
                                                               Endpoint dst, std::string dst_path,
                                                               TransferOptions options) {
  absl::StatusOr<Prepared> p = Prepare(options, dst);
  if (!p.ok()) co_return p.status();
  auto log = internal::LoggerOf(p->options.logger);
  Json opts = internal::RouteToJson(p->options);
  opts["route_name"] = options.route.route_name.empty() ? src.ToString() : options.route.route_name;
  Json req{{"op", "pull_from"}, {"source", src.ToString()}, {"source_path", src_path},
           {"path", dst_path}, {"options", opts}};
  absl::StatusOr<internal::ClientConnection> ctrl =
      co_await internal::ConnectTo(dst, "control", p->options, p->tls.get(), *log, &req);
  if (!ctrl.ok()) co_return ctrl.status();
  if (!ctrl->request_sent) {
    if (absl::Status s = co_await ctrl->conn->SendControl(req); !s.ok()) co_return s;
  }
  // The destination agent reports progress at least every second; silence means trouble.
  auto ex = co_await asio::this_coro::executor;
  internal::WatchdogScope dog =
      internal::WatchConnections(ex, {ctrl->conn}, p->options.io_timeout);
  for (;;) {
    absl::StatusOr<Json> m = co_await ctrl->conn->ReadControl();
    if (!m.ok()) {
      if (dog->fired) co_return absl::DeadlineExceededError(fmt::format("{} stopped reporting", dst.ToString()));
      co_return m.status();
    }
    absl::StatusOr<std::string> op = GetString(*m, "op");
    if (op.ok() && *op == "progress") {
      absl::StatusOr<Progress> pr = ParseProgress(*m);
      if (!pr.ok()) {
        co_return absl::DataLossError(fmt::format("malformed progress from the destination agent: {}", pr.status().message()));
      }
      if (options.progress) options.progress(*pr);
      continue;
    }
    if (!op.ok() || *op != "done") co_return absl::DataLossError("unexpected message from the destination agent");
    absl::StatusOr<TransferStats> done = ParseDone(*m);
    if (!done.ok()) {
      co_return absl::DataLossError(fmt::format("malformed message from the destination agent: {}", done.status().message()));
    }
    co_return *done;
  }
}

}  // namespace

namespace internal {
namespace {

// A get over a warm session: sends the request and reads the offer. nullopt if the session
// turned out to be dead (the agent restarted or dropped it while idle): nothing was asked of
// the agent then, and the caller opens a new session instead.
asio::awaitable<std::optional<absl::StatusOr<Json>>> RequestOnWarm(SessionCache::Impl::Warm& warm,
                                                                    const Json& req,
                                                                    const TransferOptions& o,
                                                                    bool sent = false) {
  auto ex = co_await asio::this_coro::executor;
  SetupDeadline deadline(ex, warm.ctrl, o.io_timeout);
  if (!sent) {
    if (absl::Status s = co_await warm.ctrl->SendControl(req); !s.ok()) co_return std::nullopt;
  }
  absl::StatusOr<Json> offer = co_await warm.ctrl->ReadControl();
  // A closed session reads as a lost connection; an error the agent sent is its answer.
  if (!offer.ok() && absl::IsUnavailable(offer.status()) &&
      offer.status().message().find("peer:") == std::string_view::npos) {
    co_return std::nullopt;
  }
  co_return offer;
}

asio::awaitable<absl::StatusOr<TransferStats>> PullFileBody(Endpoint agent, std::string remote_path,
                                                            std::filesystem::path final_path,
                                                            std::filesystem::path tmp_dir,
                                                            TransferOptions options, bool create_only,
                                                            std::string name, SessionCache* cache) {
  if (!options.expected_checksum.empty()) {
    // The end-to-end checksum in the expected one's algorithm; a name for known content is
    // written once.
    const std::string& e = options.expected_checksum;
    const std::size_t colon = e.find(':');
    if (colon == std::string::npos || colon + 1 == e.size() ||
        !ParseChecksumAlgorithm(std::string_view(e).substr(0, colon)).ok()) {
      co_return absl::InvalidArgumentError(
          fmt::format("expected checksum '{}': want ALGO:HEX with a known ALGO", e));
    }
    options.checksum = e.substr(0, colon);
    create_only = true;
  }
  absl::StatusOr<Prepared> p = Prepare(options, agent);
  if (!p.ok()) co_return p.status();
  auto log = LoggerOf(p->options.logger);
  const absl::Status cancelled = absl::CancelledError("transfer cancelled");
  auto ex = co_await asio::this_coro::executor;
  Json req{{"op", "get"}, {"path", remote_path}, {"options", RouteToJson(p->options)}};
  const std::string key = SessionKey(agent, p->options);
  const std::filesystem::path abs_final = std::filesystem::absolute(final_path);
  // Nothing to resume: ask for the whole file, which then follows the offer at once.
  const bool whole = !HasRestartJournal(abs_final, tmp_dir);
  if (whole) req["whole"] = true;

  // A warm session to this agent if there is one; else (pipelining) a get sent ahead on a
  // session in use; else a new session.
  std::optional<SessionCache::Impl::Warm> warm;
  absl::StatusOr<Json> offer = absl::UnknownError("no offer");
  // This pull's session while it uses it (with a cache): released on every way out, to the
  // pull that went ahead on it, to the idle ones, or closed.
  struct Slot {
    SessionCache* cache = nullptr;
    std::shared_ptr<SessionCache::Impl::Busy> busy;
    ~Slot() {
      if (busy) cache->impl().Release(busy, std::nullopt);
    }
  } slot{cache, nullptr};
  if (cache != nullptr) {
    SessionCache::Impl& c = cache->impl();
    for (;;) {
      if ((warm = c.Take(key))) {
        req["reuse"] = true;
        slot.busy = c.Use(key, warm->ctrl, warm->pipelines);
        std::optional<absl::StatusOr<Json>> got = co_await RequestOnWarm(*warm, req, p->options);
        if (got) {
          offer = std::move(*got);
          c.stats.reused += 1;
          break;
        }
        log->debug("warm session to {} was closed; opening another", agent.ToString());
        c.stats.stale += 1;
        c.Release(slot.busy, std::nullopt);
        slot.busy.reset();
        warm.reset();  // closes its connections
        if (co_await CancellationRequested()) co_return cancelled;
        continue;
      }
      if (c.pipeline_after == 0 || !whole || c.Open(key) < c.pipeline_after) {
        slot.busy = c.Use(key, nullptr, false);  // a new session, counted while it opens
        break;
      }
      std::shared_ptr<SessionCache::Impl::Busy> ahead = c.Ahead(key);
      if (ahead == nullptr) {
        // Every session is opening, or has a pull ahead on it: until one changes.
        co_await c.Wait(key, std::chrono::milliseconds(100));
        if (co_await CancellationRequested()) co_return cancelled;
        continue;
      }
      ahead->successor = true;
      req["reuse"] = true;
      if (absl::Status w = co_await ahead->ctrl->SendControl(req); !w.ok()) {
        ahead->successor_gone = true;  // the session is failing: its pull will say why
        continue;
      }
      c.stats.ahead += 1;
      while (!ahead->released) {
        co_await c.WaitFor(ahead, std::chrono::seconds(1));
        if (!ahead->released && co_await CancellationRequested()) {
          ahead->successor_gone = true;  // closed when its pull ends
          co_return cancelled;
        }
      }
      if (!ahead->handed) continue;  // its pull failed and the session closed: another way
      warm = std::move(ahead->handed);
      slot.busy = std::move(ahead->next);
      std::optional<absl::StatusOr<Json>> got =
          co_await RequestOnWarm(*warm, req, p->options, /*sent=*/true);
      if (got) {
        offer = std::move(*got);
        c.stats.reused += 1;
        break;
      }
      c.stats.stale += 1;
      c.Release(slot.busy, std::nullopt);
      slot.busy.reset();
      warm.reset();
      if (co_await CancellationRequested()) co_return cancelled;
    }
    req.erase("reuse");
  }
  ConnPtr ctrl_conn;
  std::optional<SetupDeadline> deadline;
  std::vector<ClientConnection> connected;  // a new session's data connections, not joined yet
  std::optional<EarlyJoin> early;            // a new session's joins sent beside its get
  if (warm) {
    ctrl_conn = warm->ctrl;
    deadline.emplace(ex, ctrl_conn, p->options.io_timeout);
  } else {
    // A new session: the control connection authenticates and asks for the file while the
    // data connections connect beside it and join the session the get names (by a token we
    // chose), as soon as the control connection can key their joins.
    early.emplace(ex, internal::RandomHex(16));
    req["token"] = early->token;
    auto secured = [&](internal::Conn& c) {
      early->key = internal::JoinKey(c, p->options.shared_key);
      if (early->key.empty()) early->control_failed = true;  // the joins go after the offer
      early->key_known.cancel();
    };
    absl::Status s = co_await ControlBesideData(
        agent, *p,
        [&]() -> asio::awaitable<absl::Status> {
          absl::StatusOr<ClientConnection> ctrl = co_await ConnectTo(
              agent, "control", p->options, p->tls.get(), *log, &req, secured);
          if (!ctrl.ok()) co_return ctrl.status();
          ctrl_conn = ctrl->conn;
          deadline.emplace(ex, ctrl_conn, p->options.io_timeout);
          if (!ctrl->request_sent) {
            if (absl::Status w = co_await ctrl_conn->SendControl(req); !w.ok()) co_return w;
          }
          offer = co_await ctrl_conn->ReadControl();
          co_return offer.status();
        },
        connected, &*early);
    if (!s.ok()) co_return s;
    if (cache != nullptr) cache->impl().stats.opened += 1;
  }
  if (!offer.ok()) co_return offer.status();
  if (co_await CancellationRequested()) co_return cancelled;
  bool pipelines = warm ? warm->pipelines : false;
  if (!warm) {
    absl::StatusOr<bool> pl = GetOptionalBool(*offer, "pipeline", false);
    pipelines = pl.ok() && *pl;
  }
  absl::StatusOr<std::string> op = GetString(*offer, "op");
  absl::StatusOr<std::uint64_t> size = GetUint(*offer, "size");
  absl::StatusOr<std::string> token = GetOptionalString(*offer, "token", "");
  absl::StatusOr<std::string> source_id = GetString(*offer, "source_id");
  absl::StatusOr<std::string> congestion = GetOptionalString(*offer, "congestion", "");
  if (!op.ok() || *op != "offer" || !size.ok() || !token.ok() || !source_id.ok() || !congestion.ok() ||
      (!warm && token->empty())) {
    co_return absl::DataLossError("unexpected reply to get");
  }
  DestinationSpec spec{abs_final, tmp_dir, *size, *source_id, p->options.checksum, name,
                       create_only};
  absl::StatusOr<std::shared_ptr<DestinationFile>> dst = OpenDestination(spec);
  if (dst.ok() && whole && (*dst)->resumed_bytes > 0) {
    // Another pull of this destination left bytes between our look and the offer.
    dst = absl::UnavailableError(fmt::format("a partial copy of {} appeared meanwhile; retry",
                                             name.empty() ? abs_final.string() : name));
  }
  if (!dst.ok()) {
    absl::Status w = co_await ctrl_conn->SendControl(ErrorJson(dst.status()));
    (void)w;  // ignored: we are reporting our own failure
    co_return dst.status();
  }
  if ((*dst)->resumed_bytes > 0) {
    log->info("resuming: {} of {} bytes already here", (*dst)->resumed_bytes, *size);
  }
  if (!whole) {
    std::vector<ByteRange> missing = (*dst)->received.Missing(*size);
    Json ranges{{"op", "ranges"}, {"ranges", RangesToJson(missing)}, {"resumed_bytes", (*dst)->resumed_bytes}};
    if (absl::Status s = co_await ctrl_conn->SendControl(ranges); !s.ok()) co_return s;
  }
  std::vector<ConnPtr> data;
  std::string session_congestion = *congestion;
  if (warm) {
    data = warm->data;
    if (session_congestion.empty()) session_congestion = warm->congestion;
  } else if (!early->data.empty()) {
    if (*token != early->token) {
      for (const ConnPtr& c : early->data) c->Close();
      co_return absl::DataLossError("the agent offered another session than the one we joined");
    }
    data = std::move(early->data);
  } else {
    std::string stream_congestion;
    absl::StatusOr<std::vector<ConnPtr>> joined =
        co_await JoinConnected(connected, *token, *ctrl_conn, *p, stream_congestion);
    if (!joined.ok()) co_return joined.status();
    data = std::move(*joined);
  }
  if (co_await CancellationRequested()) co_return cancelled;
  deadline.reset();
  if (slot.busy) {
    // The bytes are coming: another pull may send its get ahead on this session now.
    slot.busy->ctrl = ctrl_conn;
    slot.busy->pipelines = pipelines;
    slot.busy->receiving = true;
    cache->impl().Changed(key);
  }
  std::function<bool()> ahead_sent;
  if (slot.busy) ahead_sent = [b = slot.busy] { return b->successor; };
  absl::StatusOr<TransferStats> stats =
      co_await RunReceiver(*ctrl_conn, data, *dst, p->options, session_congestion, ahead_sent);
  if (stats.ok()) {
    stats->reused_session = warm.has_value();
    if (stats->tcp.min_rtt_ms == 0) {
      // A sender that did not say: our own control connection's least RTT (its handshake).
      stats->tcp.min_rtt_ms = ReadTcpSample(ctrl_conn->socket().native_handle()).min_rtt_us / 1000.0;
    }
    if (cache != nullptr) {
      // Only a pull that ended cleanly leaves its connections at a message boundary.
      cache->impl().Release(slot.busy, SessionCache::Impl::Warm{key, ctrl_conn, std::move(data), p->tls,
                                                                stats->congestion, pipelines, {}});
      slot.busy.reset();
    }
  }
  co_return stats;
}

}  // namespace

asio::awaitable<absl::StatusOr<TransferStats>> PullFile(Endpoint agent, std::string remote_path,
                                                        std::filesystem::path final_path,
                                                        std::filesystem::path tmp_dir,
                                                        TransferOptions options, bool create_only,
                                                        std::string name, SessionCache* cache) {
  // A cancellation (terminal, through the co_spawn's cancellation slot) aborts the operation
  // in progress, which then fails like a lost connection; it never throws, so every stream
  // and every job on the blocking pool ends before this frame does. Restored on the way out:
  // the setting belongs to the caller's whole coroutine stack.
  const bool throws = co_await asio::this_coro::throw_if_cancelled();
  co_await asio::this_coro::throw_if_cancelled(false);
  absl::StatusOr<TransferStats> result = co_await CatchExceptions(
      PullFileBody(std::move(agent), std::move(remote_path), std::move(final_path), std::move(tmp_dir),
                   std::move(options), create_only, std::move(name), cache),
      "pull");
  // However the interrupted operation failed (a closed connection, say), a cancelled pull
  // reports kCancelled. A pull that completed despite a late cancellation keeps its result.
  if (!result.ok() && !absl::IsCancelled(result.status()) && co_await CancellationRequested()) {
    result = absl::CancelledError(fmt::format("transfer cancelled ({})", result.status().message()));
  }
  co_await asio::this_coro::throw_if_cancelled(throws);
  co_return result;
}

namespace {

// Runs `body` as PullFile runs its body: a cancellation aborts the operation in progress and
// is never thrown; however the interrupted operation failed, the result is then kCancelled.
asio::awaitable<absl::StatusOr<TransferStats>> Cancellable(
    asio::awaitable<absl::StatusOr<TransferStats>> body, std::string what) {
  const bool throws = co_await asio::this_coro::throw_if_cancelled();
  co_await asio::this_coro::throw_if_cancelled(false);
  absl::StatusOr<TransferStats> result = co_await CatchExceptions(std::move(body), std::move(what));
  if (!result.ok() && !absl::IsCancelled(result.status()) && co_await CancellationRequested()) {
    result = absl::CancelledError(fmt::format("transfer cancelled ({})", result.status().message()));
  }
  co_await asio::this_coro::throw_if_cancelled(throws);
  co_return result;
}

}  // namespace

asio::awaitable<absl::StatusOr<TransferStats>> PushFile(std::filesystem::path local, Endpoint agent,
                                                        std::string remote_path,
                                                        TransferOptions options) {
  co_return co_await Cancellable(
      AsyncPush(std::move(local), std::move(agent), std::move(remote_path), std::move(options)),
      "push");
}

asio::awaitable<absl::StatusOr<TransferStats>> ThirdPartyFile(Endpoint src, std::string src_path,
                                                              Endpoint dst, std::string dst_path,
                                                              TransferOptions options) {
  co_return co_await Cancellable(ThirdPartyAsync(std::move(src), std::move(src_path), std::move(dst),
                                                 std::move(dst_path), std::move(options)),
                                 "third-party copy");
}

}  // namespace internal

asio::awaitable<absl::StatusOr<TransferStats>> AsyncPull(const Endpoint& agent_ref,
                                                         std::string remote_path,
                                                         std::filesystem::path final_path,
                                                         std::filesystem::path tmp_dir,
                                                         TransferOptions options) {
  Endpoint agent = agent_ref;  // before the first suspension: the caller's may not outlive it
  co_return co_await internal::PullFile(agent, std::move(remote_path), std::move(final_path),
                                        std::move(tmp_dir), std::move(options), false, "", nullptr);
}

asio::awaitable<absl::StatusOr<TransferStats>> AsyncPull(const Endpoint& agent_ref,
                                                         std::string remote_path,
                                                         std::filesystem::path final_path,
                                                         std::filesystem::path tmp_dir,
                                                         TransferOptions options, SessionCache* cache) {
  Endpoint agent = agent_ref;  // before the first suspension: the caller's may not outlive it
  co_return co_await internal::PullFile(agent, std::move(remote_path), std::move(final_path),
                                        std::move(tmp_dir), std::move(options), false, "", cache);
}

absl::StatusOr<TransferStats> Push(const std::filesystem::path& local, const Endpoint& agent,
                                   std::string_view remote_path, const TransferOptions& options) {
  return RunBlocking<absl::StatusOr<TransferStats>>(
      [&] { return AsyncPush(local, agent, std::string(remote_path), options); });
}

absl::StatusOr<TransferStats> Pull(const Endpoint& agent, std::string_view remote_path,
                                   const std::filesystem::path& local,
                                   const TransferOptions& options) {
  std::filesystem::path abs = std::filesystem::absolute(local);
  std::filesystem::path tmp = abs.parent_path() / ".gfrep-tmp";
  absl::StatusOr<TransferStats> r = RunBlocking<absl::StatusOr<TransferStats>>([&] {
    return AsyncPull(agent, std::string(remote_path), abs, tmp, options);
  });
  std::error_code ec;
  std::filesystem::remove(tmp, ec);  // only succeeds when empty (no other partial copies)
  return r;
}

namespace {

// One request on a new authenticated control connection, and its one answer (whose "op"
// must be `answer`), waiting at most `limit`.
absl::StatusOr<Json> AskAgent(const Endpoint& agent, const Json& request, std::string_view answer,
                              std::chrono::seconds limit, const TransferOptions& options) {
  return RunBlocking<absl::StatusOr<Json>>([&]() -> asio::awaitable<absl::StatusOr<Json>> {
    absl::StatusOr<Prepared> p = Prepare(options, agent);
    if (!p.ok()) co_return p.status();
    auto log = internal::LoggerOf(p->options.logger);
    absl::StatusOr<internal::ClientConnection> ctrl =
        co_await internal::ConnectTo(agent, "control", p->options, p->tls.get(), *log, &request);
    if (!ctrl.ok()) co_return ctrl.status();
    auto ex = co_await asio::this_coro::executor;
    SetupDeadline deadline(ex, ctrl->conn, limit);
    if (!ctrl->request_sent) {
      if (absl::Status s = co_await ctrl->conn->SendControl(request); !s.ok()) co_return s;
    }
    absl::StatusOr<Json> m = co_await ctrl->conn->ReadControl();
    if (!m.ok()) co_return m.status();
    absl::StatusOr<std::string> op = GetString(*m, "op");
    if (!op.ok() || *op != answer) {
      co_return absl::DataLossError(fmt::format("{} answered a probe with something else", agent.ToString()));
    }
    co_return *m;
  });
}

}  // namespace

absl::StatusOr<std::uint16_t> StartProbeServer(const Endpoint& agent, int seconds,
                                               const TransferOptions& options,
                                               const std::string& congestion) {
  Json req{{"op", "probe_serve"}, {"seconds", seconds}};
  if (!congestion.empty()) req["congestion"] = congestion;
  absl::StatusOr<Json> m = AskAgent(agent, req, "probe_ready", std::chrono::seconds(30), options);
  if (!m.ok()) return m.status();
  absl::StatusOr<std::uint64_t> port = GetUint(*m, "port");
  if (!port.ok() || *port == 0 || *port > 65535) return absl::DataLossError("probe server: bad port");
  return static_cast<std::uint16_t>(*port);
}

absl::StatusOr<std::string> RunProbe(const Endpoint& agent, const ProbeRunRequest& r,
                                     const TransferOptions& options) {
  Json req{{"op", "probe_run"}, {"host", r.host},         {"port", r.port},
           {"rtt_port", r.rtt_port}, {"streams", r.streams}, {"seconds", r.seconds},
           {"omit", r.omit_seconds}, {"window", r.window}};
  if (!r.congestion.empty()) req["congestion"] = r.congestion;
  absl::StatusOr<Json> m = AskAgent(agent, req, "probe_result",
                                    std::chrono::seconds(r.seconds + r.omit_seconds + 60), options);
  if (!m.ok()) return m.status();
  if (!m->contains("result") || !(*m)["result"].is_object()) {
    return absl::DataLossError("probe result: not an object");
  }
  return (*m)["result"].dump();
}

absl::StatusOr<TransferStats> ThirdParty(const Endpoint& src, std::string_view src_path,
                                         const Endpoint& dst, std::string_view dst_path,
                                         const TransferOptions& options) {
  return RunBlocking<absl::StatusOr<TransferStats>>([&] {
    return ThirdPartyAsync(src, std::string(src_path), dst, std::string(dst_path), options);
  });
}

}  // namespace gfrep::transfer
