#include "transfer/agent.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <list>
#include <map>
#include <optional>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "transfer/durable_file.h"
#include "transfer/internal/engine.h"
#include "transfer/internal/log_safe.h"
#include "transfer/internal/path.h"
#include "transfer/internal/probe_service.h"
#include "transfer/internal/pull.h"
#include "transfer/internal/read_service.h"
#include "transfer/internal/receiver.h"
#include "transfer/internal/sender.h"
#include "transfer/spool_names.h"

namespace gfrep::transfer {

using internal::ConnPtr;
using internal::GetString;
using internal::Json;
using internal::kNoThrow;
namespace asio = boost::asio;
using tcp = asio::ip::tcp;
using namespace std::chrono_literals;

namespace {

constexpr char kMutualTlsOnly[] =
    "this agent requires mutual TLS on the control connection: a client certificate from its CA "
    "(--tls-ca with --tls-cert/--tls-key; --tls encrypts the data too)";

// A session waiting for (then owning) its data connections. Lives in Impl::sessions
// while its control coroutine runs. Used only on the io thread.
struct Session {
  Session(const asio::any_io_executor& ex, int expected, std::string join_key, bool tls_data)
      : expected(expected), join_key(std::move(join_key)), tls_data(tls_data),
        ready(ex, std::chrono::steady_clock::time_point::max()) {}
  int expected;
  std::string join_key;  // internal::JoinKey of the control connection
  bool tls_data;         // data connections must be TLS (else clear text)
  std::vector<ConnPtr> joined;
  asio::steady_timer ready;
};

// Data connections that joined before the get naming their token came (`"early":true`: the
// client chose the token and sent it in its get). They wait, at most half the io_timeout,
// until that get opens the session or fails. Used only on the io thread.
struct EarlyJoins {
  explicit EarlyJoins(const asio::any_io_executor& ex) : opened(ex) {}
  asio::steady_timer opened;  // cancelled when the session opens, or its get ended
  int waiting = 0;
};

// A token a client chose for its session: 32 lowercase hex digits (128 random bits).
bool WellFormedToken(std::string_view t) {
  return t.size() == 32 &&
         std::all_of(t.begin(), t.end(), [](char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); });
}

// Lets one message through per `interval` and counts the ones it held back.
class LogThrottle {
 public:
  explicit LogThrottle(std::chrono::milliseconds interval) : interval_(interval) {}
  // True if a message may be logged now; `held_back` is then how many were not since.
  bool Allow(std::uint64_t& held_back) {
    auto now = std::chrono::steady_clock::now();
    if (now - last_ < interval_) {
      ++held_;
      return false;
    }
    last_ = now;
    held_back = std::exchange(held_, 0);
    return true;
  }

 private:
  std::chrono::milliseconds interval_;
  std::chrono::steady_clock::time_point last_{};
  std::uint64_t held_ = 0;
};

// An error for the peer, naming the field that was wrong.
absl::Status Malformed(std::string_view what, const absl::Status& s) {
  return absl::InvalidArgumentError(fmt::format("malformed {}: {}", what, s.message()));
}

// The first failure among `fields` (typed reads of one message), or OK.
absl::Status FirstError(std::initializer_list<absl::Status> fields) {
  for (const absl::Status& s : fields) {
    if (!s.ok()) return s;
  }
  return absl::OkStatus();
}

// kAlreadyExists if a create-only destination exists (checked before any work).
absl::Status RefuseExisting(const std::filesystem::path& final_path, std::string_view name) {
  struct stat st {};
  if (::lstat(final_path.c_str(), &st) == 0) {
    return absl::AlreadyExistsError(fmt::format("{} already exists (replica files are written once)", name));
  }
  if (errno != ENOENT) return ErrnoStatus(errno, fmt::format("stat {}", name));
  return absl::OkStatus();
}

}  // namespace

struct AgentServer::Impl {
  explicit Impl(AgentOptions o)
      : options(std::move(o)), log(internal::LoggerOf(options.logger)), acceptor(io) {}
  ~Impl() { destroying = true; }  // runs before the members go: see ConnectionSlot

  // Constant after Create() and Start().
  AgentOptions options;
  std::shared_ptr<spdlog::logger> log;
  std::filesystem::path spool;
  // Serving; replaced by ReloadTls (sessions that began keep theirs).
  mutable absl::Mutex tls_mu;
  std::shared_ptr<asio::ssl::context> tls ABSL_GUARDED_BY(tls_mu);
  std::shared_ptr<asio::ssl::context> Tls() const {
    absl::MutexLock lock(&tls_mu);
    return tls;
  }
  // Used only on the io thread. Declared before `io`: coroutine frames destroyed with `io`
  // still give back their session tokens and connection slots.
  std::map<std::string, std::shared_ptr<Session>> sessions;
  std::map<std::string, std::shared_ptr<EarlyJoins>> early_joins;
  int connections = 0;
  // Read from other threads (AgentServer::stats()).
  std::atomic<std::uint64_t> accepted{0};
  std::atomic<std::uint64_t> files_on_warm_sessions{0};
  std::atomic<std::uint64_t> files_sent_ahead{0};
  std::atomic<std::uint64_t> read_sessions{0};
  std::map<std::string, int> per_peer;  // peer address -> open connections
  LogThrottle refusal_log{1s};
  // Every connection served (data connections outlive their Serve coroutine), to close them
  // on Stop(). Expired entries are pruned as new ones come.
  std::list<std::weak_ptr<internal::Conn>> conns;
  bool stopping = false;
  bool forced = false;      // Stop() gave up waiting and stopped the io_context
  bool destroying = false;  // ~Impl has begun
  std::unique_ptr<internal::ProbeService> probes;  // made in Create(); used on the io thread
  asio::io_context io;
  tcp::acceptor acceptor;         // closed before `io` goes
  asio::steady_timer stop_limit{io};  // bounds a graceful Stop()

  void Track(const ConnPtr& conn) {
    if (conns.size() >= 64 && conns.size() % 64 == 0) {
      conns.remove_if([](const std::weak_ptr<internal::Conn>& w) { return w.expired(); });
    }
    conns.push_back(conn);
  }

