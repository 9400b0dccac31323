#pragma once

// HttpGet: one HTTP/1.1 request to a daemon's web port (Boost.Beast client), for tests of
// /metrics, /healthz, /readyz and the dashboard's API.

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/websocket.hpp>
#include <string>

#include "absl/status/statusor.h"

namespace gfrep::testing {

struct HttpReply {
  int status = 0;
  std::string content_type;
  std::string content_length;  // as sent (HEAD answers have one but no body)
  std::string cache_control;
  std::string body;
};

// `method` "GET", "HEAD", "POST"; `extra_header` (if not empty) is sent as X-Big (a
// request-size test). kUnavailable if it cannot connect or read.
absl::StatusOr<HttpReply> HttpGet(const std::string& host_port, const std::string& target,
                                  const std::string& method = "GET", const std::string& extra_header = "");

// A WebSocket client of ws://HOST:PORT`target` (the dashboard's /ws), handshake done.
// Throws boost::system::system_error when it cannot connect (tests: a failure either way).
using WebSocket = boost::beast::websocket::stream<boost::asio::ip::tcp::socket>;
WebSocket OpenWebSocket(boost::asio::io_context& io, const std::string& host_port, const std::string& target);

// A free loopback TCP port (bound, then released), for a daemon whose address must stay the
// same across a restart.
int FreeLoopbackPort();

// The value of the sample `name` (with its labels as written, e.g. `x{a="b"}`) in a
// Prometheus text exposition; -1 if absent.
double MetricValue(const std::string& text, const std::string& name);

}  // namespace gfrep::testing
