#include "transfer/agent.h"

#include <map>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "transfer/internal/engine.h"
#include "transfer/internal/path.h"

namespace gfrep::transfer {

using internal::ConnPtr;
using internal::Json;
using internal::kNoThrow;
namespace asio = boost::asio;
using tcp = asio::ip::tcp;

namespace {

// A session waiting for (then owning) its data connections. Lives in Impl::sessions_
// while its control coroutine runs. Used only on the io thread.
struct Session {
  Session(const asio::any_io_executor& ex, int expected)
      : expected(expected), ready(ex, std::chrono::steady_clock::time_point::max()) {}
  int expected;
  std::vector<ConnPtr> joined;
  asio::steady_timer ready;
};

std::string Str(const Json& j, const char* key) {
  return j.contains(key) && j[key].is_string() ? j[key].get<std::string>() : std::string();
}

}  // namespace

struct AgentServer::Impl {
  explicit Impl(AgentOptions o)
      : options(std::move(o)), acceptor(io), log(internal::LoggerOf(options.logger)) {}

  AgentOptions options;
  asio::io_context io;
  tcp::acceptor acceptor;
  std::shared_ptr<spdlog::logger> log;
  std::filesystem::path spool;
  std::unique_ptr<asio::ssl::context> tls;         // serving
  std::unique_ptr<asio::ssl::context> tls_client;  // pulling from other agents
  std::map<std::string, std::shared_ptr<Session>> sessions;

  asio::awaitable<void> Accept() {
    for (;;) {
      auto [ec, socket] = co_await acceptor.async_accept(kNoThrow);
      if (ec == asio::error::operation_aborted) co_return;
      if (ec) {
        log->warn("accept: {}", ec.message());
        continue;
      }
      std::string peer;
      boost::system::error_code pec;
      auto rep = socket.remote_endpoint(pec);
      if (!pec) peer = fmt::format("{}:{}", rep.address().to_string(), rep.port());
      asio::co_spawn(io, Serve(std::move(socket), peer), [this, peer](std::exception_ptr e, absl::Status s) {
        if (e) {
          log->critical("bug: exception escaped a connection handler");
          std::rethrow_exception(e);
        }
        if (!s.ok()) log->warn("peer={} {}", peer, s.ToString());
      });
    }
  }

  asio::awaitable<absl::Status> Fail(internal::Conn& conn, absl::Status s) {
    absl::Status w = co_await conn.SendControl(internal::ErrorJson(s));
    (void)w;  // ignored: the peer may have gone
    co_return s;
  }