  // Stops without io_context::stop(): closing every connection and cancelling third-party
  // pulls ends each session through its normal failure path, so jobs on the blocking pool
  // (which keep the io_context running) finish before anything they use goes; Run() returns
  // when nothing is left.
  void BeginStop() {
    if (stopping) return;
    stopping = true;
    boost::system::error_code ec;
    acceptor.close(ec);
    for (const std::weak_ptr<internal::Conn>& w : conns) {
      if (ConnPtr c = w.lock()) c->Close();
    }
    for (auto& [token, session] : sessions) session->ready.cancel();
    for (auto& [token, early] : early_joins) early->opened.cancel();
    probes->KillAll();
    stop_limit.expires_after(10s);
    stop_limit.async_wait([this](boost::system::error_code e) {
      if (e) return;
      log->error("stop: {} connections still running after 10 s; stopping anyway", connections);
      forced = true;
      io.stop();
    });
    EndStopIfIdle();
  }
  void EndStopIfIdle() {
    if (stopping && !destroying && connections == 0) stop_limit.cancel();
  }

  // One accepted connection's share of the limits, given back when its coroutine ends.
  class ConnectionSlot {
   public:
    ConnectionSlot(Impl* impl, std::string address) : impl_(impl), address_(std::move(address)) {
      ++impl_->connections;
      ++impl_->per_peer[address_];
    }
    ConnectionSlot(ConnectionSlot&& other) noexcept
        : impl_(std::exchange(other.impl_, nullptr)), address_(std::move(other.address_)) {}
    ConnectionSlot& operator=(ConnectionSlot&&) = delete;
    ~ConnectionSlot() {
      if (impl_ == nullptr) return;
      --impl_->connections;
      if (auto it = impl_->per_peer.find(address_); it != impl_->per_peer.end() && --it->second == 0) {
        impl_->per_peer.erase(it);
      }
      impl_->EndStopIfIdle();
    }

   private:
    Impl* impl_;
    std::string address_;
  };

  asio::awaitable<void> Accept() {
    asio::steady_timer backoff(io);
    std::chrono::milliseconds delay{0};
    std::uint64_t failures = 0;
    for (;;) {
      auto [ec, socket] = co_await acceptor.async_accept(kNoThrow);
      if (ec == asio::error::operation_aborted || stopping || !acceptor.is_open()) co_return;
      if (ec) {
        // Out of descriptors (EMFILE, ENFILE), buffers or memory: the connection stays queued
        // and accept fails again at once. Back off (10 ms doubling to 1 s) instead of
        // spinning; the connections we serve meanwhile end and free what is missing.
        if (failures++ == 0) log->warn("accept: {}; backing off until it works again", ec.message());
        delay = std::clamp(delay * 2, std::chrono::milliseconds(10), std::chrono::milliseconds(1000));
        backoff.expires_after(delay);
        co_await backoff.async_wait(kNoThrow);
        continue;
      }
      if (failures > 0) {
        log->info("accept works again after {} failures", failures);
        failures = 0;
        delay = std::chrono::milliseconds(0);
      }
      boost::system::error_code pec;
      auto rep = socket.remote_endpoint(pec);
      if (pec) continue;  // the peer is gone already; the socket closes here
      std::string address = rep.address().to_string();
      std::string peer = fmt::format("{}:{}", address, rep.port());
      auto it = per_peer.find(address);
      int from_peer = it == per_peer.end() ? 0 : it->second;
      if (connections >= options.max_connections || from_peer >= options.max_connections_per_peer) {
        if (std::uint64_t held_back = 0; refusal_log.Allow(held_back)) {
          log->warn("refused connection from {}: {} open ({} from {}), limits {} and {} per peer"
                    " ({} more refused since the last message)",
                    peer, connections, from_peer, address, options.max_connections,
                    options.max_connections_per_peer, held_back);
        }
        continue;  // closing the socket is the answer
      }
      ++accepted;
      asio::co_spawn(io, Guarded(std::move(socket), peer, ConnectionSlot(this, address)),
                     [this, peer](std::exception_ptr e, absl::Status s) {
                       // Never rethrow: a bug in one connection must not end the others.
                       if (e) {
                         log->critical("bug: exception escaped the connection from {}", peer);
                         return;
                       }
                       // The status may quote what the peer sent.
                       if (!s.ok()) log->warn("peer={} {}", peer, internal::LogSafe(s.ToString()));
                     });
    }
  }

  // Serve() for one connection, holding its slot; an exception ends this connection only.
  asio::awaitable<absl::Status> Guarded(tcp::socket socket, std::string peer,
                                        [[maybe_unused]] ConnectionSlot slot) {
    std::string what = fmt::format("the connection from {}", peer);
    co_return co_await internal::CatchExceptions(Serve(std::move(socket), peer), what);
  }

  asio::awaitable<absl::Status> Fail(internal::Conn& conn, absl::Status s) {
    absl::Status w = co_await conn.SendControl(internal::ErrorJson(s));
    (void)w;  // ignored: the peer may have gone
    co_return s;
  }

