#include "replica/web/http_server.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <sys/resource.h>

#include <algorithm>
#include <atomic>
#include <boost/asio.hpp>
#include <boost/asio/experimental/as_tuple.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/websocket.hpp>
#include <deque>
#include <future>
#include <set>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "replica/web/internal/http_request.h"

namespace gfrep::replica::web {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
namespace websocket = beast::websocket;
using tcp = asio::ip::tcp;
constexpr auto kTuple = asio::experimental::as_tuple(asio::use_awaitable);

// True if descriptor `fd` leaves fewer than `reserve` free below the soft RLIMIT_NOFILE.
// Descriptors are allocated lowest first, so a new one this high means the table is nearly
// full.
bool FewDescriptorsLeft(int fd, int reserve) {
  if (reserve <= 0) return false;
  rlimit rl{};
  if (::getrlimit(RLIMIT_NOFILE, &rl) != 0 || rl.rlim_cur == RLIM_INFINITY) return false;
  return static_cast<rlim_t>(fd) + static_cast<rlim_t>(reserve) >= rl.rlim_cur;
}

// Connections open now, in all and per client address. Shared (by shared_ptr) with the
// WebSocket peers, which the dashboard may hold past the server and drop on its own thread.
class ConnectionCount {
 public:
  // Takes a place for a connection from `client`; false (nothing taken) past either cap,
  // with `why` saying which.
  bool TryAdd(const std::string& client, const HttpServerOptions& o, std::string& why) {
    absl::MutexLock lock(&mu_);
    std::size_t& mine = per_client_[client];
    if (total_ >= o.max_connections || mine >= o.max_connections_per_client) {
      why = fmt::format("{} open ({} from {}), limits {} and {} per client", total_, mine, client,
                        o.max_connections, o.max_connections_per_client);
      if (mine == 0) per_client_.erase(client);
      return false;
    }
    ++total_;
    ++mine;
    return true;
  }
  void Remove(const std::string& client) {
    absl::MutexLock lock(&mu_);
    --total_;
    if (auto it = per_client_.find(client); it != per_client_.end() && --it->second == 0) per_client_.erase(it);
  }
  std::size_t open() const {
    absl::MutexLock lock(&mu_);
    return total_;
  }

 private:
  mutable absl::Mutex mu_;
  std::size_t total_ ABSL_GUARDED_BY(mu_) = 0;
  std::map<std::string, std::size_t> per_client_ ABSL_GUARDED_BY(mu_);
};

// One connection's place in the ConnectionCount, given back once: by Release() or when it
// goes. Moves from the request loop into the WebSocket peer on an upgrade.
class ConnectionSlot {
 public:
  ConnectionSlot(std::shared_ptr<ConnectionCount> count, std::string client)
      : count_(std::move(count)), client_(std::move(client)) {}
  ConnectionSlot(ConnectionSlot&& other) noexcept
      : count_(std::move(other.count_)), client_(std::move(other.client_)) {}
  ConnectionSlot& operator=(ConnectionSlot&&) = delete;
  ~ConnectionSlot() { Release(); }
  void Release() {
    if (std::shared_ptr<ConnectionCount> c = std::exchange(count_, nullptr)) c->Remove(client_);
  }

 private:
  std::shared_ptr<ConnectionCount> count_;  // null once given back
  std::string client_;
};

class Peer final : public WebSocketPeer, public std::enable_shared_from_this<Peer> {
 public:
  Peer(beast::tcp_stream stream, std::size_t max_queued, ConnectionSlot slot)
      : ws_(std::move(stream)), max_queued_(max_queued), slot_(std::move(slot)) {}

  websocket::stream<beast::tcp_stream>& ws() { return ws_; }

  bool Send(std::string text) override {
    if (!open_) return false;
    asio::post(ws_.get_executor(), [self = shared_from_this(), text = std::move(text)]() mutable {
      self->Enqueue(std::move(text));
    });
    return true;
  }
  bool open() const override { return open_; }
  std::string Received() const override {
    absl::MutexLock lock(&received_mu_);
    return received_;
  }

  // Closes at once (the server is stopping); I/O thread only.
  void CloseNow() {
    open_ = false;
    beast::error_code ec;
    beast::get_lowest_layer(ws_).socket().close(ec);
    slot_.Release();
  }

