// Protocol-level tests against an in-process AgentServer over real loopback TCP:
// authentication, session tokens (wrong, replayed), garbage and oversized frames, JSON of
// the wrong types, resource bounds before authentication, concurrent and hand-written
// (misbehaving) senders, reserved spool names and cancellation of a pull.
#include "transfer/agent.h"

#include <arpa/inet.h>
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <spdlog/spdlog.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <future>
#include <mutex>
#include <optional>
#include <thread>
#include <utility>

#include "tests/support/temp_dir.h"
#include "transfer/checksum.h"
#include "transfer/client.h"
#include "transfer/internal/engine.h"

namespace gfrep::transfer {
namespace {

namespace asio = boost::asio;
using internal::Json;
using namespace std::chrono_literals;

// Resident memory of this process (the in-process agent's included), in bytes.
std::uint64_t VmRssBytes() {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("VmRSS:", 0) == 0) return std::stoull(line.substr(6)) * 1024;
  }
  return 0;
}

// Compares bytes without printing them (they are large and binary).
::testing::AssertionResult SameBytes(const std::string& got, const std::string& want) {
  if (got == want) return ::testing::AssertionSuccess();
  std::size_t i = 0;
  while (i < got.size() && i < want.size() && got[i] == want[i]) ++i;
  return ::testing::AssertionFailure() << "contents differ: " << got.size() << " vs " << want.size()
                                       << " bytes, first difference at byte " << i;
}