  asio::awaitable<absl::Status> Serve(tcp::socket socket, std::string peer) {
    auto conn = std::make_shared<internal::Conn>(std::move(socket));
    Track(conn);
    auto ex = co_await asio::this_coro::executor;
    auto setup = std::make_shared<asio::steady_timer>(ex, options.defaults.io_timeout);
    setup->async_wait([conn](boost::system::error_code ec) {
      if (!ec) conn->Close();
    });
    struct Cancel {
      std::shared_ptr<asio::steady_timer> t;
      ~Cancel() { t->cancel(); }
    } cancel{setup};
    // Until the peer has authenticated, a control message may be at most 4 KiB.
    absl::StatusOr<Json> hello = co_await conn->ReadControl(internal::kMaxPreAuthControlPayload);
    if (!hello.ok() && conn->activity() == 0 && absl::IsUnavailable(hello.status())) {
      // Closed before a byte: a health check, or gfprobe timing the TCP handshake.
      log->debug("peer={} closed without a word", peer);
      co_return absl::OkStatus();
    }
    if (!hello.ok()) co_return co_await Fail(*conn, hello.status());
    absl::StatusOr<std::string> op = GetString(*hello, "op");
    absl::StatusOr<std::uint64_t> version = internal::GetUint(*hello, "version");
    if (!op.ok() || *op != "hello" || (version.ok() && *version != internal::kProtocolVersion)) {
      co_return co_await Fail(*conn, absl::FailedPreconditionError(fmt::format(
                                         "protocol version mismatch (this agent speaks {})",
                                         internal::kProtocolVersion)));
    }
    absl::StatusOr<std::string> role = GetString(*hello, "role");
    absl::StatusOr<std::string> client_nonce = GetString(*hello, "nonce");
    absl::StatusOr<bool> want_tls = internal::GetBool(*hello, "tls");
    // The client's request follows its TLS handshake without waiting for our welcome.
    absl::StatusOr<bool> early = internal::GetOptionalBool(*hello, "early", false);
    if (absl::Status bad = FirstError({version.status(), role.status(), client_nonce.status(),
                                       want_tls.status(), early.status()});
        !bad.ok()) {
      co_return co_await Fail(*conn, Malformed("hello", bad));
    }
    if ((*role != "control" && *role != "data") || client_nonce->size() < 16 || client_nonce->size() > 64) {
      co_return co_await Fail(*conn, absl::InvalidArgumentError("malformed hello"));
    }
    const std::shared_ptr<asio::ssl::context> tls_ctx = Tls();
    if (*want_tls && !tls_ctx) {
      co_return co_await Fail(*conn, absl::FailedPreconditionError(
                                         "this agent has no TLS certificate (start gfsited with --tls-cert/--tls-key)"));
    }
    if (!*want_tls && options.require_tls) {
      co_return co_await Fail(*conn, absl::PermissionDeniedError("this agent requires TLS (use --tls)"));
    }
    if (!*want_tls && *role == "control" && options.require_mutual_tls) {
      co_return co_await Fail(*conn, absl::PermissionDeniedError(kMutualTlsOnly));
    }
    std::string server_nonce = internal::RandomHex(16);
    // "joins_early": a data connection may join a session whose get has not come yet.
    Json msg1 = {{"op", "hello_ok"}, {"nonce", server_nonce}, {"joins_early", true}};
    if (absl::Status s = co_await conn->SendControl(msg1); !s.ok()) co_return s;
    if (*want_tls) {
      conn->KeepTlsContext(tls_ctx);
      if (absl::Status s = co_await conn->Handshake(*tls_ctx, true); !s.ok()) co_return s;
    }
    if (*role == "data") co_return co_await Join(conn, server_nonce);

    // Authentication: a verified client certificate, or the shared-key challenge.
    if (*want_tls && !options.tls.ca.empty() && conn->PeerCertificateVerified()) {
      const std::vector<std::string> uris = conn->PeerCertificateUris();
      if (options.authorize_certificate) {
        if (absl::Status s = options.authorize_certificate(uris); !s.ok()) {
          log->warn("refused peer {} ({}): {}", peer, uris.empty() ? "no identity" : uris.front(), s.message());
          co_return co_await Fail(*conn, s);
        }
      }
      log->debug("peer {} authenticated by certificate {}", peer, uris.empty() ? "(no identity)" : uris.front());
      // The session's log lines name who it is (to=ADDR (gfrep://node/NAME)).
      peer = fmt::format("{} ({})", peer, uris.empty() ? "certificate" : uris.front());
      Json msg2 = {{"op", "welcome"}, {"method", "certificate"}};
      if (absl::Status s = co_await conn->SendControl(msg2); !s.ok()) co_return s;
    } else if (options.require_mutual_tls) {
      log->warn("refused peer {}: no verified client certificate (this agent requires mutual TLS)", peer);
      co_return co_await Fail(*conn, absl::PermissionDeniedError(kMutualTlsOnly));
    } else {
      if (*early && *want_tls) {
        // Sent before the client knew it would be challenged: dropped unread; it comes
        // again behind the authentication.
        absl::StatusOr<Json> unread = co_await conn->ReadControl(internal::kMaxPreAuthControlPayload);
        if (!unread.ok()) co_return co_await Fail(*conn, unread.status());
      }
      Json msg3 = {{"op", "challenge"}};
      if (absl::Status s = co_await conn->SendControl(msg3); !s.ok()) co_return s;
      absl::StatusOr<Json> auth = co_await conn->ReadControl(internal::kMaxPreAuthControlPayload);
      if (!auth.ok()) co_return co_await Fail(*conn, auth.status());
      std::string expect = internal::HmacHex(options.shared_key,
                                             fmt::format("gfrep-client|{}|{}", server_nonce, *client_nonce));
      absl::StatusOr<std::string> auth_op = GetString(*auth, "op");
      absl::StatusOr<std::string> mac = GetString(*auth, "mac");
      if (!auth_op.ok() || *auth_op != "auth" || !mac.ok() || !internal::ConstantTimeEqual(*mac, expect)) {
        log->warn("refused unauthenticated peer {}: shared key mismatch", peer);
        co_return co_await Fail(*conn, absl::PermissionDeniedError(
                                           "authentication failed: shared key mismatch (copy the agent's key file)"));
      }
      std::string server_mac = internal::HmacHex(options.shared_key,
                                                 fmt::format("gfrep-server|{}|{}", *client_nonce, server_nonce));
      Json msg4 = {{"op", "welcome"}, {"method", "shared-key"}, {"mac", server_mac}};
      if (absl::Status s = co_await conn->SendControl(msg4); !s.ok()) co_return s;
      // In clear text every later message carries a MAC keyed from this authentication.
      if (!conn->tls()) {
        conn->BindControlMessages(internal::ControlSessionKey(options.shared_key, *client_nonce, server_nonce), false);
      }
    }
    absl::StatusOr<Json> req = co_await conn->ReadControl();
    if (!req.ok()) co_return co_await Fail(*conn, req.status());
    absl::StatusOr<std::string> req_op = GetString(*req, "op");
    if (!req_op.ok()) co_return co_await Fail(*conn, Malformed("request", req_op.status()));
    if (internal::ProbeService::IsProbeOp(*req_op)) {
      setup->cancel();  // a measurement takes longer than a session's setup
      co_return co_await probes->Serve(conn, *req, *log);
    }
    absl::StatusOr<TransferOptions> o = RequestOptions(*conn, *req);
    if (!o.ok()) co_return co_await Fail(*conn, o.status());
    if (*req_op == "put") co_return co_await ServePut(conn, *req, *o, setup, peer);
    if (*req_op == "get") co_return co_await ServeGets(conn, *req, *o, setup, peer);
    if (*req_op == "pull_from") co_return co_await ServePullFrom(conn, *req, *o, setup, peer);
    if (*req_op == "read") co_return co_await ServeRead(conn, *req, *o, setup, peer);
    co_return co_await Fail(*conn, absl::InvalidArgumentError(fmt::format("unknown request '{}'", *req_op)));
  }

