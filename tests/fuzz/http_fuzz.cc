// Fuzzes the dashboard's HTTP and WebSocket input (gfcatalogd --http): the bytes a browser,
// or anyone who reaches the port, sends. Requests are read as HttpServer's sessions read
// them (replica/web/internal/http_request.h: Beast's parser with the server's limits, the same
// routing and responses) over a Beast test stream, and answered by the real routes of the
// dashboard (replica/web/dashboard.h), AddHealthRoutes and a /metrics page, over a small fake
// catalog written here (a federation of two sites and one file, /exp/a.dat, and request 7).
//
// The first input byte picks the mode:
//  - '0' raw: the rest is what a client sends on one connection (requests, pipelined);
//  - '1' built: a request made from fuzzed parts (method, path, query, a header field and a
//    body of fuzzed sizes, keep-alive, HTTP/1.0 or 1.1), then raw bytes after it;
//  - '2' WebSocket, raw: the rest is what a page sends on /ws after the handshake;
//  - '3' WebSocket, built: messages made from fuzzed parts, sent as masked frames, some
//    fragmented, with pings between the fragments, maybe a close at the end.
// Asserts:
//  - every request read is answered with a documented status: 405 for a method other than
//    GET and HEAD, 404 for a path that is no page, and for the pages what an oracle of each
//    says (/api/request: 400 unless id is 1-19 digits, then 200 for 7 and 404 otherwise;
//    /api/explain: 400 without a path or for one SplitPath refuses (not absolute, not
//    UTF-8, ...) or through a file, 200 for the fake's three entries, else 404; 200 for the
//    rest); never 500;
//  - JSON answers parse as JSON; HEAD answers have no body; the answer keeps the connection
//    open exactly when the request asks; what the server wrote parses back as responses
//    with those statuses, in order;
//  - the query handlers see is the percent-decoding of the target's (an oracle);
//  - limits: a request whose header (request line and fields) or body has at most 16 KiB is
//    read; one whose body has more, or whose header has more than 16 KiB and the 512 bytes
//    of a first read (see Built), is refused with 413 and the connection closed;
//  - WebSocket: every message read has at most kMaxWebSocketMessage bytes and text ones
//    are UTF-8; built messages are read back exactly, in order, up to the first one that is
//    too long (refused with message_too_big) or not UTF-8 (bad_frame_payload).

#include <fuzzer/FuzzedDataProvider.h>
#include <spdlog/sinks/null_sink.h>
#include <spdlog/spdlog.h>

#include <boost/asio/io_context.hpp>
#include <boost/beast/_experimental/test/stream.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/websocket.hpp>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "catalog/catalog.h"
#include "catalog/types.h"
#include "replica/core/metrics.h"
#include "replica/web/dashboard.h"
#include "replica/web/http_server.h"
#include "replica/web/internal/dashboard_assets.h"
#include "replica/web/internal/http_request.h"
#include "replica/web/telemetry.h"
#include "tests/fuzz/fuzz_check.h"

namespace gfrep::replica::web {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
namespace websocket = beast::websocket;
using catalog::Attributes;
using catalog::FileType;

// A read-only federation: sites a and b with nodes a1 and b1, "/exp" holding "a.dat" with a
// complete replica on a1 and a pending one on b1, request 7 copying it. Paths resolve as
// the real catalog resolves them (SplitPath's refusals, kNotFound and kFailedPrecondition
// naming the prefix); what the dashboard does not read is kUnimplemented. A view: the
// dashboard cannot write.
class FakeCatalog final : public catalog::CatalogView {
 public:
  FakeCatalog() {
    root_ = Entry(catalog::kRootInode, 0, "", FileType::kDirectory, 0);
    exp_ = Entry(2, catalog::kRootInode, "exp", FileType::kDirectory, 0);
    file_ = Entry(3, 2, "a.dat", FileType::kFile, 1000);
  }

