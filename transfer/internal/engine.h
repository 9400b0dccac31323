#pragma once

// The transfer engine's connection layer, shared by client.cc, agent.cc and the sender and
// receiver cores (sender.h, receiver.h): a connection (plain TCP or TLS) that speaks
// frames, the connection preamble and authentication, socket tuning, the JSON forms of
// options and ranges, and small coroutine helpers (running streams concurrently, moving
// blocking work to BlockingPool(), turning exceptions and cancellation into statuses).
//
// Everything runs as coroutines on one executor; blocking work (fsync, whole-file
// checksums) goes to BlockingPool(). A job sent there owns what it uses (shared_ptr), so it
// never touches the frame of a coroutine that has ended.

#include <boost/asio.hpp>
#include <boost/asio/ssl.hpp>
#include <spdlog/logger.h>

#include <fmt/format.h>

#include <chrono>
#include <filesystem>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "transfer/checksum.h"
#include "transfer/client.h"
#include "transfer/errno_status.h"
#include "transfer/internal/frame.h"
#include "transfer/internal/json_fields.h"
#include "transfer/internal/range_set.h"
#include "transfer/internal/tls_channel.h"
#include "transfer/options.h"

// Debian's Abseil has its own absl::string_view (Status::message()); let fmt print it.
template <>
struct fmt::formatter<absl::string_view> : fmt::formatter<std::string_view> {
  template <class Ctx>
  auto format(absl::string_view v, Ctx& ctx) const {
    return fmt::formatter<std::string_view>::format(std::string_view(v.data(), v.size()), ctx);
  }
};

namespace gfrep::transfer::internal {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;
inline constexpr auto kNoThrow = asio::as_tuple(asio::use_awaitable);
// 2 (2026-11-24): control messages after a shared-key authentication carry a MAC.
// 3 (2026-11-24): data connections of a session whose control connection runs TLS join with
// a key exported from that TLS session (JoinKey), not the shared key; "tls_control".
inline constexpr int kProtocolVersion = 3;
// Bytes of the MAC that ends every control message on a bound connection (HMAC-SHA256).
inline constexpr std::size_t kControlMacSize = 32;

absl::Status FromAsio(const boost::system::error_code& ec, std::string_view context);
// {"op":"error","code":N,"message":M}
Json ErrorJson(const absl::Status& status);
std::shared_ptr<spdlog::logger> LoggerOf(const std::shared_ptr<spdlog::logger>& logger);
asio::thread_pool& BlockingPool();
std::string RandomHex(std::size_t bytes);
std::string HmacHex(std::string_view key, std::string_view message);
// HMAC-SHA256 of `message`: 32 raw bytes.
std::string HmacRaw(std::string_view key, std::string_view message);
// The key that binds a control connection's messages to its shared-key authentication: both
// sides derive it from the shared key and both nonces, so an on-path attacker that cannot
// read the key file can neither forge, alter, replay nor reorder a message.
std::string ControlSessionKey(std::string_view shared_key, std::string_view client_nonce,
                              std::string_view server_nonce);
bool ConstantTimeEqual(std::string_view a, std::string_view b);

// Runs fn() on BlockingPool() and resumes on the caller's executor with its result. The job
// runs on a copy of `fn`, so whatever it captures by value (e.g. a shared_ptr) stays alive
// while it runs, and is let go of before the caller resumes (a partial file's lock, held by
// the last owner of its DestinationFile, used to be released on the pool's thread a moment
// after the caller had its result, and an immediate retry found it "busy"). `fn` must be a
// named object: GCC 12 mis-destroys closures with non-trivial captures that are created
// inside a co_await expression.
template <class T>
asio::awaitable<T> OffThread(const std::function<T()>& fn) {
  auto held = std::make_shared<std::function<T()>>(fn);
  std::function<asio::awaitable<T>()> job = [held]() -> asio::awaitable<T> {
    T result = (*held)();
    *held = nullptr;
    co_return result;
  };
  // The caller's cancellation is not passed to the job (an empty slot): it runs to its end
  // anyway, and a job cancelled meanwhile threw "co_await: Operation canceled" on the pool's
  // thread when co_spawn went back to the caller's executor, past every handler: the
  // process ended (a site agent's copy given back as a straggler during a verify).
  co_return co_await asio::co_spawn(
      BlockingPool(), job, asio::bind_cancellation_slot(asio::cancellation_slot(), asio::use_awaitable));
}

// True once the calling coroutine's cancellation slot saw a cancellation. Code that runs
// with throw_if_cancelled(false) (AsyncPull) checks it between operations: only the
// operation in progress when the cancellation came is aborted.
asio::awaitable<bool> CancellationRequested();

// Runs `body` and turns an exception escaping it into a status: a cancellation
// (operation_aborted) into kCancelled, anything else into kInternal ("bug: ... in `what`").
template <class T>
asio::awaitable<T> CatchExceptions(asio::awaitable<T> body, std::string what) {
  try {
    co_return co_await std::move(body);
  } catch (const boost::system::system_error& e) {
    if (e.code() == asio::error::operation_aborted) {
      co_return absl::CancelledError(fmt::format("{} cancelled", what));
    }
    co_return absl::InternalError(fmt::format("bug: exception in {}: {}", what, e.what()));
  } catch (const std::exception& e) {
    co_return absl::InternalError(fmt::format("bug: exception in {}: {}", what, e.what()));
  }
}

// One TCP connection, optionally wrapped in TLS, speaking frames.
// Thread safety: used by one coroutine at a time on one executor.
class Conn {
 public:
  explicit Conn(tcp::socket socket);
  tcp::socket& socket() { return socket_; }
  bool tls() const { return tls_ != nullptr; }
  std::uint64_t activity() const { return activity_; }
  // True the first time it is asked, false after: whether a data stream runs on this
  // connection for the first time (a warm session's connection carries many files' streams).
  bool TakeFirstStream() { return !std::exchange(stream_ran_, true); }

