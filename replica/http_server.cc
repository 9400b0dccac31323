#include "replica/http_server.h"

#include <fmt/format.h>

#include <boost/asio.hpp>
#include <boost/asio/experimental/as_tuple.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/websocket.hpp>
#include <atomic>
#include <deque>
#include <future>
#include <mutex>
#include <set>
#include <thread>

#include "replica/internal/http_request.h"

namespace gfrep::replica {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
namespace websocket = beast::websocket;
using tcp = asio::ip::tcp;
constexpr auto kTuple = asio::experimental::as_tuple(asio::use_awaitable);

class Peer final : public WebSocketPeer, public std::enable_shared_from_this<Peer> {
 public:
  Peer(beast::tcp_stream stream, std::size_t max_queued) : ws_(std::move(stream)), max_queued_(max_queued) {}

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
    std::lock_guard<std::mutex> lock(received_mu_);
    return received_;
  }

  // Closes at once (the server is stopping); I/O thread only.
  void CloseNow() {
    open_ = false;
    beast::error_code ec;
    beast::get_lowest_layer(ws_).socket().close(ec);
  }

  // Reads what the browser sends (keeping the last text frame), to see pings and the close.
  void StartReading() {
    ws_.async_read(in_, [self = shared_from_this()](beast::error_code ec, std::size_t) {
      if (ec) {
        self->open_ = false;
        return;
      }
      if (self->ws_.got_text()) {
        std::lock_guard<std::mutex> lock(self->received_mu_);
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
  mutable std::mutex received_mu_;
  std::string received_;  // guarded by received_mu_
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
  asio::io_context io{1};
  tcp::acceptor acceptor{io};
  HttpRoutes routes;
  HttpServerOptions options;
  std::thread thread;
  std::string host;

  // On the I/O thread: stop accepting, close every connection.
  void CloseAll() {
    beast::error_code ec;
    acceptor.close(ec);
    for (beast::tcp_stream* s : sessions) s->socket().close(ec);
    for (const std::weak_ptr<Peer>& w : peers) {
      if (auto p = w.lock()) p->CloseNow();
    }
  }

  asio::awaitable<void> Session(tcp::socket socket) {
    beast::tcp_stream stream(std::move(socket));
    sessions.insert(&stream);
    struct Forget {
      std::set<beast::tcp_stream*>& sessions;
      beast::tcp_stream* s;
      ~Forget() { sessions.erase(s); }
    } forget{sessions, &stream};
    beast::flat_buffer buffer;
    for (;;) {
      stream.expires_after(std::chrono::seconds(60));
      internal::RequestParser parser;
      internal::LimitRequest(parser);
      auto [ec, n] = co_await http::async_read(stream, buffer, parser, kTuple);
      if (ec) {
        if (std::optional<internal::BeastResponse> refusal = internal::RefusalOf(ec)) {
          co_await http::async_write(stream, *refusal, kTuple);
        }
        break;
      }
      internal::BeastRequest req = parser.release();
      if (const internal::WebSocketHandler* handler = internal::WebSocketRoute(routes, req)) {
        stream.expires_never();
        sessions.erase(&stream);  // moved into the peer, which Stop closes as a peer
        auto peer = std::make_shared<Peer>(std::move(stream), options.max_queued_frames);
        std::erase_if(peers, [](const std::weak_ptr<Peer>& w) { return w.expired(); });
        peers.push_back(peer);
        internal::LimitWebSocket(peer->ws());
        auto [aec] = co_await peer->ws().async_accept(req, kTuple);
        if (aec) co_return;
        peer->StartReading();
        (*handler)(peer);
        co_return;
      }
      internal::BeastResponse res = internal::Respond(routes, req);
      auto [wec, wn] = co_await http::async_write(stream, res, kTuple);
      if (wec || !req.keep_alive()) break;
    }
    beast::error_code ignored;
    stream.socket().shutdown(tcp::socket::shutdown_send, ignored);
  }

  asio::awaitable<void> Accept() {
    asio::steady_timer pause(io);
    for (;;) {
      auto [ec, socket] = co_await acceptor.async_accept(kTuple);
      if (ec) {
        if (ec == asio::error::operation_aborted || !acceptor.is_open()) co_return;
        // e.g. EMFILE: the connection stays queued and would fail again at once; wait a little
        // instead of spinning.
        pause.expires_after(std::chrono::milliseconds(100));
        co_await pause.async_wait(kTuple);
        continue;
      }
      asio::co_spawn(io, Session(std::move(socket)), asio::detached);
    }
  }
};

absl::StatusOr<std::unique_ptr<HttpServer>> HttpServer::Start(const HttpServerOptions& options,
                                                               HttpRoutes routes) {
  auto impl = std::make_unique<Impl>();
  impl->options = options;
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

}  // namespace gfrep::replica