  absl::StatusOr<Attributes> Stat(std::string_view path) override {
    absl::StatusOr<std::vector<std::string>> parts = catalog::SplitPath(path);
    if (!parts.ok()) return parts.status();
    const Attributes* cur = &root_;
    for (std::size_t i = 0; i < parts->size(); ++i) {
      const std::vector<std::string> prefix(parts->begin(), parts->begin() + i + 1);
      if (cur->type != FileType::kDirectory) {
        return absl::FailedPreconditionError(
            catalog::JoinPath({parts->begin(), parts->begin() + i}) + ": not a directory");
      }
      const Attributes* next = nullptr;
      if (cur == &root_ && (*parts)[i] == "exp") next = &exp_;
      if (cur == &exp_ && (*parts)[i] == "a.dat") next = &file_;
      if (next == nullptr) {
        return absl::NotFoundError(catalog::JoinPath(prefix) + ": no such file or directory");
      }
      cur = next;
    }
    return *cur;
  }
  absl::StatusOr<std::vector<absl::StatusOr<Attributes>>> StatMany(
      const std::vector<std::string>& paths) override {
    std::vector<absl::StatusOr<Attributes>> out;
    for (const std::string& p : paths) out.push_back(Stat(p));
    return out;
  }
  absl::StatusOr<catalog::Location> Locate(std::string_view path) override {
    absl::StatusOr<Attributes> a = Stat(path);
    if (!a.ok()) return a.status();
    catalog::Location loc;
    loc.path = std::string(path);
    loc.attributes = *a;
    if (a->type == FileType::kFile) loc.replicas = *GetReplicas(a->inode);
    return loc;
  }
  absl::StatusOr<Attributes> StatInode(catalog::InodeId inode) override {
    for (const Attributes* a : {&root_, &exp_, &file_}) {
      if (a->inode == inode) return *a;
    }
    return absl::NotFoundError("no such inode");
  }
  absl::StatusOr<std::string> PathOf(catalog::InodeId inode) override {
    if (inode == root_.inode) return std::string("/");
    if (inode == exp_.inode) return std::string("/exp");
    if (inode == file_.inode) return std::string("/exp/a.dat");
    return absl::NotFoundError("no such inode");
  }
  absl::StatusOr<std::vector<catalog::DirEntry>> List(std::string_view path,
                                                      const catalog::ListOptions&) override {
    absl::StatusOr<Attributes> a = Stat(path);
    if (!a.ok()) return a.status();
    if (a->inode == root_.inode) return std::vector<catalog::DirEntry>{{"exp", exp_}};
    if (a->inode == exp_.inode) return std::vector<catalog::DirEntry>{{"a.dat", file_}};
    return absl::FailedPreconditionError("not a directory");
  }
  absl::StatusOr<std::vector<catalog::Replica>> GetReplicas(catalog::InodeId inode) override {
    if (inode != file_.inode) return std::vector<catalog::Replica>{};
    catalog::Replica a1;
    a1.inode = inode;
    a1.node = "a1";
    a1.state = catalog::ReplicaState::kComplete;
    a1.generation = 1;
    a1.size = 1000;
    catalog::Replica b1 = a1;
    b1.node = "b1";
    b1.state = catalog::ReplicaState::kPending;
    return std::vector<catalog::Replica>{a1, b1};
  }
  absl::StatusOr<std::vector<catalog::Replica>> ListNodeReplicas(std::string_view node,
                                                                 catalog::InodeId after,
                                                                 std::size_t) override {
    std::vector<catalog::Replica> out;
    const std::vector<catalog::Replica> all = *GetReplicas(file_.inode);
    for (const catalog::Replica& r : all) {
      if (r.node == node && r.inode > after) out.push_back(r);
    }
    return out;
  }
  absl::StatusOr<std::vector<catalog::Site>> ListSites() override {
    return std::vector<catalog::Site>{{"a", {{"region", "jp"}}}, {"b", {}}};
  }
  absl::StatusOr<std::vector<catalog::Node>> ListNodes(std::string_view site) override {
    std::vector<catalog::Node> out;
    for (const char* name : {"a1", "b1"}) {
      catalog::Node n;
      n.name = name;
      n.site = std::string(1, name[0]);
      n.address = std::string("127.0.0.1:") + (name[0] == 'a' ? "7001" : "7002");
      if (site.empty() || site == n.site) out.push_back(n);
    }
    return out;
  }
  absl::StatusOr<catalog::Node> GetNode(std::string_view name) override {
    const std::vector<catalog::Node> all = *ListNodes("");
    for (const catalog::Node& n : all) {
      if (n.name == name) return n;
    }
    return absl::NotFoundError("no such node");
  }
  absl::StatusOr<std::vector<catalog::Route>> ListRoutes() override {
    return std::vector<catalog::Route>{};
  }
  absl::StatusOr<catalog::Request> GetRequest(std::uint64_t id) override {
    if (id != 7) return absl::NotFoundError("no such request");
    catalog::Request r;
    r.id = 7;
    r.spec.paths = {"/exp"};
    r.spec.copies = 2;
    r.spec.owner = "alice";
    r.state = catalog::RequestState::kRunning;
    r.files_total = 1;
    r.bytes_total = 1000;
    return r;
  }
  absl::StatusOr<std::vector<catalog::Request>> ListRequests(bool, catalog::RequestState,
                                                             std::size_t) override {
    return std::vector<catalog::Request>{*GetRequest(7)};
  }
  absl::StatusOr<std::vector<catalog::Task>> ListTasks(const catalog::TaskFilter& f) override {
    catalog::Task t;
    t.id = 11;
    t.spec.request_id = 7;
    t.spec.path = "/exp/a.dat";
    t.spec.src_node = "a1";
    t.spec.dst_node = "b1";
    t.inode = file_.inode;
    t.generation = 1;
    t.size = 1000;
    t.state = catalog::TaskState::kQueued;
    if (f.request_id != 0 && f.request_id != 7) return std::vector<catalog::Task>{};
    return std::vector<catalog::Task>{t};
  }
  absl::StatusOr<catalog::PolicyDocument> GetPolicies() override {
    catalog::PolicyDocument d;
    d.text =
        "rules:\n  - name: exp-two\n    paths: [\"/exp/**\"]\n    copies: 2\n    sites: \"*\"\n";
    d.source = "policies.yaml";
    d.version = 1;
    return d;
  }
  absl::StatusOr<std::uint64_t> LastEventSeq() override { return 0; }
  absl::StatusOr<std::vector<catalog::Event>> ReadEvents(std::uint64_t, std::size_t,
                                                         std::chrono::milliseconds) override {
    return std::vector<catalog::Event>{};
  }