  // Reads what the browser sends (keeping the last text frame), to see pings and the close.
  // The read ends in an error when the connection does (closed, failed, idle too long): its
  // place under the server's caps is given back then, not when the last holder lets go.
  void StartReading() {
    ws_.async_read(in_, [self = shared_from_this()](beast::error_code ec, std::size_t) {
      if (ec) {
        self->open_ = false;
        beast::error_code ignored;
        beast::get_lowest_layer(self->ws_).socket().close(ignored);
        self->slot_.Release();
        return;
      }
      if (self->ws_.got_text()) {
        absl::MutexLock lock(&self->received_mu_);
        self->received_ = beast::buffers_to_string(self->in_.data());
      }
      self->in_.clear();
      self->StartReading();
    });
  }

 private:
  void Enqueue(std::string text) {
    if (!open_) return;
    if (queue_.size() >= max_queued_) {  // the browser cannot keep up: let it reconnect
      open_ = false;
      ws_.async_close(websocket::close_code::try_again_later, [self = shared_from_this()](beast::error_code) {});
      return;
    }
    queue_.push_back(std::move(text));
    if (!writing_) Write();
  }

  void Write() {
    writing_ = true;
    ws_.text(true);
    ws_.async_write(asio::buffer(queue_.front()), [self = shared_from_this()](beast::error_code ec, std::size_t) {
      self->queue_.pop_front();
      if (ec) {
        self->open_ = false;
        self->queue_.clear();
        self->writing_ = false;
        return;
      }
      if (self->queue_.empty()) {
        self->writing_ = false;
      } else {
        self->Write();
      }
    });
  }

  websocket::stream<beast::tcp_stream> ws_;
  const std::size_t max_queued_;
  std::atomic<bool> open_{true};
  std::deque<std::string> queue_;  // I/O thread only
  bool writing_ = false;           // I/O thread only
  beast::flat_buffer in_;
  mutable absl::Mutex received_mu_;
  std::string received_ ABSL_GUARDED_BY(received_mu_);
  ConnectionSlot slot_;   // I/O thread only (and the destructor)
};

}  // namespace

absl::Status CheckHttpListen(const std::string& listen, bool allow_public) {
  const std::size_t colon = listen.rfind(':');
  if (colon == std::string::npos || colon + 1 == listen.size()) {
    return absl::InvalidArgumentError(fmt::format("--http {}: not host:port", listen));
  }
  const std::string host = listen.substr(0, colon);
  if (!allow_public && !IsLoopbackHost(host)) {
    return absl::InvalidArgumentError(fmt::format(
        "--http {}: not a loopback address; the dashboard, /metrics and the health checks have no "
        "authentication yet, so serving them beyond this host needs --http-public",
        listen));
  }
  return absl::OkStatus();
}

bool IsLoopbackHost(std::string_view host) {
  if (host == "localhost") return true;
  boost::system::error_code ec;
  std::string h(host);
  if (h.size() > 2 && h.front() == '[' && h.back() == ']') h = h.substr(1, h.size() - 2);
  const asio::ip::address a = asio::ip::make_address(h, ec);
  return !ec && a.is_loopback();
}

// The coroutines refer to Impl by plain pointer: HttpServer owns it and Stop() has joined the
// I/O thread before it goes; the io_context, destroyed last, destroys what is left of them.
struct HttpServer::Impl {
  // Open connections, closed by Stop (I/O thread only). Declared before `io`: the sessions'
  // frames, destroyed with it, still erase themselves from here.
  std::set<beast::tcp_stream*> sessions;
  std::vector<std::weak_ptr<Peer>> peers;
  std::shared_ptr<ConnectionCount> count = std::make_shared<ConnectionCount>();
  std::atomic<std::uint64_t> accepted{0};
  std::atomic<std::uint64_t> refused{0};
  asio::io_context io{1};
  tcp::acceptor acceptor{io};
  HttpRoutes routes;
  HttpServerOptions options;
  std::shared_ptr<spdlog::logger> log;
  std::thread thread;
  std::string host;
  // Refusals logged at most once a second (I/O thread only).
  std::chrono::steady_clock::time_point refusal_logged{};
  std::uint64_t refusals_unlogged = 0;

  // On the I/O thread: stop accepting, close every connection.
  void CloseAll() {
    beast::error_code ec;
    acceptor.close(ec);
    for (beast::tcp_stream* s : sessions) s->socket().close(ec);
    for (const std::weak_ptr<Peer>& w : peers) {
      if (auto p = w.lock()) p->CloseNow();
    }
  }

