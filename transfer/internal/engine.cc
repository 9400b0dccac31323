#include "transfer/internal/engine.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/crypto.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>
#include <sys/mman.h>
#include <sys/sendfile.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>
#include <xxhash.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <deque>
#include <fstream>
#include <map>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "absl/status/status.h"

namespace gfrep::transfer::internal {
namespace {

using SteadyTime = std::chrono::steady_clock;

absl::Status ErrnoStatus(int e, std::string_view context) {
  std::string msg = fmt::format("{}: {}", context, std::strerror(e));
  switch (e) {
    case ENOSPC:
    case EDQUOT:
      return absl::ResourceExhaustedError(fmt::format("{} (disk full)", msg));
    case ENOENT:
      return absl::NotFoundError(msg);
    case EACCES:
    case EPERM:
      return absl::PermissionDeniedError(msg);
    case EPIPE:
    case ECONNRESET:
      return absl::UnavailableError(msg);
    default:
      return absl::InternalError(msg);
  }
}

std::string ReadSysctl(const char* path) {
  std::ifstream in(path);
  std::string s;
  std::getline(in, s);
  return s;
}

// Runs `tasks` concurrently on the current executor and waits for all. On the first
// failure `on_error` runs once (it closes the other tasks' connections). Returns the first
// failure, or OK.
asio::awaitable<absl::Status> RunConcurrently(
    std::vector<std::function<asio::awaitable<absl::Status>()>> tasks,
    std::function<void()> on_error) {
  auto ex = co_await asio::this_coro::executor;
  struct State {
    int left;
    absl::Status first;
    asio::steady_timer done;
    std::function<void()> on_error;
  };
  auto st = std::make_shared<State>(
      State{static_cast<int>(tasks.size()), absl::OkStatus(),
            asio::steady_timer(ex, SteadyTime::time_point::max()), std::move(on_error)});
  for (auto& task : tasks) {
    asio::co_spawn(ex, task(), [st](std::exception_ptr e, absl::Status s) {
      if (e) s = absl::InternalError("bug: exception escaped a transfer stream");
      if (!s.ok() && st->first.ok()) {
        st->first = s;
        if (st->on_error) st->on_error();
      }
      if (--st->left == 0) st->done.cancel();
    });
  }
  while (st->left > 0) co_await st->done.async_wait(kNoThrow);
  co_return st->first;
}

class ProgressReporter {
 public:
  ProgressReporter(const TransferOptions& o, std::uint64_t total, std::uint64_t resumed,
                   int streams)
      : fn_(o.progress), start_(SteadyTime::now()) {
    p_.bytes_total = total;
    p_.resumed_bytes = resumed;
    p_.bytes_done = resumed;
    p_.streams = streams;
  }
  void Add(std::uint64_t bytes, bool force = false) {
    p_.bytes_done = std::min(p_.bytes_total, p_.bytes_done + bytes);
    if (!fn_) return;
    auto now = SteadyTime::now();
    if (force || now - last_ >= std::chrono::milliseconds(100)) {
      last_ = now;
      p_.seconds = std::chrono::duration<double>(now - start_).count();
      fn_(p_);
    }
  }
  void SetDone(std::uint64_t done) {
    p_.bytes_done = done;
    Add(0, true);
  }

 private:
  std::function<void(const Progress&)> fn_;
  Progress p_;
  SteadyTime::time_point start_;
  SteadyTime::time_point last_{};
};

std::vector<ByteRange> SplitBlocks(const std::vector<ByteRange>& ranges, std::uint64_t unit) {
  std::vector<ByteRange> out;
  for (const ByteRange& r : ranges) {
    for (std::uint64_t b = r.begin; b < r.end; b += unit) out.push_back({b, std::min(r.end, b + unit)});
  }
  return out;
}

}  // namespace

asio::awaitable<absl::Status> RunConcurrentlyPublic(
    std::vector<std::function<asio::awaitable<absl::Status>()>> tasks,
    std::function<void()> on_error) {
  co_return co_await RunConcurrently(std::move(tasks), std::move(on_error));
}

absl::Status FromAsio(const boost::system::error_code& ec, std::string_view context) {
  if (!ec) return absl::OkStatus();
  std::string msg = fmt::format("{}: {}", context, ec.message());
  if (ec == asio::error::operation_aborted) return absl::CancelledError(msg);
  if (ec == asio::error::timed_out) return absl::DeadlineExceededError(msg);
  if (ec == asio::error::eof || ec == asio::error::connection_reset ||
      ec == asio::error::connection_refused || ec == asio::error::broken_pipe ||
      ec == asio::error::connection_aborted || ec == asio::error::host_unreachable ||
      ec == asio::error::network_unreachable || ec == asio::error::bad_descriptor ||
      ec == asio::ssl::error::stream_truncated) {
    return absl::UnavailableError(msg);
  }
  return absl::UnavailableError(msg);
}

Json ErrorJson(const absl::Status& s) {
  return Json{{"op", "error"}, {"code", static_cast<int>(s.code())}, {"message", std::string(s.message())}};
}

std::shared_ptr<spdlog::logger> LoggerOf(const std::shared_ptr<spdlog::logger>& logger) {
  return logger ? logger : spdlog::default_logger();
}

asio::thread_pool& BlockingPool() {
  static asio::thread_pool pool(2);
  return pool;
}

std::string RandomHex(std::size_t bytes) {
  std::vector<unsigned char> b(bytes);
  RAND_bytes(b.data(), static_cast<int>(b.size()));
  std::string out;
  for (unsigned char c : b) out += fmt::format("{:02x}", c);
  return out;
}

std::string HmacHex(std::string_view key, std::string_view message) {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()),
       reinterpret_cast<const unsigned char*>(message.data()), message.size(), md, &len);
  std::string out;
  for (unsigned int i = 0; i < len; ++i) out += fmt::format("{:02x}", md[i]);
  return out;
}