  // What the dashboard does not read.
  absl::StatusOr<catalog::Route> GetRoute(std::string_view, std::string_view) override {
    return No();
  }
  absl::StatusOr<catalog::Task> GetTask(std::uint64_t) override { return No(); }
  absl::StatusOr<std::vector<catalog::RequestFile>> ListRequestFiles(
      std::uint64_t id, const catalog::RequestFileFilter& f) override {
    if (id != 7) return absl::NotFoundError("no such request");
    if (f.after >= file_.inode) return std::vector<catalog::RequestFile>{};
    catalog::RequestFile rf;
    rf.request_id = 7;
    rf.id = file_.inode;
    rf.path = "/exp/a.dat";
    rf.state = catalog::RequestFileState::kCopying;
    rf.open_tasks = 1;
    return std::vector<catalog::RequestFile>{rf};
  }

 private:
  static absl::Status No() { return absl::UnimplementedError("not in the fuzz catalog"); }
  static Attributes Entry(catalog::InodeId inode, catalog::InodeId parent, std::string name,
                          FileType type, std::uint64_t size) {
    Attributes a;
    a.inode = inode;
    a.parent = parent;
    a.name = std::move(name);
    a.type = type;
    a.size = size;
    a.generation = type == FileType::kFile ? 1 : 0;
    return a;
  }
  Attributes root_, exp_, file_;
};

// gfcatalogd's pages, over the fake catalog; built once.
struct Server {
  Server() {
    DashboardOptions o;
    o.catalog = &catalog;
    o.hub = &hub;
    o.library_dir = "/nonexistent";  // dygraphs not installed: /lib/... is 404
    o.logger =
        std::make_shared<spdlog::logger>("fuzz", std::make_shared<spdlog::sinks::null_sink_mt>());
    dashboard = std::make_unique<Dashboard>(o);
    dashboard->AddRoutes(routes);
    AddHealthRoutes(routes, [] { return absl::OkStatus(); });
    routes.pages["/metrics"] = [d = dashboard.get()](const HttpRequest&) {
      MetricsText m;
      d->AppendMetrics(m);
      return HttpResponse{200, kMetricsContentType, m.text(), {}};
    };
  }
  FakeCatalog catalog;
  TelemetryHub hub;
  std::unique_ptr<Dashboard> dashboard;
  HttpRoutes routes;
};

Server& TheServer() {
  static Server* server = new Server();  // never destroyed: lives as long as the fuzzer
  return *server;
}

asio::io_context& Io() {
  static asio::io_context* io = new asio::io_context();
  return *io;
}

// Percent-decoding of a query component ('+' is a space), written from the URL form
// encoding; nullopt for a '%' not followed by two hex digits.
std::optional<std::string> OracleDecode(std::string_view s) {
  auto hex = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  std::string out;
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '%') {
      if (i + 2 >= s.size() || hex(s[i + 1]) < 0 || hex(s[i + 2]) < 0) return std::nullopt;
      out.push_back(static_cast<char>(hex(s[i + 1]) * 16 + hex(s[i + 2])));
      i += 2;
    } else {
      out.push_back(s[i] == '+' ? ' ' : s[i]);
    }
  }
  return out;
}

