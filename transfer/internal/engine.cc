#include "transfer/internal/engine.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/crypto.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#include <pthread.h>
#include <signal.h>
#include <sys/sendfile.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>

#include <spdlog/spdlog.h>

#include "absl/status/status.h"
#include "transfer/congestion.h"
#include "transfer/internal/no_sigpipe.h"

namespace gfrep::transfer::internal {
namespace {

using SteadyTime = std::chrono::steady_clock;

std::string ReadSysctl(const char* path) {
  std::ifstream in(path);
  std::string s;
  std::getline(in, s);
  return s;
}

}  // namespace

asio::awaitable<absl::Status> RunConcurrently(
    std::vector<std::function<asio::awaitable<absl::Status>()>> tasks,
    std::function<void()> on_error) {
  auto ex = co_await asio::this_coro::executor;
  // The tasks are separate coroutines that use state owned by our caller, so this frame must
  // not end before they have. A cancellation of the caller (e.g. a site agent whose lease was
  // lost) is passed on by `on_error` (closing the connections) and then waited out like any
  // failure; throwing on it is off meanwhile, or a co_await below would throw past the tasks.
  const bool throws = co_await asio::this_coro::throw_if_cancelled();
  co_await asio::this_coro::throw_if_cancelled(false);
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
    asio::co_spawn(ex, CatchExceptions(task(), "a transfer stream"), [st](std::exception_ptr e, absl::Status s) {
      if (e) s = absl::InternalError("bug: exception escaped a transfer stream");
      if (!s.ok() && st->first.ok()) {
        st->first = s;
        if (st->on_error) st->on_error();
      }
      if (--st->left == 0) st->done.cancel();
    });
  }
  bool cancelled = false;
  for (;;) {
    if (!cancelled && co_await CancellationRequested()) {
      cancelled = true;
      if (st->first.ok()) {
        st->first = absl::CancelledError("transfer cancelled");
        if (st->on_error) st->on_error();
      }
    }
    if (st->left == 0) break;
    co_await st->done.async_wait(kNoThrow);
  }
  co_await asio::this_coro::throw_if_cancelled(throws);
  co_return st->first;
}

asio::awaitable<bool> CancellationRequested() {
  asio::cancellation_state cs = co_await asio::this_coro::cancellation_state;
  co_return cs.cancelled() != asio::cancellation_type::none;
}

absl::Status FromAsio(const boost::system::error_code& ec, std::string_view context) {
  if (!ec) return absl::OkStatus();
  std::string msg = fmt::format("{}: {}", context, ec.message());
  if (ec == asio::error::operation_aborted) return absl::CancelledError(msg);
  if (ec == asio::error::timed_out) return absl::DeadlineExceededError(msg);
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
  if (RAND_bytes(b.data(), static_cast<int>(b.size())) != 1) {
    // Nonces and tokens without randomness would make authentication replayable.
    spdlog::critical("RAND_bytes failed: no secure random numbers");
    std::abort();
  }
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

std::string HmacRaw(std::string_view key, std::string_view message) {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()),
       reinterpret_cast<const unsigned char*>(message.data()), message.size(), md, &len);
  return std::string(reinterpret_cast<const char*>(md), len);
}

std::string ControlSessionKey(std::string_view shared_key, std::string_view client_nonce,
                              std::string_view server_nonce) {
  return HmacRaw(shared_key, fmt::format("gfrep-session|{}|{}", client_nonce, server_nonce));
}

namespace {
// What a bound control message's MAC covers: who sent it, its place in that direction's
// sequence, and its JSON.
std::string ControlMac(std::string_view key, bool from_client, std::uint64_t sequence,
                       std::string_view json) {
  std::string m = fmt::format("gfrep-control|{}|{}|", from_client ? "c>s" : "s>c", sequence);
  m.append(json);
  return HmacRaw(key, m);
}
}  // namespace

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

absl::Status Conn::StartTls(asio::ssl::context& ctx) {
  absl::StatusOr<std::unique_ptr<TlsChannel>> channel = TlsChannel::Create(ctx.native_handle(), socket_);
  if (!channel.ok()) return channel.status();
  tls_ = std::move(*channel);
  return absl::OkStatus();
}

