#pragma once

// The transfer engine's moving parts shared by client.cc and agent.cc: a connection
// (plain TCP or TLS) that speaks frames, the connection preamble and authentication, socket
// tuning, and the sender/receiver cores that move the missing ranges of one file over N
// data connections. Everything runs as coroutines on one executor; blocking work (fsync,
// whole-file checksums) goes to BlockingPool().

#include <boost/asio.hpp>
#include <boost/asio/ssl.hpp>
#include <spdlog/logger.h>

#include <fmt/format.h>

#include <filesystem>
#include <future>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "transfer/checksum.h"
#include "transfer/client.h"
#include "transfer/internal/frame.h"
#include "transfer/internal/journal.h"
#include "transfer/internal/range_set.h"
#include "transfer/internal/token_bucket.h"
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
using Json = nlohmann::json;
inline constexpr auto kNoThrow = asio::as_tuple(asio::use_awaitable);
inline constexpr int kProtocolVersion = 1;

absl::Status FromAsio(const boost::system::error_code& ec, std::string_view context);
// {"op":"error","code":N,"message":M}
Json ErrorJson(const absl::Status& status);
std::shared_ptr<spdlog::logger> LoggerOf(const std::shared_ptr<spdlog::logger>& logger);
asio::thread_pool& BlockingPool();
std::string RandomHex(std::size_t bytes);
std::string HmacHex(std::string_view key, std::string_view message);
bool ConstantTimeEqual(std::string_view a, std::string_view b);

// Runs fn() on BlockingPool() and resumes on the caller's executor with its result.
// `fn` is taken by reference and must be a named object: GCC 12 mis-destroys closures
// with non-trivial captures that are created inside a co_await expression.
template <class T>
asio::awaitable<T> OffThread(const std::function<T()>& fn) {
  co_return co_await asio::co_spawn(
      BlockingPool(), [&fn]() -> asio::awaitable<T> { co_return fn(); }, asio::use_awaitable);
}

// One TCP connection, optionally wrapped in TLS, speaking frames.
// Thread safety: used by one coroutine at a time on one executor.
class Conn {
 public:
  explicit Conn(tcp::socket socket);
  tcp::socket& socket() { return socket_; }
  bool tls() const { return tls_ != nullptr; }
  std::uint64_t activity() const { return activity_; }

  asio::awaitable<absl::Status> Handshake(asio::ssl::context& ctx, bool server);
  // True if TLS is on and the peer presented a certificate that verified.
  bool PeerCertificateVerified();

  asio::awaitable<absl::Status> SendControl(const Json& message);
  // Reads one control frame. A peer's {"op":"error"} becomes its Status ("peer: ...").
  asio::awaitable<absl::StatusOr<Json>> ReadControl();
  asio::awaitable<absl::Status> SendFrame(FrameType type, std::string_view payload);
  asio::awaitable<absl::StatusOr<FrameHeader>> ReadHeader(std::uint32_t max_data);
  asio::awaitable<absl::Status> ReadExact(void* data, std::size_t size);
  // A data frame whose payload is in memory.
  asio::awaitable<absl::Status> WriteData(const FrameHeader& header, const void* data);
  // A data frame whose payload is read from `fd` at header.offset (sendfile without TLS).
  asio::awaitable<absl::Status> WriteDataFromFile(const FrameHeader& header, int fd,
                                                  const unsigned char* map);
  void Close();

 private:
  template <class Buffers>
  asio::awaitable<absl::Status> Write(const Buffers& buffers, std::string_view what);

  tcp::socket socket_;
  std::unique_ptr<asio::ssl::stream<tcp::socket&>> tls_;
  std::uint64_t activity_ = 0;
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

// Socket settings of one data connection; warnings go to `log`. Returns the congestion
// control algorithm in use.
std::string TuneSocket(tcp::socket& socket, const RouteOptions& route, spdlog::logger& log);

// Client side of a new connection: connect, preamble, TLS, then for role "control" the
// mutual authentication. `server_nonce` receives the server's per-connection nonce.
struct ClientConnection {
  ConnPtr conn;
  std::string server_nonce;
};
asio::awaitable<absl::StatusOr<ClientConnection>> ConnectTo(const Endpoint& endpoint,
                                                            std::string_view role,
                                                            const TransferOptions& options,
                                                            asio::ssl::context* tls_ctx,
                                                            spdlog::logger& log);
// Client side of a data connection joining session `token`.
asio::awaitable<absl::StatusOr<ConnPtr>> JoinSession(const Endpoint& endpoint,
                                                     std::string_view token,
                                                     const TransferOptions& options,
                                                     asio::ssl::context* tls_ctx,
                                                     spdlog::logger& log);
std::string JoinMac(std::string_view key, std::string_view token, std::string_view nonce);
absl::StatusOr<std::unique_ptr<asio::ssl::context>> MakeTlsContext(const TlsOptions& tls,
                                                                   bool server);

// Runs `tasks` concurrently on the current executor and returns when all finished (the
// first failure, or OK). `on_error` runs once, on the first failure.
asio::awaitable<absl::Status> RunConcurrentlyPublic(
    std::vector<std::function<asio::awaitable<absl::Status>()>> tasks,
    std::function<void()> on_error = nullptr);

Json RouteToJson(const TransferOptions& o);
absl::Status RouteFromJson(const Json& j, TransferOptions& o);
std::vector<ByteRange> RangesFromJson(const Json& j, std::uint64_t size, absl::Status& status);
Json RangesToJson(const std::vector<ByteRange>& ranges);

// The source side of a session: an open file and its identity.
struct SourceFile {
  int fd = -1;
  std::uint64_t size = 0;
  std::string source_id;
  const unsigned char* map = nullptr;
  ~SourceFile();
};
absl::StatusOr<std::unique_ptr<SourceFile>> OpenSource(const std::filesystem::path& path);

// Sends the missing ranges over `data` (work stealing), then FINISH with the file checksum
// on `ctrl`, re-sending blocks the receiver reports damaged. Returns when the receiver
// confirmed the file is in place.
asio::awaitable<absl::StatusOr<TransferStats>> RunSender(Conn& ctrl, std::vector<ConnPtr> data,
                                                         SourceFile& src,
                                                         std::vector<ByteRange> missing,
                                                         const TransferOptions& options,
                                                         std::string congestion,
                                                         std::uint64_t resumed_bytes);

// The destination side: partial file + journal in tmp_dir, final name elsewhere.
struct DestinationFile {
  std::filesystem::path final_path;
  std::filesystem::path part_path;
  std::filesystem::path journal_path;
  int fd = -1;
  std::uint64_t size = 0;
  Journal journal;
  RangeSet received;
  std::uint64_t resumed_bytes = 0;
  ~DestinationFile();
};
absl::StatusOr<std::unique_ptr<DestinationFile>> OpenDestination(
    const std::filesystem::path& final_path, const std::filesystem::path& tmp_dir,
    std::uint64_t size, const std::string& source_id, const std::string& checksum);

asio::awaitable<absl::StatusOr<TransferStats>> RunReceiver(Conn& ctrl, std::vector<ConnPtr> data,
                                                           DestinationFile& dst,
                                                           const TransferOptions& options,
                                                           std::string congestion);

}  // namespace gfrep::transfer::internal