// A blocking TCP connection to `to` from the local address `from` (e.g. "127.0.0.2"), or -1.
int ConnectFrom(const char* from, const Endpoint& to) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  sockaddr_in src{};
  src.sin_family = AF_INET;
  ::inet_pton(AF_INET, from, &src.sin_addr);
  sockaddr_in dst{};
  dst.sin_family = AF_INET;
  dst.sin_port = htons(to.port);
  ::inet_pton(AF_INET, to.host.c_str(), &dst.sin_addr);
  if (::bind(fd, reinterpret_cast<sockaddr*>(&src), sizeof(src)) != 0 ||
      ::connect(fd, reinterpret_cast<sockaddr*>(&dst), sizeof(dst)) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

// True if the peer closed `fd` (EOF or reset) within `timeout`, without sending anything.
bool ClosedWithoutData(int fd, std::chrono::milliseconds timeout) {
  pollfd p{fd, POLLIN, 0};
  if (::poll(&p, 1, static_cast<int>(timeout.count())) != 1) return false;
  char c;
  ssize_t n = ::recv(fd, &c, 1, 0);
  return n == 0 || (n < 0 && errno == ECONNRESET);
}

// An on-path attacker between a client and the agent: relays every connection, and rewrites
// the payload of each control frame the client sends with `rewrite` (the header stays valid:
// its check covers the header only). Without `rewrite` it relays the bytes as they come (TLS
// included). Either way it records every byte it saw, both ways (seen()). Stops and joins its
// threads when destroyed.
class TamperingProxy {
 public:
  TamperingProxy(Endpoint agent, std::function<void(std::string&)> rewrite)
      : agent_(std::move(agent)), rewrite_(std::move(rewrite)) {
    listen_fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    ::inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
    socklen_t len = sizeof(a);
    if (::bind(listen_fd_, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0 || ::listen(listen_fd_, 64) != 0 ||
        ::getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
      ADD_FAILURE() << "proxy: " << std::strerror(errno);
      return;
    }
    endpoint_ = Endpoint{"127.0.0.1", ntohs(a.sin_port)};
    threads_.emplace_back([this] { AcceptLoop(); });
  }
  ~TamperingProxy() {
    stopping_ = true;
    ::shutdown(listen_fd_, SHUT_RDWR);
    {
      std::lock_guard<std::mutex> lock(mu_);
      for (int fd : fds_) ::shutdown(fd, SHUT_RDWR);
    }
    for (std::size_t i = 0;; ++i) {  // threads_ may grow until the accept loop ended
      std::thread t;
      {
        std::lock_guard<std::mutex> lock(mu_);
        if (i >= threads_.size()) break;
        t = std::move(threads_[i]);
      }
      if (t.joinable()) t.join();
    }
    std::lock_guard<std::mutex> lock(mu_);
    for (int fd : fds_) ::close(fd);
    ::close(listen_fd_);
  }
  const Endpoint& endpoint() const { return endpoint_; }
  int rewritten() const { return rewritten_; }
  // Everything relayed so far, both directions interleaved; clears the record.
  std::string TakeSeen() {
    std::lock_guard<std::mutex> lock(mu_);
    return std::exchange(seen_, "");
  }

 private:
  static bool ReadAll(int fd, void* p, std::size_t n) {
    auto* c = static_cast<char*>(p);
    while (n > 0) {
      ssize_t r = ::recv(fd, c, n, 0);
      if (r <= 0) return false;
      c += r;
      n -= static_cast<std::size_t>(r);
    }
    return true;
  }
  static bool WriteAll(int fd, const void* p, std::size_t n) {
    const auto* c = static_cast<const char*>(p);
    while (n > 0) {
      ssize_t w = ::send(fd, c, n, MSG_NOSIGNAL);
      if (w <= 0) return false;
      c += w;
      n -= static_cast<std::size_t>(w);
    }
    return true;
  }
  void AcceptLoop() {
    while (!stopping_) {
      int client = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
      if (client < 0) return;
      int agent = ConnectFrom("127.0.0.1", agent_);
      std::lock_guard<std::mutex> lock(mu_);
      fds_.push_back(client);
      if (agent < 0) {
        ::shutdown(client, SHUT_RDWR);
        continue;
      }
      fds_.push_back(agent);
      if (rewrite_) {
        threads_.emplace_back([this, client, agent] { ClientToAgent(client, agent); });
      } else {
        threads_.emplace_back([this, client, agent] { Relay(client, agent); });
      }
      threads_.emplace_back([this, client, agent] { Relay(agent, client); });  // as is
    }
  }
  void Relay(int from, int to) {
    char buf[65536];
    for (;;) {
      ssize_t r = ::recv(from, buf, sizeof(buf), 0);
      if (r <= 0) break;
      Record(std::string_view(buf, static_cast<std::size_t>(r)));
      if (!WriteAll(to, buf, static_cast<std::size_t>(r))) break;
    }
    ::shutdown(to, SHUT_RDWR);
  }
  void Record(std::string_view bytes) {
    std::lock_guard<std::mutex> lock(mu_);
    seen_.append(bytes);
  }
  void ClientToAgent(int client, int agent) {
    for (;;) {
      internal::HeaderBytes h;
      if (!ReadAll(client, h.data(), h.size())) break;
      absl::StatusOr<internal::FrameHeader> fh = internal::DecodeHeader(h, UINT32_MAX);
      if (!fh.ok()) break;
      std::string payload(fh->length, '\0');
      if (!ReadAll(client, payload.data(), payload.size())) break;
      if (fh->type == internal::FrameType::kControl) {
        const std::string before = payload;
        rewrite_(payload);
        if (payload != before) ++rewritten_;
      }
      Record(std::string_view(reinterpret_cast<const char*>(h.data()), h.size()));
      Record(payload);
      if (!WriteAll(agent, h.data(), h.size()) || !WriteAll(agent, payload.data(), payload.size())) break;
    }
    ::shutdown(agent, SHUT_RDWR);
  }

  Endpoint agent_;
  std::function<void(std::string&)> rewrite_;
  int listen_fd_ = -1;
  Endpoint endpoint_;
  std::atomic<bool> stopping_{false};
  std::atomic<int> rewritten_{0};
  std::mutex mu_;
  std::vector<int> fds_;
  std::vector<std::thread> threads_;
  std::string seen_;  // guarded by mu_
};

// A throwaway CA (openssl CLI) in `dir`: ca.pem, agent.pem/key naming 127.0.0.1, and a client
// certificate client.pem/key. True on success.
bool MakeTestCertificates(const std::filesystem::path& dir) {
  const std::string d = dir.string();
  const std::string cmd =
      "cd '" + d + "' && openssl req -x509 -newkey rsa:2048 -nodes -days 1 -subj /CN=ca "
      "-keyout ca.key -out ca.pem 2>/dev/null && printf 'subjectAltName=IP:127.0.0.1\\n' > san.ext && "
      "for n in agent client; do openssl req -newkey rsa:2048 -nodes -subj /CN=$n -keyout $n.key "
      "-out $n.csr 2>/dev/null && openssl x509 -req -in $n.csr -CA ca.pem -CAkey ca.key "
      "-CAcreateserial -days 1 -extfile san.ext -out $n.pem 2>/dev/null || exit 1; done";
  return std::system(cmd.c_str()) == 0;
}

class AgentTest : public ::testing::Test {
 protected:
  AgentTest() : dir_("agent") {
    StartAgent([](AgentOptions&) {});
    testing::WriteRandomFile(dir_.path() / "spool" / "f.dat", 3 << 20, 5);
    options_.shared_key = std::string(32, 'k');
    options_.route.streams = 3;
    options_.route.stripe_unit = 64 << 10;
    options_.io_timeout = std::chrono::milliseconds(3000);
  }
  ~AgentTest() override { StopAgent(); }

  // Starts the in-process agent on the test spool, with `adjust` applied to its options.
  void StartAgent(const std::function<void(AgentOptions&)>& adjust) {
    AgentOptions o;
    o.spool = dir_.path() / "spool";
    o.shared_key = std::string(32, 'k');
    o.defaults.io_timeout = std::chrono::milliseconds(3000);
    o.on_file_committed = [this](const std::filesystem::path& p, const TransferStats&) {
      std::lock_guard<std::mutex> lock(mu_);
      committed_.push_back(p);
      committed_cv_.notify_all();
    };
    adjust(o);
    absl::StatusOr<std::unique_ptr<AgentServer>> server = AgentServer::Create(std::move(o));
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = std::move(*server);
    endpoint_ = *server_->Start();
    thread_ = std::thread([this] { server_->Run(); });
  }
  void StopAgent() {
    if (server_ == nullptr) return;
    server_->Stop();
    thread_.join();
    server_.reset();
  }

  // A control connection (TLS with `tls_ctx`) that asked for spool file f.dat and got its
  // offer: the session's token, its data connections not yet joined.
  struct OpenGet {
    internal::ClientConnection control;
    std::string token;
  };
  asio::awaitable<absl::StatusOr<OpenGet>> GetOverOneStream(asio::ssl::context* tls_ctx) {
    auto log = spdlog::default_logger();
    absl::StatusOr<internal::ClientConnection> ctrl =
        co_await internal::ConnectTo(endpoint_, "control", options_, tls_ctx, *log);
    if (!ctrl.ok()) co_return ctrl.status();
    Json get{{"op", "get"}, {"path", "f.dat"}, {"options", internal::RouteToJson(options_)}};
    if (absl::Status w = co_await ctrl->conn->SendControl(get); !w.ok()) co_return w;
    absl::StatusOr<Json> offer = co_await ctrl->conn->ReadControl();
    if (!offer.ok()) co_return offer.status();
    if (!offer->contains("token") || !(*offer)["token"].is_string()) co_return absl::DataLossError("offer without token");
    co_return OpenGet{*ctrl, (*offer)["token"].get<std::string>()};
  }

  // Runs `body` as a coroutine on a fresh io_context and returns its status.
  absl::Status RunClient(std::function<asio::awaitable<absl::Status>()> body) {
    asio::io_context io;
    absl::Status result = absl::UnknownError("not run");
    asio::co_spawn(io, body(), [&](std::exception_ptr e, absl::Status s) {
      result = e ? absl::InternalError("exception") : s;
    });
    io.run();
    return result;
  }

  // A data connection (one stream) joins session `token` early; 300 ms later (so that the
  // join is there first) a control connection asks for `path` whole, naming that token.
  struct EarlyRace {
    absl::Status join = absl::UnknownError("not run");
    absl::StatusOr<Json> reply = absl::UnknownError("not run");  // the offer, or the refusal
    bool answered_before_get = false;
    std::chrono::steady_clock::duration join_took{};
  };
  absl::Status JoinAheadOfGet(const std::string& token, const std::string& path, EarlyRace& race) {
    return RunClient([&]() -> asio::awaitable<absl::Status> {
      auto log = spdlog::default_logger();
      auto ex = co_await asio::this_coro::executor;
      options_.route.streams = 1;
      bool get_sent = false;
      std::vector<std::function<asio::awaitable<absl::Status>()>> both;
      both.push_back([&]() -> asio::awaitable<absl::Status> {
        absl::StatusOr<internal::ClientConnection> d =
            co_await internal::ConnectTo(endpoint_, "data", options_, nullptr, *log);
        if (!d.ok()) co_return d.status();
        if (!d->joins_early) co_return absl::FailedPreconditionError("the agent did not say joins_early");
        const auto start = std::chrono::steady_clock::now();
        race.join = co_await internal::SendJoin(*d, token, options_.shared_key, /*early=*/true);
        race.join_took = std::chrono::steady_clock::now() - start;
        race.answered_before_get = !get_sent;
        co_return absl::OkStatus();
      });
      both.push_back([&]() -> asio::awaitable<absl::Status> {
        asio::steady_timer wait(ex, std::chrono::milliseconds(300));
        co_await wait.async_wait(internal::kNoThrow);
        absl::StatusOr<internal::ClientConnection> ctrl =
            co_await internal::ConnectTo(endpoint_, "control", options_, nullptr, *log);
        if (!ctrl.ok()) co_return ctrl.status();
        Json get{{"op", "get"}, {"path", path}, {"whole", true}, {"token", token},
                 {"options", internal::RouteToJson(options_)}};
        get_sent = true;
        if (absl::Status w = co_await ctrl->conn->SendControl(get); !w.ok()) co_return w;
        race.reply = co_await ctrl->conn->ReadControl();
        co_return absl::OkStatus();
      });
      co_return co_await internal::RunConcurrently(std::move(both));
    });
  }

  gfrep::testing::TempDir dir_;
  std::unique_ptr<AgentServer> server_;
  Endpoint endpoint_;
  std::thread thread_;
  TransferOptions options_;
  // The agent runs the hook after it answered "done", so the client may return first.
  std::vector<std::filesystem::path> WaitCommitted(std::size_t n) {
    std::unique_lock<std::mutex> lock(mu_);
    committed_cv_.wait_for(lock, std::chrono::seconds(10), [&] { return committed_.size() >= n; });
    return committed_;
  }

  std::mutex mu_;
  std::condition_variable committed_cv_;
  std::vector<std::filesystem::path> committed_;
};

TEST_F(AgentTest, PushPullRoundTripAndCommitHook) {
  absl::StatusOr<TransferStats> pulled = Pull(endpoint_, "f.dat", dir_.path() / "copy.dat", options_);
  ASSERT_TRUE(pulled.ok()) << pulled.status();
  EXPECT_EQ(pulled->bytes, 3u << 20);
  EXPECT_EQ(pulled->streams, 3);
  EXPECT_EQ(testing::ReadFile(dir_.path() / "copy.dat"), testing::ReadFile(dir_.path() / "spool" / "f.dat"));
  absl::StatusOr<TransferStats> pushed = Push(dir_.path() / "copy.dat", endpoint_, "d/back.dat", options_);
  ASSERT_TRUE(pushed.ok()) << pushed.status();
  EXPECT_EQ(pushed->checksum, pulled->checksum);
  std::vector<std::filesystem::path> committed = WaitCommitted(1);
  ASSERT_EQ(committed.size(), 1u);
  EXPECT_EQ(committed[0].filename(), "back.dat");
  EXPECT_FALSE(std::filesystem::exists(dir_.path() / ".gfrep-tmp"));
}

// Without TLS, an on-path attacker who cannot read the key file used to be able to rewrite
// any control message after the shared-key handshake: here the put's destination path. Each
// message now carries a MAC keyed from the handshake; the altered request is refused and no
// file is written under either name.
TEST_F(AgentTest, AControlMessageAlteredOnThePathIsRefused) {
  testing::WriteRandomFile(dir_.path() / "src.dat", 1 << 20, 21);
  auto swap_name = [](std::string& payload) {
    for (std::size_t at; (at = payload.find("victim-a.dat")) != std::string::npos;) payload[at + 7] = 'b';
  };
  TamperingProxy proxy(endpoint_, swap_name);
  absl::StatusOr<TransferStats> put = Push(dir_.path() / "src.dat", proxy.endpoint(), "victim-a.dat", options_);
  EXPECT_GE(proxy.rewritten(), 1);
  ASSERT_FALSE(put.ok());
  EXPECT_TRUE(absl::IsPermissionDenied(put.status())) << put.status();
  EXPECT_NE(put.status().message().find("failed its authentication"), absl::string_view::npos) << put.status();
  EXPECT_FALSE(std::filesystem::exists(dir_.path() / "spool" / "victim-a.dat"));
  EXPECT_FALSE(std::filesystem::exists(dir_.path() / "spool" / "victim-b.dat"));
  // Through the same proxy, a message it leaves alone passes: the MAC is not in the way.
  absl::StatusOr<TransferStats> clean = Push(dir_.path() / "src.dat", proxy.endpoint(), "clean.dat", options_);
  ASSERT_TRUE(clean.ok()) << clean.status();
  EXPECT_TRUE(SameBytes(testing::ReadFile(dir_.path() / "spool" / "clean.dat"),
                        testing::ReadFile(dir_.path() / "src.dat")));
}

// tls_control: the control connection is mutual TLS (certificate authentication, nothing
// of it readable on the path) while the data connections carry the file in clear text, joined
// with a key exported from that TLS session (no shared key needed, and the shared key does
// not let anyone else join). tls encrypts the data too.
TEST_F(AgentTest, MutualTlsOnTheControlConnectionAloneLeavesDataClearAndKeysTheJoins) {
  ASSERT_TRUE(MakeTestCertificates(dir_.path()));
  const std::filesystem::path d = dir_.path();
  int certificates_seen = 0;
  StopAgent();
  StartAgent([&](AgentOptions& o) {
    o.tls = {d / "agent.pem", d / "agent.key", d / "ca.pem"};
    o.require_mutual_tls = true;
    o.authorize_certificate = [&](const std::vector<std::string>&) {
      ++certificates_seen;
      return absl::OkStatus();
    };
  });
  testing::WriteRandomFile(d / "src.dat", 1 << 20, 31);
  const std::string src = testing::ReadFile(d / "src.dat");
  const std::string chunk = src.substr(300000, 64);  // 64 random bytes of the file
  TamperingProxy proxy(endpoint_, nullptr);
  options_.shared_key = std::string(32, 'x');  // not the agent's: the certificate is what counts
  options_.tls_options = {d / "client.pem", d / "client.key", d / "ca.pem"};

  // Control in clear text: refused by an agent that requires mutual TLS.
  absl::StatusOr<TransferStats> clear = Push(d / "src.dat", proxy.endpoint(), "clear-name.dat", options_);
  ASSERT_FALSE(clear.ok());
  EXPECT_NE(clear.status().message().find("requires mutual TLS"), absl::string_view::npos) << clear.status();
  // TLS without a client certificate, holding the agent's own shared key: refused too.
  TransferOptions keyed = options_;
  keyed.tls_control = true;
  keyed.shared_key = std::string(32, 'k');
  keyed.tls_options = {{}, {}, d / "ca.pem"};
  absl::StatusOr<TransferStats> no_cert = Push(d / "src.dat", endpoint_, "keyed.dat", keyed);
  ASSERT_FALSE(no_cert.ok());
  EXPECT_TRUE(absl::IsPermissionDenied(no_cert.status())) << no_cert.status();
  EXPECT_NE(no_cert.status().message().find("requires mutual TLS"), absl::string_view::npos) << no_cert.status();
  // A client certificate from another CA fails the TLS handshake ("tlsv1 alert unknown ca").
  std::filesystem::create_directories(d / "other");
  ASSERT_TRUE(MakeTestCertificates(d / "other"));
  keyed.tls_options = {d / "other" / "client.pem", d / "other" / "client.key", d / "ca.pem"};
  absl::StatusOr<TransferStats> foreign = Push(d / "src.dat", endpoint_, "foreign.dat", keyed);
  ASSERT_FALSE(foreign.ok());
  EXPECT_NE(foreign.status().message().find("unknown ca"), absl::string_view::npos) << foreign.status();
  EXPECT_EQ(certificates_seen, 0);
  for (const char* name : {"clear-name.dat", "keyed.dat", "foreign.dat"}) {
    EXPECT_FALSE(std::filesystem::exists(d / "spool" / name)) << name;
  }

  options_.tls_control = true;
  proxy.TakeSeen();
  absl::StatusOr<TransferStats> put = Push(d / "src.dat", proxy.endpoint(), "hidden-name.dat", options_);
  ASSERT_TRUE(put.ok()) << put.status();
  EXPECT_EQ(testing::ReadFile(d / "spool" / "hidden-name.dat"), src);
  EXPECT_EQ(certificates_seen, 1);
  std::string seen = proxy.TakeSeen();
  EXPECT_NE(seen.find(chunk), std::string::npos) << "the data connections should carry the file in clear";
  EXPECT_EQ(seen.find("hidden-name"), std::string::npos) << "the control connection leaked the path";

  // tls: nothing of the file on the path either.
  options_.tls = true;
  put = Push(d / "src.dat", proxy.endpoint(), "sealed-name.dat", options_);
  ASSERT_TRUE(put.ok()) << put.status();
  EXPECT_EQ(testing::ReadFile(d / "spool" / "sealed-name.dat"), src);
  seen = proxy.TakeSeen();
  EXPECT_EQ(seen.find(chunk), std::string::npos) << "tls: the file crossed in clear";
  EXPECT_EQ(seen.find("sealed-name"), std::string::npos);
  options_.tls = false;

  // A data connection keyed by the agent's shared key cannot join a session opened over TLS.
  absl::Status join = RunClient([&]() -> asio::awaitable<absl::Status> {
    auto log = spdlog::default_logger();
    absl::StatusOr<std::unique_ptr<asio::ssl::context>> ctx = internal::MakeTlsContext(options_.tls_options, false);
    if (!ctx.ok()) co_return ctx.status();
    options_.route.streams = 1;
    absl::StatusOr<OpenGet> get = co_await GetOverOneStream(ctx->get());
    if (!get.ok()) co_return get.status();
    TransferOptions clear_text = options_;
    clear_text.tls_control = false;
    clear_text.shared_key = std::string(32, 'k');  // the agent's own key
    absl::StatusOr<internal::ConnPtr> data = co_await internal::JoinSession(
        endpoint_, get->token, clear_text, nullptr, *log);
    co_return data.status();
  });
  EXPECT_TRUE(absl::IsPermissionDenied(join)) << join;
  EXPECT_NE(join.message().find("session token"), absl::string_view::npos) << join;
}

// A server that ends its TLS handshake and sends its welcome only once it has read the
// client's request: a client holding a certificate that waited for the welcome first (a
// round trip more to the first reply) would never get it.
TEST_F(AgentTest, UnderMutualTlsTheRequestFollowsTheHandshakeWithoutWaitingForTheWelcome) {
  ASSERT_TRUE(MakeTestCertificates(dir_.path()));
  const std::filesystem::path d = dir_.path();
  TransferOptions o = options_;
  o.tls_control = true;
  o.tls_options = {d / "client.pem", d / "client.key", d / "ca.pem"};
  const Json get{{"op", "get"}, {"path", "f.dat"}};
  bool hello_said_early = false;
  std::string read_before_welcome;
  bool request_sent = false;
  absl::Status s = RunClient([&]() -> asio::awaitable<absl::Status> {
    auto ex = co_await asio::this_coro::executor;
    asio::ip::tcp::acceptor acceptor(ex, {asio::ip::make_address("127.0.0.1"), 0});
    const Endpoint at{"127.0.0.1", acceptor.local_endpoint().port()};
    absl::StatusOr<std::unique_ptr<asio::ssl::context>> server_tls =
        internal::MakeTlsContext({d / "agent.pem", d / "agent.key", d / "ca.pem"}, true);
    absl::StatusOr<std::unique_ptr<asio::ssl::context>> client_tls =
        internal::MakeTlsContext(o.tls_options, false);
    if (!server_tls.ok()) co_return server_tls.status();
    if (!client_tls.ok()) co_return client_tls.status();
    std::vector<std::function<asio::awaitable<absl::Status>()>> both;
    both.push_back([&]() -> asio::awaitable<absl::Status> {
      auto [aec, sock] = co_await acceptor.async_accept(internal::kNoThrow);
      if (aec) co_return absl::InternalError(aec.message());
      auto conn = std::make_shared<internal::Conn>(std::move(sock));
      asio::steady_timer guard(ex, 5s);  // a client that waits for the welcome: closed
      guard.async_wait([conn](boost::system::error_code ec) {
        if (!ec) conn->Close();
      });
      absl::StatusOr<Json> hello = co_await conn->ReadControl(internal::kMaxPreAuthControlPayload);
      if (!hello.ok()) co_return hello.status();
      hello_said_early = hello->value("early", false);
      const Json hello_ok{{"op", "hello_ok"}, {"nonce", std::string(32, 'n')}};
      if (absl::Status w = co_await conn->SendControl(hello_ok); !w.ok()) co_return w;
      if (absl::Status h = co_await conn->Handshake(**server_tls, true); !h.ok()) co_return h;
      absl::StatusOr<Json> req = co_await conn->ReadControl();
      if (!req.ok()) {
        co_return absl::DeadlineExceededError(
            fmt::format("no request before the welcome: {}", req.status().ToString()));
      }
      read_before_welcome = req->value("op", std::string());
      guard.cancel();
      const Json welcome{{"op", "welcome"}, {"method", "certificate"}};
      co_return co_await conn->SendControl(welcome);
    });
    both.push_back([&]() -> asio::awaitable<absl::Status> {
      auto log = spdlog::default_logger();
      absl::StatusOr<internal::ClientConnection> c =
          co_await internal::ConnectTo(at, "control", o, client_tls->get(), *log, &get);
      if (!c.ok()) co_return c.status();
      request_sent = c->request_sent;
      co_return absl::OkStatus();
    });
    co_return co_await internal::RunConcurrently(std::move(both));
  });
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_TRUE(hello_said_early);
  EXPECT_EQ(read_before_welcome, "get");
  EXPECT_TRUE(request_sent);
}

// An agent with TLS that does not verify client certificates challenges instead: it drops
// the request sent behind the handshake unread and takes it again behind the shared key.
TEST_F(AgentTest, AnAgentThatChallengesACertificateHolderStillServesItsEarlyRequest) {
  ASSERT_TRUE(MakeTestCertificates(dir_.path()));
  const std::filesystem::path d = dir_.path();
  StopAgent();
  StartAgent([&](AgentOptions& a) { a.tls = {d / "agent.pem", d / "agent.key", {}}; });
  options_.tls_control = true;
  options_.tls_options = {d / "client.pem", d / "client.key", d / "ca.pem"};
  absl::StatusOr<TransferStats> got = Pull(endpoint_, "f.dat", d / "copy.dat", options_);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(testing::ReadFile(d / "copy.dat"), testing::ReadFile(d / "spool" / "f.dat"));
  testing::WriteRandomFile(d / "src.dat", 300000, 7);
  absl::StatusOr<TransferStats> put = Push(d / "src.dat", endpoint_, "put.dat", options_);
  ASSERT_TRUE(put.ok()) << put.status();
  EXPECT_EQ(testing::ReadFile(d / "spool" / "put.dat"), testing::ReadFile(d / "src.dat"));
  options_.shared_key = std::string(32, 'x');  // and the challenge is still a real one
  absl::StatusOr<TransferStats> wrong = Pull(endpoint_, "f.dat", d / "copy2.dat", options_);
  EXPECT_TRUE(absl::IsPermissionDenied(wrong.status())) << wrong.status();
  EXPECT_FALSE(std::filesystem::exists(d / "copy2.dat"));
}

TEST_F(AgentTest, EmptyFileCopies) {
  testing::WriteRandomFile(dir_.path() / "empty", 0, 1);
  absl::StatusOr<TransferStats> s = Push(dir_.path() / "empty", endpoint_, "empty", options_);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_TRUE(std::filesystem::exists(dir_.path() / "spool" / "empty"));
}

TEST_F(AgentTest, WrongKeyIsRefusedWithPermissionDenied) {
  options_.shared_key = std::string(32, 'x');
  absl::StatusOr<TransferStats> s = Pull(endpoint_, "f.dat", dir_.path() / "copy.dat", options_);
  EXPECT_TRUE(absl::IsPermissionDenied(s.status())) << s.status();
  EXPECT_NE(s.status().message().find("authentication failed"), absl::string_view::npos);
  EXPECT_FALSE(std::filesystem::exists(dir_.path() / "copy.dat"));
}

TEST_F(AgentTest, UnknownTokenIsRefused) {
  absl::Status s = RunClient([&]() -> asio::awaitable<absl::Status> {
    auto log = spdlog::default_logger();
    absl::StatusOr<internal::ConnPtr> c =
        co_await internal::JoinSession(endpoint_, std::string(32, 'a'), options_, nullptr, *log);
    co_return c.status();
  });
  EXPECT_TRUE(absl::IsPermissionDenied(s)) << s;
  EXPECT_NE(s.message().find("session token"), absl::string_view::npos);
}

TEST_F(AgentTest, ReplayedTokenIsRefused) {
  absl::Status s = RunClient([&]() -> asio::awaitable<absl::Status> {
    auto log = spdlog::default_logger();
    options_.route.streams = 1;
    absl::StatusOr<OpenGet> get = co_await GetOverOneStream(nullptr);
    if (!get.ok()) co_return get.status();
    internal::ClientConnection* ctrl = &get->control;
    std::string token = get->token;
    Json ranges{{"op", "ranges"}, {"ranges", Json::array()}, {"resumed_bytes", 0}};
    if (absl::Status w = co_await ctrl->conn->SendControl(ranges); !w.ok()) co_return w;
    absl::StatusOr<internal::ConnPtr> first =
        co_await internal::JoinSession(endpoint_, token, options_, nullptr, *log);
    if (!first.ok()) co_return absl::InternalError(fmt::format("first join failed: {}", first.status().ToString()));
    // The session had one stream: the same token again must be refused.
    absl::StatusOr<internal::ConnPtr> again =
        co_await internal::JoinSession(endpoint_, token, options_, nullptr, *log);
    co_return again.status();
  });
  EXPECT_TRUE(absl::IsPermissionDenied(s)) << s;
}

// A client that chose its session's token (a get's "token") sends its data connections'
// joins beside the get: the agent holds a join that comes first until the get opens the
// session (before 2026-11-30 it refused it as an unknown token).
TEST_F(AgentTest, AJoinAheadOfItsGetIsHeldUntilTheGetOpensTheSession) {
  const std::string token = internal::RandomHex(16);
  EarlyRace race;
  absl::Status s = JoinAheadOfGet(token, "f.dat", race);
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_TRUE(race.join.ok()) << race.join;
  EXPECT_FALSE(race.answered_before_get) << "the join was answered before its session existed";
  ASSERT_TRUE(race.reply.ok()) << race.reply.status();
  EXPECT_EQ(race.reply->value("token", ""), token) << "the session is not the one the client named";
}

// A join held for a get that then fails is refused when the get fails, not when the
// agent's io_timeout (3 s here) runs out.
TEST_F(AgentTest, AJoinHeldForAGetThatFailsIsRefusedWithIt) {
  EarlyRace race;
  absl::Status s = JoinAheadOfGet(internal::RandomHex(16), "no-such-file.dat", race);
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_TRUE(absl::IsNotFound(race.reply.status())) << race.reply.status();
  EXPECT_TRUE(absl::IsPermissionDenied(race.join)) << race.join;
  EXPECT_NE(race.join.message().find("session token"), absl::string_view::npos) << race.join;
  EXPECT_LT(race.join_took, std::chrono::milliseconds(2500)) << "held until the agent's timeout";
}

// An early join whose get never comes is refused after half the agent's io_timeout (a join that
// does not say "early" is refused at once: UnknownTokenIsRefused).
TEST_F(AgentTest, AnEarlyJoinWhoseGetNeverComesIsRefusedAfterTheTimeout) {
  absl::Status early = RunClient([&]() -> asio::awaitable<absl::Status> {
    auto log = spdlog::default_logger();
    absl::StatusOr<internal::ClientConnection> d =
        co_await internal::ConnectTo(endpoint_, "data", options_, nullptr, *log);
    if (!d.ok()) co_return d.status();
    co_return co_await internal::SendJoin(*d, internal::RandomHex(16), options_.shared_key, true);
  });
  EXPECT_TRUE(absl::IsPermissionDenied(early)) << early;
  EXPECT_NE(early.message().find("session token"), absl::string_view::npos) << early;
}

// An early join without a token, or with one that is not a string, is refused like any bad
// join, and the agent serves on (until 2026-11-30's fix it read the missing token: a crash).
TEST_F(AgentTest, AnEarlyJoinWithoutAUsableTokenIsRefusedAndTheAgentServesOn) {
  for (const Json& token : {Json(), Json(42)}) {
    absl::Status s = RunClient([&]() -> asio::awaitable<absl::Status> {
      auto log = spdlog::default_logger();
      absl::StatusOr<internal::ClientConnection> d =
          co_await internal::ConnectTo(endpoint_, "data", options_, nullptr, *log);
      if (!d.ok()) co_return d.status();
      Json join{{"op", "join"}, {"early", true}, {"mac", std::string(64, '0')}};
      if (!token.is_null()) join["token"] = token;
      if (absl::Status w = co_await d->conn->SendControl(join); !w.ok()) co_return w;
      co_return (co_await d->conn->ReadControl(internal::kMaxPreAuthControlPayload)).status();
    });
    EXPECT_TRUE(absl::IsPermissionDenied(s)) << token.dump() << ": " << s;
  }
  absl::StatusOr<TransferStats> pulled = Pull(endpoint_, "f.dat", dir_.path() / "after.dat", options_);
  EXPECT_TRUE(pulled.ok()) << pulled.status();
}

// A get may name its session's token only once, and only as 32 lowercase hex digits.
TEST_F(AgentTest, AGetNamingATokenInUseOrMalformedIsRefused) {
  const std::string token = internal::RandomHex(16);
  absl::Status again = absl::UnknownError("not run");
  absl::Status malformed = absl::UnknownError("not run");
  absl::Status s = RunClient([&]() -> asio::awaitable<absl::Status> {
    auto log = spdlog::default_logger();
    options_.route.streams = 1;
    auto ask = [&](std::string t, absl::Status& out, std::optional<internal::ClientConnection>& keep)
        -> asio::awaitable<absl::Status> {
      absl::StatusOr<internal::ClientConnection> ctrl =
          co_await internal::ConnectTo(endpoint_, "control", options_, nullptr, *log);
      if (!ctrl.ok()) co_return ctrl.status();
      Json get{{"op", "get"}, {"path", "f.dat"}, {"token", std::move(t)},
               {"options", internal::RouteToJson(options_)}};
      if (absl::Status w = co_await ctrl->conn->SendControl(get); !w.ok()) co_return w;
      out = (co_await ctrl->conn->ReadControl()).status();
      keep = *ctrl;  // the session stays open while `keep` holds its control connection
      co_return absl::OkStatus();
    };
    std::optional<internal::ClientConnection> first, second, third;
    absl::Status opened = absl::UnknownError("not run");
    if (absl::Status e = co_await ask(token, opened, first); !e.ok()) co_return e;
    if (!opened.ok()) co_return opened;
    if (absl::Status e = co_await ask(token, again, second); !e.ok()) co_return e;
    co_return co_await ask("XYZ", malformed, third);
  });
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_TRUE(absl::IsAlreadyExists(again)) << again;
  EXPECT_TRUE(absl::IsInvalidArgument(malformed)) << malformed;
}

TEST_F(AgentTest, GarbageAndOversizedFramesAreRefusedAndServerKeepsServing) {
  absl::Status s = RunClient([&]() -> asio::awaitable<absl::Status> {
    auto ex = co_await asio::this_coro::executor;
    for (int variant = 0; variant < 3; ++variant) {
      asio::ip::tcp::socket sock(ex);
      auto [ec] = co_await sock.async_connect(
          {asio::ip::make_address(endpoint_.host), endpoint_.port}, internal::kNoThrow);
      if (ec) co_return absl::InternalError("connect");
      std::string bytes;
      if (variant == 0) bytes = std::string(200, '\x42');  // garbage
      if (variant == 1) {
        // A control frame header announcing more than the limit.
        internal::FrameHeader h{internal::FrameType::kControl, internal::kMaxControlPayload + 1, 0, 0};
        internal::HeaderBytes b = internal::EncodeHeader(h);
        bytes.assign(reinterpret_cast<const char*>(b.data()), b.size());
      }
      if (variant == 2) bytes = internal::EncodeFrame(internal::FrameType::kControl, "{\"op\":\"hel").substr(0, 40);
      auto [wec, n] = co_await asio::async_write(sock, asio::buffer(bytes), internal::kNoThrow);
      (void)n;
      if (variant == 2) sock.shutdown(asio::ip::tcp::socket::shutdown_send);  // truncated
      char buf[256];
      // The server answers with an error frame or just closes; either way the
      // connection ends (never hangs past its setup timeout).
      for (;;) {
        auto [rec, m] = co_await sock.async_read_some(asio::buffer(buf), internal::kNoThrow);
        if (rec) break;
      }
    }
    co_return absl::OkStatus();
  });
  EXPECT_TRUE(s.ok()) << s;
  absl::StatusOr<TransferStats> ok = Pull(endpoint_, "f.dat", dir_.path() / "after.dat", options_);
  EXPECT_TRUE(ok.ok()) << ok.status();
}

TEST_F(AgentTest, MissingSourceIsNotFound) {
  absl::StatusOr<TransferStats> s = Pull(endpoint_, "nope.dat", dir_.path() / "x", options_);
  EXPECT_TRUE(absl::IsNotFound(s.status())) << s.status();
  EXPECT_FALSE(std::filesystem::exists(dir_.path() / "x"));
  absl::StatusOr<TransferStats> p = Push(dir_.path() / "nope-local", endpoint_, "x", options_);
  EXPECT_TRUE(absl::IsNotFound(p.status())) << p.status();
}

TEST_F(AgentTest, PathEscapesAreRefused) {
  testing::WriteRandomFile(dir_.path() / "src", 1000, 1);
  for (const char* bad : {"../evil", "a/../../evil", "/tmp/evil"}) {
    absl::StatusOr<TransferStats> s = Push(dir_.path() / "src", endpoint_, bad, options_);
    EXPECT_TRUE(absl::IsInvalidArgument(s.status())) << bad << " " << s.status();
  }
  std::filesystem::create_directory_symlink(dir_.path(), dir_.path() / "spool" / "out");
  absl::StatusOr<TransferStats> s = Push(dir_.path() / "src", endpoint_, "out/evil", options_);
  EXPECT_TRUE(absl::IsPermissionDenied(s.status())) << s.status();
  EXPECT_FALSE(std::filesystem::exists(dir_.path() / "evil"));
  absl::StatusOr<TransferStats> g = Pull(endpoint_, "out/src", dir_.path() / "stolen", options_);
  EXPECT_TRUE(absl::IsPermissionDenied(g.status())) << g.status();
}

TEST_F(AgentTest, FlippedByteIsResentOnce) {
  testing::WriteRandomFile(dir_.path() / "src", 1 << 20, 9);
  options_.test_corrupt_offset = 300000;
  options_.test_corrupt_times = 1;
  absl::StatusOr<TransferStats> s = Push(dir_.path() / "src", endpoint_, "flip", options_);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->resend_rounds, 1);
  EXPECT_EQ(testing::ReadFile(dir_.path() / "spool" / "flip"), testing::ReadFile(dir_.path() / "src"));
}

TEST_F(AgentTest, PersistentCorruptionFailsWithDataLossAndNothingInPlace) {
  testing::WriteRandomFile(dir_.path() / "src", 1 << 20, 9);
  options_.test_corrupt_offset = 300000;
  options_.test_corrupt_times = 1000;
  absl::StatusOr<TransferStats> s = Push(dir_.path() / "src", endpoint_, "flip", options_);
  EXPECT_TRUE(absl::IsDataLoss(s.status())) << s.status();
  EXPECT_FALSE(std::filesystem::exists(dir_.path() / "spool" / "flip"));
}

TEST_F(AgentTest, CrcBlockChecksumAndOtherFileChecksumsWork) {
  options_.block_checksum = "crc32c";
  for (const char* alg : {"adler32", "sha256"}) {
    options_.checksum = alg;
    absl::StatusOr<TransferStats> s = Pull(endpoint_, "f.dat", dir_.path() / alg, options_);
    ASSERT_TRUE(s.ok()) << s.status();
    EXPECT_EQ(s->checksum, *ComputeFileChecksum(dir_.path() / "spool" / "f.dat", *ParseChecksumAlgorithm(alg)));
  }
}

// With a checksum that must be fed in file order (xxh3-128, sha256, adler32), blocks that
// arrive ahead of the end-to-end checksum's frontier are kept in receive buffers and hashed
// from memory; a full pool falls back to reading them back from the partial file.
TEST_F(AgentTest, ReceivePoolAndItsFallbackGiveTheRightChecksum) {
  const std::filesystem::path src = dir_.path() / "spool" / "f.dat";
  options_.checksum = "xxh3-128";
  const std::string want = *ComputeFileChecksum(src, ChecksumAlgorithm::kXxh3_128);
  options_.route.streams = 1;  // in order: nothing is ever read back
  absl::StatusOr<TransferStats> one = Pull(endpoint_, "f.dat", dir_.path() / "one", options_);
  ASSERT_TRUE(one.ok()) << one.status();
  EXPECT_EQ(one->checksum, want);
  EXPECT_EQ(one->checksum_read_back_bytes, 0u);
  options_.route.streams = 4;
  // Default pool (2 x streams blocks), one block, none: always the right checksum and file.
  for (std::uint64_t pool : {options_.receive_pool_bytes, std::uint64_t{64} << 10, std::uint64_t{0}}) {
    options_.receive_pool_bytes = pool;
    const std::filesystem::path out = dir_.path() / fmt::format("pool{}", pool);
    absl::StatusOr<TransferStats> s = Pull(endpoint_, "f.dat", out, options_);
    ASSERT_TRUE(s.ok()) << s.status();
    EXPECT_EQ(s->checksum, want) << "pool " << pool;
    EXPECT_EQ(*ComputeFileChecksum(out, ChecksumAlgorithm::kXxh3_128), want) << "pool " << pool;
    EXPECT_LE(s->checksum_read_back_bytes, s->bytes);
    // With a pool, the first block ahead of the frontier always fits it, so less than the
    // whole file is read back.
    if (pool != 0) {
      EXPECT_LT(s->checksum_read_back_bytes, s->bytes) << "pool " << pool;
    }
  }
}

// With xxh3-tree (the default) every block that starts and ends on a leaf is checked by its
// leaves' digests, which also make the file checksum in any order: nothing is read back.
// Blocks that are not whole leaves are checked as usual and their leaves are read back once.
TEST_F(AgentTest, TreeChecksumComesFromTheBlockPass) {
  const std::filesystem::path src = dir_.path() / "spool" / "f.dat";  // 3 MiB
  const std::string want = *ComputeFileChecksum(src, ChecksumAlgorithm::kXxh3Tree);
  ASSERT_EQ(options_.checksum, "xxh3-tree");
  options_.route.streams = 3;
  options_.route.stripe_unit = 1 << 20;
  absl::StatusOr<TransferStats> whole = Pull(endpoint_, "f.dat", dir_.path() / "whole", options_);
  ASSERT_TRUE(whole.ok()) << whole.status();
  EXPECT_EQ(whole->checksum, want);
  EXPECT_EQ(whole->checksum_read_back_bytes, 0u);
  EXPECT_EQ(testing::ReadFile(dir_.path() / "whole"), testing::ReadFile(src));
  // 192 KiB blocks are not whole leaves: right checksum, every leaf read back once.
  options_.route.stripe_unit = 192 << 10;
  absl::StatusOr<TransferStats> small = Pull(endpoint_, "f.dat", dir_.path() / "small", options_);
  ASSERT_TRUE(small.ok()) << small.status();
  EXPECT_EQ(small->checksum, want);
  EXPECT_EQ(small->checksum_read_back_bytes, small->bytes);
  // A flipped byte in a tree frame fails its leaf-digest check and is re-sent.
  options_.route.stripe_unit = 1 << 20;
  options_.test_corrupt_offset = (1 << 20) + 12345;
  options_.test_corrupt_times = 1;
  absl::StatusOr<TransferStats> flipped = Push(src, endpoint_, "flipped", options_);
  ASSERT_TRUE(flipped.ok()) << flipped.status();
  EXPECT_EQ(flipped->resend_rounds, 1);
  EXPECT_EQ(flipped->checksum, want);
  EXPECT_EQ(testing::ReadFile(dir_.path() / "spool" / "flipped"), testing::ReadFile(src));
}

// A damaged block is caught and re-sent whether it lands at the frontier, in the pool or past
// a full pool (the agent's receiver here has a pool of one block).
TEST_F(AgentTest, DamagedBlocksAreCaughtWithAPoolOfOneBlock) {
  StopAgent();
  StartAgent([](AgentOptions& o) { o.defaults.receive_pool_bytes = 64 << 10; });
  testing::WriteRandomFile(dir_.path() / "src", 2 << 20, 11);
  options_.checksum = "xxh3-128";
  for (std::int64_t at : {std::int64_t{0}, std::int64_t{300000}, std::int64_t{1500000}}) {
    options_.test_corrupt_offset = at;
    options_.test_corrupt_times = 1;
    const std::string name = fmt::format("flip{}", at);
    absl::StatusOr<TransferStats> s = Push(dir_.path() / "src", endpoint_, name, options_);
    ASSERT_TRUE(s.ok()) << s.status();
    EXPECT_EQ(s->resend_rounds, 1) << at;
    EXPECT_EQ(testing::ReadFile(dir_.path() / "spool" / name), testing::ReadFile(dir_.path() / "src")) << at;
  }
  options_.test_corrupt_offset = 1500000;
  options_.test_corrupt_times = 1000;
  absl::StatusOr<TransferStats> bad = Push(dir_.path() / "src", endpoint_, "never", options_);
  EXPECT_TRUE(absl::IsDataLoss(bad.status())) << bad.status();
  EXPECT_FALSE(std::filesystem::exists(dir_.path() / "spool" / "never"));
}

// Sends `text` as the first control frame of a fresh connection and reads the answer: the
// agent must refuse it (an error frame, or closing the connection), never crash.
absl::Status SendFirstFrame(const Endpoint& agent, std::string text) {
  asio::io_context io;
  absl::Status result = absl::UnknownError("not run");
  asio::co_spawn(
      io,
      [&]() -> asio::awaitable<absl::Status> {
        asio::ip::tcp::socket sock(io);
        auto [ec] = co_await sock.async_connect({asio::ip::make_address(agent.host), agent.port},
                                                internal::kNoThrow);
        if (ec) co_return absl::UnavailableError("connect");
        internal::Conn conn(std::move(sock));
        if (absl::Status s = co_await conn.SendFrame(internal::FrameType::kControl, text); !s.ok()) {
          co_return s;
        }
        absl::StatusOr<Json> reply = co_await conn.ReadControl();
        co_return reply.status();
      },
      [&](std::exception_ptr e, absl::Status s) { result = e ? absl::InternalError("exception") : s; });
  io.run();
  return result;
}

TEST_F(AgentTest, WrongJsonTypesBeforeAuthenticationAreRefusedAndTheAgentKeepsServing) {
  const std::string nonce = "0123456789abcdef0123456789abcdef";
  const std::vector<std::string> frames = {
      R"({"op":"hello","version":"1","role":"control","tls":false,"nonce":")" + nonce + "\"}",
      R"({"op":"hello","version":null,"role":"control","tls":false,"nonce":")" + nonce + "\"}",
      R"({"op":"hello","version":{},"role":"control","tls":false,"nonce":")" + nonce + "\"}",
      R"({"op":"hello","version":-1,"role":"control","tls":false,"nonce":")" + nonce + "\"}",
      R"({"op":"hello","version":1.0,"role":"control","tls":false,"nonce":")" + nonce + "\"}",
      R"({"op":"hello","version":1,"role":"control","tls":"yes","nonce":")" + nonce + "\"}",
      R"({"op":"hello","version":1,"role":"control","tls":1,"nonce":")" + nonce + "\"}",
      R"({"op":"hello","version":1,"role":"control","tls":false,"nonce":5})",
      R"({"op":"hello","version":1,"role":["data"],"tls":false,"nonce":")" + nonce + "\"}",
      R"({"op":"hello","version":1,"role":"control","nonce":")" + nonce + "\"}",
      R"({"op":"error","code":"x"})",
      R"({"op":"error","code":3.5,"message":7})",
      R"({"op":"error","code":-3,"message":"m"})",
      R"({"op":["hello"]})",
      R"([1,2,3])",
  };
  for (const std::string& f : frames) {
    absl::Status s = SendFirstFrame(endpoint_, f);
    EXPECT_FALSE(s.ok()) << f;
  }
  absl::StatusOr<TransferStats> ok = Pull(endpoint_, "f.dat", dir_.path() / "after.dat", options_);
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_TRUE(SameBytes(testing::ReadFile(dir_.path() / "after.dat"), testing::ReadFile(dir_.path() / "spool" / "f.dat")));
}