  // The transfer options of a request: this agent's defaults overridden by the request's
  // "options", validated.
  absl::StatusOr<TransferOptions> RequestOptions(internal::Conn& conn, const Json& req) {
    absl::StatusOr<const Json*> req_options = internal::GetObject(req, "options");
    if (!req_options.ok()) return Malformed("request", req_options.status());
    TransferOptions o = options.defaults;
    o.logger = log;
    o.progress = nullptr;
    if (absl::Status s = internal::RouteFromJson(**req_options, o); !s.ok()) return s;
    if (absl::Status s = Validate(o); !s.ok()) return s;
    if ((o.tls || o.tls_control) && !conn.tls()) {
      return absl::InvalidArgumentError("TLS data requested on a clear control connection");
    }
    if (options.require_tls && !o.tls) {
      return absl::PermissionDeniedError("this agent requires TLS on the data connections too (use --tls)");
    }
    return o;
  }

  asio::awaitable<absl::Status> Join(ConnPtr conn, std::string server_nonce) {
    absl::StatusOr<Json> join = co_await conn->ReadControl(internal::kMaxPreAuthControlPayload);
    if (!join.ok()) co_return co_await Fail(*conn, join.status());
    absl::StatusOr<std::string> op = GetString(*join, "op");
    absl::StatusOr<std::string> token = GetString(*join, "token");
    absl::StatusOr<std::string> mac = GetString(*join, "mac");
    absl::StatusOr<bool> early = internal::GetOptionalBool(*join, "early", false);
    auto it = token.ok() ? sessions.find(*token) : sessions.end();
    if (it == sessions.end() && token.ok() && early.ok() && *early && WellFormedToken(*token) &&
        !stopping) {
      // The get that opens this session is on its way: wait for it, half as long as a setup
      // may take (so that the refusal, not the setup's deadline, ends the connection). The
      // MAC is checked below, with the session's key.
      std::shared_ptr<EarlyJoins>& slot = early_joins[*token];
      if (!slot) {
        slot = std::make_shared<EarlyJoins>(co_await asio::this_coro::executor);
        slot->opened.expires_after(options.defaults.io_timeout / 2);
      }
      std::shared_ptr<EarlyJoins> wait = slot;
      ++wait->waiting;
      co_await wait->opened.async_wait(kNoThrow);
      if (--wait->waiting == 0) {
        if (auto e = early_joins.find(*token); e != early_joins.end() && e->second == wait) early_joins.erase(e);
      }
      it = sessions.find(*token);
    }
    if (!op.ok() || *op != "join" || it == sessions.end() || !mac.ok() ||
        static_cast<int>(it->second->joined.size()) >= it->second->expected || it->second->join_key.empty() ||
        !internal::ConstantTimeEqual(*mac, internal::JoinMac(it->second->join_key, *token, server_nonce))) {
      co_return co_await Fail(*conn, absl::PermissionDeniedError(
                                         "unknown, expired or already used session token"));
    }
    if (conn->tls() != it->second->tls_data) {
      co_return co_await Fail(*conn, absl::PermissionDeniedError(fmt::format(
                                         "this session's data connections must {}use TLS",
                                         it->second->tls_data ? "" : "not ")));
    }
    Json msg5 = {{"op", "joined"}};
    if (absl::Status s = co_await conn->SendControl(msg5); !s.ok()) co_return s;
    it->second->joined.push_back(conn);
    it->second->ready.cancel();
    co_return absl::OkStatus();
  }

  // Wakes the data connections that joined ahead of the get with this token: the session
  // opened (they join it) or the get failed (they are refused).
  void WakeEarlyJoins(const std::string& token) {
    if (auto e = early_joins.find(token); e != early_joins.end()) e->second->opened.cancel();
  }

  // Registers a session and waits until all its data connections joined.
  asio::awaitable<absl::StatusOr<std::vector<ConnPtr>>> AwaitJoins(const std::string& token,
                                                                  std::shared_ptr<Session> session,
                                                                  const TransferOptions& o,
                                                                  std::string& congestion) {
    session->ready.expires_after(o.io_timeout);
    while (static_cast<int>(session->joined.size()) < session->expected && !stopping) {
      auto [ec] = co_await session->ready.async_wait(kNoThrow);
      if (!ec) break;
    }
    sessions.erase(token);  // single use: no more joins with this token
    if (stopping) co_return absl::UnavailableError("the agent is stopping");
    if (static_cast<int>(session->joined.size()) < session->expected) {
      co_return absl::DeadlineExceededError(fmt::format("only {} of {} data connections joined",
                                                        session->joined.size(), session->expected));
    }
    for (const ConnPtr& c : session->joined) congestion = internal::TuneSocket(c->socket(), o.route, *log);
    co_return session->joined;
  }

  struct TokenGuard {
    TokenGuard(Impl* impl, std::string token) : impl(impl), token(std::move(token)) {}
    TokenGuard(const TokenGuard&) = delete;
    TokenGuard& operator=(const TokenGuard&) = delete;
    Impl* impl;
    std::string token;
    ~TokenGuard() { impl->sessions.erase(token); }
  };