asio::awaitable<absl::Status> Conn::Handshake(asio::ssl::context& ctx, bool server) {
  if (absl::Status s = StartTls(ctx); !s.ok()) co_return s;
  if (absl::Status s = co_await tls_->Handshake(server); !s.ok()) {
    co_return absl::UnavailableError(fmt::format("TLS handshake failed: {}", s.message()));
  }
  co_return absl::OkStatus();
}

asio::awaitable<absl::Status> Conn::Handshake(asio::ssl::context& ctx, std::string_view host) {
  if (absl::Status s = StartTls(ctx); !s.ok()) co_return s;
  SSL* ssl = tls_->ssl();
  const std::string name(host);
  boost::system::error_code aec;
  (void)asio::ip::make_address(name, aec);
  const bool is_ip = !aec;
  // The certificate must name what we dialled: an IP address in an iPAddress SAN, a host
  // name in a dNSName SAN (OpenSSL's checks, run during the handshake's verification).
  const int set = is_ip ? X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(ssl), name.c_str())
                        : SSL_set1_host(ssl, name.c_str());
  if (set != 1) co_return absl::InvalidArgumentError(fmt::format("TLS: cannot check host '{}'", name));
  if (!is_ip) SSL_set_tlsext_host_name(ssl, name.c_str());
  if (absl::Status s = co_await tls_->Handshake(false); !s.ok()) {
    const long v = SSL_get_verify_result(ssl);
    if (v == X509_V_ERR_HOSTNAME_MISMATCH || v == X509_V_ERR_IP_ADDRESS_MISMATCH) {
      co_return absl::PermissionDeniedError(fmt::format(
          "TLS: the agent's certificate does not name {} (issue it with gfca issue node NAME --host {})",
          name, name));
    }
    co_return absl::UnavailableError(fmt::format("TLS handshake failed: {}", s.message()));
  }
  co_return absl::OkStatus();
}

std::vector<std::string> Conn::PeerCertificateUris() {
  std::vector<std::string> out;
  if (!PeerCertificateVerified()) return out;
  X509* cert = SSL_get1_peer_certificate(tls_->ssl());
  auto* names = static_cast<GENERAL_NAMES*>(X509_get_ext_d2i(cert, NID_subject_alt_name, nullptr, nullptr));
  for (int i = 0; names != nullptr && i < sk_GENERAL_NAME_num(names); ++i) {
    const GENERAL_NAME* n = sk_GENERAL_NAME_value(names, i);
    if (n->type != GEN_URI) continue;
    const ASN1_IA5STRING* uri = n->d.uniformResourceIdentifier;
    out.emplace_back(reinterpret_cast<const char*>(ASN1_STRING_get0_data(uri)), ASN1_STRING_length(uri));
  }
  GENERAL_NAMES_free(names);
  X509_free(cert);
  return out;
}

void Conn::BindControlMessages(std::string key, bool client) {
  mac_key_ = std::move(key);
  client_ = client;
  sent_ = 0;
  received_ = 0;
  unbound_reads_ = 0;
}

void Conn::BindControlMessagesAfterNextRead(std::string key, bool client) {
  BindControlMessages(std::move(key), client);
  unbound_reads_ = 1;
}

bool Conn::PeerCertificateVerified() {
  if (!tls_) return false;
  X509* cert = SSL_get1_peer_certificate(tls_->ssl());
  if (cert == nullptr) return false;
  X509_free(cert);
  return SSL_get_verify_result(tls_->ssl()) == X509_V_OK;
}

template <class Buffers>
asio::awaitable<absl::Status> Conn::Write(const Buffers& buffers, std::string_view what) {
  if (tls_) {
    for (auto it = asio::buffer_sequence_begin(buffers); it != asio::buffer_sequence_end(buffers); ++it) {
      const asio::const_buffer b(*it);
      if (absl::Status s = co_await tls_->Write(b.data(), b.size(), activity_, what); !s.ok()) co_return s;
    }
    co_return absl::OkStatus();
  }
  auto [ec, n] = co_await asio::async_write(socket_, buffers, kNoThrow);
  activity_ += n;
  co_return FromAsio(ec, what);
}