TEST_F(AgentTest, WrongJsonTypesAfterAuthenticationAreRefusedAndTheAgentKeepsServing) {
  // Each case: the request, then (for a get) the ranges message; the agent must answer with
  // an error or close, on that connection only.
  struct Case {
    Json request;
    Json ranges;  // null: none
  };
  Json good_options = internal::RouteToJson(options_);
  Json bad_options = good_options;
  bad_options["streams"] = "3";
  Json float_options = good_options;
  float_options["io_timeout_ms"] = 1.5;
  std::vector<Case> cases = {
      {{{"op", "get"}, {"path", "f.dat"}, {"options", good_options}},
       {{"op", "ranges"}, {"ranges", Json::array()}, {"resumed_bytes", "x"}}},
      {{{"op", "get"}, {"path", "f.dat"}, {"options", good_options}},
       {{"op", "ranges"}, {"ranges", "all"}, {"resumed_bytes", 0}}},
      {{{"op", "get"}, {"path", "f.dat"}, {"options", good_options}},
       {{"op", 7}, {"ranges", Json::array()}, {"resumed_bytes", 0}}},
      {{{"op", "get"}, {"path", 5}, {"options", good_options}}, nullptr},
      {{{"op", "get"}, {"path", "f.dat"}, {"options", "fast"}}, nullptr},
      {{{"op", "get"}, {"path", "f.dat"}, {"options", bad_options}}, nullptr},
      {{{"op", "get"}, {"path", "f.dat"}, {"options", float_options}}, nullptr},
      {{{"op", "get"}, {"path", "f.dat"}}, nullptr},
      {{{"op", "put"}, {"path", "p"}, {"size", "5"}, {"source_id", "s"}, {"options", good_options}}, nullptr},
      {{{"op", "put"}, {"path", "p"}, {"size", 5}, {"source_id", 5}, {"options", good_options}}, nullptr},
      {{{"op", "pull_from"}, {"source", 5}, {"path", "p"}, {"source_path", "f.dat"}, {"options", good_options}}, nullptr},
      {{{"op", "pull_from"}, {"source", endpoint_.ToString()}, {"path", "p"}, {"source_path", true},
        {"options", good_options}}, nullptr},
  };
  for (const Case& c : cases) {
    absl::Status s = RunClient([&]() -> asio::awaitable<absl::Status> {
      auto log = spdlog::default_logger();
      absl::StatusOr<internal::ClientConnection> ctrl =
          co_await internal::ConnectTo(endpoint_, "control", options_, nullptr, *log);
      if (!ctrl.ok()) co_return absl::InternalError(fmt::format("connect: {}", ctrl.status().ToString()));
      if (absl::Status w = co_await ctrl->conn->SendControl(c.request); !w.ok()) co_return w;
      absl::StatusOr<Json> reply = co_await ctrl->conn->ReadControl();
      if (!reply.ok() || c.ranges.is_null()) co_return reply.status();
      if (absl::Status w = co_await ctrl->conn->SendControl(c.ranges); !w.ok()) co_return w;
      // The agent now waits for joins unless it refused the ranges.
      absl::StatusOr<Json> after = co_await ctrl->conn->ReadControl();
      co_return after.status();
    });
    EXPECT_FALSE(s.ok()) << c.request.dump() << " " << c.ranges.dump();
    EXPECT_EQ(s.message().find("connect:"), absl::string_view::npos) << s;
  }
  // A data connection joining with a token of the wrong type.
  absl::Status join = RunClient([&]() -> asio::awaitable<absl::Status> {
    auto log = spdlog::default_logger();
    absl::StatusOr<internal::ClientConnection> c =
        co_await internal::ConnectTo(endpoint_, "data", options_, nullptr, *log);
    if (!c.ok()) co_return absl::InternalError("connect");
    Json j{{"op", "join"}, {"token", 12345}, {"mac", Json::array()}};
    if (absl::Status w = co_await c->conn->SendControl(j); !w.ok()) co_return w;
    co_return (co_await c->conn->ReadControl()).status();
  });
  EXPECT_FALSE(join.ok());
  absl::StatusOr<TransferStats> ok = Pull(endpoint_, "f.dat", dir_.path() / "after.dat", options_);
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_TRUE(SameBytes(testing::ReadFile(dir_.path() / "after.dat"), testing::ReadFile(dir_.path() / "spool" / "f.dat")));
}