  asio::awaitable<absl::Status> ServePut(ConnPtr conn, const Json& req, TransferOptions o,
                                         std::shared_ptr<asio::steady_timer> setup, std::string peer) {
    absl::StatusOr<std::string> path = GetString(req, "path");
    absl::StatusOr<std::uint64_t> size = internal::GetUint(req, "size");
    absl::StatusOr<std::string> source_id = GetString(req, "source_id");
    if (absl::Status bad = FirstError({path.status(), size.status(), source_id.status()}); !bad.ok()) {
      co_return co_await Fail(*conn, Malformed("put", bad));
    }
    absl::StatusOr<std::filesystem::path> final_path = internal::ResolveSpoolPath(spool, *path);
    if (!final_path.ok()) co_return co_await Fail(*conn, final_path.status());
    std::error_code ec;
    if (std::filesystem::is_directory(*final_path, ec)) {
      co_return co_await Fail(*conn, absl::InvalidArgumentError(fmt::format("{} is a directory", *path)));
    }
    internal::DestinationSpec spec{*final_path, spool / internal::kTmpDirName, *size, *source_id,
                                   o.checksum, *path, IsReplicaRelativePath(*path)};
    absl::StatusOr<std::shared_ptr<internal::DestinationFile>> dst = internal::OpenDestination(spec);
    if (!dst.ok()) co_return co_await Fail(*conn, dst.status());
    std::string token = internal::RandomHex(16);
    auto session = std::make_shared<Session>(co_await asio::this_coro::executor, o.route.streams,
                                             internal::JoinKey(*conn, options.shared_key), o.tls);
    sessions[token] = session;
    TokenGuard guard{this, token};
    Json reply{{"op", "session"}, {"token", token},
               {"missing", internal::RangesToJson((*dst)->received.Missing(*size))},
               {"resumed_bytes", (*dst)->resumed_bytes}};
    if (absl::Status s = co_await conn->SendControl(reply); !s.ok()) co_return s;
    std::string congestion;
    absl::StatusOr<std::vector<ConnPtr>> data = co_await AwaitJoins(token, session, o, congestion);
    if (!data.ok()) co_return co_await Fail(*conn, data.status());
    setup->cancel();
    log->info("receiving path={} size={} resumed={} streams={} from={}", *path, *size,
              (*dst)->resumed_bytes, o.route.streams, peer);
    absl::StatusOr<TransferStats> stats = co_await internal::RunReceiver(*conn, *data, *dst, o, congestion);
    if (!stats.ok()) co_return stats.status();
    log->info("received path={} bytes={} secs={:.2f} checksum={}", *path, stats->bytes, stats->seconds, stats->checksum);
    if (options.on_file_committed) options.on_file_committed(*final_path, *stats);
    co_return absl::OkStatus();
  }

  // The spool's file at `path` (a path a peer sent), opened for sending.
  absl::StatusOr<std::shared_ptr<internal::SourceFile>> OpenSpoolFile(const std::string& path) {
    absl::StatusOr<std::filesystem::path> src_path = internal::ResolveSpoolPath(spool, path);
    if (!src_path.ok()) return src_path.status();
    std::error_code ec;
    if (!std::filesystem::exists(*src_path, ec)) {
      return absl::NotFoundError(fmt::format("no such file in the spool: {}", path));
    }
    return internal::OpenSource(*src_path);
  }

  // A session of gets: the first one opens the session (its data connections join with the
  // token offered); while the client keeps the session, further gets marked "reuse" run over
  // the same control and data connections, one after another (SessionCache in client.h).
  // A get may come ahead of the last file's outcome (pipelined; the offer says "pipeline"):
  // it starts right after that file's finish, and the outcome is read after its own.
  // A session idle for `session_idle` is closed; so is one whose get failed.
  asio::awaitable<absl::Status> ServeGets(ConnPtr conn, const Json& first, TransferOptions o,
                                          std::shared_ptr<asio::steady_timer> setup, std::string peer) {
    std::vector<ConnPtr> data;
    std::string congestion;
    struct CloseData {  // a session ends with its data connections
      std::vector<ConnPtr>& data;
      ~CloseData() {
        for (const ConnPtr& c : data) c->Close();
      }
    } close_data{data};
    internal::Pipeline pipeline;
    if (absl::Status s = co_await ServeGet(conn, first, o, setup, peer, data, congestion, pipeline);
        !s.ok()) {
      co_return s;
    }
    auto ex = co_await asio::this_coro::executor;
    for (;;) {
      std::optional<Json> next = std::move(pipeline.ahead);
      pipeline.ahead.reset();
      pipeline.previous_pending = next.has_value();
      if (!next) {
        auto timer = std::make_shared<asio::steady_timer>(ex, options.session_idle);
        timer->async_wait([conn](boost::system::error_code ec) {
          if (!ec) conn->Close();
        });
        absl::StatusOr<Json> read = co_await conn->ReadControl();
        timer->cancel();
        // The client closed the session (or we did, idle or stopping): the normal end.
        if (!read.ok() && (absl::IsUnavailable(read.status()) || absl::IsCancelled(read.status()))) {
          co_return absl::OkStatus();
        }
        if (!read.ok()) co_return co_await Fail(*conn, read.status());
        next = std::move(*read);
      }
      absl::StatusOr<std::string> op = GetString(*next, "op");
      absl::StatusOr<bool> reuse = internal::GetBool(*next, "reuse");
      absl::StatusOr<bool> whole = internal::GetOptionalBool(*next, "whole", false);
      if (!op.ok() || *op != "get" || !reuse.ok() || !*reuse) {
        co_return co_await Fail(*conn, absl::InvalidArgumentError(
                                           "expected a get with \"reuse\" on an open session"));
      }
      if (pipeline.previous_pending && (!whole.ok() || !*whole)) {
        // Its ranges would come behind the last file's outcome: only whole files go ahead.
        co_return co_await Fail(*conn, absl::InvalidArgumentError(
                                           "a get sent ahead must ask for the whole file"));
      }
      absl::StatusOr<TransferOptions> next_o = RequestOptions(*conn, *next);
      if (!next_o.ok()) co_return co_await Fail(*conn, next_o.status());
      if (next_o->route.streams != static_cast<int>(data.size()) || next_o->tls != o.tls) {
        co_return co_await Fail(*conn, absl::InvalidArgumentError(fmt::format(
                                           "a reused session has {} streams{}; open a new one for other settings",
                                           data.size(), o.tls ? " with TLS" : "")));
      }
      next_o->route.route_name = o.route.route_name;  // pacing stays that of the session
      auto setup_next = std::make_shared<asio::steady_timer>(ex, options.defaults.io_timeout);
      setup_next->async_wait([conn](boost::system::error_code ec) {
        if (!ec) conn->Close();
      });
      if (pipeline.previous_pending) ++files_sent_ahead;
      absl::Status s =
          co_await ServeGet(conn, *next, *next_o, setup_next, peer, data, congestion, pipeline);
      setup_next->cancel();
      if (!s.ok()) co_return s;
      ++files_on_warm_sessions;
    }
  }