asio::awaitable<absl::Status> Conn::SendFrame(FrameType type, std::string_view payload) {
  std::string f = EncodeFrame(type, payload);
  co_return co_await Write(asio::buffer(f), "send frame");
}

asio::awaitable<absl::Status> Conn::SendControl(const Json& message) {
  // `replace`: a message quoting bytes that are not UTF-8 (a path, say) must not throw.
  std::string text = message.dump(-1, ' ', false, Json::error_handler_t::replace);
  // Rare (a get sent ahead meeting an outcome): the later one waits a moment.
  while (control_writing_) {
    asio::steady_timer t(co_await asio::this_coro::executor, std::chrono::milliseconds(1));
    co_await t.async_wait(kNoThrow);
  }
  control_writing_ = true;
  struct Done {
    bool& writing;
    ~Done() { writing = false; }
  } done{control_writing_};
  // The MAC's sequence number in the order the frames go out.
  if (bound()) text += ControlMac(mac_key_, client_, sent_++, text);
  if (tls_ || !socket_.is_open()) co_return co_await SendFrame(FrameType::kControl, text);
  // In clear, straight to the socket (a control frame nearly always fits its buffer); asio
  // only for what did not fit. Seen with pipelined gets: a pull's error message written
  // through asio, after another pull's get on the same connection had failed with EPIPE
  // (their agent had gone), waited until cancelled, with the socket open and nothing in
  // its send queue (SiteAgentTest.ASourceKilledMidPipelineLeavesNoWrongReplica...; why asio
  // saw no writability was not found). A direct send fails at once.
  const std::string f = EncodeFrame(FrameType::kControl, text);
  ssize_t n;
  do {
    n = ::send(socket_.native_handle(), f.data(), f.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
  } while (n < 0 && errno == EINTR);
  if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK) {
    co_return absl::UnavailableError(fmt::format("send frame: {}", std::strerror(errno)));
  }
  const std::size_t sent = n > 0 ? static_cast<std::size_t>(n) : 0;
  activity_ += sent;
  if (sent == f.size()) co_return absl::OkStatus();
  co_return co_await Write(asio::buffer(f.data() + sent, f.size() - sent), "send frame");
}

asio::awaitable<absl::Status> Conn::ReadExact(void* data, std::size_t size) {
  if (tls_) {
    TlsChannel::ReadResult r = co_await tls_->Read(data, size, activity_);
    if (r.eof && r.read > 0) {
      co_return absl::UnavailableError(fmt::format("truncated frame: peer closed after {} of {} bytes", r.read, size));
    }
    co_return r.status;
  }
  auto [ec, n] = co_await asio::async_read(socket_, asio::buffer(data, size), kNoThrow);
  activity_ += n;
  if (ec == asio::error::eof && n > 0) {
    // A lost connection like any other (kUnavailable: the peer may say why elsewhere).
    co_return absl::UnavailableError(fmt::format("truncated frame: peer closed after {} of {} bytes", n, size));
  }
  co_return FromAsio(ec, "read");
}

asio::awaitable<absl::StatusOr<FrameHeader>> Conn::ReadHeader(std::uint32_t max_data) {
  HeaderBytes b;
  if (absl::Status s = co_await ReadExact(b.data(), b.size()); !s.ok()) co_return s;
  co_return DecodeHeader(b, max_data);
}