// 800 connections from one address, each sending only a header that announces a 1 MiB
// control message, must not make the agent allocate that much; a peer on another address is
// served meanwhile.
TEST_F(AgentTest, HalfOpenConnectionsAnnouncingHugeControlFramesKeepMemoryBounded) {
  internal::FrameHeader h{internal::FrameType::kControl, 1u << 20, 0, 0};
  internal::HeaderBytes header = internal::EncodeHeader(h);
  const std::uint64_t before = VmRssBytes();
  std::uint64_t peak = before;
  std::vector<int> fds;
  for (int i = 0; i < 800; ++i) {
    int fd = ConnectFrom("127.0.0.2", endpoint_);
    ASSERT_GE(fd, 0) << "connection " << i << ": " << std::strerror(errno);
    fds.push_back(fd);
    ASSERT_EQ(::send(fd, header.data(), header.size(), MSG_NOSIGNAL), static_cast<ssize_t>(header.size()));
    if (i % 100 == 0) peak = std::max(peak, VmRssBytes());
  }
  absl::StatusOr<TransferStats> ok = Pull(endpoint_, "f.dat", dir_.path() / "meanwhile.dat", options_);
  EXPECT_TRUE(ok.ok()) << ok.status();
  // Wait (bounded) until the agent has dealt with every connection: each one is answered
  // (error frame) or closed. Before that, a connection may still be waiting for its payload.
  auto deadline = std::chrono::steady_clock::now() + 10s;
  std::size_t answered = 0;
  std::vector<bool> done(fds.size(), false);
  while (answered < fds.size() && std::chrono::steady_clock::now() < deadline) {
    for (std::size_t i = 0; i < fds.size(); ++i) {
      if (done[i]) continue;
      pollfd p{fds[i], POLLIN, 0};
      if (::poll(&p, 1, 0) == 1) {
        done[i] = true;
        ++answered;
      }
    }
    peak = std::max(peak, VmRssBytes());
    if (answered < fds.size()) std::this_thread::sleep_for(20ms);  // polling sockets of another thread's server
  }
  for (int fd : fds) ::close(fd);
  EXPECT_EQ(answered, fds.size()) << "the agent left connections waiting for announced payloads";
  EXPECT_LT(peak - before, std::uint64_t{64} << 20) << "resident memory grew by " << ((peak - before) >> 20) << " MiB";
}