// The query of a target: '&'-separated key=value pairs after the first '?', decoded; pairs
// with a bad escape are left out; a later pair wins.
std::map<std::string, std::string> OracleQuery(std::string_view target) {
  std::map<std::string, std::string> q;
  const std::size_t mark = target.find('?');
  if (mark == std::string_view::npos) return q;
  std::string_view rest = target.substr(mark + 1);
  while (!rest.empty()) {
    const std::size_t amp = rest.find('&');
    const std::string_view item = rest.substr(0, amp);
    rest = amp == std::string_view::npos ? std::string_view() : rest.substr(amp + 1);
    const std::size_t eq = item.find('=');
    std::optional<std::string> k = OracleDecode(item.substr(0, eq));
    std::optional<std::string> v =
        OracleDecode(eq == std::string_view::npos ? std::string_view() : item.substr(eq + 1));
    if (k && v) q[*k] = *v;
  }
  return q;
}

// The status each page gives (the dashboard's documented refusals).
int ExpectedStatus(const internal::BeastRequest& req) {
  if (req.method() != http::verb::get && req.method() != http::verb::head) return 405;
  const std::string_view target = req.target();
  const std::string path(target.substr(0, target.find('?')));
  const std::map<std::string, std::string> q = OracleQuery(target);
  if (path == "/api/request") {
    auto it = q.find("id");
    if (it == q.end() || it->second.empty() || it->second.size() > 19 ||
        it->second.find_first_not_of("0123456789") != std::string::npos) {
      return 400;
    }
    return std::stoull(it->second) == 7 ? 200 : 404;
  }
  if (path == "/api/explain") {
    auto it = q.find("path");
    if (it == q.end() || it->second.empty()) return 400;
    absl::StatusOr<std::vector<std::string>> parts = catalog::SplitPath(it->second);
    if (!parts.ok()) return 400;
    const std::vector<std::string>& p = *parts;
    if (p.empty() || p[0] != "exp") return p.empty() ? 200 : 404;
    if (p.size() == 1) return 200;
    if (p[1] != "a.dat") return 404;
    return p.size() == 2 ? 200 : 400;  // below a file: kFailedPrecondition
  }
  if (path == "/favicon.ico") return 204;
  if (path == "/lib/dygraph.min.js" || path == "/lib/dygraph.min.css") return 404;
  if (path == "/api/state" || path == "/healthz" || path == "/readyz" || path == "/metrics") {
    return 200;
  }
  for (const auto& [name, content] : internal::DashboardAssets()) {
    if (path == (name == "index.html" ? "/" : "/" + name)) return 200;
  }
  return 404;
}