  asio::awaitable<absl::Status> Serve(tcp::socket socket, std::string peer) {
    auto conn = std::make_shared<internal::Conn>(std::move(socket));
    auto ex = co_await asio::this_coro::executor;
    auto setup = std::make_shared<asio::steady_timer>(ex, options.defaults.io_timeout);
    setup->async_wait([conn](boost::system::error_code ec) {
      if (!ec) conn->Close();
    });
    struct Cancel {
      std::shared_ptr<asio::steady_timer> t;
      ~Cancel() { t->cancel(); }
    } cancel{setup};
    absl::StatusOr<Json> hello = co_await conn->ReadControl();
    if (!hello.ok()) co_return hello.status();
    if ((*hello)["op"] != "hello" || (*hello).value("version", 0) != internal::kProtocolVersion) {
      co_return co_await Fail(*conn, absl::FailedPreconditionError(fmt::format(
                                         "protocol version mismatch (this agent speaks {})",
                                         internal::kProtocolVersion)));
    }
    std::string role = Str(*hello, "role");
    std::string client_nonce = Str(*hello, "nonce");
    bool want_tls = (*hello).value("tls", false);
    if ((role != "control" && role != "data") || client_nonce.size() < 16 || client_nonce.size() > 64) {
      co_return co_await Fail(*conn, absl::InvalidArgumentError("malformed hello"));
    }
    if (want_tls && !tls) {
      co_return co_await Fail(*conn, absl::FailedPreconditionError(
                                         "this agent has no TLS certificate (start gfsited with --tls-cert/--tls-key)"));
    }
    if (!want_tls && options.require_tls) {
      co_return co_await Fail(*conn, absl::PermissionDeniedError("this agent requires TLS (use --tls)"));
    }
    std::string server_nonce = internal::RandomHex(16);
    Json msg1 = {{"op", "hello_ok"}, {"nonce", server_nonce}};
    if (absl::Status s = co_await conn->SendControl(msg1); !s.ok()) co_return s;
    if (want_tls) {
      if (absl::Status s = co_await conn->Handshake(*tls, true); !s.ok()) co_return s;
    }
    if (role == "data") co_return co_await Join(conn, server_nonce);

    // Authentication: a verified client certificate, or the shared-key challenge.
    if (want_tls && !options.tls.ca.empty() && conn->PeerCertificateVerified()) {
      Json msg2 = {{"op", "welcome"}, {"method", "certificate"}};
      if (absl::Status s = co_await conn->SendControl(msg2); !s.ok()) co_return s;
    } else {
      Json msg3 = {{"op", "challenge"}};
      if (absl::Status s = co_await conn->SendControl(msg3); !s.ok()) co_return s;
      absl::StatusOr<Json> auth = co_await conn->ReadControl();
      if (!auth.ok()) co_return auth.status();
      std::string expect = internal::HmacHex(options.shared_key,
                                             fmt::format("gfrep-client|{}|{}", server_nonce, client_nonce));
      if ((*auth)["op"] != "auth" || !internal::ConstantTimeEqual(Str(*auth, "mac"), expect)) {
        log->warn("refused unauthenticated peer {}: shared key mismatch", peer);
        co_return co_await Fail(*conn, absl::PermissionDeniedError(
                                           "authentication failed: shared key mismatch (copy the agent's key file)"));
      }
      std::string mac = internal::HmacHex(options.shared_key,
                                          fmt::format("gfrep-server|{}|{}", client_nonce, server_nonce));
      Json msg4 = {{"op", "welcome"}, {"method", "shared-key"}, {"mac", mac}};
      if (absl::Status s = co_await conn->SendControl(msg4); !s.ok()) co_return s;
    }
    absl::StatusOr<Json> req = co_await conn->ReadControl();
    if (!req.ok()) co_return req.status();
    std::string op = Str(*req, "op");
    TransferOptions o = options.defaults;
    o.logger = log;
    o.progress = nullptr;
    if (absl::Status s = internal::RouteFromJson((*req).value("options", Json::object()), o); !s.ok()) {
      co_return co_await Fail(*conn, s);
    }
    if (absl::Status s = Validate(o); !s.ok()) co_return co_await Fail(*conn, s);
    if (o.tls && !conn->tls()) {
      co_return co_await Fail(*conn, absl::InvalidArgumentError("TLS data requested on a clear control connection"));
    }
    if (op == "put") co_return co_await ServePut(conn, *req, o, setup, peer);
    if (op == "get") co_return co_await ServeGet(conn, *req, o, setup, peer);
    if (op == "pull_from") co_return co_await ServePullFrom(conn, *req, o, setup, peer);
    co_return co_await Fail(*conn, absl::InvalidArgumentError(fmt::format("unknown request '{}'", op)));
  }

  asio::awaitable<absl::Status> Join(ConnPtr conn, std::string server_nonce) {
    absl::StatusOr<Json> join = co_await conn->ReadControl();
    if (!join.ok()) co_return join.status();
    std::string token = Str(*join, "token");
    auto it = sessions.find(token);
    if ((*join)["op"] != "join" || it == sessions.end() ||
        static_cast<int>(it->second->joined.size()) >= it->second->expected ||
        !internal::ConstantTimeEqual(Str(*join, "mac"),
                                     internal::JoinMac(options.shared_key, token, server_nonce))) {
      co_return co_await Fail(*conn, absl::PermissionDeniedError(
                                         "unknown, expired or already used session token"));
    }
    Json msg5 = {{"op", "joined"}};
    if (absl::Status s = co_await conn->SendControl(msg5); !s.ok()) co_return s;
    it->second->joined.push_back(conn);
    it->second->ready.cancel();
    co_return absl::OkStatus();
  }

  // Registers a session and waits until all its data connections joined.
  asio::awaitable<absl::StatusOr<std::vector<ConnPtr>>> AwaitJoins(const std::string& token,
                                                                  std::shared_ptr<Session> session,
                                                                  const TransferOptions& o,
                                                                  std::string& congestion) {
    session->ready.expires_after(o.io_timeout);
    while (static_cast<int>(session->joined.size()) < session->expected) {
      auto [ec] = co_await session->ready.async_wait(kNoThrow);
      if (!ec) break;
    }
    sessions.erase(token);  // single use: no more joins with this token
    if (static_cast<int>(session->joined.size()) < session->expected) {
      co_return absl::DeadlineExceededError(fmt::format("only {} of {} data connections joined",
                                                        session->joined.size(), session->expected));
    }
    for (const ConnPtr& c : session->joined) congestion = internal::TuneSocket(c->socket(), o.route, *log);
    co_return session->joined;
  }

  struct TokenGuard {
    Impl* impl;
    std::string token;
    ~TokenGuard() { impl->sessions.erase(token); }
  };

