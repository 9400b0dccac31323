#include "tests/support/http_get.h"

#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <sstream>

namespace gfrep::testing {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;

absl::StatusOr<HttpReply> HttpGet(const std::string& host_port, const std::string& target,
                                  const std::string& method, const std::string& extra_header) {
  const std::size_t colon = host_port.rfind(':');
  if (colon == std::string::npos) return absl::InvalidArgumentError("not host:port: " + host_port);
  try {
    asio::io_context io;
    asio::ip::tcp::resolver resolver(io);
    beast::tcp_stream stream(io);
    stream.expires_after(std::chrono::seconds(10));
    stream.connect(resolver.resolve(host_port.substr(0, colon), host_port.substr(colon + 1)));
    http::request<http::string_body> req{http::string_to_verb(method), target, 11};
    req.set(http::field::host, host_port);
    if (!extra_header.empty()) req.set("X-Big", extra_header);
    http::write(stream, req);
    beast::flat_buffer buffer;
    http::response_parser<http::string_body> parser;
    parser.body_limit(64 << 20);
    if (method == "HEAD") parser.skip(true);
    http::read(stream, buffer, parser);
    const auto& res = parser.get();
    HttpReply r;
    r.status = res.result_int();
    r.content_type = std::string(res[http::field::content_type]);
    r.content_length = std::string(res[http::field::content_length]);
    r.cache_control = std::string(res[http::field::cache_control]);
    r.body = res.body();
    return r;
  } catch (const std::exception& e) {
    return absl::UnavailableError(std::string("http ") + host_port + target + ": " + e.what());
  }
}

int FreeLoopbackPort() {
  asio::io_context io;
  asio::ip::tcp::acceptor a(io, {asio::ip::make_address("127.0.0.1"), 0});
  return a.local_endpoint().port();
}

double MetricValue(const std::string& text, const std::string& name) {
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.size() > name.size() && line.compare(0, name.size(), name) == 0 && line[name.size()] == ' ') {
      return std::stod(line.substr(name.size() + 1));
    }
  }
  return -1;
}

WebSocket OpenWebSocket(boost::asio::io_context& io, const std::string& host_port, const std::string& target) {
  namespace asio = boost::asio;
  WebSocket ws(io);
  const std::size_t colon = host_port.rfind(':');
  ws.next_layer().connect({asio::ip::make_address(host_port.substr(0, colon)),
                           static_cast<unsigned short>(std::stoi(host_port.substr(colon + 1)))});
  ws.handshake(host_port, target);
  return ws;
}

}  // namespace gfrep::testing