// Checks one request the server read and the response it made.
void CheckExchange(const internal::BeastRequest& req, const internal::BeastResponse& res) {
  FUZZ_CHECK(req.body().size() <= internal::kMaxRequestBytes, "a body over the limit was read");
  FUZZ_CHECK(req.target().size() <= internal::kMaxRequestBytes, "a target over the limit was read");
  const HttpRequest seen = internal::ToRequest(req);
  FUZZ_CHECK(
      seen.target == req.target() && seen.path == seen.target.substr(0, seen.target.find('?')),
      "the path handlers see is not the target before '?'");
  FUZZ_CHECK(seen.query == OracleQuery(req.target()), "the query handlers see is not the target's");

  const int status = static_cast<int>(res.result_int());
  FUZZ_CHECK(status != 500, "a page failed (500)");
  FUZZ_CHECK(status == ExpectedStatus(req), "a request got another status than its page documents");
  FUZZ_CHECK(res.keep_alive() == req.keep_alive(), "keep-alive differs from the request's");
  if (req.method() == http::verb::head) {
    FUZZ_CHECK(res.body().empty(), "a HEAD answer has a body");
  } else if (res[http::field::content_type] == "application/json") {
    const nlohmann::json j = nlohmann::json::parse(res.body(), nullptr, false);
    FUZZ_CHECK(!j.is_discarded(), "a JSON answer does not parse");
  }
}

// What the server does with one connection's bytes: HttpServer::Impl::Session without the
// socket (and without the WebSocket hand-over, which ends the HTTP part).
struct Served {
  std::vector<int> statuses;  // of the responses written, in order
  std::vector<bool> heads;    // whether each answered a HEAD
  bool upgraded = false;
  beast::error_code last_error;
};

Served Serve(std::string_view bytes, std::string* wire) {
  Server& server = TheServer();
  beast::test::stream conn(Io());
  beast::test::stream client(Io());
  conn.connect(client);
  conn.append(bytes);
  conn.close_remote();  // the client has sent everything
  Served out;
  beast::flat_buffer buffer;
  for (;;) {
    internal::RequestParser parser;
    internal::LimitRequest(parser);
    beast::error_code ec;
    http::read(conn, buffer, parser, ec);
    if (ec) {
      out.last_error = ec;
      if (std::optional<internal::BeastResponse> refusal = internal::RefusalOf(ec)) {
        FUZZ_CHECK(refusal->result_int() == 413 && !refusal->keep_alive(),
                   "a request over the limits must get 413 and a close");
        http::write(conn, *refusal, ec);
        FUZZ_CHECK(!ec, "writing the 413 failed");
        out.statuses.push_back(413);
        out.heads.push_back(false);
      }
      break;
    }
    internal::BeastRequest req = parser.release();
    if (internal::WebSocketRoute(server.routes, req) != nullptr) {
      FUZZ_CHECK(websocket::is_upgrade(req) && internal::ToRequest(req).path == "/ws",
                 "a request that is no upgrade to /ws took the WebSocket route");
      out.upgraded = true;
      break;
    }
    internal::BeastResponse res = internal::Respond(server.routes, req);
    CheckExchange(req, res);
    http::write(conn, res, ec);
    FUZZ_CHECK(!ec, "writing a response failed");
    out.statuses.push_back(static_cast<int>(res.result_int()));
    out.heads.push_back(req.method() == http::verb::head);
    if (!req.keep_alive()) break;
  }
  *wire = client.str();
  return out;
}