  asio::awaitable<absl::Status> Handshake(asio::ssl::context& ctx, bool server);
  // Client side: also checks that the server's certificate names `host` (a DNS name or an IP
  // address, against its subject alternative names).
  asio::awaitable<absl::Status> Handshake(asio::ssl::context& ctx, std::string_view host);
  // Holds `ctx` as long as this connection (a server's context may be replaced meanwhile).
  void KeepTlsContext(std::shared_ptr<asio::ssl::context> ctx) { tls_ctx_ = std::move(ctx); }
  // REQUIRES: tls().
  SSL* NativeTls() { return tls_->ssl(); }
  // Who encrypts this connection's records: "" (no TLS), "openssl" (user space), "ktls",
  // "ktls-send" or "ktls-receive" (the kernel; TlsChannel::path).
  std::string_view TlsPath() const { return tls_ ? tls_->path() : std::string_view(); }
  // Whether WriteDataFromFile can send from a file here: in clear, or under kernel TLS.
  bool CanSendFile() const { return !tls_ || tls_->kernel_send(); }
  // True if TLS is on and the peer presented a certificate that verified.
  bool PeerCertificateVerified();
  // The URI subject alternative names of the peer's verified certificate (gfrep://ROLE/NAME
  // for certificates from gfca); empty without one.
  std::vector<std::string> PeerCertificateUris();

  // From now on every control message sent ends with HMAC-SHA256(key, direction | sequence
  // number | JSON), and every control message read must end with the peer's: one that does
  // not verify (altered, injected, replayed, reordered or unsigned) fails with
  // kPermissionDenied. For shared-key sessions in clear text (TLS protects its own);
  // `client` says which direction label this side sends with.
  void BindControlMessages(std::string key, bool client);
  // As BindControlMessages, except that the next control message read is still taken
  // unbound (the peer's answer to the authentication, which it sends before it binds): a
  // client may then send its request right behind its authentication, a round trip sooner.
  void BindControlMessagesAfterNextRead(std::string key, bool client);
  bool bound() const { return !mac_key_.empty(); }