// Progress tells what each data stream carried: one count per stream, adding up to the file
// at the end (the dashboard's per-stream graphs), for a pull (receiver) and a push (sender).
TEST_F(AgentTest, ProgressCountsTheBytesOfEachStream) {
  for (bool pull : {true, false}) {
    Progress last;
    TransferOptions o = options_;
    o.progress = [&](const Progress& p) { last = p; };
    // Paced streams (10 MB/s each): on an idle loopback one stream used to send every block
    // of a push before the others had connected, and the test failed now and then.
    o.route.stream_rate_bps = 80'000'000;
    absl::StatusOr<TransferStats> s = pull ? Pull(endpoint_, "f.dat", dir_.path() / "copy.dat", o)
                                           : Push(dir_.path() / "copy.dat", endpoint_, "d/streams.dat", o);
    ASSERT_TRUE(s.ok()) << s.status();
    ASSERT_EQ(last.stream_bytes.size(), static_cast<std::size_t>(s->streams)) << (pull ? "pull" : "push");
    std::uint64_t sum = 0;
    int carried = 0;
    for (std::uint64_t b : last.stream_bytes) {
      sum += b;
      carried += b > 0 ? 1 : 0;
    }
    EXPECT_EQ(sum, 3u << 20) << (pull ? "pull" : "push");
    EXPECT_GE(carried, 2) << "3 MiB over 3 streams: more than one stream carried blocks";
  }
}