  // One connection: requests until the client stops, or a WebSocket. `slot` is its place
  // under the caps.
  asio::awaitable<void> Session(tcp::socket socket, ConnectionSlot slot) {
    beast::tcp_stream stream(std::move(socket));
    sessions.insert(&stream);
    struct Forget {
      std::set<beast::tcp_stream*>& sessions;
      beast::tcp_stream* s;
      ~Forget() { sessions.erase(s); }
    } forget{sessions, &stream};
    beast::flat_buffer buffer;
    for (;;) {
      internal::RequestParser parser;
      internal::LimitRequest(parser);
      // The head within header_timeout (a client that trickles it, or says nothing on a
      // kept-alive connection, is let go), then the body within body_timeout.
      stream.expires_after(options.header_timeout);
      boost::system::error_code ec;
      {
        auto [hec, hn] = co_await http::async_read_header(stream, buffer, parser, kTuple);
        ec = hec;
      }
      if (!ec && !parser.is_done()) {
        stream.expires_after(options.body_timeout);
        auto [bec, bn] = co_await http::async_read(stream, buffer, parser, kTuple);
        ec = bec;
      }
      if (ec) {
        if (std::optional<internal::BeastResponse> refusal = internal::RefusalOf(ec)) {
          stream.expires_after(options.body_timeout);
          co_await http::async_write(stream, *refusal, kTuple);
        }
        break;
      }
      internal::BeastRequest req = parser.release();
      if (const internal::WebSocketHandler* handler = internal::WebSocketRoute(routes, req)) {
        stream.expires_never();
        sessions.erase(&stream);  // moved into the peer, which Stop closes as a peer
        auto peer = std::make_shared<Peer>(std::move(stream), options.max_queued_frames, std::move(slot));
        std::erase_if(peers, [](const std::weak_ptr<Peer>& w) { return w.expired(); });
        peers.push_back(peer);
        internal::LimitWebSocket(peer->ws());
        // Pinged after half the idle time without a frame, closed after all of it: a page
        // whose browser went away (or a client that never answers) does not stay.
        websocket::stream_base::timeout timeouts{};
        timeouts.handshake_timeout = options.websocket_idle_timeout;
        timeouts.idle_timeout = options.websocket_idle_timeout;
        timeouts.keep_alive_pings = true;
        peer->ws().set_option(timeouts);
        auto [aec] = co_await peer->ws().async_accept(req, kTuple);
        if (aec) co_return;
        peer->StartReading();
        (*handler)(peer);
        co_return;
      }
      internal::BeastResponse res = internal::Respond(routes, req);
      stream.expires_after(options.body_timeout);
      auto [wec, wn] = co_await http::async_write(stream, res, kTuple);
      if (wec || !req.keep_alive()) break;
    }
    beast::error_code ignored;
    stream.socket().shutdown(tcp::socket::shutdown_send, ignored);
  }

  // Logs a refused connection, at most once a second (with how many went unlogged).
  void LogRefusal(const std::string& peer, const std::string& why) {
    const auto now = std::chrono::steady_clock::now();
    if (now - refusal_logged < std::chrono::seconds(1)) {
      ++refusals_unlogged;
      return;
    }
    refusal_logged = now;
    log->warn("http: refused connection from {}: {} ({} more refused since the last message)", peer, why,
              std::exchange(refusals_unlogged, 0));
  }

  asio::awaitable<void> Accept() {
    asio::steady_timer backoff(io);
    std::chrono::milliseconds delay{0};
    std::uint64_t failures = 0;
    for (;;) {
      auto [ec, socket] = co_await acceptor.async_accept(kTuple);
      if (ec == asio::error::operation_aborted || !acceptor.is_open()) co_return;
      if (ec) {
        // Out of descriptors (EMFILE, ENFILE), buffers or memory: the connection stays queued
        // and accept fails again at once. Back off (10 ms doubling to 1 s) instead of
        // spinning, as the transfer agent does; connections ending meanwhile free what is
        // missing.
        if (failures++ == 0) log->warn("http: accept: {}; backing off until it works again", ec.message());
        delay = std::clamp(delay * 2, std::chrono::milliseconds(10), std::chrono::milliseconds(1000));
        backoff.expires_after(delay);
        co_await backoff.async_wait(kTuple);
        continue;
      }
      if (failures > 0) {
        log->info("http: accept works again after {} failures", failures);
        failures = 0;
        delay = std::chrono::milliseconds(0);
      }
      boost::system::error_code pec;
      const tcp::endpoint remote = socket.remote_endpoint(pec);
      if (pec) continue;  // the client is gone already; the socket closes here
      const std::string client = remote.address().to_string();
      std::string why;
      if (FewDescriptorsLeft(socket.native_handle(), options.descriptor_reserve)) {
        why = fmt::format("fewer than {} descriptors free (the daemon keeps them)", options.descriptor_reserve);
      } else if (count->TryAdd(client, options, why)) {
        why.clear();
      }
      if (!why.empty()) {
        ++refused;
        LogRefusal(fmt::format("{}:{}", client, remote.port()), why);
        continue;  // closing the socket is the answer
      }
      ++accepted;
      asio::co_spawn(io, Session(std::move(socket), ConnectionSlot(count, client)),
                     [log = log](std::exception_ptr e) {
                       // One connection's bug must not end the server: report, go on.
                       if (!e) return;
                       try {
                         std::rethrow_exception(e);
                       } catch (const std::exception& x) {
                         log->critical("bug: exception escaped an http connection: {}", x.what());
                       }
                     });
    }
  }
};