  // One get: offer, the receiver's ranges, the bytes. `data` empty: this get opens the session
  // and its data connections join with the offered token (`data` and `congestion` are set);
  // else it runs over `data`. `pipeline`: see ServeGets; "sent" is logged with the outcome.
  asio::awaitable<absl::Status> ServeGet(ConnPtr conn, const Json& req, TransferOptions o,
                                         std::shared_ptr<asio::steady_timer> setup, std::string peer,
                                         std::vector<ConnPtr>& data, std::string& congestion,
                                         internal::Pipeline& pipeline) {
    // A new session's token, when the client chose it (its data connections may have joined
    // already, waiting in early_joins): they are woken on every way out of here.
    absl::StatusOr<std::string> chosen = internal::GetOptionalString(req, "token", "");
    if (!chosen.ok()) co_return co_await Fail(*conn, Malformed("get", chosen.status()));
    struct WakeOnExit {
      Impl* impl;
      std::string token;
      ~WakeOnExit() {
        if (!token.empty()) impl->WakeEarlyJoins(token);
      }
    } wake_on_exit{this, data.empty() ? *chosen : ""};
    if (data.empty() && !chosen->empty()) {
      if (!WellFormedToken(*chosen)) {
        co_return co_await Fail(*conn, absl::InvalidArgumentError("malformed get: a token is 32 lowercase hex digits"));
      }
      if (sessions.contains(*chosen)) {
        co_return co_await Fail(*conn, absl::AlreadyExistsError("session token already in use"));
      }
    }
    absl::StatusOr<std::string> path = GetString(req, "path");
    if (!path.ok()) co_return co_await Fail(*conn, Malformed("get", path.status()));
    absl::StatusOr<std::shared_ptr<internal::SourceFile>> src = OpenSpoolFile(*path);
    if (!src.ok()) co_return co_await Fail(*conn, src.status());
    Json offer{{"op", "offer"}, {"size", (*src)->size}, {"source_id", (*src)->source_id}};
    std::shared_ptr<Session> session;
    std::optional<TokenGuard> guard;
    std::string token;
    if (data.empty()) {
      token = chosen->empty() ? internal::RandomHex(16) : *chosen;
      session = std::make_shared<Session>(co_await asio::this_coro::executor, o.route.streams,
                                          internal::JoinKey(*conn, options.shared_key), o.tls);
      sessions[token] = session;
      guard.emplace(this, token);
      WakeEarlyJoins(token);
      offer["token"] = token;
      offer["pipeline"] = true;  // gets may come ahead of an outcome on this session
    } else {
      offer["congestion"] = congestion;
    }
    // "whole": the receiver has nothing of this file and takes all of it, so the bytes follow
    // the offer at once (no "ranges" round trip).
    bool whole = false;
    if (req.contains("whole")) {
      absl::StatusOr<bool> w = internal::GetBool(req, "whole");
      if (!w.ok()) co_return co_await Fail(*conn, Malformed("get", w.status()));
      whole = *w;
    }
    if (absl::Status s = co_await conn->SendControl(offer); !s.ok()) co_return s;
    std::vector<internal::ByteRange> missing;
    std::uint64_t resumed = 0;
    if (whole) {
      if ((*src)->size > 0) missing.push_back({0, (*src)->size});
    } else {
      absl::StatusOr<Json> ranges = co_await conn->ReadControl();
      if (!ranges.ok()) co_return co_await Fail(*conn, ranges.status());
      absl::StatusOr<std::string> op = GetString(*ranges, "op");
      absl::StatusOr<const Json*> list = internal::GetArray(*ranges, "ranges");
      absl::StatusOr<std::uint64_t> resumed_bytes = internal::GetUint(*ranges, "resumed_bytes");
      if (!op.ok() || *op != "ranges") co_return co_await Fail(*conn, absl::InvalidArgumentError("expected ranges"));
      if (absl::Status bad = FirstError({list.status(), resumed_bytes.status()}); !bad.ok()) {
        co_return co_await Fail(*conn, Malformed("ranges", bad));
      }
      absl::StatusOr<std::vector<internal::ByteRange>> asked = internal::RangesFromJson(**list, (*src)->size);
      if (!asked.ok()) co_return co_await Fail(*conn, asked.status());
      missing = std::move(*asked);
      resumed = *resumed_bytes;
    }
    if (session) {
      absl::StatusOr<std::vector<ConnPtr>> joined = co_await AwaitJoins(token, session, o, congestion);
      if (!joined.ok()) co_return co_await Fail(*conn, joined.status());
      data = std::move(*joined);
    }
    setup->cancel();
    log->info("sending path={} size={} resumed={} streams={} cc={} to={}{}", *path, (*src)->size, resumed,
              o.route.streams, congestion.empty() ? "?" : congestion, peer, session ? "" : " (warm session)");
    absl::StatusOr<TransferStats> stats =
        co_await internal::RunSender(*conn, data, *src, missing, o, congestion, resumed, &pipeline);
    if (!stats.ok()) co_return stats.status();
    std::string sent = fmt::format("sent path={} bytes={} secs={:.2f}{}{}", *path,
                                   stats->bytes_transferred, stats->seconds,
                                   stats->tls.empty() ? "" : " tls=", stats->tls);
    if (pipeline.ahead) {
      // Confirmed behind the next file's finish (RunSender reads the outcome there).
      pipeline.previous_done = [log = log, sent = std::move(sent)] { log->info("{}", sent); };
    } else {
      log->info("{}", sent);
    }
    co_return absl::OkStatus();
  }

