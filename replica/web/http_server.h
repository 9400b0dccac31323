#pragma once

// HttpServer: a small HTTP/1.1 and WebSocket server (Boost.Beast) for the daemons' /metrics,
// /healthz, /readyz and gfcatalogd's dashboard. Exact-path routes; GET and HEAD only; one
// I/O thread (handlers run on it: keep them short, they are what a scrape or a page waits
// for); keep-alive; requests larger than 16 KiB are refused (413).
//
// Bounded, so that slow or idle clients cannot take the daemon's descriptors (its real work,
// gRPC or transfers, shares the table): at most `max_connections` connections, and
// `max_connections_per_client` from one address; none while fewer than
// `descriptor_reserve` descriptors are free; one more is closed at once. A request's head
// must arrive within `header_timeout` (also the keep-alive idle limit), the rest and each
// response within `body_timeout`; a WebSocket silent for `websocket_idle_timeout` (it is
// pinged, and browsers answer pings by themselves) or slower than `max_queued_frames` is
// closed. accept failing (out of descriptors) backs off, 10 ms doubling to 1 s.
//
// WebSocket routes hand each connection to `on_open` as a WebSocketPeer that sends text
// frames (queued, in order, from any thread). A peer whose queue grows past
// `max_queued_frames` (a browser that cannot keep up) is closed rather than left to fall
// further behind; the page reconnects and starts from the history.
//
// Thread safety: routes are fixed at Start; Stop() from any thread except the I/O thread.

#include <spdlog/logger.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>

#include "absl/status/statusor.h"

namespace gfrep::replica::web {

struct HttpRequest {
  std::string method;  // "GET" or "HEAD"
  std::string target;  // as sent: "/api/request?id=7"
  std::string path;    // "/api/request"
  std::map<std::string, std::string> query;  // percent-decoded
};

struct HttpResponse {
  int status = 200;
  std::string content_type = "text/plain; charset=utf-8";
  std::string body;
  std::map<std::string, std::string> headers;  // extra ones (e.g. Cache-Control)
};

inline constexpr std::size_t kMaxWebSocketMessage = 4096;

// One WebSocket connection.
class WebSocketPeer {
 public:
  virtual ~WebSocketPeer() = default;
  // Queues a text frame; false if the peer is closed (or was closed for falling behind).
  virtual bool Send(std::string text) = 0;
  virtual bool open() const = 0;
  // The last text frame the browser sent ("" before any; frames over kMaxWebSocketMessage
  // close the connection): what the page asks for, read by whoever feeds it.
  virtual std::string Received() const = 0;
};

struct HttpRoutes {
  std::map<std::string, std::function<HttpResponse(const HttpRequest&)>> pages;
  std::map<std::string, std::function<void(std::shared_ptr<WebSocketPeer>)>> websockets;
};

struct HttpServerOptions {
  std::string listen = "127.0.0.1:0";  // host:port; port 0 picks a free one
  // Frames queued for one WebSocket; a peer further behind is closed (it reconnects).
  std::size_t max_queued_frames = 100;
  // Connections served at once (requests and WebSockets); one more is closed at once.
  std::size_t max_connections = 128;
  // Connections served at once from one client address (a browser opens about six, plus the
  // dashboard's WebSocket; clients behind one proxy or NAT share it).
  std::size_t max_connections_per_client = 16;
  // A new connection whose descriptor leaves fewer than this many free below the soft
  // RLIMIT_NOFILE is closed at once, so that no flood of clients takes the daemon's last
  // descriptors. 0: none kept.
  int descriptor_reserve = 128;
  // Time a client has to send a request's head (request line and headers), counted from the
  // connection or from the previous response: also how long an idle keep-alive connection
  // stays open.
  std::chrono::milliseconds header_timeout{10000};
  // Time for the rest of a request (its body) and for sending each response.
  std::chrono::milliseconds body_timeout{30000};
  // A WebSocket is closed when nothing came from the browser for this long; it is pinged
  // after half of it (browsers answer pings by themselves). Also the limit on its handshake.
  std::chrono::milliseconds websocket_idle_timeout{60000};
  // Where refused connections and accept failures are logged (at most once a second each).
  // Null: spdlog's default logger.
  std::shared_ptr<spdlog::logger> logger;
};

// What an HttpServer has done, for /metrics.
struct HttpServerStats {
  std::uint64_t connections_accepted = 0;
  std::uint64_t connections_refused = 0;  // over a cap or the descriptor reserve: closed at once
  std::uint64_t open_connections = 0;     // now, WebSockets included
};

class HttpServer {
 public:
  // Binds and serves. kInvalidArgument for a bad address or limits (a cap of 0, a timeout not
  // positive), kUnavailable if it cannot bind.
  static absl::StatusOr<std::unique_ptr<HttpServer>> Start(const HttpServerOptions& options,
                                                           HttpRoutes routes);
  ~HttpServer();  // Stop()

  int port() const;
  std::string address() const;  // host:port with the real port
  // Thread-safe.
  HttpServerStats stats() const;
  // Closes the listener and every connection, joins the I/O thread.
  void Stop();

 private:
  struct Impl;
  explicit HttpServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// /healthz (200 "ok" while the process serves) and /readyz (200 "ready" when `ready()` is OK,
// else 503 with its message), as Kubernetes-style probes expect.
void AddHealthRoutes(HttpRoutes& routes, std::function<absl::Status()> ready);

// A daemon's --http address: kInvalidArgument unless host:port, and, without `allow_public`,
// unless the host is loopback (the pages and /metrics have no authentication yet).
absl::Status CheckHttpListen(const std::string& listen, bool allow_public);

// Decodes %XX and '+' in a query component; kInvalidArgument for a bad escape.
absl::StatusOr<std::string> PercentDecode(std::string_view text);

// True if `host` is a loopback address or name ("127.0.0.1", "::1", "localhost").
bool IsLoopbackHost(std::string_view host);

}  // namespace gfrep::replica::web