  // Never throws (strings that are not UTF-8 are replaced). Two coroutines may send control
  // messages on one connection (a pull's outcome and another's get sent ahead, client.cc):
  // each frame goes whole, in the order they came.
  asio::awaitable<absl::Status> SendControl(const Json& message);
  // Reads one control frame: a JSON object with a string "op". A payload longer than
  // `max_payload` is refused (kResourceExhausted) before anything is allocated for it; use
  // kMaxPreAuthControlPayload until the peer is authenticated. A peer's {"op":"error"}
  // becomes its Status ("peer: ...").
  asio::awaitable<absl::StatusOr<Json>> ReadControl(
      std::uint32_t max_payload = kMaxControlPayload);
  asio::awaitable<absl::Status> SendFrame(FrameType type, std::string_view payload);
  asio::awaitable<absl::StatusOr<FrameHeader>> ReadHeader(std::uint32_t max_data);
  asio::awaitable<absl::Status> ReadExact(void* data, std::size_t size);
  // A data frame whose payload is in memory.
  asio::awaitable<absl::Status> WriteData(const FrameHeader& header, const void* data);
  // A data frame whose payload is sent from `fd` at header.offset with sendfile (under
  // kernel TLS, as records the kernel encrypts). REQUIRES: CanSendFile(). kAborted if the
  // file is shorter than the frame says.
  asio::awaitable<absl::Status> WriteDataFromFile(const FrameHeader& header, int fd);
  void Close();

 private:
  template <class Buffers>
  asio::awaitable<absl::Status> Write(const Buffers& buffers, std::string_view what);
  // Makes tls_ on socket_ with `ctx`.
  absl::Status StartTls(asio::ssl::context& ctx);

  tcp::socket socket_;
  std::shared_ptr<asio::ssl::context> tls_ctx_;  // declared first: outlives tls_
  std::unique_ptr<TlsChannel> tls_;  // OpenSSL on the socket itself (tls_channel.h)
  std::uint64_t activity_ = 0;
  std::string mac_key_;  // empty: messages are not bound
  bool client_ = false;
  std::uint64_t sent_ = 0;      // control messages sent since binding
  std::uint64_t received_ = 0;  // control messages read since binding
  int unbound_reads_ = 0;       // reads still taken without a MAC after binding
  bool control_writing_ = false;  // a SendControl is writing its frame
  bool stream_ran_ = false;       // a data stream has run here (TakeFirstStream)
};
using ConnPtr = std::shared_ptr<Conn>;

// Closes every connection of a transfer when none moved a byte for `timeout`.
struct Watchdog {
  std::vector<ConnPtr> conns;
  std::chrono::milliseconds timeout{30000};
  bool done = false;
  bool paused = false;
  bool fired = false;
  asio::steady_timer* timer = nullptr;  // set while the watchdog runs
  // Ends the watchdog now (it would otherwise notice at its next tick).
  void Finish() {
    done = true;
    if (timer != nullptr) timer->cancel();
  }
};
void StartWatchdog(const asio::any_io_executor& ex, std::shared_ptr<Watchdog> dog);

// A watchdog that ends with the scope that owns it (every exit of a transfer coroutine).
class WatchdogScope {
 public:
  explicit WatchdogScope(std::shared_ptr<Watchdog> dog) : dog_(std::move(dog)) {}
  ~WatchdogScope() { dog_->Finish(); }
  WatchdogScope(const WatchdogScope&) = delete;
  WatchdogScope& operator=(const WatchdogScope&) = delete;
  Watchdog* operator->() const { return dog_.get(); }