  // A streaming read session (internal/read_service.h; the client is transfer/remote_file.h):
  // read_ok with the file's size and identity, the first pieces asked for at once on this
  // control connection, then pieces on demand over the data connections.
  asio::awaitable<absl::Status> ServeRead(ConnPtr conn, const Json& req, TransferOptions o,
                                          std::shared_ptr<asio::steady_timer> setup, std::string peer) {
    absl::StatusOr<std::string> path = GetString(req, "path");
    if (!path.ok()) co_return co_await Fail(*conn, Malformed("read", path.status()));
    absl::StatusOr<std::shared_ptr<internal::SourceFile>> src = OpenSpoolFile(*path);
    if (!src.ok()) co_return co_await Fail(*conn, src.status());
    // "first": bytes from the start sent at once on this connection (at most a stripe unit).
    std::vector<internal::ByteRange> first;
    if (req.contains("first")) {
      absl::StatusOr<std::uint64_t> n = internal::GetUint(req, "first");
      if (!n.ok()) co_return co_await Fail(*conn, Malformed("read", n.status()));
      const std::uint64_t len = std::min({*n, (*src)->size, o.route.stripe_unit});
      if (len > 0) first.push_back({0, len});
    }
    const std::string token = internal::RandomHex(16);
    auto session = std::make_shared<Session>(co_await asio::this_coro::executor, o.route.streams,
                                             internal::JoinKey(*conn, options.shared_key), o.tls);
    sessions[token] = session;
    TokenGuard guard{this, token};
    Json ok{{"op", "read_ok"}, {"size", (*src)->size}, {"source_id", (*src)->source_id}, {"token", token}};
    if (absl::Status s = co_await conn->SendControl(ok); !s.ok()) co_return s;
    const BlockChecksumAlgorithm alg = *ParseBlockChecksumAlgorithm(o.block_checksum);
    if (absl::Status s = co_await internal::SendRanges(*conn, **src, first, alg); !s.ok()) {
      co_return co_await Fail(*conn, s);
    }
    std::string congestion;
    absl::StatusOr<std::vector<ConnPtr>> data = co_await AwaitJoins(token, session, o, congestion);
    if (!data.ok()) co_return co_await Fail(*conn, data.status());
    setup->cancel();
    ++read_sessions;
    log->info("serving reads path={} size={} streams={} to={}", *path, (*src)->size, o.route.streams, peer);
    absl::Status s = co_await internal::ServeReadSession(conn, std::move(*data), *src, o, options.session_idle);
    log->info("read session ended path={}: {}", *path, s.ok() ? "closed" : s.ToString());
    co_return s;
  }

  asio::awaitable<absl::Status> ServePullFrom(ConnPtr conn, const Json& req, TransferOptions o,
                                              std::shared_ptr<asio::steady_timer> setup, std::string peer) {
    absl::StatusOr<std::string> source_text = GetString(req, "source");
    absl::StatusOr<std::string> path = GetString(req, "path");
    absl::StatusOr<std::string> source_path = GetString(req, "source_path");
    if (absl::Status bad = FirstError({source_text.status(), path.status(), source_path.status()}); !bad.ok()) {
      co_return co_await Fail(*conn, Malformed("pull_from", bad));
    }
    absl::StatusOr<Endpoint> source = ParseEndpoint(*source_text);
    if (!source.ok()) co_return co_await Fail(*conn, source.status());
    absl::StatusOr<std::filesystem::path> final_path = internal::ResolveSpoolPath(spool, *path);
    if (!final_path.ok()) co_return co_await Fail(*conn, final_path.status());
    const bool create_only = IsReplicaRelativePath(*path);
    if (create_only) {
      if (absl::Status s = RefuseExisting(*final_path, *path); !s.ok()) co_return co_await Fail(*conn, s);
    }
    setup->cancel();
    o.test_corrupt_offset = -1;  // the hook belongs to this agent's own sending
    struct Shared {
      Progress latest;
      bool have = false;
      bool finished = false;
    };
    auto shared = std::make_shared<Shared>();
    o.progress = [shared](const Progress& p) {
      shared->latest = p;
      shared->have = true;
    };
    auto ex = co_await asio::this_coro::executor;
    auto pump_timer = std::make_shared<asio::steady_timer>(ex);
    log->info("pulling {}/{} into {} for {}", source->ToString(), *source_path, *path, peer);
    absl::StatusOr<TransferStats> result = absl::UnknownError("not run");
    // Stop(), or a client that went away, cancels the pull through this signal (from the pump
    // below, on the io thread).
    // It outlives the pull: RunConcurrently returns only after both tasks ended.
    asio::cancellation_signal cancel_pull;
    std::vector<std::function<asio::awaitable<absl::Status>()>> tasks;
    tasks.push_back([&]() -> asio::awaitable<absl::Status> {
      result = co_await asio::co_spawn(
          ex,
          internal::PullFile(*source, *source_path, *final_path, spool / internal::kTmpDirName, o,
                             create_only, *path),
          asio::bind_cancellation_slot(cancel_pull.slot(), asio::use_awaitable));
      shared->finished = true;
      pump_timer->cancel();
      co_return absl::OkStatus();
    });
    tasks.push_back([&]() -> asio::awaitable<absl::Status> {
      bool cancelled = false;
      while (!shared->finished) {
        pump_timer->expires_after(std::chrono::milliseconds(250));
        co_await pump_timer->async_wait(kNoThrow);
        if (shared->finished) break;
        if (stopping && !cancelled) {
          cancelled = true;
          cancel_pull.emit(asio::cancellation_type::terminal);
        }
        const Progress& p = shared->have ? shared->latest : Progress{};
        Json m{{"op", "progress"}, {"bytes_done", p.bytes_done}, {"bytes_total", p.bytes_total},
               {"resumed_bytes", p.resumed_bytes}, {"seconds", p.seconds}, {"streams", p.streams}};
        absl::Status s = co_await conn->SendControl(m);
        // The client went away (gfcp interrupted, a CopyHandle cancelled or destroyed): nobody
        // waits for this copy any more, so it stops; the partial file stays for a resume. (A
        // write to a closed peer fails at the second tick at the latest: ~0.5 s.)
        if (!s.ok() && !cancelled) {
          cancelled = true;
          log->info("client of the pull into {} went away ({}); cancelling it", *path, s.message());
          cancel_pull.emit(asio::cancellation_type::terminal);
        }
      }
      co_return absl::OkStatus();
    });
    absl::Status s = co_await internal::RunConcurrently(std::move(tasks));
    (void)s;  // both tasks always succeed; the pull's result is in `result`
    if (!result.ok()) co_return co_await Fail(*conn, result.status());
    const TransferStats& st = *result;
    Json done{{"op", "done"}, {"bytes", st.bytes}, {"bytes_transferred", st.bytes_transferred},
              {"resumed_bytes", st.resumed_bytes}, {"seconds", st.seconds}, {"streams", st.streams},
              {"checksum", st.checksum}, {"congestion", st.congestion}, {"resend_rounds", st.resend_rounds},
              {"tcp", internal::TcpFiguresToJson(st.tcp)}};
    if (!st.tls.empty()) done["tls"] = st.tls;
    absl::Status w = co_await conn->SendControl(done);
    (void)w;  // ignored: the copy is complete whether or not the client hears it
    if (options.on_file_committed) options.on_file_committed(*final_path, st);
    co_return absl::OkStatus();
  }
};