  asio::awaitable<absl::Status> ServePut(ConnPtr conn, const Json& req, TransferOptions o,
                                         std::shared_ptr<asio::steady_timer> setup, std::string peer) {
    std::string path = Str(req, "path");
    absl::StatusOr<std::filesystem::path> final_path = internal::ResolveSpoolPath(spool, path);
    if (!final_path.ok()) co_return co_await Fail(*conn, final_path.status());
    if (!req.contains("size") || !req["size"].is_number_unsigned()) {
      co_return co_await Fail(*conn, absl::InvalidArgumentError("put without a size"));
    }
    std::uint64_t size = req["size"].get<std::uint64_t>();
    std::error_code ec;
    if (std::filesystem::is_directory(*final_path, ec)) {
      co_return co_await Fail(*conn, absl::InvalidArgumentError(fmt::format("{} is a directory", path)));
    }
    absl::StatusOr<std::unique_ptr<internal::DestinationFile>> dst = internal::OpenDestination(
        *final_path, spool / internal::kTmpDirName, size, Str(req, "source_id"), o.checksum);
    if (!dst.ok()) co_return co_await Fail(*conn, dst.status());
    std::string token = internal::RandomHex(16);
    auto session = std::make_shared<Session>(co_await asio::this_coro::executor, o.route.streams);
    sessions[token] = session;
    TokenGuard guard{this, token};
    Json reply{{"op", "session"}, {"token", token},
               {"missing", internal::RangesToJson((*dst)->received.Missing(size))},
               {"resumed_bytes", (*dst)->resumed_bytes}};
    if (absl::Status s = co_await conn->SendControl(reply); !s.ok()) co_return s;
    std::string congestion;
    absl::StatusOr<std::vector<ConnPtr>> data = co_await AwaitJoins(token, session, o, congestion);
    if (!data.ok()) co_return co_await Fail(*conn, data.status());
    setup->cancel();
    log->info("receiving path={} size={} resumed={} streams={} from={}", path, size,
              (*dst)->resumed_bytes, o.route.streams, peer);
    absl::StatusOr<TransferStats> stats = co_await internal::RunReceiver(*conn, *data, **dst, o, congestion);
    if (!stats.ok()) co_return stats.status();
    log->info("received path={} bytes={} secs={:.2f} checksum={}", path, stats->bytes, stats->seconds, stats->checksum);
    if (options.on_file_committed) options.on_file_committed(*final_path, *stats);
    co_return absl::OkStatus();
  }

  asio::awaitable<absl::Status> ServeGet(ConnPtr conn, const Json& req, TransferOptions o,
                                         std::shared_ptr<asio::steady_timer> setup, std::string peer) {
    std::string path = Str(req, "path");
    absl::StatusOr<std::filesystem::path> src_path = internal::ResolveSpoolPath(spool, path);
    if (!src_path.ok()) co_return co_await Fail(*conn, src_path.status());
    std::error_code ec;
    if (!std::filesystem::exists(*src_path, ec)) {
      co_return co_await Fail(*conn, absl::NotFoundError(fmt::format("no such file in the spool: {}", path)));
    }
    absl::StatusOr<std::unique_ptr<internal::SourceFile>> src = internal::OpenSource(*src_path);
    if (!src.ok()) co_return co_await Fail(*conn, src.status());
    std::string token = internal::RandomHex(16);
    auto session = std::make_shared<Session>(co_await asio::this_coro::executor, o.route.streams);
    sessions[token] = session;
    TokenGuard guard{this, token};
    Json offer{{"op", "offer"}, {"token", token}, {"size", (*src)->size}, {"source_id", (*src)->source_id}};
    if (absl::Status s = co_await conn->SendControl(offer); !s.ok()) co_return s;
    absl::StatusOr<Json> ranges = co_await conn->ReadControl();
    if (!ranges.ok()) co_return ranges.status();
    if ((*ranges)["op"] != "ranges") co_return co_await Fail(*conn, absl::InvalidArgumentError("expected ranges"));
    absl::Status rs;
    std::vector<internal::ByteRange> missing =
        internal::RangesFromJson((*ranges).value("ranges", Json::array()), (*src)->size, rs);
    if (!rs.ok()) co_return co_await Fail(*conn, rs);
    std::uint64_t resumed = (*ranges).value("resumed_bytes", std::uint64_t{0});
    std::string congestion;
    absl::StatusOr<std::vector<ConnPtr>> data = co_await AwaitJoins(token, session, o, congestion);
    if (!data.ok()) co_return co_await Fail(*conn, data.status());
    setup->cancel();
    log->info("sending path={} size={} resumed={} streams={} to={}", path, (*src)->size, resumed,
              o.route.streams, peer);
    absl::StatusOr<TransferStats> stats =
        co_await internal::RunSender(*conn, *data, **src, missing, o, congestion, resumed);
    if (!stats.ok()) co_return stats.status();
    log->info("sent path={} bytes={} secs={:.2f}", path, stats->bytes_transferred, stats->seconds);
    co_return absl::OkStatus();
  }