asio::awaitable<absl::StatusOr<Json>> Conn::ReadControl(std::uint32_t max_payload) {
  absl::StatusOr<FrameHeader> h = co_await ReadHeader(0);
  if (!h.ok()) co_return h.status();
  if (h->type != FrameType::kControl) {
    co_return absl::DataLossError("expected a control frame");
  }
  if (h->length > max_payload) {
    co_return absl::ResourceExhaustedError(fmt::format(
        "control message of {} bytes refused (at most {} bytes here)", h->length, max_payload));
  }
  std::string payload(h->length, '\0');
  if (absl::Status s = co_await ReadExact(payload.data(), payload.size()); !s.ok()) co_return s;
  if (bound() && unbound_reads_ > 0) {
    --unbound_reads_;
  } else if (bound()) {
    const std::uint64_t sequence = received_++;
    bool good = payload.size() >= kControlMacSize;
    if (good) {
      std::string_view json(payload.data(), payload.size() - kControlMacSize);
      std::string_view mac(payload.data() + json.size(), kControlMacSize);
      good = ConstantTimeEqual(mac, ControlMac(mac_key_, !client_, sequence, json));
    }
    if (!good) {
      co_return absl::PermissionDeniedError(
          "control message failed its authentication (altered, injected or replayed on the way?)");
    }
    payload.resize(payload.size() - kControlMacSize);
  }
  Json j = Json::parse(payload, nullptr, false);
  if (j.is_discarded() || !j.is_object()) co_return absl::DataLossError("malformed control message");
  absl::StatusOr<std::string> op = GetString(j, "op");
  if (!op.ok()) co_return absl::InvalidArgumentError(fmt::format("malformed control message: {}", op.status().message()));
  if (*op == "error") {
    absl::StatusOr<std::uint64_t> code = GetUint(j, "code");
    absl::StatusOr<std::string> message = GetOptionalString(j, "message", "unknown error");
    if (!code.ok() || !message.ok()) {
      co_return absl::InvalidArgumentError(fmt::format(
          "malformed error message from the peer: {}",
          (!code.ok() ? code.status() : message.status()).message()));
    }
    std::uint64_t c = *code >= 1 && *code <= 16 ? *code : 2;  // 2: kUnknown
    co_return absl::Status(static_cast<absl::StatusCode>(c), fmt::format("peer: {}", *message));
  }
  co_return j;
}

asio::awaitable<absl::Status> Conn::WriteData(const FrameHeader& header, const void* data) {
  HeaderBytes hb = EncodeHeader(header);
  std::array<asio::const_buffer, 2> bufs{asio::buffer(hb), asio::buffer(data, header.length)};
  co_return co_await Write(bufs, "send data");
}

namespace {

// sendfile(2) that never raises SIGPIPE (no_sigpipe.h): a peer that closed its end makes it
// fail with EPIPE instead of killing the process.
ssize_t SendfileNoSignal(int sock, int fd, off_t* offset, std::size_t count) {
  ScopedNoSigPipe no_sigpipe;
  return ::sendfile(sock, fd, offset, count);
}

}  // namespace