// The server's output parses back as the responses it wrote.
void CheckWire(const std::string& wire, const Served& served) {
  beast::test::stream in(Io());
  in.append(wire);
  in.close_remote();
  beast::flat_buffer buffer;
  for (std::size_t i = 0; i < served.statuses.size(); ++i) {
    http::response_parser<http::string_body> parser;
    parser.body_limit(boost::none);
    parser.skip(served.heads[i]);  // a HEAD answer's Content-Length has no body after it
    beast::error_code ec;
    http::read(in, buffer, parser, ec);
    FUZZ_CHECK(!ec, "the server wrote a response that does not parse");
    FUZZ_CHECK(static_cast<int>(parser.get().result_int()) == served.statuses[i],
               "a response parses back with another status");
  }
}

void Raw(std::string_view bytes) {
  std::string wire;
  const Served served = Serve(bytes, &wire);
  CheckWire(wire, served);
}

// A request from fuzzed parts; its sizes decide whether it must be read or refused.
void Built(FuzzedDataProvider& in) {
  static const char* const kMethods[] = {"GET", "HEAD", "POST", "PUT", "DELETE", "OPTIONS"};
  static const char* const kPaths[] = {
      "/",        "/api/explain", "/api/request", "/api/state",          "/healthz",      "/readyz",
      "/metrics", "/ws",          "/favicon.ico", "/lib/dygraph.min.js", "/dashboard.js", "/nope"};
  const std::string method = kMethods[in.ConsumeIntegralInRange<std::size_t>(0, 5)];
  const std::string path = kPaths[in.ConsumeIntegralInRange<std::size_t>(0, 11)];
  const bool http10 = in.ConsumeBool();
  const bool close = in.ConsumeBool();
  const bool upgrade = in.ConsumeBool();
  // Sizes: mostly small, else around the limit (where the refusals start), else any.
  auto size = [&in] {
    switch (in.ConsumeIntegralInRange(0, 3)) {
      case 0:
      case 1:
        return in.ConsumeIntegralInRange<std::size_t>(0, 255);
      case 2:
        return in.ConsumeIntegralInRange<std::size_t>(internal::kMaxRequestBytes - 512,
                                                      internal::kMaxRequestBytes + 64);
      default:
        return in.ConsumeIntegralInRange<std::size_t>(0, 2 * internal::kMaxRequestBytes);
    }
  };
  const std::size_t fill = size();
  const std::size_t body = size();
  const std::size_t pad = size();  // in the target
  std::string query;
  const std::string key = in.ConsumeRandomLengthString(32);
  const std::string value = in.ConsumeRandomLengthString(64);
  // Escaped as a browser would; the raw bytes after the request go on the connection.
  auto escape = [](std::string_view s) {
    static const char* const kHex = "0123456789ABCDEF";
    std::string out;
    for (char c : s) {
      const auto u = static_cast<unsigned char>(c);
      if ((u >= '0' && u <= '9') || (u >= 'a' && u <= 'z') || (u >= 'A' && u <= 'Z') || c == '/' ||
          c == '.' || c == '-' || c == '_') {
        out.push_back(c);
      } else {
        out += {'%', kHex[u >> 4], kHex[u & 15]};
      }
    }
    return out;
  };
  query = "?" + escape(key) + "=" + escape(value) + "&pad=" + std::string(pad, 'p');
  const std::string target = path + query;

  std::string start_line = method + " " + target + (http10 ? " HTTP/1.0" : " HTTP/1.1") + "\r\n";
  std::string fields = "Host: localhost\r\n";
  if (upgrade) {
    fields +=
        "Connection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 13\r\n"
        "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n";
  } else if (close) {
    fields += "Connection: close\r\n";
  }
  fields += "X-Fill: " + std::string(fill, 'f') + "\r\n";
  if (body > 0) fields += "Content-Length: " + std::to_string(body) + "\r\n";
  fields += "\r\n";
  const std::string request = start_line + fields + std::string(body, 'b');

  std::string wire;
  const Served served = Serve(request + in.ConsumeRemainingBytesAsString(), &wire);
  CheckWire(wire, served);
  // Beast (1.81, basic_parser::put) counts a header's bytes from the first line it has not
  // consumed yet: the start line and the complete fields of earlier reads do not count. Here
  // every field before X-Fill is short, so the header may pass the limit by the start line and
  // those fields (a 510-byte start line and the upgrade fields passed it by 615 bytes, found by
  // this target in a CI run on 2026-11-28; regression_long_start_line_upgrade in the corpus).
  const std::size_t header = start_line.size() + fields.size();
  const std::size_t before_fill = start_line.size() + fields.find("X-Fill: ");
  const bool may_refuse = header > internal::kMaxRequestBytes || body > internal::kMaxRequestBytes;
  const bool must_refuse = start_line.size() > internal::kMaxRequestBytes ||
                           header > internal::kMaxRequestBytes + before_fill ||
                           body > internal::kMaxRequestBytes;
  if (!served.statuses.empty() && served.statuses[0] == 413) {
    FUZZ_CHECK(may_refuse, "a request within the limits was refused (413)");
    FUZZ_CHECK(served.statuses.size() == 1, "the connection went on after a 413");
    return;
  }
  FUZZ_CHECK(!must_refuse, "a request over the limits was read");
  const bool ws = upgrade && path == "/ws" && method == "GET" && !http10;
  if (ws) {
    FUZZ_CHECK(served.upgraded && served.statuses.empty(), "an upgrade to /ws was not handed over");
    return;
  }
  FUZZ_CHECK(!served.statuses.empty() && served.statuses[0] != 413,
             "a request within the limits was not answered");
}