  asio::awaitable<absl::Status> ServePullFrom(ConnPtr conn, const Json& req, TransferOptions o,
                                              std::shared_ptr<asio::steady_timer> setup, std::string peer) {
    absl::StatusOr<Endpoint> source = ParseEndpoint(Str(req, "source"));
    if (!source.ok()) co_return co_await Fail(*conn, source.status());
    std::string path = Str(req, "path");
    absl::StatusOr<std::filesystem::path> final_path = internal::ResolveSpoolPath(spool, path);
    if (!final_path.ok()) co_return co_await Fail(*conn, final_path.status());
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
    log->info("pulling {}/{} into {} for {}", source->ToString(), Str(req, "source_path"), path, peer);
    absl::StatusOr<TransferStats> result = absl::UnknownError("not run");
    std::vector<std::function<asio::awaitable<absl::Status>()>> tasks;
    tasks.push_back([&]() -> asio::awaitable<absl::Status> {
      result = co_await AsyncPull(*source, Str(req, "source_path"), *final_path,
                                  spool / internal::kTmpDirName, o);
      shared->finished = true;
      pump_timer->cancel();
      co_return absl::OkStatus();
    });
    tasks.push_back([&]() -> asio::awaitable<absl::Status> {
      while (!shared->finished) {
        pump_timer->expires_after(std::chrono::milliseconds(250));
        co_await pump_timer->async_wait(kNoThrow);
        if (shared->finished) break;
        const Progress& p = shared->have ? shared->latest : Progress{};
        Json m{{"op", "progress"}, {"bytes_done", p.bytes_done}, {"bytes_total", p.bytes_total},
               {"resumed_bytes", p.resumed_bytes}, {"seconds", p.seconds}, {"streams", p.streams}};
        absl::Status s = co_await conn->SendControl(m);
        (void)s;  // ignored: a client that went away does not stop the pull
      }
      co_return absl::OkStatus();
    });
    absl::Status s = co_await internal::RunConcurrentlyPublic(std::move(tasks));
    (void)s;  // both tasks always succeed; the pull's result is in `result`
    if (!result.ok()) co_return co_await Fail(*conn, result.status());
    const TransferStats& st = *result;
    Json done{{"op", "done"}, {"bytes", st.bytes}, {"bytes_transferred", st.bytes_transferred},
              {"resumed_bytes", st.resumed_bytes}, {"seconds", st.seconds}, {"streams", st.streams},
              {"checksum", st.checksum}, {"congestion", st.congestion}, {"resend_rounds", st.resend_rounds}};
    absl::Status w = co_await conn->SendControl(done);
    (void)w;  // ignored: the copy is complete whether or not the client hears it
    if (options.on_file_committed) options.on_file_committed(*final_path, st);
    co_return absl::OkStatus();
  }
};

AgentServer::AgentServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
AgentServer::~AgentServer() = default;

absl::StatusOr<std::unique_ptr<AgentServer>> AgentServer::Create(AgentOptions options) {
  if (options.spool.empty()) return absl::InvalidArgumentError("no spool directory");
  if (options.shared_key.empty()) return absl::InvalidArgumentError("no shared key");
  options.defaults.shared_key = options.shared_key;
  auto impl = std::make_unique<Impl>(std::move(options));
  std::error_code ec;
  std::filesystem::create_directories(impl->options.spool, ec);
  if (ec) return absl::InternalError(fmt::format("create spool {}: {}", impl->options.spool.string(), ec.message()));
  impl->spool = std::filesystem::canonical(impl->options.spool, ec);
  if (ec) return absl::InternalError(fmt::format("spool {}: {}", impl->options.spool.string(), ec.message()));
  if (!impl->options.tls.cert.empty()) {
    auto ctx = internal::MakeTlsContext(impl->options.tls, true);
    if (!ctx.ok()) return ctx.status();
    impl->tls = std::move(*ctx);
  }
  impl->options.defaults.tls_options = impl->options.tls;
  return std::unique_ptr<AgentServer>(new AgentServer(std::move(impl)));
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
  asio::co_spawn(impl_->io, impl_->Accept(), asio::detached);  // ends only when closed
  return Endpoint{local.address().to_string(), local.port()};
}

void AgentServer::Run() { impl_->io.run(); }

void AgentServer::Stop() {
  asio::post(impl_->io, [this] {
    boost::system::error_code ec;
    impl_->acceptor.close(ec);
    impl_->io.stop();
  });
}

}  // namespace gfrep::transfer