AgentServer::AgentServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

AgentServer::~AgentServer() {
  if (impl_ && impl_->forced) {
    // Work of the forced stop may still complete onto the io_context: keep it (and what
    // its coroutines use) rather than free it under them. Only at shutdown, once.
    impl_->log->critical("agent stopped with work pending; its state is not freed");
    (void)impl_.release();  // deliberate leak, see above
  }
}

absl::StatusOr<std::unique_ptr<AgentServer>> AgentServer::Create(AgentOptions options) {
  if (options.spool.empty()) return absl::InvalidArgumentError("no spool directory");
  if (options.shared_key.empty()) return absl::InvalidArgumentError("no shared key");
  if (options.max_connections < 1 || options.max_connections > 1000000) {
    return absl::InvalidArgumentError(
        fmt::format("max connections must be 1..1000000, got {}", options.max_connections));
  }
  if (options.max_connections_per_peer < 1 || options.max_connections_per_peer > options.max_connections) {
    return absl::InvalidArgumentError(fmt::format("max connections per peer must be 1..{}, got {}",
                                                  options.max_connections, options.max_connections_per_peer));
  }
  if (options.session_idle.count() < 1) return absl::InvalidArgumentError("session idle limit must be positive");
  options.defaults.shared_key = options.shared_key;
  auto impl = std::make_unique<Impl>(std::move(options));
  std::error_code ec;
  // Uploads and copies sync the directories below the spool, never the one holding it: a
  // spool made at a first start vanished whole at a power cut with every replica in it
  // (tests/integration/powerloss_test.cc). Sync its name (and those of parents made for it).
  std::filesystem::path spool_path = std::filesystem::absolute(impl->options.spool, ec).lexically_normal();
  if (ec) return absl::InternalError(fmt::format("spool {}: {}", impl->options.spool.string(), ec.message()));
  if (!spool_path.has_filename()) spool_path = spool_path.parent_path();  // "/a/spool/" -> "/a/spool"
  absl::StatusOr<std::vector<std::filesystem::path>> made = CreateParents(spool_path);
  if (!made.ok()) return made.status();
  std::vector<std::filesystem::path> holders = {spool_path.parent_path()};
  for (const std::filesystem::path& d : *made) {
    if (d.parent_path() != spool_path.parent_path()) holders.push_back(d.parent_path());
  }
  if (absl::Status s = SyncDirectories(holders); !s.ok()) return s;
  impl->spool = std::filesystem::canonical(impl->options.spool, ec);
  if (ec) return absl::InternalError(fmt::format("spool {}: {}", impl->options.spool.string(), ec.message()));
  if (!impl->options.tls.cert.empty()) {
    auto ctx = internal::MakeTlsContext(impl->options.tls, true);
    if (!ctx.ok()) return ctx.status();
    absl::MutexLock lock(&impl->tls_mu);
    impl->tls = std::shared_ptr<asio::ssl::context>(std::move(*ctx));
  }
  impl->options.defaults.tls_options = impl->options.tls;
  absl::StatusOr<Endpoint> listen = ParseEndpoint(impl->options.listen);
  impl->probes = std::make_unique<internal::ProbeService>(impl->options.probe_helper,
                                                          listen.ok() ? listen->host : "0.0.0.0");
  return std::unique_ptr<AgentServer>(new AgentServer(std::move(impl)));
}

absl::Status AgentServer::ReloadTls() {
  if (impl_->options.tls.cert.empty()) return absl::FailedPreconditionError("this agent has no TLS certificate");
  absl::StatusOr<std::unique_ptr<asio::ssl::context>> ctx = internal::MakeTlsContext(impl_->options.tls, true);
  if (!ctx.ok()) return ctx.status();
  std::shared_ptr<asio::ssl::context> fresh(std::move(*ctx));
  absl::MutexLock lock(&impl_->tls_mu);
  impl_->tls = std::move(fresh);
  return absl::OkStatus();
}

absl::StatusOr<Endpoint> AgentServer::Start() {
  absl::StatusOr<Endpoint> want = ParseEndpoint(impl_->options.listen);
  if (!want.ok()) return want.status();
  boost::system::error_code ec;
  auto addr = asio::ip::make_address(want->host, ec);
  if (ec) return absl::InvalidArgumentError(fmt::format("listen address '{}': {}", want->host, ec.message()));
  tcp::endpoint ep(addr, want->port);
  auto& a = impl_->acceptor;
  a.open(ep.protocol(), ec);
  if (!ec) a.set_option(tcp::acceptor::reuse_address(true), ec);
  if (!ec && impl_->options.defaults.route.socket_buffer > 0) {
    a.set_option(asio::socket_base::receive_buffer_size(static_cast<int>(impl_->options.defaults.route.socket_buffer)), ec);
  }
  if (!ec) a.bind(ep, ec);
  if (!ec) a.listen(asio::socket_base::max_listen_connections, ec);
  if (ec) return absl::UnavailableError(fmt::format("listen on {}: {}", impl_->options.listen, ec.message()));
  auto local = a.local_endpoint();
  Impl* impl = impl_.get();
  asio::co_spawn(impl->io, impl->Accept(), [impl](std::exception_ptr e) {
    // The loop ends only when the acceptor closes; anything else is a bug worth a loud line.
    if (e) impl->log->critical("bug: exception ended the accept loop; no new connections");
  });
  return Endpoint{local.address().to_string(), local.port()};
}

void AgentServer::Run() { impl_->io.run(); }

AgentServer::Stats AgentServer::stats() const {
  return Stats{impl_->accepted.load(), impl_->files_on_warm_sessions.load(),
               impl_->files_sent_ahead.load(), impl_->read_sessions.load()};
}

void AgentServer::Stop() {
  asio::post(impl_->io, [impl = impl_.get()] { impl->BeginStop(); });
}

}  // namespace gfrep::transfer