// Issue 37: on a route whose rate is shared by many copies, a whole block could wait its turn
// in the route's token bucket longer than the no-progress watchdog allows, and copies failed
// "no progress for 30000 ms". Such a block now goes as pieces, so bytes keep moving. Here one
// 512 KiB block at 512 kbit/s would wait 4 s (beyond the burst) for its tokens, over the
// 3 s watchdog of both ends.
TEST_F(AgentTest, AThrottledBlockGoesInPiecesWithinTheNoProgressTimeout) {
  const std::filesystem::path src = dir_.path() / "throttled.src";
  testing::WriteRandomFile(src, 512 << 10, 31);
  TransferOptions slow = options_;
  slow.route.streams = 1;
  slow.route.stripe_unit = 512 << 10;
  slow.route.route_name = "throttled-pieces";
  slow.route.route_rate_bps = 512'000;
  absl::StatusOr<TransferStats> r = Push(src, endpoint_, "throttled.dat", slow);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(SameBytes(testing::ReadFile(dir_.path() / "spool" / "throttled.dat"),
                        testing::ReadFile(src)));
}

// Two sessions writing the same destination at once: the second is refused at once, and
// whichever succeeds put exactly its own bytes in place.
TEST_F(AgentTest, ConcurrentPutsToOnePathNeverMixTheirBytes) {
  const std::filesystem::path a = dir_.path() / "a.src";
  const std::filesystem::path b = dir_.path() / "b.src";
  testing::WriteRandomFile(a, 2 << 20, 21);
  testing::WriteRandomFile(b, 2 << 20, 22);
  TransferOptions slow = options_;
  slow.route.route_name = "concurrent-slow";
  slow.route.route_rate_bps = 8'000'000;  // ~2 s for 2 MiB
  std::promise<void> started;
  std::atomic<bool> signalled{false};
  slow.progress = [&](const Progress& p) {
    if (p.bytes_done >= (512u << 10) && !signalled.exchange(true)) started.set_value();
  };
  absl::StatusOr<TransferStats> ra = absl::UnknownError("not run");
  std::thread ta([&] { ra = Push(a, endpoint_, "same/path", slow); });
  bool overlapping = started.get_future().wait_for(20s) == std::future_status::ready;
  TransferOptions fast = options_;
  fast.route.route_name = "concurrent-fast";
  absl::StatusOr<TransferStats> rb = Push(b, endpoint_, "same/path", fast);
  ta.join();
  ASSERT_TRUE(overlapping) << ra.status();
  const std::filesystem::path final_path = dir_.path() / "spool" / "same" / "path";
  for (auto [r, src] : {std::pair{&ra, a}, std::pair{&rb, b}}) {
    if (r->ok()) {
      EXPECT_TRUE(SameBytes(testing::ReadFile(final_path), testing::ReadFile(src))) << src;
      EXPECT_EQ((*r)->checksum, *ComputeFileChecksum(src, ChecksumAlgorithm::kXxh3Tree)) << src;
    } else {
      EXPECT_TRUE(absl::IsUnavailable(r->status())) << r->status();
      EXPECT_NE(r->status().message().find("another transfer is writing"), absl::string_view::npos)
          << r->status();
    }
  }
  EXPECT_TRUE(ra.ok()) << ra.status();
  EXPECT_FALSE(rb.ok()) << "the second session ran while the first was writing";
}