absl::StatusOr<std::unique_ptr<HttpServer>> HttpServer::Start(const HttpServerOptions& options,
                                                               HttpRoutes routes) {
  if (options.max_connections < 1 || options.max_connections_per_client < 1 || options.descriptor_reserve < 0 ||
      options.header_timeout.count() <= 0 || options.body_timeout.count() <= 0 ||
      options.websocket_idle_timeout.count() <= 0) {
    return absl::InvalidArgumentError(
        "http: connection caps must be at least 1, the descriptor reserve not negative and "
        "the timeouts positive");
  }
  auto impl = std::make_unique<Impl>();
  impl->options = options;
  impl->log = options.logger ? options.logger : spdlog::default_logger();
  impl->routes = std::move(routes);
  const std::size_t colon = options.listen.rfind(':');
  if (colon == std::string::npos) {
    return absl::InvalidArgumentError(fmt::format("--http {}: not host:port", options.listen));
  }
  std::string host = options.listen.substr(0, colon);
  const std::string port_text = options.listen.substr(colon + 1);
  int port = -1;
  try {
    std::size_t used = 0;
    port = std::stoi(port_text, &used);
    if (used != port_text.size()) port = -1;
  } catch (const std::exception&) {
  }
  if (port < 0 || port > 65535) {
    return absl::InvalidArgumentError(fmt::format("--http {}: bad port '{}'", options.listen, port_text));
  }
  if (host.size() > 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  if (host == "localhost") host = "127.0.0.1";
  boost::system::error_code ec;
  const asio::ip::address addr = asio::ip::make_address(host.empty() ? "0.0.0.0" : host, ec);
  if (ec) return absl::InvalidArgumentError(fmt::format("--http {}: bad address '{}'", options.listen, host));
  const tcp::endpoint ep(addr, static_cast<unsigned short>(port));
  impl->acceptor.open(ep.protocol(), ec);
  if (!ec) impl->acceptor.set_option(asio::socket_base::reuse_address(true), ec);
  if (!ec) impl->acceptor.bind(ep, ec);
  if (!ec) impl->acceptor.listen(asio::socket_base::max_listen_connections, ec);
  if (ec) return absl::UnavailableError(fmt::format("http: cannot listen on {}: {}", options.listen, ec.message()));
  impl->host = addr.is_v6() ? fmt::format("[{}]", addr.to_string()) : addr.to_string();
  asio::co_spawn(impl->io, impl->Accept(), asio::detached);
  impl->thread = std::thread([impl = impl.get()] { impl->io.run(); });
  return std::unique_ptr<HttpServer>(new HttpServer(std::move(impl)));
}

HttpServer::HttpServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

HttpServer::~HttpServer() { Stop(); }

int HttpServer::port() const {
  boost::system::error_code ec;
  return impl_->acceptor.local_endpoint(ec).port();
}

std::string HttpServer::address() const { return fmt::format("{}:{}", impl_->host, port()); }

HttpServerStats HttpServer::stats() const {
  return {impl_->accepted.load(), impl_->refused.load(), impl_->count->open()};
}

void HttpServer::Stop() {
  if (!impl_ || !impl_->thread.joinable()) return;
  // Close the listener and every connection on the I/O thread, then stop it.
  std::promise<void> closed;
  asio::post(impl_->io, [impl = impl_.get(), &closed] {
    impl->CloseAll();
    closed.set_value();
  });
  closed.get_future().wait_for(std::chrono::seconds(5));
  impl_->io.stop();
  impl_->thread.join();
}

}  // namespace gfrep::replica::web