// Reads messages as the server's peer reads them (the last text message is what the page
// asks for); returns them and the error that ended the reading.
struct Read {
  std::vector<std::pair<bool, std::string>> messages;  // (text, payload)
  beast::error_code error;
};

Read ReadWebSocket(const std::string& frames) {
  static const std::string kUpgrade =
      "GET /ws HTTP/1.1\r\nHost: localhost\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n"
      "Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n";
  internal::RequestParser parser;
  internal::LimitRequest(parser);
  beast::error_code ec;
  parser.put(asio::buffer(kUpgrade), ec);
  FUZZ_CHECK(!ec && parser.is_done(), "the upgrade request does not parse");
  const internal::BeastRequest req = parser.release();
  FUZZ_CHECK(internal::WebSocketRoute(TheServer().routes, req) != nullptr,
             "/ws is no WebSocket route");

  websocket::stream<beast::test::stream> ws(Io());
  beast::test::stream client(Io());
  ws.next_layer().connect(client);
  internal::LimitWebSocket(ws);
  ws.accept(req, ec);
  FUZZ_CHECK(!ec, "the WebSocket handshake failed");
  ws.next_layer().append(frames);
  ws.next_layer().close_remote();
  Read out;
  for (std::size_t i = 0; i <= frames.size(); ++i) {
    beast::flat_buffer buffer;
    ws.read(buffer, ec);
    if (ec) {
      out.error = ec;
      return out;
    }
    std::string payload = beast::buffers_to_string(buffer.data());
    FUZZ_CHECK(payload.size() <= kMaxWebSocketMessage,
               "a WebSocket message over the limit was read");
    FUZZ_CHECK(!ws.got_text() || catalog::IsValidUtf8(payload), "a text message is not UTF-8");
    out.messages.emplace_back(ws.got_text(), std::move(payload));
  }
  FUZZ_CHECK(false, "more WebSocket messages than bytes");
  return out;
}

void WebSocketRaw(std::string_view bytes) { ReadWebSocket(std::string(bytes)); }