// A hand-written authenticated sender: puts `size` bytes at `path` and sends `frames` (data
// frames at their offsets with the given checksums) on one stream, then end and finish with
// `checksum`. Returns the agent's answer to finish (or the first error).
struct RawBlock {
  std::uint64_t offset;
  std::string bytes;
  std::uint64_t checksum;  // block checksum sent in the header
};
absl::Status SendRawPut(const Endpoint& agent, TransferOptions o, const std::string& path,
                        std::uint64_t size, const std::vector<RawBlock>& blocks,
                        const std::string& checksum) {
  asio::io_context io;
  absl::Status result = absl::UnknownError("not run");
  asio::co_spawn(
      io,
      [&]() -> asio::awaitable<absl::Status> {
        auto log = spdlog::default_logger();
        o.route.streams = 1;
        absl::StatusOr<internal::ClientConnection> ctrl =
            co_await internal::ConnectTo(agent, "control", o, nullptr, *log);
        if (!ctrl.ok()) co_return ctrl.status();
        Json put{{"op", "put"}, {"path", path}, {"size", size}, {"source_id", "raw:1"},
                 {"options", internal::RouteToJson(o)}};
        if (absl::Status s = co_await ctrl->conn->SendControl(put); !s.ok()) co_return s;
        absl::StatusOr<Json> session = co_await ctrl->conn->ReadControl();
        if (!session.ok()) co_return session.status();
        std::string token = (*session)["token"].get<std::string>();
        absl::StatusOr<internal::ConnPtr> data = co_await internal::JoinSession(agent, token, o, nullptr, *log);
        if (!data.ok()) co_return data.status();
        // A write to a data connection the agent refused and closed can stay pending (seen
        // once in several runs): after 5 s the data connection is closed on our side too, so
        // the answer waiting on the control connection is still read.
        auto unstick = std::make_shared<asio::steady_timer>(co_await asio::this_coro::executor, 5s);
        unstick->async_wait([d = *data](boost::system::error_code ec) {
          if (!ec) d->Close();
        });
        struct Cancel {
          std::shared_ptr<asio::steady_timer> t;
          ~Cancel() { t->cancel(); }
        } cancel_unstick{unstick};
        for (const RawBlock& b : blocks) {
          internal::FrameHeader h{internal::FrameType::kData, static_cast<std::uint32_t>(b.bytes.size()),
                                  b.offset, b.checksum};
          absl::Status w = co_await (*data)->WriteData(h, b.bytes.data());
          (void)w;  // ignored: the agent may drop the stream; its reason comes on the control connection
        }
        absl::Status e = co_await (*data)->SendFrame(internal::FrameType::kEnd, "");
        (void)e;  // ignored: as above
        Json finish{{"op", "finish"}, {"checksum", checksum}, {"round", 0}, {"congestion", ""}};
        if (absl::Status s = co_await ctrl->conn->SendControl(finish); !s.ok()) co_return s;
        absl::StatusOr<Json> reply = co_await ctrl->conn->ReadControl();
        if (!reply.ok()) co_return reply.status();
        if ((*reply)["op"] == "done") co_return absl::OkStatus();
        co_return absl::FailedPreconditionError(reply->dump());
      },
      [&](std::exception_ptr e, absl::Status s) { result = e ? absl::InternalError("exception") : s; });
  io.run();
  return result;
}

TEST_F(AgentTest, OverlappingBlockIsRefusedAndNeverOverwritesReceivedBytes) {
  constexpr std::uint64_t kBlock = 64 << 10;
  testing::WriteRandomFile(dir_.path() / "orig", 4 * kBlock, 31);
  const std::string orig = testing::ReadFile(dir_.path() / "orig");
  std::string evil = orig.substr(0, kBlock);
  for (char& c : evil) c = static_cast<char>(c ^ 0x33);
  auto block = [&](std::uint64_t i) {
    std::string bytes = orig.substr(i * kBlock, kBlock);
    return RawBlock{i * kBlock, bytes, BlockChecksum(BlockChecksumAlgorithm::kXxh3_64, bytes.data(), bytes.size())};
  };
  const std::string sum = ChecksumOf(ChecksumAlgorithm::kXxh3Tree, orig);
  // The duplicate of block 0 carries other bytes with a valid block checksum, and a second
  // one is damaged (its checksum does not match its bytes).
  std::vector<RawBlock> variants[] = {
      {block(0), RawBlock{0, evil, BlockChecksum(BlockChecksumAlgorithm::kXxh3_64, evil.data(), evil.size())},
       block(1), block(2), block(3)},
      {block(0), block(1), RawBlock{kBlock / 2, evil, 12345}, block(2), block(3)},
  };
  int n = 0;
  for (const std::vector<RawBlock>& blocks : variants) {
    const std::string name = fmt::format("dup{}", n++);
    absl::Status s = SendRawPut(endpoint_, options_, name, orig.size(), blocks, sum);
    const std::filesystem::path final_path = dir_.path() / "spool" / name;
    if (std::filesystem::exists(final_path)) {
      EXPECT_TRUE(SameBytes(testing::ReadFile(final_path), orig)) << name << ": a committed file holds other bytes than verified";
    }
    EXPECT_FALSE(s.ok()) << name;
    EXPECT_NE(s.message().find("overlapping block"), absl::string_view::npos) << name << " " << s;
  }
  absl::StatusOr<TransferStats> ok = Pull(endpoint_, "f.dat", dir_.path() / "after.dat", options_);
  EXPECT_TRUE(ok.ok()) << ok.status();
}

// A block whose checksum does not match is never written: the partial file keeps zeros there.
TEST_F(AgentTest, DamagedBlockNeverReachesThePartialFile) {
  constexpr std::uint64_t kBlock = 64 << 10;
  testing::WriteRandomFile(dir_.path() / "orig", 2 * kBlock, 32);
  const std::string orig = testing::ReadFile(dir_.path() / "orig");
  std::string b0 = orig.substr(0, kBlock);
  std::string b1 = orig.substr(kBlock);
  std::vector<RawBlock> blocks = {
      {0, b0, BlockChecksum(BlockChecksumAlgorithm::kXxh3_64, b0.data(), b0.size())},
      {kBlock, b1, 777},  // damaged
  };
  absl::Status s = SendRawPut(endpoint_, options_, "dmg", orig.size(), blocks,
                              ChecksumOf(ChecksumAlgorithm::kXxh3Tree, orig));
  EXPECT_FALSE(s.ok());  // the agent asks for a re-send; this sender gives up
  StopAgent();           // the session's partial file is final now
  std::vector<std::filesystem::path> parts;
  for (const auto& e : std::filesystem::directory_iterator(dir_.path() / "spool" / ".gfrep-tmp")) {
    if (e.path().extension() == ".part") parts.push_back(e.path());
  }
  ASSERT_EQ(parts.size(), 1u);
  std::string part = testing::ReadFile(parts[0]);
  ASSERT_EQ(part.size(), orig.size());
  EXPECT_TRUE(SameBytes(part.substr(0, kBlock), b0));
  EXPECT_TRUE(SameBytes(part.substr(kBlock), std::string(kBlock, '\0'))) << "damaged bytes reached the disk";
}

TEST_F(AgentTest, ReservedSpoolNamesAreRefusedAndReplicaFilesAreWrittenOnce) {
  testing::WriteRandomFile(dir_.path() / "src", 100000, 41);
  testing::WriteRandomFile(dir_.path() / "other", 100000, 42);
  std::filesystem::create_directories(dir_.path() / "spool" / ".gfrep-index");
  testing::WriteRandomFile(dir_.path() / "spool" / ".gfrep-index" / "1", 1000, 43);
  for (const char* bad : {".gfrep-index/1", ".gfrep-staging/task-1", ".gfrep-tmp/x", ".gfrep-data/1",
                          ".gfrep-data/01/2", ".gfrep-data/1/2/3", ".gfrep-data", ".gfrep-other"}) {
    absl::StatusOr<TransferStats> put = Push(dir_.path() / "src", endpoint_, bad, options_);
    EXPECT_TRUE(absl::IsInvalidArgument(put.status())) << bad << " " << put.status();
    EXPECT_NE(put.status().message().find("reserved"), absl::string_view::npos) << bad << " " << put.status();
    absl::StatusOr<TransferStats> get = Pull(endpoint_, bad, dir_.path() / "got", options_);
    EXPECT_TRUE(absl::IsInvalidArgument(get.status())) << bad << " " << get.status();
  }
  const std::string replica = ".gfrep-data/5/7";
  absl::StatusOr<TransferStats> first = Push(dir_.path() / "src", endpoint_, replica, options_);
  ASSERT_TRUE(first.ok()) << first.status();
  absl::StatusOr<TransferStats> again = Push(dir_.path() / "other", endpoint_, replica, options_);
  EXPECT_TRUE(absl::IsAlreadyExists(again.status())) << again.status();
  EXPECT_TRUE(SameBytes(testing::ReadFile(dir_.path() / "spool" / replica), testing::ReadFile(dir_.path() / "src")));
  absl::StatusOr<TransferStats> get = Pull(endpoint_, replica, dir_.path() / "replica.copy", options_);
  ASSERT_TRUE(get.ok()) << get.status();
  EXPECT_TRUE(SameBytes(testing::ReadFile(dir_.path() / "replica.copy"), testing::ReadFile(dir_.path() / "src")));
  // A third-party copy into a replica name is create-only too.
  absl::StatusOr<TransferStats> third = ThirdParty(endpoint_, "f.dat", endpoint_, replica, options_);
  EXPECT_TRUE(absl::IsAlreadyExists(third.status())) << third.status();
  absl::StatusOr<TransferStats> fresh = ThirdParty(endpoint_, "f.dat", endpoint_, ".gfrep-data/5/8", options_);
  ASSERT_TRUE(fresh.ok()) << fresh.status();
  EXPECT_TRUE(SameBytes(testing::ReadFile(dir_.path() / "spool" / ".gfrep-data/5/8"),
                        testing::ReadFile(dir_.path() / "spool" / "f.dat")));
}

