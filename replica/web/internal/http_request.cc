#include "replica/web/internal/http_request.h"

#include <fmt/format.h>

#include <exception>
#include <string>
#include <string_view>

namespace gfrep::replica::web::internal {
namespace {

namespace http = boost::beast::http;
namespace websocket = boost::beast::websocket;

HttpResponse Dispatch(const HttpRoutes& routes, const BeastRequest& req) {
  if (req.method() != http::verb::get && req.method() != http::verb::head) {
    return {405, "text/plain; charset=utf-8", "only GET and HEAD\n", {{"Allow", "GET, HEAD"}}};
  }
  const HttpRequest r = ToRequest(req);
  auto it = routes.pages.find(r.path);
  if (it == routes.pages.end()) {
    return {404, "text/plain; charset=utf-8", fmt::format("{}: not found\n", r.path), {}};
  }
  try {
    return it->second(r);
  } catch (const std::exception& e) {
    return {500, "text/plain; charset=utf-8", fmt::format("internal error: {}\n", e.what()), {}};
  }
}

}  // namespace

void LimitRequest(RequestParser& parser) {
  parser.header_limit(kMaxRequestBytes);
  parser.body_limit(kMaxRequestBytes);
}

std::optional<BeastResponse> RefusalOf(const boost::beast::error_code& read_error) {
  if (read_error != http::error::header_limit && read_error != http::error::body_limit) {
    return std::nullopt;
  }
  BeastResponse res{http::status::payload_too_large, 11};
  res.set(http::field::content_type, "text/plain; charset=utf-8");
  res.body() = "request too large\n";
  res.keep_alive(false);
  res.prepare_payload();
  return res;
}

HttpRequest ToRequest(const BeastRequest& req) {
  HttpRequest r;
  r.method = std::string(req.method_string());
  r.target = std::string(req.target());
  const std::size_t q = r.target.find('?');
  r.path = r.target.substr(0, q);
  if (q != std::string::npos) {
    std::string_view rest = std::string_view(r.target).substr(q + 1);
    while (!rest.empty()) {
      const std::size_t amp = rest.find('&');
      std::string_view item = rest.substr(0, amp);
      rest = amp == std::string_view::npos ? std::string_view() : rest.substr(amp + 1);
      const std::size_t eq = item.find('=');
      absl::StatusOr<std::string> key = PercentDecode(item.substr(0, eq));
      absl::StatusOr<std::string> value =
          PercentDecode(eq == std::string_view::npos ? std::string_view() : item.substr(eq + 1));
      if (key.ok() && value.ok()) r.query[*key] = *value;
    }
  }
  return r;
}

const WebSocketHandler* WebSocketRoute(const HttpRoutes& routes, const BeastRequest& req) {
  if (!websocket::is_upgrade(req)) return nullptr;
  auto it = routes.websockets.find(ToRequest(req).path);
  return it == routes.websockets.end() ? nullptr : &it->second;
}

BeastResponse Respond(const HttpRoutes& routes, const BeastRequest& req) {
  HttpResponse r = Dispatch(routes, req);
  BeastResponse res{static_cast<http::status>(r.status), req.version()};
  res.set(http::field::server, "gfrep");
  res.set(http::field::content_type, r.content_type);
  for (const auto& [k, v] : r.headers) res.set(k, v);
  res.keep_alive(req.keep_alive());
  res.body() = std::move(r.body);
  res.prepare_payload();
  if (req.method() == http::verb::head) res.body().clear();  // Content-Length stays
  return res;
}

}  // namespace gfrep::replica::web::internal

// Pure functions of http_server.h, here rather than beside the server's coroutines so that
// code that only handles requests (the fuzz build) compiles without them.
namespace gfrep::replica::web {

absl::StatusOr<std::string> PercentDecode(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (c == '+') {
      out.push_back(' ');
    } else if (c == '%') {
      auto hex = [](char h) -> int {
        if (h >= '0' && h <= '9') return h - '0';
        if (h >= 'a' && h <= 'f') return h - 'a' + 10;
        if (h >= 'A' && h <= 'F') return h - 'A' + 10;
        return -1;
      };
      const int hi = i + 1 < text.size() ? hex(text[i + 1]) : -1;
      const int lo = i + 2 < text.size() ? hex(text[i + 2]) : -1;
      if (hi < 0 || lo < 0) return absl::InvalidArgumentError("bad % escape");
      out.push_back(static_cast<char>(hi * 16 + lo));
      i += 2;
    } else {
      out.push_back(c);
    }
  }
  return out;
}

void AddHealthRoutes(HttpRoutes& routes, std::function<absl::Status()> ready) {
  routes.pages["/healthz"] = [](const HttpRequest&) {
    return HttpResponse{200, "text/plain; charset=utf-8", "ok\n", {}};
  };
  routes.pages["/readyz"] = [ready = std::move(ready)](const HttpRequest&) {
    absl::Status s = ready ? ready() : absl::OkStatus();
    if (s.ok()) return HttpResponse{200, "text/plain; charset=utf-8", "ready\n", {}};
    return HttpResponse{
        503, "text/plain; charset=utf-8", fmt::format("not ready: {}\n", s.ToString()), {}};
  };
}

}  // namespace gfrep::replica::web