// A client frame (RFC 6455 5.2): masked, payload length in 7, 16 or 64 bits.
void Frame(std::string& out, bool fin, int opcode, std::string_view payload, std::uint32_t key) {
  out.push_back(static_cast<char>((fin ? 0x80 : 0) | opcode));
  const std::size_t n = payload.size();
  if (n < 126) {
    out.push_back(static_cast<char>(0x80 | n));
  } else if (n < 65536) {
    out.push_back(static_cast<char>(0x80 | 126));
    out.push_back(static_cast<char>(n >> 8));
    out.push_back(static_cast<char>(n & 0xff));
  } else {
    out.push_back(static_cast<char>(0x80 | 127));
    for (int shift = 56; shift >= 0; shift -= 8) out.push_back(static_cast<char>(n >> shift));
  }
  const char mask[4] = {static_cast<char>(key >> 24), static_cast<char>(key >> 16),
                        static_cast<char>(key >> 8), static_cast<char>(key)};
  out.append(mask, 4);
  for (std::size_t i = 0; i < n; ++i) out.push_back(static_cast<char>(payload[i] ^ mask[i % 4]));
}

void WebSocketBuilt(FuzzedDataProvider& in) {
  std::string frames;
  std::vector<std::pair<bool, std::string>> sent;
  const std::uint32_t key = in.ConsumeIntegral<std::uint32_t>();
  while (in.remaining_bytes() > 0 && sent.size() < 16) {
    const bool text = in.ConsumeBool();
    const int pieces = in.ConsumeIntegralInRange(1, 3);
    const bool ping = in.ConsumeBool();
    // Payloads near the limit: a fuzzed prefix, then filler.
    std::string payload = in.ConsumeRandomLengthString(64);
    payload.append(in.ConsumeIntegralInRange<std::size_t>(0, 5000), 'x');
    sent.emplace_back(text, payload);
    std::size_t at = 0;
    for (int k = 0; k < pieces; ++k) {
      const std::size_t left = payload.size() - at;
      const std::size_t n = k + 1 == pieces ? left : left / 2;
      Frame(frames, k + 1 == pieces, k == 0 ? (text ? 1 : 2) : 0,
            std::string_view(payload).substr(at, n), key);
      at += n;
      if (ping && k + 1 < pieces) Frame(frames, true, 9, "ping", key);
    }
  }
  const bool close = in.ConsumeBool();
  if (close) Frame(frames, true, 8, std::string("\x03\xe8", 2), key);  // 1000, normal

  const Read read = ReadWebSocket(frames);
  std::size_t i = 0;
  for (; i < sent.size(); ++i) {
    const auto& [text, payload] = sent[i];
    if (payload.size() > kMaxWebSocketMessage || (text && !catalog::IsValidUtf8(payload))) break;
    FUZZ_CHECK(i < read.messages.size() && read.messages[i] == sent[i],
               "a WebSocket message was not read back as sent");
  }
  FUZZ_CHECK(read.messages.size() == i, "messages were read after one the server must refuse");
  if (i < sent.size()) {
    FUZZ_CHECK(read.error == websocket::error::message_too_big ||
                   read.error == websocket::error::bad_frame_payload,
               "a message over the limit or not UTF-8 was refused with another error");
  } else if (close) {
    FUZZ_CHECK(read.error == websocket::error::closed, "a close frame did not close the stream");
  }
}

}  // namespace
}  // namespace gfrep::replica::web

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace gfrep::replica::web;
  if (size < 1) return 0;
  const std::string_view rest(reinterpret_cast<const char*>(data + 1), size - 1);
  FuzzedDataProvider in(data + 1, size - 1);
  switch (data[0] % 4) {
    case 0:
      Raw(rest);
      break;
    case 1:
      Built(in);
      break;
    case 2:
      WebSocketRaw(rest);
      break;
    default:
      WebSocketBuilt(in);
      break;
  }
  return 0;
}