// A pull told the file's checksum and size (TransferOptions::expected_checksum, as a site
// agent passes the catalog's) computes its end-to-end checksum in that algorithm, installs
// only bytes that match, never replaces the name, and tells a mismatch apart.
TEST_F(AgentTest, APullWithAnExpectedChecksumInstallsOnlyMatchingBytesAndNeverReplaces) {
  const std::filesystem::path src = dir_.path() / "spool" / "f.dat";
  absl::StatusOr<std::string> sha = ComputeFileChecksum(src, ChecksumAlgorithm::kSha256);
  ASSERT_TRUE(sha.ok()) << sha.status();
  TransferOptions o = options_;
  o.expected_checksum = *sha;
  o.expected_size = 3 << 20;
  const std::filesystem::path good = dir_.path() / "expected" / "good";
  absl::StatusOr<TransferStats> pulled = Pull(endpoint_, "f.dat", good, o);
  ASSERT_TRUE(pulled.ok()) << pulled.status();
  EXPECT_EQ(pulled->checksum, *sha) << "not computed in the expected checksum's algorithm";
  EXPECT_TRUE(SameBytes(testing::ReadFile(good), testing::ReadFile(src)));
  absl::StatusOr<TransferStats> again = Pull(endpoint_, "f.dat", good, o);
  EXPECT_TRUE(absl::IsAlreadyExists(again.status())) << again.status();

  // The source's bytes are not what their owner recorded: nothing is installed.
  const std::filesystem::path bad = dir_.path() / "expected" / "bad";
  o.expected_checksum = "sha256:" + std::string(64, '0');
  absl::StatusOr<TransferStats> wrong = Pull(endpoint_, "f.dat", bad, o);
  EXPECT_TRUE(IsExpectedChecksumMismatch(wrong.status())) << wrong.status();
  EXPECT_TRUE(absl::IsFailedPrecondition(wrong.status())) << wrong.status();
  EXPECT_FALSE(std::filesystem::exists(bad));
  // The right checksum but another size: the same.
  o.expected_checksum = *sha;
  o.expected_size = (3 << 20) + 1;
  wrong = Pull(endpoint_, "f.dat", bad, o);
  EXPECT_TRUE(IsExpectedChecksumMismatch(wrong.status())) << wrong.status();
  EXPECT_FALSE(std::filesystem::exists(bad));
  // A transport failure is not a mismatch.
  EXPECT_FALSE(IsExpectedChecksumMismatch(absl::DataLossError("end-to-end checksum mismatch")));
  // A malformed expected checksum is refused before anything is asked.
  for (const char* malformed : {"nope", "md4:00", "sha256:"}) {
    o.expected_checksum = malformed;
    absl::StatusOr<TransferStats> refused = Pull(endpoint_, "f.dat", bad, o);
    EXPECT_TRUE(absl::IsInvalidArgument(refused.status())) << malformed << ": " << refused.status();
  }
}

// What a site agent does to stop a copy: a terminal cancellation emitted on the copy's own
// io_context, which then runs until the pull's handler was called.
TEST_F(AgentTest, TerminalCancellationEndsAsyncPullWithCancelled) {
  testing::WriteRandomFile(dir_.path() / "spool" / "big", 8 << 20, 51);
  for (int round = 0; round < 3; ++round) {
    asio::io_context io;
    asio::cancellation_signal signal;
    TransferOptions o = options_;
    o.route.route_name = fmt::format("cancel-{}", round);
    o.route.route_rate_bps = 8'000'000;  // ~8 s for the whole file
    std::optional<std::chrono::steady_clock::time_point> emitted;
    std::uint64_t done_at_cancel = 0;
    o.progress = [&](const Progress& p) {
      if (!emitted && p.bytes_done >= (1u << 20)) {
        emitted = std::chrono::steady_clock::now();
        done_at_cancel = p.bytes_done;
        asio::post(io, [&] { signal.emit(asio::cancellation_type::terminal); });
      }
    };
    std::optional<absl::StatusOr<TransferStats>> result;
    bool exception = false;
    const std::filesystem::path out = dir_.path() / fmt::format("cancelled{}", round);
    asio::co_spawn(io, AsyncPull(endpoint_, "big", out, dir_.path() / "tmp", o),
                   asio::bind_cancellation_slot(
                       signal.slot(), [&](std::exception_ptr e, absl::StatusOr<TransferStats> r) {
                         if (e) {
                           exception = true;
                         } else {
                           result = std::move(r);
                         }
                       }));
    io.run();  // returns by itself once nothing of the pull is left
    auto ended = std::chrono::steady_clock::now();
    ASSERT_FALSE(exception) << "an exception escaped AsyncPull";
    ASSERT_TRUE(result.has_value());
    ASSERT_TRUE(emitted.has_value());
    EXPECT_TRUE(absl::IsCancelled(result->status())) << result->status();
    EXPECT_LT(done_at_cancel, std::uint64_t{8} << 20);
    EXPECT_LT(ended - *emitted, 3s) << "the pull did not stop promptly";
    EXPECT_FALSE(std::filesystem::exists(out));
  }
  absl::StatusOr<TransferStats> ok = Pull(endpoint_, "big", dir_.path() / "big.copy", options_);
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_TRUE(SameBytes(testing::ReadFile(dir_.path() / "big.copy"), testing::ReadFile(dir_.path() / "spool" / "big")));
}

TEST_F(AgentTest, ConnectionsBeyondTheLimitsAreClosedAtOnce) {
  StopAgent();
  StartAgent([](AgentOptions& o) {
    o.max_connections = 4;
    o.max_connections_per_peer = 2;
  });
  // Two idle connections from 127.0.0.2 fill its share; a third is closed at once (an
  // accepted one would wait for its hello until the 3 s setup timeout).
  std::vector<int> fds;
  for (int i = 0; i < 2; ++i) fds.push_back(ConnectFrom("127.0.0.2", endpoint_));
  int third = ConnectFrom("127.0.0.2", endpoint_);
  ASSERT_GE(third, 0);
  EXPECT_TRUE(ClosedWithoutData(third, 2s)) << "per-peer limit";
  ::close(third);
  // Two more from 127.0.0.3 fill the agent; a fifth from elsewhere is closed at once.
  for (int i = 0; i < 2; ++i) fds.push_back(ConnectFrom("127.0.0.3", endpoint_));
  int fifth = ConnectFrom("127.0.0.4", endpoint_);
  ASSERT_GE(fifth, 0);
  EXPECT_TRUE(ClosedWithoutData(fifth, 2s)) << "global limit";
  ::close(fifth);
  for (int fd : fds) {
    ASSERT_GE(fd, 0);
    EXPECT_FALSE(ClosedWithoutData(fd, 0ms)) << "an accepted connection was closed";
    ::close(fd);
  }
  // Served again once they are gone (the agent notices the closes asynchronously).
  options_.route.streams = 1;
  absl::StatusOr<TransferStats> ok = absl::UnknownError("not run");
  auto deadline = std::chrono::steady_clock::now() + 10s;
  do {
    ok = Pull(endpoint_, "f.dat", dir_.path() / "after.dat", options_);
  } while (!ok.ok() && absl::IsUnavailable(ok.status()) && std::chrono::steady_clock::now() < deadline);
  EXPECT_TRUE(ok.ok()) << ok.status();
}

TEST_F(AgentTest, ConnectionLimitsAreValidated) {
  for (auto [global, per_peer] : {std::pair{0, 1}, std::pair{10, 0}, std::pair{10, 11}, std::pair{2000000, 1}}) {
    AgentOptions o;
    o.spool = dir_.path() / "spool2";
    o.shared_key = std::string(32, 'k');
    o.max_connections = global;
    o.max_connections_per_peer = per_peer;
    absl::StatusOr<std::unique_ptr<AgentServer>> s = AgentServer::Create(std::move(o));
    EXPECT_TRUE(absl::IsInvalidArgument(s.status())) << global << " " << per_peer << " " << s.status();
  }
}

// Stop() while a third-party pull and a put are running: both end (the clients get errors),
// every job they left on the blocking pool finishes before the agent's state goes, and the
// partial files stay usable for a resume.
TEST_F(AgentTest, StopEndsRunningSessionsAndReturnsPromptly) {
  testing::WriteRandomFile(dir_.path() / "spool" / "big", 8 << 20, 61);
  testing::WriteRandomFile(dir_.path() / "up", 8 << 20, 62);
  TransferOptions slow = options_;
  slow.route.route_rate_bps = 8'000'000;  // ~8 s each
  slow.journal_interval = 256 << 10;      // journal flushes on the blocking pool all along
  std::atomic<int> started{0};
  std::promise<void> both;
  auto progress = [&](const Progress& p) {
    static thread_local bool counted = false;
    if (p.bytes_done >= (512u << 10) && !counted) {
      counted = true;
      if (++started == 2) both.set_value();
    }
  };
  absl::StatusOr<TransferStats> third = absl::UnknownError("not run");
  absl::StatusOr<TransferStats> put = absl::UnknownError("not run");
  TransferOptions t = slow;
  t.route.route_name = "stop-third";
  t.progress = progress;
  TransferOptions u = slow;
  u.route.route_name = "stop-put";
  u.progress = progress;
  std::thread a([&] { third = ThirdParty(endpoint_, "big", endpoint_, "big.copy", t); });
  std::thread b([&] { put = Push(dir_.path() / "up", endpoint_, "up.copy", u); });
  bool running = both.get_future().wait_for(20s) == std::future_status::ready;
  auto t0 = std::chrono::steady_clock::now();
  StopAgent();
  auto stopped = std::chrono::steady_clock::now() - t0;
  a.join();
  b.join();
  ASSERT_TRUE(running);
  EXPECT_LT(stopped, 5s) << "Stop() waited for the sessions to finish on their own";
  EXPECT_FALSE(third.ok());
  EXPECT_FALSE(put.ok());
  EXPECT_FALSE(std::filesystem::exists(dir_.path() / "spool" / "big.copy"));
  EXPECT_FALSE(std::filesystem::exists(dir_.path() / "spool" / "up.copy"));
  // A new agent on the same spool resumes the put.
  StartAgent([](AgentOptions&) {});
  absl::StatusOr<TransferStats> again = Push(dir_.path() / "up", endpoint_, "up.copy", options_);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_GT(again->resumed_bytes, 0u);
  EXPECT_TRUE(SameBytes(testing::ReadFile(dir_.path() / "spool" / "up.copy"), testing::ReadFile(dir_.path() / "up")));
}

}  // namespace
}  // namespace gfrep::transfer