bool ConstantTimeEqual(std::string_view a, std::string_view b) {
  return a.size() == b.size() && CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

std::string JoinMac(std::string_view key, std::string_view token, std::string_view nonce) {
  return HmacHex(key, fmt::format("gfrep-join|{}|{}", token, nonce));
}

// ---------------------------------------------------------------- Conn

Conn::Conn(tcp::socket socket) : socket_(std::move(socket)) {
  boost::system::error_code ec;
  socket_.set_option(tcp::no_delay(true), ec);
  socket_.non_blocking(true, ec);
}

asio::awaitable<absl::Status> Conn::Handshake(asio::ssl::context& ctx, bool server) {
  tls_ = std::make_unique<asio::ssl::stream<tcp::socket&>>(socket_, ctx);
  auto [ec] = co_await tls_->async_handshake(
      server ? asio::ssl::stream_base::server : asio::ssl::stream_base::client, kNoThrow);
  if (ec) {
    co_return absl::UnavailableError(fmt::format("TLS handshake failed: {}", ec.message()));
  }
  co_return absl::OkStatus();
}

bool Conn::PeerCertificateVerified() {
  if (!tls_) return false;
  X509* cert = SSL_get1_peer_certificate(tls_->native_handle());
  if (cert == nullptr) return false;
  X509_free(cert);
  return SSL_get_verify_result(tls_->native_handle()) == X509_V_OK;
}

template <class Buffers>
asio::awaitable<absl::Status> Conn::Write(const Buffers& buffers, std::string_view what) {
  boost::system::error_code ec;
  std::size_t n = 0;
  if (tls_) {
    std::tie(ec, n) = co_await asio::async_write(*tls_, buffers, kNoThrow);
  } else {
    std::tie(ec, n) = co_await asio::async_write(socket_, buffers, kNoThrow);
  }
  activity_ += n;
  co_return FromAsio(ec, what);
}

asio::awaitable<absl::Status> Conn::SendFrame(FrameType type, std::string_view payload) {
  std::string f = EncodeFrame(type, payload);
  co_return co_await Write(asio::buffer(f), "send frame");
}

asio::awaitable<absl::Status> Conn::SendControl(const Json& message) {
  co_return co_await SendFrame(FrameType::kControl, message.dump());
}

asio::awaitable<absl::Status> Conn::ReadExact(void* data, std::size_t size) {
  boost::system::error_code ec;
  std::size_t n = 0;
  if (tls_) {
    std::tie(ec, n) = co_await asio::async_read(*tls_, asio::buffer(data, size), kNoThrow);
  } else {
    std::tie(ec, n) = co_await asio::async_read(socket_, asio::buffer(data, size), kNoThrow);
  }
  activity_ += n;
  if (ec == asio::error::eof && n > 0) {
    co_return absl::DataLossError(fmt::format("truncated frame: peer closed after {} of {} bytes", n, size));
  }
  co_return FromAsio(ec, "read");
}

asio::awaitable<absl::StatusOr<FrameHeader>> Conn::ReadHeader(std::uint32_t max_data) {
  HeaderBytes b;
  if (absl::Status s = co_await ReadExact(b.data(), b.size()); !s.ok()) co_return s;
  co_return DecodeHeader(b, max_data);
}

asio::awaitable<absl::StatusOr<Json>> Conn::ReadControl() {
  absl::StatusOr<FrameHeader> h = co_await ReadHeader(0);
  if (!h.ok()) co_return h.status();
  if (h->type != FrameType::kControl) {
    co_return absl::DataLossError("expected a control frame");
  }
  std::string payload(h->length, '\0');
  if (absl::Status s = co_await ReadExact(payload.data(), payload.size()); !s.ok()) co_return s;
  Json j = Json::parse(payload, nullptr, false);
  if (j.is_discarded() || !j.is_object() || !j.contains("op") || !j["op"].is_string()) {
    co_return absl::DataLossError("malformed control message");
  }
  if (j["op"] == "error") {
    int code = j.value("code", 2);
    if (code < 1 || code > 16) code = 2;
    std::string message = j.contains("message") && j["message"].is_string()
                              ? j["message"].get<std::string>()
                              : "unknown error";
    co_return absl::Status(static_cast<absl::StatusCode>(code), fmt::format("peer: {}", message));
  }
  co_return j;
}

asio::awaitable<absl::Status> Conn::WriteData(const FrameHeader& header, const void* data) {
  HeaderBytes hb = EncodeHeader(header);
  std::array<asio::const_buffer, 2> bufs{asio::buffer(hb), asio::buffer(data, header.length)};
  co_return co_await Write(bufs, "send data");
}

asio::awaitable<absl::Status> Conn::WriteDataFromFile(const FrameHeader& header, int fd,
                                                      const unsigned char* map) {
  if (tls_) co_return co_await WriteData(header, map + header.offset);
  HeaderBytes hb = EncodeHeader(header);
  int sock = socket_.native_handle();
  std::size_t sent = 0;
  while (sent < hb.size()) {
    ssize_t n = ::send(sock, hb.data() + sent, hb.size() - sent, MSG_MORE | MSG_NOSIGNAL);
    if (n >= 0) {
      sent += static_cast<std::size_t>(n);
    } else if (errno == EAGAIN || errno == EWOULDBLOCK) {
      auto [ec] = co_await socket_.async_wait(tcp::socket::wait_write, kNoThrow);
      if (ec) co_return FromAsio(ec, "send data");
    } else if (errno != EINTR) {
      co_return ErrnoStatus(errno, "send data header");
    }
  }
  off_t off = static_cast<off_t>(header.offset);
  std::size_t left = header.length;
  while (left > 0) {
    ssize_t n = ::sendfile(sock, fd, &off, left);
    if (n > 0) {
      left -= static_cast<std::size_t>(n);
      activity_ += static_cast<std::uint64_t>(n);
    } else if (n == 0) {
      co_return absl::AbortedError("source file shrank during the transfer");
    } else if (errno == EAGAIN || errno == EWOULDBLOCK) {
      auto [ec] = co_await socket_.async_wait(tcp::socket::wait_write, kNoThrow);
      if (ec) co_return FromAsio(ec, "send data");
    } else if (errno != EINTR) {
      co_return ErrnoStatus(errno, "sendfile");
    }
  }
  co_return absl::OkStatus();
}

void Conn::Close() {
  boost::system::error_code ec;
  socket_.shutdown(tcp::socket::shutdown_both, ec);
  socket_.close(ec);
}

void StartWatchdog(const asio::any_io_executor& ex, std::shared_ptr<Watchdog> dog) {
  asio::co_spawn(
      ex,
      [dog]() -> asio::awaitable<void> {
        asio::steady_timer timer(co_await asio::this_coro::executor);
        dog->timer = &timer;
        auto tick = std::min<std::chrono::milliseconds>(dog->timeout / 4, std::chrono::milliseconds(500));
        std::uint64_t last = ~0ull;
        auto last_change = SteadyTime::now();
        while (!dog->done) {
          timer.expires_after(tick);
          co_await timer.async_wait(kNoThrow);
          std::uint64_t sum = 0;
          for (const ConnPtr& c : dog->conns) sum += c->activity();
          if (sum != last || dog->paused) {
            last = sum;
            last_change = SteadyTime::now();
          } else if (!dog->done && SteadyTime::now() - last_change > dog->timeout) {
            dog->fired = true;
            for (const ConnPtr& c : dog->conns) c->Close();
            break;
          }
        }
        dog->timer = nullptr;
      },
      asio::detached);  // a watchdog has no result; it only closes connections
}

std::string TuneSocket(tcp::socket& socket, const RouteOptions& route, spdlog::logger& log) {
  int fd = socket.native_handle();
  if (route.socket_buffer > 0) {
    int want = static_cast<int>(route.socket_buffer);
    struct Opt {
      int name;
      const char* label;
      const char* sysctl;
    };
    for (Opt o : {Opt{SO_SNDBUF, "SO_SNDBUF", "net.core.wmem_max"},
                  Opt{SO_RCVBUF, "SO_RCVBUF", "net.core.rmem_max"}}) {
      ::setsockopt(fd, SOL_SOCKET, o.name, &want, sizeof(want));
      int got = 0;
      socklen_t len = sizeof(got);
      ::getsockopt(fd, SOL_SOCKET, o.name, &got, &len);
      // Linux doubles the value for bookkeeping overhead; less than that means clamped.
      if (got < 2 * want) {
        static std::atomic<bool> warned{false};
        if (!warned.exchange(true)) {
          log.warn("{} {} bytes clamped by the kernel to {}; raise it with sysctl -w {}={}",
                   o.label, want, got / 2, o.sysctl, want);
        }
      }
    }
  }
  if (!route.congestion.empty()) {
    if (::setsockopt(fd, IPPROTO_TCP, TCP_CONGESTION, route.congestion.data(),
                     static_cast<socklen_t>(route.congestion.size())) != 0) {
      static std::atomic<bool> warned{false};
      if (!warned.exchange(true)) {
        log.warn("congestion control '{}' is not available here (available: {}); using the "
                 "default '{}'",
                 route.congestion, ReadSysctl("/proc/sys/net/ipv4/tcp_available_congestion_control"),
                 ReadSysctl("/proc/sys/net/ipv4/tcp_congestion_control"));
      }
    }
  }
  if (route.stream_rate_bps > 0) {
    std::uint64_t rate = route.stream_rate_bps / 8;
    if (::setsockopt(fd, SOL_SOCKET, SO_MAX_PACING_RATE, &rate, sizeof(rate)) != 0) {
      log.warn("SO_MAX_PACING_RATE: {}", std::strerror(errno));
    }
  }
  char name[32] = {};
  socklen_t len = sizeof(name);
  if (::getsockopt(fd, IPPROTO_TCP, TCP_CONGESTION, name, &len) != 0) return "";
  return std::string(name, strnlen(name, sizeof(name)));
}

absl::StatusOr<std::unique_ptr<asio::ssl::context>> MakeTlsContext(const TlsOptions& tls,
                                                                   bool server) {
  auto ctx = std::make_unique<asio::ssl::context>(server ? asio::ssl::context::tls_server
                                                         : asio::ssl::context::tls_client);
  ctx->set_options(asio::ssl::context::default_workarounds | asio::ssl::context::no_sslv2 |
                   asio::ssl::context::no_sslv3 | asio::ssl::context::no_tlsv1 |
                   asio::ssl::context::no_tlsv1_1);
  boost::system::error_code ec;
  if (!tls.cert.empty()) {
    ctx->use_certificate_chain_file(tls.cert.string(), ec);
    if (ec) return absl::InvalidArgumentError(fmt::format("TLS certificate {}: {}", tls.cert.string(), ec.message()));
    ctx->use_private_key_file(tls.key.string(), asio::ssl::context::pem, ec);
    if (ec) return absl::InvalidArgumentError(fmt::format("TLS key {}: {}", tls.key.string(), ec.message()));
  } else if (server) {
    return absl::InvalidArgumentError("TLS needs a certificate and key");
  }
  if (!tls.ca.empty()) {
    ctx->load_verify_file(tls.ca.string(), ec);
    if (ec) return absl::InvalidArgumentError(fmt::format("TLS CA {}: {}", tls.ca.string(), ec.message()));
    // Servers ask for (but do not require) a client certificate; clients require the
    // server's to verify against the CA.
    ctx->set_verify_mode(server ? asio::ssl::verify_peer : asio::ssl::verify_peer | asio::ssl::verify_fail_if_no_peer_cert);
  } else if (!server) {
    return absl::InvalidArgumentError("TLS needs a CA file to verify the agent's certificate (--tls-ca)");
  }
  return ctx;
}

// ---------------------------------------------------------------- connecting

asio::awaitable<absl::StatusOr<ClientConnection>> ConnectTo(const Endpoint& endpoint,
                                                            std::string_view role,
                                                            const TransferOptions& options,
                                                            asio::ssl::context* tls_ctx,
                                                            spdlog::logger& log) {
  auto ex = co_await asio::this_coro::executor;
  tcp::resolver resolver(ex);
  auto [rec, results] = co_await resolver.async_resolve(endpoint.host, std::to_string(endpoint.port), kNoThrow);
  if (rec) co_return absl::UnavailableError(fmt::format("resolve {}: {}", endpoint.ToString(), rec.message()));
  tcp::socket socket(ex);
  if (role == "data" && options.route.socket_buffer > 0) {
    // Set the receive buffer before connect so the window scale covers it.
    boost::system::error_code oec;
    socket.open(results.begin()->endpoint().protocol(), oec);
    int want = static_cast<int>(options.route.socket_buffer);
    ::setsockopt(socket.native_handle(), SOL_SOCKET, SO_RCVBUF, &want, sizeof(want));
  }
  asio::steady_timer timer(ex, options.io_timeout);
  timer.async_wait([&socket](boost::system::error_code ec) {
    if (!ec) {
      boost::system::error_code ignored;
      socket.close(ignored);
    }
  });
  auto [cec, ep] = co_await asio::async_connect(socket, results, kNoThrow);
  timer.cancel();
  if (cec) {
    co_return absl::UnavailableError(fmt::format("connect to {}: {}", endpoint.ToString(), cec.message()));
  }
  auto conn = std::make_shared<Conn>(std::move(socket));
  std::string nonce = RandomHex(16);
  Json msg1 = {{"op", "hello"}, {"version", kProtocolVersion}, {"role", std::string(role)},
           {"tls", options.tls}, {"nonce", nonce}};
  if (absl::Status s = co_await conn->SendControl(msg1);
      !s.ok()) {
    co_return s;
  }
  absl::StatusOr<Json> reply = co_await conn->ReadControl();
  if (!reply.ok()) {
    co_return absl::Status(reply.status().code(),
                           fmt::format("{}: {}", endpoint.ToString(), reply.status().message()));
  }
  if ((*reply)["op"] != "hello_ok" || !(*reply).contains("nonce") || !(*reply)["nonce"].is_string()) {
    co_return absl::DataLossError(fmt::format("{}: unexpected reply to hello", endpoint.ToString()));
  }
  ClientConnection out{conn, (*reply)["nonce"].get<std::string>()};
  if (options.tls) {
    if (tls_ctx == nullptr) co_return absl::InternalError("bug: TLS requested without a context");
    if (absl::Status s = co_await conn->Handshake(*tls_ctx, false); !s.ok()) {
      co_return absl::UnavailableError(fmt::format("{}: {}", endpoint.ToString(), s.message()));
    }
  }
  if (role != "control") co_return out;
  absl::StatusOr<Json> ch = co_await conn->ReadControl();
  if (!ch.ok()) co_return absl::Status(ch.status().code(), fmt::format("{}: {}", endpoint.ToString(), ch.status().message()));
  if ((*ch)["op"] == "welcome" && options.tls && (*ch).value("method", "") == "certificate") {
    log.debug("authenticated to {} by TLS client certificate", endpoint.ToString());
    co_return out;
  }
  if ((*ch)["op"] != "challenge") {
    co_return absl::DataLossError(fmt::format("{}: expected an authentication challenge", endpoint.ToString()));
  }
  std::string server_nonce = out.server_nonce;
  std::string mac = HmacHex(options.shared_key, fmt::format("gfrep-client|{}|{}", server_nonce, nonce));
  Json msg2 = {{"op", "auth"}, {"mac", mac}};
  if (absl::Status s = co_await conn->SendControl(msg2); !s.ok()) co_return s;
  absl::StatusOr<Json> welcome = co_await conn->ReadControl();
  if (!welcome.ok()) {
    co_return absl::Status(welcome.status().code(),
                           fmt::format("{}: {}", endpoint.ToString(), welcome.status().message()));
  }
  std::string expect = HmacHex(options.shared_key, fmt::format("gfrep-server|{}|{}", nonce, server_nonce));
  if ((*welcome)["op"] != "welcome" || !ConstantTimeEqual((*welcome).value("mac", ""), expect)) {
    co_return absl::PermissionDeniedError(fmt::format(
        "{}: the agent failed to prove it holds our shared key (different key file?)", endpoint.ToString()));
  }
  co_return out;
}

asio::awaitable<absl::StatusOr<ConnPtr>> JoinSession(const Endpoint& endpoint,
                                                     std::string_view token,
                                                     const TransferOptions& options,
                                                     asio::ssl::context* tls_ctx,
                                                     spdlog::logger& log) {
  absl::StatusOr<ClientConnection> c = co_await ConnectTo(endpoint, "data", options, tls_ctx, log);
  if (!c.ok()) co_return c.status();
  std::string payload = fmt::format("{}", token);
  Json join{{"op", "join"}, {"token", std::string(token)},
            {"mac", JoinMac(options.shared_key, token, c->server_nonce)}};
  if (absl::Status s = co_await c->conn->SendControl(join); !s.ok()) co_return s;
  absl::StatusOr<Json> r = co_await c->conn->ReadControl();
  if (!r.ok()) co_return r.status();
  if ((*r)["op"] != "joined") co_return absl::DataLossError("unexpected reply to join");
  co_return c->conn;
}

// ---------------------------------------------------------------- JSON helpers

Json RouteToJson(const TransferOptions& o) {
  return Json{{"streams", o.route.streams},
              {"stripe_unit", o.route.stripe_unit},
              {"socket_buffer", o.route.socket_buffer},
              {"congestion", o.route.congestion},
              {"stream_rate_bps", o.route.stream_rate_bps},
              {"route_rate_bps", o.route.route_rate_bps},
              {"route_name", o.route.route_name},
              {"checksum", o.checksum},
              {"block_checksum", o.block_checksum},
              {"tls", o.tls},
              {"io_timeout_ms", o.io_timeout.count()},
              {"max_resend_rounds", o.max_resend_rounds}};
}

absl::Status RouteFromJson(const Json& j, TransferOptions& o) {
  try {
    o.route.streams = j.at("streams").get<int>();
    o.route.stripe_unit = j.at("stripe_unit").get<std::uint64_t>();
    o.route.socket_buffer = j.at("socket_buffer").get<std::uint64_t>();
    o.route.congestion = j.at("congestion").get<std::string>();
    o.route.stream_rate_bps = j.at("stream_rate_bps").get<std::uint64_t>();
    o.route.route_rate_bps = j.at("route_rate_bps").get<std::uint64_t>();
    o.route.route_name = j.at("route_name").get<std::string>();
    o.checksum = j.at("checksum").get<std::string>();
    o.block_checksum = j.at("block_checksum").get<std::string>();
    o.tls = j.at("tls").get<bool>();
    o.io_timeout = std::chrono::milliseconds(std::clamp<std::int64_t>(j.at("io_timeout_ms").get<std::int64_t>(), 100, 3600000));
    o.max_resend_rounds = j.at("max_resend_rounds").get<int>();
  } catch (const Json::exception& e) {
    return absl::InvalidArgumentError(fmt::format("bad transfer options: {}", e.what()));
  }
  return Validate(o.route);
}

Json RangesToJson(const std::vector<ByteRange>& ranges) {
  Json a = Json::array();
  for (const ByteRange& r : ranges) a.push_back({r.begin, r.end});
  return a;
}

std::vector<ByteRange> RangesFromJson(const Json& j, std::uint64_t size, absl::Status& status) {
  std::vector<ByteRange> out;
  status = absl::OkStatus();
  if (!j.is_array() || j.size() > 100000) {
    status = absl::InvalidArgumentError("bad range list");
    return out;
  }
  std::uint64_t prev = 0;
  for (const Json& r : j) {
    if (!r.is_array() || r.size() != 2 || !r[0].is_number_unsigned() || !r[1].is_number_unsigned()) {
      status = absl::InvalidArgumentError("bad range in list");
      return {};
    }
    std::uint64_t b = r[0].get<std::uint64_t>(), e = r[1].get<std::uint64_t>();
    if (b >= e || e > size || b < prev) {
      status = absl::InvalidArgumentError(fmt::format("range [{}, {}) invalid for size {}", b, e, size));
      return {};
    }
    prev = e;
    out.push_back({b, e});
  }
  return out;
}

// ---------------------------------------------------------------- source

SourceFile::~SourceFile() {
  if (map != nullptr) ::munmap(const_cast<unsigned char*>(map), size);
  if (fd >= 0) ::close(fd);
}

absl::StatusOr<std::unique_ptr<SourceFile>> OpenSource(const std::filesystem::path& path) {
  auto src = std::make_unique<SourceFile>();
  src->fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (src->fd < 0) return ErrnoStatus(errno, fmt::format("source {}", path.string()));
  struct stat st {};
  if (::fstat(src->fd, &st) != 0) return ErrnoStatus(errno, fmt::format("stat {}", path.string()));
  if (!S_ISREG(st.st_mode)) {
    return absl::InvalidArgumentError(fmt::format("source {} is not a regular file", path.string()));
  }
  src->size = static_cast<std::uint64_t>(st.st_size);
  src->source_id = fmt::format("{}:{}.{:09}:{}", src->size, st.st_mtim.tv_sec, st.st_mtim.tv_nsec, st.st_ino);
  if (src->size > 0) {
    void* m = ::mmap(nullptr, src->size, PROT_READ, MAP_SHARED, src->fd, 0);
    if (m == MAP_FAILED) return ErrnoStatus(errno, fmt::format("mmap {}", path.string()));
    src->map = static_cast<const unsigned char*>(m);
  }
  return src;
}

// ---------------------------------------------------------------- sender

namespace {

struct SenderState {
  std::deque<ByteRange> queue;
  bool failed = false;
  std::uint64_t sent = 0;
  int corrupt_left = 0;
  // When the whole file is sent in order (no resume), the end-to-end checksum is advanced
  // in the same pass as the block checksums: `file_hasher` covers [0, hashed_upto).
  std::unique_ptr<FileHasher> file_hasher;
  std::uint64_t hashed_upto = 0;
  XXH3_state_t* block_state = nullptr;
  ~SenderState() {
    if (block_state != nullptr) XXH3_freeState(block_state);
  }
};

#ifndef MADV_POPULATE_READ
#define MADV_POPULATE_READ 22
#endif

// Block checksum of [begin, end) of the source mapping; also feeds the file hasher when
// the block is next in file order. Works in 256 KiB pieces so both hashes read each piece
// while it is in cache, after faulting the block's pages in with one call.
std::uint64_t HashBlock(SenderState& st, const SourceFile& src, BlockChecksumAlgorithm alg,
                        const ByteRange& b) {
  constexpr std::uint64_t kPiece = 256 * 1024;
  constexpr std::uintptr_t kPage = 4096;
  auto first = reinterpret_cast<std::uintptr_t>(src.map + b.begin) & ~(kPage - 1);
  auto last = reinterpret_cast<std::uintptr_t>(src.map + b.end);
  ::madvise(reinterpret_cast<void*>(first), last - first, MADV_POPULATE_READ);  // a hint only
  FileHasher* file = st.file_hasher != nullptr && st.hashed_upto == b.begin ? st.file_hasher.get() : nullptr;
  if (alg == BlockChecksumAlgorithm::kXxh3_64) {
    if (st.block_state == nullptr) st.block_state = XXH3_createState();
    XXH3_64bits_reset(st.block_state);
  }
  std::uint32_t crc = 0;
  for (std::uint64_t p = b.begin; p < b.end; p += kPiece) {
    auto n = static_cast<std::size_t>(std::min(kPiece, b.end - p));
    if (alg == BlockChecksumAlgorithm::kXxh3_64) {
      XXH3_64bits_update(st.block_state, src.map + p, n);
    } else {
      crc = Crc32c(crc, src.map + p, n);
    }
    if (file != nullptr) file->Update(src.map + p, n);
  }
  if (file != nullptr) st.hashed_upto = b.end;
  return alg == BlockChecksumAlgorithm::kXxh3_64 ? XXH3_64bits_digest(st.block_state) : crc;
}

asio::awaitable<absl::Status> SendStream(Conn& c, SenderState& st, SourceFile& src,
                                         const TransferOptions& o, BlockChecksumAlgorithm alg,
                                         TokenBucket* bucket, ProgressReporter& progress) {
  asio::steady_timer timer(co_await asio::this_coro::executor);
  std::vector<unsigned char> scratch;
  while (!st.failed && !st.queue.empty()) {
    ByteRange b = st.queue.front();
    st.queue.pop_front();
    auto len = static_cast<std::uint32_t>(b.size());
    if (bucket != nullptr) {
      auto wait = bucket->Reserve(len);
      if (wait.count() > 0) {
        timer.expires_after(wait);
        co_await timer.async_wait(kNoThrow);
      }
    }
    FrameHeader h{FrameType::kData, len, b.begin, HashBlock(st, src, alg, b)};
    absl::Status s;
    auto corrupt = static_cast<std::uint64_t>(o.test_corrupt_offset);
    if (o.test_corrupt_offset >= 0 && st.corrupt_left > 0 && b.begin <= corrupt && corrupt < b.end) {
      --st.corrupt_left;
      scratch.assign(src.map + b.begin, src.map + b.end);
      scratch[corrupt - b.begin] ^= 0x5a;
      s = co_await c.WriteData(h, scratch.data());
    } else {
      s = co_await c.WriteDataFromFile(h, src.fd, src.map);
    }
    if (!s.ok()) co_return s;
    st.sent += len;
    progress.Add(len);
  }
  if (st.failed) co_return absl::CancelledError("stream stopped");
  co_return co_await c.SendFrame(FrameType::kEnd, "");
}

// After a local stream error, the receiver usually said why on the control connection.
asio::awaitable<absl::Status> PeerReason(Conn& ctrl, absl::Status local) {
  auto ex = co_await asio::this_coro::executor;
  asio::steady_timer timer(ex, std::chrono::seconds(3));
  timer.async_wait([&ctrl](boost::system::error_code ec) {
    if (!ec) ctrl.Close();
  });
  absl::StatusOr<Json> m = co_await ctrl.ReadControl();
  timer.cancel();
  if (!m.ok() && absl::IsUnavailable(local) && !absl::IsUnavailable(m.status()) &&
      !absl::IsCancelled(m.status())) {
    co_return m.status();
  }
  co_return local;
}

}  // namespace

asio::awaitable<absl::StatusOr<TransferStats>> RunSender(Conn& ctrl, std::vector<ConnPtr> data,
                                                         SourceFile& src,
                                                         std::vector<ByteRange> missing,
                                                         const TransferOptions& o,
                                                         std::string congestion,
                                                         std::uint64_t resumed_bytes) {
  auto log = LoggerOf(o.logger);
  auto ex = co_await asio::this_coro::executor;
  auto start = SteadyTime::now();
  BlockChecksumAlgorithm alg = *ParseBlockChecksumAlgorithm(o.block_checksum);
  ChecksumAlgorithm file_alg = *ParseChecksumAlgorithm(o.checksum);
  SenderState st;
  // The whole file in order: its checksum is computed in the block pass (HashBlock).
  // Otherwise (resume) it is computed beside the sending, on another thread.
  bool inline_sum = src.size > 0 && missing.size() == 1 && missing[0].begin == 0 && missing[0].end == src.size;
  std::future<absl::StatusOr<std::string>> checksum;
  if (inline_sum) {
    st.file_hasher = std::make_unique<FileHasher>(file_alg);
  } else {
    checksum = std::async(std::launch::async, [fd = src.fd, size = src.size, file_alg] {
      return ComputeFdChecksum(fd, size, file_alg);
    });
  }
  std::shared_ptr<TokenBucket> bucket;
  if (o.route.route_rate_bps > 0) {
    bucket = RouteBucket(o.route.route_name, static_cast<double>(o.route.route_rate_bps) / 8);
  }
  auto dog = std::make_shared<Watchdog>();
  dog->conns = data;
  dog->timeout = o.io_timeout;
  StartWatchdog(ex, dog);
  struct DogGuard {
    std::shared_ptr<Watchdog> d;
    ~DogGuard() { d->Finish(); }
  } guard{dog};

  ProgressReporter progress(o, src.size, resumed_bytes, static_cast<int>(data.size()));
  st.corrupt_left = o.test_corrupt_times;
  int round = 0;
  std::optional<absl::StatusOr<std::string>> file_sum;
  for (;;) {
    std::vector<ByteRange> blocks = SplitBlocks(missing, o.route.stripe_unit);
    st.queue.assign(blocks.begin(), blocks.end());
    st.failed = false;
    std::vector<std::function<asio::awaitable<absl::Status>()>> tasks;
    for (const ConnPtr& c : data) {
      tasks.push_back([&, c]() { return SendStream(*c, st, src, o, alg, bucket.get(), progress); });
    }
    absl::Status s = co_await RunConcurrently(std::move(tasks), [&] {
      st.failed = true;
      for (const ConnPtr& c : data) c->Close();
    });
    if (!s.ok()) {
      if (dog->fired) s = absl::DeadlineExceededError(fmt::format("no progress for {} ms", o.io_timeout.count()));
      co_return co_await PeerReason(ctrl, s);
    }
    dog->paused = true;
    if (!file_sum.has_value() && inline_sum) {
      if (st.hashed_upto == src.size) {
        file_sum = st.file_hasher->Finish();
      } else {  // not reached when every block went out in order; computed the slow way then
        checksum = std::async(std::launch::async, [fd = src.fd, size = src.size, file_alg] {
          return ComputeFdChecksum(fd, size, file_alg);
        });
      }
    }
    if (!file_sum.has_value()) {
      while (checksum.wait_for(std::chrono::seconds(0)) != std::future_status::ready) {
        asio::steady_timer t(ex, std::chrono::milliseconds(5));
        co_await t.async_wait(kNoThrow);
      }
      file_sum = checksum.get();
    }
    const absl::StatusOr<std::string>& sum = *file_sum;
    if (!sum.ok()) co_return sum.status();
    Json msg3 = {{"op", "finish"}, {"checksum", *sum},
                                                    {"round", round}, {"congestion", congestion}};
    if (absl::Status w = co_await ctrl.SendControl(msg3);
        !w.ok()) {
      co_return w;
    }
    absl::StatusOr<Json> reply = co_await ctrl.ReadControl();
    if (!reply.ok()) co_return reply.status();
    if ((*reply)["op"] == "resend") {
      absl::Status rs;
      missing = RangesFromJson((*reply).value("ranges", Json::array()), src.size, rs);
      if (!rs.ok()) co_return rs;
      ++round;
      std::uint64_t bytes = 0;
      for (const ByteRange& r : missing) bytes += r.size();
      log->warn("receiver asks to re-send {} bytes in {} ranges (damaged blocks), round {}", bytes,
                missing.size(), round);
      dog->paused = false;
      continue;
    }
    if ((*reply)["op"] != "done") co_return absl::DataLossError("unexpected reply to finish");
    TransferStats stats;
    stats.bytes = src.size;
    stats.bytes_transferred = st.sent;
    stats.resumed_bytes = resumed_bytes;
    stats.seconds = std::chrono::duration<double>(SteadyTime::now() - start).count();
    stats.streams = static_cast<int>(data.size());
    stats.checksum = *sum;
    stats.congestion = congestion;
    stats.resend_rounds = round;
    progress.SetDone(src.size);
    co_return stats;
  }
}

// ---------------------------------------------------------------- destination

DestinationFile::~DestinationFile() {
  if (fd >= 0) ::close(fd);
}

absl::StatusOr<std::unique_ptr<DestinationFile>> OpenDestination(
    const std::filesystem::path& final_path, const std::filesystem::path& tmp_dir,
    std::uint64_t size, const std::string& source_id, const std::string& checksum) {
  auto d = std::make_unique<DestinationFile>();
  d->final_path = final_path;
  d->size = size;
  std::error_code ec;
  std::filesystem::create_directories(tmp_dir, ec);
  if (ec) return absl::InternalError(fmt::format("create {}: {}", tmp_dir.string(), ec.message()));
  std::string key = fmt::format("{:016x}", XXH3_64bits(final_path.string().data(), final_path.string().size()));
  d->part_path = tmp_dir / (key + ".part");
  d->journal_path = tmp_dir / (key + ".journal");
  absl::StatusOr<Journal> j = Journal::Open(d->journal_path, JournalHeader{size, source_id, checksum});
  if (!j.ok()) return j.status();
  d->journal = std::move(*j);
  int flags = O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW;
  if (!d->journal.resumed()) flags |= O_TRUNC;
  d->fd = ::open(d->part_path.c_str(), flags, 0644);
  if (d->fd < 0) return ErrnoStatus(errno, fmt::format("open {}", d->part_path.string()));
  // Check room up front for a clear error (a later ENOSPC on write is reported the same
  // way). No fallocate: on tmpfs it would zero every page once more before we write it.
  std::uint64_t need = size - (d->journal.resumed() ? d->journal.ranges().Bytes() : 0);
  struct statvfs vfs {};
  if (::fstatvfs(d->fd, &vfs) == 0) {
    std::uint64_t avail = static_cast<std::uint64_t>(vfs.f_bavail) * vfs.f_frsize;
    if (avail < need) {
      return absl::ResourceExhaustedError(fmt::format(
          "disk full: {} bytes needed, {} available in {}", need, avail, tmp_dir.string()));
    }
  }
  if (::ftruncate(d->fd, static_cast<off_t>(size)) != 0) {
    return ErrnoStatus(errno, fmt::format("size {}", d->part_path.string()));
  }
  if (d->journal.resumed()) {
    d->received = d->journal.ranges();
    d->resumed_bytes = d->received.Bytes();
  }
  return d;
}

namespace {

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
  // The end-to-end checksum advances over the received prefix of the file as blocks land:
  // the block at the frontier is hashed from the receive buffer (one pass), blocks that
  // arrived ahead of it (or were resumed) are read back once the frontier reaches them.
  // Null after a damaged frontier block: the whole file is then read back at the end.
  std::unique_ptr<FileHasher> file_hasher;  // covers [0, hashed_upto) of the partial file
  std::uint64_t hashed_upto = 0;
  bool frontier_claimed = false;  // a stream is hashing the block at hashed_upto inline
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
  std::vector<std::unique_ptr<unsigned char[]>> spare;  // released stripe-unit buffers, reused
  std::uint64_t spare_size = 0;                          // size of each spare buffer
  std::uint64_t pooled_blocks = 0;                       // stats for tests/logs
  std::uint64_t read_back_bytes = 0;

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
absl::Status CatchUpHash(ReceiverState& st, DestinationFile& dst, unsigned char* buf,
                         std::size_t cap, std::uint64_t limit) {
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

void StartFlush(const std::shared_ptr<ReceiverState>& st, DestinationFile& dst,
                const asio::any_io_executor& ex) {
  st->flushing = true;
  std::vector<ByteRange> ranges = std::move(st->pending);
  st->pending.clear();
  st->pending_bytes = 0;
  asio::co_spawn(
      BlockingPool(),
      [&dst, ranges = std::move(ranges)]() -> asio::awaitable<absl::Status> {
        co_return FlushRanges(dst, ranges);
      },
      asio::bind_executor(ex, [st](std::exception_ptr, absl::Status s) {
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
asio::awaitable<void> FinalFlush(std::shared_ptr<ReceiverState> st, DestinationFile& dst) {
  co_await WaitFlush(st);
  std::vector<ByteRange> ranges = std::move(st->pending);
  st->pending.clear();
  std::function<absl::Status()> job = [&dst, &ranges] { return FlushRanges(dst, ranges); };
  absl::Status s = co_await OffThread(job);
  (void)s;  // ignored: best effort while already failing
}

asio::awaitable<absl::Status> ReceiveStream(Conn& c, std::shared_ptr<ReceiverState> st,
                                            DestinationFile& dst, const TransferOptions& o,
                                            BlockChecksumAlgorithm alg,
                                            ProgressReporter& progress) {
  constexpr std::size_t kPiece = 256 * 1024;
  auto ex = co_await asio::this_coro::executor;
  std::unique_ptr<unsigned char, decltype(&std::free)> buf(
      static_cast<unsigned char*>(std::aligned_alloc(4096, kPiece)), &std::free);
  XXH3_state_t* xxh = XXH3_createState();
  struct Free {
    XXH3_state_t* s;
    ~Free() { XXH3_freeState(s); }
  } free_xxh{xxh};
  auto log = LoggerOf(o.logger);
  for (;;) {
    absl::StatusOr<FrameHeader> h = co_await c.ReadHeader(static_cast<std::uint32_t>(o.route.stripe_unit));
    if (!h.ok()) co_return h.status();
    if (h->type == FrameType::kEnd) co_return absl::OkStatus();
    if (h->type != FrameType::kData) co_return absl::DataLossError("unexpected frame type on a data connection");
    if (h->length == 0 || h->offset > dst.size || h->length > dst.size - h->offset) {
      co_return absl::DataLossError(fmt::format("data frame [{}, +{}) outside the file of {} bytes",
                                                h->offset, h->length, dst.size));
    }
    XXH3_64bits_reset(xxh);
    bool inline_file = st->file_hasher != nullptr && !st->frontier_claimed && h->offset == st->hashed_upto;
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
    std::uint32_t crc = 0;
    std::uint64_t done = 0;
    while (done < h->length) {
      std::size_t n = static_cast<std::size_t>(std::min<std::uint64_t>(kPiece, h->length - done));
      unsigned char* piece = pooled != nullptr ? pooled.get() + done : buf.get();
      if (absl::Status s = co_await c.ReadExact(piece, n); !s.ok()) co_return s;
      if (alg == BlockChecksumAlgorithm::kXxh3_64) {
        XXH3_64bits_update(xxh, piece, n);
      } else {
        crc = Crc32c(crc, piece, n);
      }
      if (inline_file) st->file_hasher->Update(piece, n);
      std::size_t w = 0;
      while (w < n) {
        ssize_t r = ::pwrite(dst.fd, piece + w, n - w, static_cast<off_t>(h->offset + done + w));
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) co_return ErrnoStatus(r < 0 ? errno : ENOSPC, fmt::format("write {}", dst.part_path.string()));
        w += static_cast<std::size_t>(r);
      }
      done += n;
    }
    std::uint64_t sum = alg == BlockChecksumAlgorithm::kXxh3_64 ? XXH3_64bits_digest(xxh) : crc;
    if (inline_file) st->frontier_claimed = false;
    if (sum != h->checksum) {
      if (inline_file) {  // it saw damaged bytes: read back at the end
        st->file_hasher.reset();
        st->DropPool();
      }
      ++st->bad_blocks;
      log->warn("block [{}, +{}) failed its {} checksum; it will be re-sent", h->offset, h->length,
                BlockChecksumAlgorithmName(alg));
      continue;
    }
    dst.received.Add(h->offset, h->offset + h->length);
    if (inline_file) st->hashed_upto = h->offset + h->length;
    if (pooled != nullptr && st->file_hasher != nullptr && h->offset >= st->hashed_upto) {
      st->pool[h->offset] = ReceiverState::PooledBlock{std::move(pooled), h->length};
      ++st->pooled_blocks;
    }  // else the guard releases it (the frontier passed it or the hasher was dropped)
    // Blocks that arrived ahead of the frontier, while they are recent (bounded per block
    // so a long resumed prefix does not stall the streams; the rest is read at the end).
    if (absl::Status c = CatchUpHash(*st, dst, buf.get(), kPiece, 4 * static_cast<std::uint64_t>(h->length));
        !c.ok()) {
      co_return c;
    }
    st->pending.push_back({h->offset, h->offset + h->length});
    st->pending_bytes += h->length;
    st->received_now += h->length;
    progress.Add(h->length);
    if (!st->flush_error.ok()) co_return st->flush_error;
    if (st->pending_bytes >= o.journal_interval && !st->flushing) StartFlush(st, dst, ex);
  }
}

}  // namespace

asio::awaitable<absl::StatusOr<TransferStats>> RunReceiver(Conn& ctrl, std::vector<ConnPtr> data,
                                                           DestinationFile& dst,
                                                           const TransferOptions& o,
                                                           std::string congestion) {
  auto log = LoggerOf(o.logger);
  auto ex = co_await asio::this_coro::executor;
  auto start = SteadyTime::now();
  BlockChecksumAlgorithm alg = *ParseBlockChecksumAlgorithm(o.block_checksum);
  ChecksumAlgorithm file_alg = *ParseChecksumAlgorithm(o.checksum);
  auto st = std::make_shared<ReceiverState>(ex);
  if (dst.size > 0) st->file_hasher = std::make_unique<FileHasher>(file_alg);
  st->spare_size = o.route.stripe_unit;
  st->pool_limit = std::min<std::uint64_t>(o.receive_pool_bytes,
                                           2 * data.size() * o.route.stripe_unit);
  auto dog = std::make_shared<Watchdog>();
  dog->conns = data;
  dog->timeout = o.io_timeout;
  StartWatchdog(ex, dog);
  struct DogGuard {
    std::shared_ptr<Watchdog> d;
    ~DogGuard() { d->Finish(); }
  } guard{dog};
  ProgressReporter progress(o, dst.size, dst.resumed_bytes, static_cast<int>(data.size()));
  int round = 0;
  for (;;) {
    std::vector<std::function<asio::awaitable<absl::Status>()>> tasks;
    for (const ConnPtr& c : data) {
      tasks.push_back([&, c]() { return ReceiveStream(*c, st, dst, o, alg, progress); });
    }
    absl::Status s = co_await RunConcurrently(std::move(tasks), [&] {
      st->failed = true;
      for (const ConnPtr& c : data) c->Close();
    });
    if (s.ok()) {
      absl::StatusOr<Json> fin = co_await ctrl.ReadControl();
      if (!fin.ok()) {
        s = fin.status();
      } else if ((*fin)["op"] != "finish" || !(*fin).contains("checksum") || !(*fin)["checksum"].is_string()) {
        s = absl::DataLossError("expected finish on the control connection");
      } else {
        std::vector<ByteRange> missing = dst.received.Missing(dst.size);
        if (!missing.empty()) {
          if (round >= o.max_resend_rounds) {
            s = absl::DataLossError(fmt::format(
                "{} bytes still damaged after {} re-send rounds ({} bad blocks); nothing was put in place",
                dst.size - dst.received.Bytes(), round, st->bad_blocks));
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
          std::string expected = (*fin)["checksum"].get<std::string>();
          if ((*fin).contains("congestion") && (*fin)["congestion"].is_string()) {
            congestion = (*fin)["congestion"].get<std::string>();
          }
          dog->paused = true;
          if (absl::Status f = co_await WaitFlush(st); !f.ok()) {
            s = f;
          } else {
            std::function<absl::StatusOr<std::string>()> verify =
                [&dst, &st, file_alg]() -> absl::StatusOr<std::string> {
              if (::fdatasync(dst.fd) != 0) return ErrnoStatus(errno, "sync partial file");
              if (st->file_hasher != nullptr) {
                constexpr std::size_t kCap = 1 << 20;
                std::unique_ptr<unsigned char, decltype(&std::free)> b(
                    static_cast<unsigned char*>(std::aligned_alloc(4096, kCap)), &std::free);
                absl::Status c = CatchUpHash(*st, dst, b.get(), kCap, dst.size);
                if (!c.ok()) return c;
                if (st->hashed_upto == dst.size) return st->file_hasher->Finish();
              }
              st->read_back_bytes += dst.size;
              return ComputeFdChecksum(dst.fd, dst.size, file_alg);
            };
            absl::StatusOr<std::string> got = co_await OffThread(verify);
            if (!got.ok()) {
              s = got.status();
            } else if (*got != expected) {
              std::error_code ec;
              std::filesystem::remove(dst.part_path, ec);
              std::filesystem::remove(dst.journal_path, ec);
              s = absl::DataLossError(fmt::format(
                  "end-to-end checksum mismatch: sender {} receiver {}; partial file discarded", expected, *got));
            } else {
              std::function<absl::Status()> commit = [&dst]() -> absl::Status {
                std::error_code ec;
                std::filesystem::create_directories(dst.final_path.parent_path(), ec);
                if (::rename(dst.part_path.c_str(), dst.final_path.c_str()) != 0) {
                  return ErrnoStatus(errno, fmt::format("rename into {}", dst.final_path.string()));
                }
                int dfd = ::open(dst.final_path.parent_path().c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
                if (dfd >= 0) {
                  ::fsync(dfd);
                  ::close(dfd);
                }
                dst.journal.Close();
                std::filesystem::remove(dst.journal_path, ec);
                return absl::OkStatus();
              };
              absl::Status r = co_await OffThread(commit);
              if (!r.ok()) {
                s = r;
              } else {
                TransferStats stats;
                stats.bytes = dst.size;
                stats.bytes_transferred = st->received_now;
                stats.resumed_bytes = dst.resumed_bytes;
                stats.seconds = std::chrono::duration<double>(SteadyTime::now() - start).count();
                stats.streams = static_cast<int>(data.size());
                stats.checksum = *got;
                stats.congestion = congestion;
                stats.resend_rounds = round;
                stats.checksum_read_back_bytes = st->read_back_bytes;
                log->debug("end-to-end checksum: {} blocks hashed from the receive pool, {} bytes read back",
                           st->pooled_blocks, st->read_back_bytes);
                progress.SetDone(dst.size);
                Json msg5 = {{"op", "done"}, {"checksum", *got},
                                                            {"bytes_transferred", st->received_now}};
                absl::Status w = co_await ctrl.SendControl(msg5);
                (void)w;  // ignored: the file is in place; a lost reply only makes the peer retry
                co_return stats;
              }
            }
          }
        }
      }
    }
    // Failure: keep what arrived durable for a resume, tell the peer, report.
    if (dog->fired) s = absl::DeadlineExceededError(fmt::format("no progress for {} ms", o.io_timeout.count()));
    for (const ConnPtr& c : data) c->Close();
    if (!absl::IsDataLoss(s) || std::filesystem::exists(dst.part_path)) co_await FinalFlush(st, dst);
    if (absl::IsUnavailable(s) && s.message().find("peer:") == std::string_view::npos) {
      s = absl::UnavailableError(fmt::format("sender connection lost ({}); rerun to resume", s.message()));
    }
    absl::Status w = co_await ctrl.SendControl(ErrorJson(s));
    (void)w;  // ignored: the peer may be gone
    co_return s;
  }
}

}  // namespace gfrep::transfer::internal