 private:
  std::shared_ptr<Watchdog> dog_;
};

// Starts a watchdog over `conns` on `ex`; it stops when the returned scope ends.
[[nodiscard]] WatchdogScope WatchConnections(const asio::any_io_executor& ex,
                                             std::vector<ConnPtr> conns,
                                             std::chrono::milliseconds timeout);

// Socket settings of one data connection; warnings go to `log`. Returns the congestion
// control algorithm in use.
std::string TuneSocket(tcp::socket& socket, const RouteOptions& route, spdlog::logger& log);

// Client side of a new connection: connect, preamble, TLS, then for role "control" the
// mutual authentication. `server_nonce` receives the server's per-connection nonce.
struct ClientConnection {
  ConnPtr conn;
  std::string server_nonce;
  bool request_sent = false;  // ConnectTo sent `request` already
  bool joins_early = false;   // the agent takes joins ahead of the get naming their token
};
// With `request` (control connections): sends it without waiting for the agent's welcome,
// one round trip less to the first reply. Under TLS with our certificate it goes right
// behind the handshake (hello's "early"; an agent that challenges instead drops it unread
// and gets it again, as below); with the shared key, right behind the authentication (the
// agent reads it only once the authentication succeeded, and in clear text it is bound to
// that authentication like any later message). `request_sent` says whether it went.
// `secured` (control connections) is called once the TLS handshake is done (in clear text:
// after the hello), before the request goes: the connection's JoinKey is known from then on.
asio::awaitable<absl::StatusOr<ClientConnection>> ConnectTo(const Endpoint& endpoint,
                                                            std::string_view role,
                                                            const TransferOptions& options,
                                                            asio::ssl::context* tls_ctx,
                                                            spdlog::logger& log,
                                                            const Json* request = nullptr,
                                                            std::function<void(Conn&)> secured = nullptr);
// The key data connections prove they belong to a session with (JoinMac): under TLS on the
// control connection, keying material exported from its TLS session (RFC 5705), so only the
// holder of that connection can join and no shared key is needed; in clear text, the shared
// key. Empty if the export failed.
std::string JoinKey(Conn& control, std::string_view shared_key);
// Joins a connected data connection (role "data") to session `token`. `early`: the session's
// get may not have reached the agent yet (the client chose the token; the agent must have
// said `joins_early`), and the agent holds the join until it has.
asio::awaitable<absl::Status> SendJoin(const ClientConnection& c, std::string_view token,
                                       std::string_view join_key, bool early = false);
// Client side of a data connection joining session `token` (ConnectTo, then SendJoin) of a
// control connection in clear text (keyed by options.shared_key).
asio::awaitable<absl::StatusOr<ConnPtr>> JoinSession(const Endpoint& endpoint,
                                                     std::string_view token,
                                                     const TransferOptions& options,
                                                     asio::ssl::context* tls_ctx,
                                                     spdlog::logger& log);
std::string JoinMac(std::string_view key, std::string_view token, std::string_view nonce);
absl::StatusOr<std::unique_ptr<asio::ssl::context>> MakeTlsContext(const TlsOptions& tls,
                                                                   bool server);

// Runs `tasks` concurrently on the current executor and returns when all finished (the
// first failure, or OK). `on_error` runs once, on the first failure; a cancellation of the
// calling coroutine counts as one (kCancelled). Never returns, and never throws, before
// every task has ended: the tasks may use state owned by the caller.
asio::awaitable<absl::Status> RunConcurrently(
    std::vector<std::function<asio::awaitable<absl::Status>()>> tasks,
    std::function<void()> on_error = nullptr);

// After a data connection failed with kUnavailable, the peer has usually said why on the
// control connection: returns its reason if one comes within a few seconds, else `local`.
asio::awaitable<absl::Status> PeerReason(Conn& ctrl, absl::Status local);

Json RouteToJson(const TransferOptions& o);
// The "options" of a request, into `o` (route fields, checksums, TLS, timeouts), validated.
absl::Status RouteFromJson(const Json& j, TransferOptions& o);
// An ordered list of [begin, end) pairs within [0, size) (at most 100,000).
absl::StatusOr<std::vector<ByteRange>> RangesFromJson(const Json& j, std::uint64_t size);
Json RangesToJson(const std::vector<ByteRange>& ranges);
// The "tcp" object of finish and done messages: {"sent","retrans","srtt_us","min_rtt_us"}.
Json TcpFiguresToJson(const TcpFigures& f);
// `message`'s "tcp" object; zeros when it has none (a peer built before 2026-11-24).
absl::StatusOr<TcpFigures> TcpFiguresFromJson(const Json& message);

// Progress of one transfer for TransferOptions::progress (at most every 100 ms).
class ProgressReporter {
 public:
  ProgressReporter(const TransferOptions& o, std::uint64_t total, std::uint64_t resumed,
                   int streams);
  // `bytes` more carried by data stream `stream` (0 <= stream < streams).
  void Add(int stream, std::uint64_t bytes);
  void SetDone(std::uint64_t done);

 private:
  std::function<void(const Progress&)> fn_;
  void Report(bool force);

  Progress p_;
  std::chrono::steady_clock::time_point start_;
  std::chrono::steady_clock::time_point last_{};
};

}  // namespace gfrep::transfer::internal
