#pragma once

// What HttpServer (replica/web/http_server.h) does with a request apart from the socket: the
// parser's limits, the refusal of a request over them, the request as handlers see it, the
// route it takes and the response it gets; and the limits of a WebSocket connection. The
// server's sessions call these; so does tests/fuzz/http_fuzz.cc, on the same limits.
//
// Thread safety: pure functions, except that Respond runs the route's handler.

#include <boost/beast/core/error.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/websocket.hpp>
#include <cstddef>
#include <functional>
#include <memory>
#include <optional>

#include "replica/web/http_server.h"

namespace gfrep::replica::web::internal {

using BeastRequest = boost::beast::http::request<boost::beast::http::string_body>;
using BeastResponse = boost::beast::http::response<boost::beast::http::string_body>;
using RequestParser = boost::beast::http::request_parser<boost::beast::http::string_body>;
using WebSocketHandler = std::function<void(std::shared_ptr<WebSocketPeer>)>;

// A request's header, and its body, may have at most this many bytes. (Beast counts a
// header's bytes from the first line it has not consumed: the complete lines of an earlier
// read do not count, so a header may pass by up to one read, 512 bytes on a new connection.)
inline constexpr std::size_t kMaxRequestBytes = 16 * 1024;

// Sets the limits above on a parser of one request.
void LimitRequest(RequestParser& parser);

// The answer to a request that could not be read: 413 ("request too large", closing the
// connection) for a header or body over the limits; nullopt for everything else (a broken or
// closed connection, bad syntax), which closes the connection without an answer.
std::optional<BeastResponse> RefusalOf(const boost::beast::error_code& read_error);

// The request as handlers see it: method, target, the path before '?', and the query's
// key=value pairs percent-decoded (pairs with a bad escape are left out).
HttpRequest ToRequest(const BeastRequest& req);

// The handler of the WebSocket route a WebSocket upgrade request asks for; null if `req`
// is no upgrade or its path no WebSocket route (then it is answered by Respond).
const WebSocketHandler* WebSocketRoute(const HttpRoutes& routes, const BeastRequest& req);

// The response to a request: 405 (with Allow) for a method other than GET and HEAD, 404
// for a path that is no page, else the page's (500 if its handler throws); with Server and
// Content-Type, keep-alive as the request asks, and for HEAD the Content-Length of the
// body but no body.
BeastResponse Respond(const HttpRoutes& routes, const BeastRequest& req);

// Sets a WebSocket stream's limits: messages of at most kMaxWebSocketMessage bytes (a
// longer one closes the connection), Beast's suggested server timeouts.
template <class NextLayer>
void LimitWebSocket(boost::beast::websocket::stream<NextLayer>& ws) {
  ws.read_message_max(kMaxWebSocketMessage);
  ws.set_option(
      boost::beast::websocket::stream_base::timeout::suggested(boost::beast::role_type::server));
}

}  // namespace gfrep::replica::web::internal