asio::awaitable<absl::Status> Conn::WriteDataFromFile(const FrameHeader& header, int fd) {
  HeaderBytes hb = EncodeHeader(header);
  if (tls_) {
    // Kernel TLS: the header as one record, the payload as records the kernel cuts from the
    // file's pages.
    if (absl::Status s = co_await tls_->Write(hb.data(), hb.size(), activity_, "send data header"); !s.ok()) {
      co_return s;
    }
    co_return co_await tls_->SendFile(fd, header.offset, header.length, activity_);
  }
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
    ssize_t n = SendfileNoSignal(sock, fd, &off, left);
    if (n > 0) {
      left -= static_cast<std::size_t>(n);
      activity_ += static_cast<std::uint64_t>(n);
    } else if (n == 0) {
      co_return absl::AbortedError("source changed size during the transfer");
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

WatchdogScope WatchConnections(const asio::any_io_executor& ex, std::vector<ConnPtr> conns,
                               std::chrono::milliseconds timeout) {
  auto dog = std::make_shared<Watchdog>();
  dog->conns = std::move(conns);
  dog->timeout = timeout;
  StartWatchdog(ex, dog);
  return WatchdogScope(std::move(dog));
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
    auto select = [&] {
      return ::setsockopt(fd, IPPROTO_TCP, TCP_CONGESTION, route.congestion.data(),
                          static_cast<socklen_t>(route.congestion.size())) == 0;
    };
    if (!select()) {
      // Not offered by the kernel (ENOENT): provide it if this process can (the kernel's
      // module, or gfrep's BPF highspeed), then ask again. Agents do it at start for their
      // routes; this covers gfcp, a route set after the agent started, and a registration
      // that ended with the process that made it.
      absl::StatusOr<CongestionControl> provided = EnsureCongestionControl(route.congestion);
      if (provided.ok()) {
        static std::atomic<bool> told{false};
        if (!told.exchange(true)) log.info("congestion control {}", provided->detail);
      }
      if (!provided.ok() || !select()) {
        static std::atomic<bool> warned{false};
        if (!warned.exchange(true)) {
          log.warn("congestion control '{}' unavailable, using the default '{}': {}", route.congestion,
                   ReadSysctl("/proc/sys/net/ipv4/tcp_congestion_control"),
                   provided.ok() ? std::string("the socket refused it") : std::string(provided.status().message()));
        }
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
  // Kernel TLS where the kernel has it (TlsChannel::path says whether a connection got it).
  SSL_CTX_set_options(ctx->native_handle(), SSL_OP_ENABLE_KTLS);
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
                                                            spdlog::logger& log,
                                                            const Json* request,
                                                            std::function<void(Conn&)> secured) {
  auto ex = co_await asio::this_coro::executor;
  tcp::resolver resolver(ex);
  auto [rec, results] = co_await resolver.async_resolve(endpoint.host, std::to_string(endpoint.port), kNoThrow);
  if (rec) co_return absl::UnavailableError(fmt::format("resolve {}: {}", endpoint.ToString(), rec.message()));
  auto socket = std::make_shared<tcp::socket>(ex);
  if (role == "data" && options.route.socket_buffer > 0) {
    // Set the receive buffer before connect so the window scale covers it.
    boost::system::error_code oec;
    socket->open(results.begin()->endpoint().protocol(), oec);
    int want = static_cast<int>(options.route.socket_buffer);
    ::setsockopt(socket->native_handle(), SOL_SOCKET, SO_RCVBUF, &want, sizeof(want));
  }
  asio::steady_timer timer(ex, options.io_timeout);
  timer.async_wait([socket](boost::system::error_code ec) {  // owns the socket it may close
    if (!ec) {
      boost::system::error_code ignored;
      socket->close(ignored);
    }
  });
  auto [cec, ep] = co_await asio::async_connect(*socket, results, kNoThrow);
  timer.cancel();
  if (cec) {
    co_return absl::UnavailableError(fmt::format("connect to {}: {}", endpoint.ToString(), cec.message()));
  }
  auto conn = std::make_shared<Conn>(std::move(*socket));
  std::string nonce = RandomHex(16);
  // Data connections are encrypted only when asked; a control connection also under
  // tls_control (mutual TLS, data in clear).
  const bool use_tls = options.tls || (role == "control" && options.tls_control);
  // Under TLS with our certificate, the request goes right behind the handshake, before the
  // agent's welcome (a round trip less); an agent that answers with a challenge instead
  // drops it unread and gets it again behind the shared-key authentication.
  const bool early = use_tls && role == "control" && request != nullptr &&
                     !options.tls_options.cert.empty() &&
                     request->dump().size() <= kMaxPreAuthControlPayload;
  Json msg1 = {{"op", "hello"}, {"version", kProtocolVersion}, {"role", std::string(role)},
           {"tls", use_tls}, {"nonce", nonce}};
  if (early) msg1["early"] = true;
  if (absl::Status s = co_await conn->SendControl(msg1); !s.ok()) co_return s;
  // Until the agent has proven it holds the key, it gets no more room than we give it.
  absl::StatusOr<Json> reply = co_await conn->ReadControl(kMaxPreAuthControlPayload);
  if (!reply.ok()) {
    co_return absl::Status(reply.status().code(),
                           fmt::format("{}: {}", endpoint.ToString(), reply.status().message()));
  }
  absl::StatusOr<std::string> op = GetString(*reply, "op");
  absl::StatusOr<std::string> server_nonce = GetString(*reply, "nonce");
  if (!op.ok() || *op != "hello_ok" || !server_nonce.ok()) {
    co_return absl::DataLossError(fmt::format("{}: unexpected reply to hello", endpoint.ToString()));
  }
  absl::StatusOr<bool> joins_early = GetOptionalBool(*reply, "joins_early", false);
  ClientConnection out{conn, *server_nonce, false, joins_early.ok() && *joins_early};
  if (use_tls) {
    if (tls_ctx == nullptr) co_return absl::InternalError("bug: TLS requested without a context");
    if (absl::Status s = co_await conn->Handshake(*tls_ctx, endpoint.host); !s.ok()) {
      co_return absl::Status(s.code(), fmt::format("{}: {}", endpoint.ToString(), s.message()));
    }
  }
  if (role != "control") co_return out;
  if (secured) secured(*conn);
  if (early) {
    if (absl::Status s = co_await conn->SendControl(*request); !s.ok()) co_return s;
    out.request_sent = true;
  }
  absl::StatusOr<Json> ch = co_await conn->ReadControl(kMaxPreAuthControlPayload);
  if (!ch.ok()) co_return absl::Status(ch.status().code(), fmt::format("{}: {}", endpoint.ToString(), ch.status().message()));
  absl::StatusOr<std::string> ch_op = GetString(*ch, "op");
  absl::StatusOr<std::string> method = GetOptionalString(*ch, "method", "");
  if (ch_op.ok() && *ch_op == "welcome" && use_tls && method.ok() && *method == "certificate") {
    log.debug("authenticated to {} by TLS client certificate", endpoint.ToString());
    co_return out;
  }
  if (!ch_op.ok() || *ch_op != "challenge") {
    co_return absl::DataLossError(fmt::format("{}: expected an authentication challenge", endpoint.ToString()));
  }
  std::string mac = HmacHex(options.shared_key, fmt::format("gfrep-client|{}|{}", out.server_nonce, nonce));
  Json msg2 = {{"op", "auth"}, {"mac", mac}};
  if (absl::Status s = co_await conn->SendControl(msg2); !s.ok()) co_return s;
  if (request != nullptr) {
    // The request right behind the authentication, bound to it (in clear text; the agent
    // answers the authentication unbound, then binds and reads this).
    if (!conn->tls()) {
      conn->BindControlMessagesAfterNextRead(ControlSessionKey(options.shared_key, nonce, out.server_nonce), true);
    }
    if (absl::Status s = co_await conn->SendControl(*request); !s.ok()) co_return s;
    out.request_sent = true;
  }
  absl::StatusOr<Json> welcome = co_await conn->ReadControl(kMaxPreAuthControlPayload);
  if (!welcome.ok()) {
    co_return absl::Status(welcome.status().code(),
                           fmt::format("{}: {}", endpoint.ToString(), welcome.status().message()));
  }
  std::string expect = HmacHex(options.shared_key, fmt::format("gfrep-server|{}|{}", nonce, out.server_nonce));
  absl::StatusOr<std::string> w_op = GetString(*welcome, "op");
  absl::StatusOr<std::string> w_mac = GetString(*welcome, "mac");
  if (!w_op.ok() || *w_op != "welcome" || !w_mac.ok() || !ConstantTimeEqual(*w_mac, expect)) {
    co_return absl::PermissionDeniedError(fmt::format(
        "{}: the agent failed to prove it holds our shared key (different key file?)", endpoint.ToString()));
  }
  if (!conn->tls() && !out.request_sent) {
    conn->BindControlMessages(ControlSessionKey(options.shared_key, nonce, out.server_nonce), true);
  }
  co_return out;
}

std::string JoinKey(Conn& control, std::string_view shared_key) {
  if (!control.tls()) return std::string(shared_key);
  // RFC 5705 exporter: both ends of this TLS session, and nobody else, can compute it.
  std::string key(32, '\0');
  static constexpr std::string_view kLabel = "EXPORTER-gfrep-join";
  if (SSL_export_keying_material(control.NativeTls(), reinterpret_cast<unsigned char*>(key.data()), key.size(),
                                 kLabel.data(), kLabel.size(), nullptr, 0, 0) != 1) {
    return "";  // never matches: the joins are refused rather than keyed with nothing
  }
  return key;
}

asio::awaitable<absl::Status> SendJoin(const ClientConnection& c, std::string_view token,
                                       std::string_view join_key, bool early) {
  if (join_key.empty()) co_return absl::InternalError("no key to join the session with");
  Json join{{"op", "join"}, {"token", std::string(token)},
            {"mac", JoinMac(join_key, token, c.server_nonce)}};
  if (early) join["early"] = true;
  if (absl::Status s = co_await c.conn->SendControl(join); !s.ok()) co_return s;
  absl::StatusOr<Json> r = co_await c.conn->ReadControl(kMaxPreAuthControlPayload);
  if (!r.ok()) co_return r.status();
  absl::StatusOr<std::string> op = GetString(*r, "op");
  if (!op.ok() || *op != "joined") co_return absl::DataLossError("unexpected reply to join");
  co_return absl::OkStatus();
}

asio::awaitable<absl::StatusOr<ConnPtr>> JoinSession(const Endpoint& endpoint,
                                                     std::string_view token,
                                                     const TransferOptions& options,
                                                     asio::ssl::context* tls_ctx,
                                                     spdlog::logger& log) {
  absl::StatusOr<ClientConnection> c = co_await ConnectTo(endpoint, "data", options, tls_ctx, log);
  if (!c.ok()) co_return c.status();
  if (absl::Status s = co_await SendJoin(*c, token, options.shared_key); !s.ok()) co_return s;
  co_return c->conn;
}

asio::awaitable<absl::Status> PeerReason(Conn& ctrl, absl::Status local) {
  if (co_await CancellationRequested()) co_return local;  // nobody waits for the reason
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
              {"tls_control", o.tls_control},
              {"io_timeout_ms", o.io_timeout.count()},
              {"max_resend_rounds", o.max_resend_rounds}};
}

absl::Status RouteFromJson(const Json& j, TransferOptions& o) {
  auto bad = [](const absl::Status& s) {
    return absl::InvalidArgumentError(fmt::format("bad transfer options: {}", s.message()));
  };
  absl::StatusOr<std::int64_t> streams = GetInt(j, "streams");
  if (!streams.ok()) return bad(streams.status());
  absl::StatusOr<std::uint64_t> stripe_unit = GetUint(j, "stripe_unit");
  if (!stripe_unit.ok()) return bad(stripe_unit.status());
  absl::StatusOr<std::uint64_t> socket_buffer = GetUint(j, "socket_buffer");
  if (!socket_buffer.ok()) return bad(socket_buffer.status());
  absl::StatusOr<std::string> congestion = GetString(j, "congestion");
  if (!congestion.ok()) return bad(congestion.status());
  absl::StatusOr<std::uint64_t> stream_rate = GetUint(j, "stream_rate_bps");
  if (!stream_rate.ok()) return bad(stream_rate.status());
  absl::StatusOr<std::uint64_t> route_rate = GetUint(j, "route_rate_bps");
  if (!route_rate.ok()) return bad(route_rate.status());
  absl::StatusOr<std::string> route_name = GetString(j, "route_name");
  if (!route_name.ok()) return bad(route_name.status());
  absl::StatusOr<std::string> checksum = GetString(j, "checksum");
  if (!checksum.ok()) return bad(checksum.status());
  absl::StatusOr<std::string> block_checksum = GetString(j, "block_checksum");
  if (!block_checksum.ok()) return bad(block_checksum.status());
  absl::StatusOr<bool> tls = GetBool(j, "tls");
  if (!tls.ok()) return bad(tls.status());
  absl::StatusOr<bool> tls_control = GetOptionalBool(j, "tls_control", false);
  if (!tls_control.ok()) return bad(tls_control.status());
  absl::StatusOr<std::int64_t> io_timeout_ms = GetInt(j, "io_timeout_ms");
  if (!io_timeout_ms.ok()) return bad(io_timeout_ms.status());
  absl::StatusOr<std::int64_t> resend = GetInt(j, "max_resend_rounds");
  if (!resend.ok()) return bad(resend.status());
  if (*streams < 0 || *streams > kMaxStreams || *resend < 0 || *resend > 100 || route_name->size() > 255) {
    return absl::InvalidArgumentError("bad transfer options: value out of range");
  }
  o.route.streams = static_cast<int>(*streams);
  o.route.stripe_unit = *stripe_unit;
  o.route.socket_buffer = *socket_buffer;
  o.route.congestion = *congestion;
  o.route.stream_rate_bps = *stream_rate;
  o.route.route_rate_bps = *route_rate;
  o.route.route_name = *route_name;
  o.checksum = *checksum;
  o.block_checksum = *block_checksum;
  o.tls = *tls;
  o.tls_control = *tls_control;
  o.io_timeout = std::chrono::milliseconds(std::clamp<std::int64_t>(*io_timeout_ms, 100, 3600000));
  o.max_resend_rounds = static_cast<int>(*resend);
  return Validate(o.route);
}

Json TcpFiguresToJson(const TcpFigures& f) {
  return Json{{"sent", f.bytes_sent},
              {"retrans", f.bytes_retrans},
              {"srtt_us", static_cast<std::uint64_t>(f.srtt_ms * 1000)},
              {"min_rtt_us", static_cast<std::uint64_t>(f.min_rtt_ms * 1000)}};
}

absl::StatusOr<TcpFigures> TcpFiguresFromJson(const Json& message) {
  TcpFigures f;
  if (!message.is_object() || !message.contains("tcp")) return f;
  absl::StatusOr<const Json*> tcp = GetObject(message, "tcp");
  if (!tcp.ok()) return tcp.status();
  absl::StatusOr<std::uint64_t> sent = GetUint(**tcp, "sent");
  absl::StatusOr<std::uint64_t> retrans = GetUint(**tcp, "retrans");
  absl::StatusOr<std::uint64_t> srtt = GetUint(**tcp, "srtt_us");
  absl::StatusOr<std::uint64_t> min_rtt = GetUint(**tcp, "min_rtt_us");
  for (const absl::Status& s : {sent.status(), retrans.status(), srtt.status(), min_rtt.status()}) {
    if (!s.ok()) return s;
  }
  // RTTs beyond a minute are nonsense from a peer; counters are taken as they are.
  constexpr std::uint64_t kMaxRttUs = 60'000'000;
  if (*srtt > kMaxRttUs || *min_rtt > kMaxRttUs) {
    return absl::InvalidArgumentError("field 'tcp' has an RTT over 60 s");
  }
  f.bytes_sent = *sent;
  f.bytes_retrans = std::min(*retrans, *sent);
  f.srtt_ms = static_cast<double>(*srtt) / 1000;
  f.min_rtt_ms = static_cast<double>(*min_rtt) / 1000;
  return f;
}

Json RangesToJson(const std::vector<ByteRange>& ranges) {
  Json a = Json::array();
  for (const ByteRange& r : ranges) a.push_back({r.begin, r.end});
  return a;
}

absl::StatusOr<std::vector<ByteRange>> RangesFromJson(const Json& j, std::uint64_t size) {
  if (!j.is_array() || j.size() > 100000) return absl::InvalidArgumentError("bad range list");
  std::vector<ByteRange> out;
  std::uint64_t prev = 0;
  for (const Json& r : j) {
    if (!r.is_array() || r.size() != 2 || !r[0].is_number_unsigned() || !r[1].is_number_unsigned()) {
      return absl::InvalidArgumentError("bad range in list");
    }
    std::uint64_t b = r[0].get<std::uint64_t>(), e = r[1].get<std::uint64_t>();
    if (b >= e || e > size || b < prev) {
      return absl::InvalidArgumentError(fmt::format("range [{}, {}) invalid for size {}", b, e, size));
    }
    prev = e;
    out.push_back({b, e});
  }
  return out;
}

// ---------------------------------------------------------------- progress

ProgressReporter::ProgressReporter(const TransferOptions& o, std::uint64_t total,
                                   std::uint64_t resumed, int streams)
    : fn_(o.progress), start_(SteadyTime::now()) {
  p_.bytes_total = total;
  p_.resumed_bytes = resumed;
  p_.bytes_done = resumed;
  p_.streams = streams;
  p_.stream_bytes.assign(static_cast<std::size_t>(std::max(0, streams)), 0);
}

void ProgressReporter::Add(int stream, std::uint64_t bytes) {
  p_.bytes_done = std::min(p_.bytes_total, p_.bytes_done + bytes);
  if (stream >= 0 && static_cast<std::size_t>(stream) < p_.stream_bytes.size()) {
    p_.stream_bytes[static_cast<std::size_t>(stream)] += bytes;
  }
  Report(false);
}

void ProgressReporter::Report(bool force) {
  if (!fn_) return;
  auto now = SteadyTime::now();
  if (force || now - last_ >= std::chrono::milliseconds(100)) {
    last_ = now;
    p_.seconds = std::chrono::duration<double>(now - start_).count();
    fn_(p_);
  }
}

void ProgressReporter::SetDone(std::uint64_t done) {
  p_.bytes_done = done;
  Report(true);
}

}  // namespace gfrep::transfer::internal
