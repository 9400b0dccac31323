#include "transfer/internal/tls_channel.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/err.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <string>

#include <fmt/format.h>

#include "transfer/internal/engine.h"
#include "transfer/internal/no_sigpipe.h"
#include "transfer/options.h"

namespace gfrep::transfer::internal {
namespace {

// OpenSSL's reason for the failure of the call that returned `ssl_error` (the thread's error
// queue, else errno), as asio's ssl errors read: "certificate verify failed".
std::string SslFailure(int ssl_error, int saved_errno) {
  const unsigned long e = ERR_peek_last_error();
  if (e != 0) {
    const char* reason = ERR_reason_error_string(e);
    std::string out = reason != nullptr ? reason : fmt::format("OpenSSL error {:#x}", e);
    ERR_clear_error();
    return out;
  }
  if (ssl_error == SSL_ERROR_SYSCALL && saved_errno != 0) return std::strerror(saved_errno);
  return fmt::format("TLS error {}", ssl_error);
}

// Whether a failed read means the peer closed: close_notify, a close without it, or a reset
// that OpenSSL reports as an unexpected end.
bool IsPeerClose(int ssl_error, int saved_errno) {
  if (ssl_error == SSL_ERROR_ZERO_RETURN) return true;
  if (ssl_error == SSL_ERROR_SYSCALL) return ERR_peek_error() == 0 && saved_errno == 0;
  if (ssl_error == SSL_ERROR_SSL) {
    return ERR_GET_REASON(ERR_peek_last_error()) == SSL_R_UNEXPECTED_EOF_WHILE_READING;
  }
  return false;
}

bool Wants(int ssl_error) {
  return ssl_error == SSL_ERROR_WANT_READ || ssl_error == SSL_ERROR_WANT_WRITE;
}

}  // namespace

absl::StatusOr<std::unique_ptr<TlsChannel>> TlsChannel::Create(SSL_CTX* ctx, tcp::socket& socket) {
  boost::system::error_code ec;
  socket.non_blocking(true, ec);
  if (ec) return FromAsio(ec, "TLS socket");
  SSL* ssl = SSL_new(ctx);
  if (ssl == nullptr) return absl::InternalError("TLS: SSL_new failed");
  // A socket BIO on our descriptor (not closed by SSL_free): OpenSSL reads and writes the
  // socket itself, and it is the one BIO kernel TLS can be switched on for.
  if (SSL_set_fd(ssl, socket.native_handle()) != 1) {
    SSL_free(ssl);
    return absl::InternalError("TLS: SSL_set_fd failed");
  }
  // A write may end after any whole record, and be continued from a moved pointer.
  SSL_set_mode(ssl, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
  // Read ahead: one recv takes what fits OpenSSL's buffer of one record (else two, header and
  // body). The buffer stays one record long: OpenSSL 3.0 moves the unread rest of a larger
  // one to its front before each record, which with 256 KiB was 18 % of the receiving
  // agent's profile (tests/bench/RESULTS.md).
  SSL_set_read_ahead(ssl, 1);
  return std::unique_ptr<TlsChannel>(new TlsChannel(ssl, socket));
}

TlsChannel::~TlsChannel() { SSL_free(ssl_); }

asio::awaitable<absl::Status> TlsChannel::WaitFor(int ssl_error, std::string_view what) {
  auto [ec] = co_await socket_.async_wait(
      ssl_error == SSL_ERROR_WANT_READ ? tcp::socket::wait_read : tcp::socket::wait_write, kNoThrow);
  co_return FromAsio(ec, what);
}

asio::awaitable<absl::Status> TlsChannel::Handshake(bool server) {
  if (server) {
    SSL_set_accept_state(ssl_);
  } else {
    SSL_set_connect_state(ssl_);
  }
  for (;;) {
    // The descriptor may have been closed meanwhile (a watchdog); its number must not be
    // used again, it may be somebody else's by now.
    if (!socket_.is_open()) co_return FromAsio(asio::error::bad_descriptor, "TLS handshake");
    ERR_clear_error();
    int r = 0;
    int e = 0;
    int saved = 0;
    {
      ScopedNoSigPipe no_sigpipe;
      r = SSL_do_handshake(ssl_);
      saved = errno;
      if (r != 1) e = SSL_get_error(ssl_, r);
    }
    if (r == 1) co_return absl::OkStatus();
    if (!Wants(e)) {
      if (IsPeerClose(e, saved)) co_return absl::UnavailableError("the peer closed the connection");
      co_return absl::UnavailableError(SslFailure(e, saved));
    }
    if (absl::Status s = co_await WaitFor(e, "TLS handshake"); !s.ok()) co_return s;
  }
}

asio::awaitable<absl::Status> TlsChannel::Write(const void* data, std::size_t size,
                                                std::uint64_t& activity, std::string_view what) {
  const auto* p = static_cast<const char*>(data);
  std::size_t done = 0;
  while (done < size) {
    if (!socket_.is_open()) co_return FromAsio(asio::error::bad_descriptor, what);
    int e = 0;
    int saved = 0;
    {
      ScopedNoSigPipe no_sigpipe;
      // As many records as the socket takes now, then wait for room. (A call that succeeds
      // leaves nothing in the error queue: one clearing before the burst is enough.)
      ERR_clear_error();
      while (done < size) {
        std::size_t n = 0;
        const int r = SSL_write_ex(ssl_, p + done, size - done, &n);
        if (r == 1) {
          done += n;
          activity += n;
          continue;
        }
        saved = errno;
        e = SSL_get_error(ssl_, r);
        break;
      }
    }
    if (done == size) break;
    if (!Wants(e)) {
      // A socket error is a lost connection, as for a connection in clear (FromAsio).
      if (e == SSL_ERROR_SYSCALL && saved != 0) {
        co_return absl::UnavailableError(fmt::format("{}: {}", what, std::strerror(saved)));
      }
      co_return absl::UnavailableError(fmt::format("{}: {}", what, SslFailure(e, saved)));
    }
    if (absl::Status s = co_await WaitFor(e, what); !s.ok()) co_return s;
  }
  co_return absl::OkStatus();
}

asio::awaitable<TlsChannel::ReadResult> TlsChannel::Read(void* data, std::size_t size,
                                                         std::uint64_t& activity) {
  auto* p = static_cast<char*>(data);
  ReadResult out;
  while (out.read < size) {
    if (!socket_.is_open()) {
      out.status = FromAsio(asio::error::bad_descriptor, "read");
      co_return out;
    }
    int e = 0;
    int saved = 0;
    {
      // SSL_read writes too at times (an alert, a key update's answer).
      ScopedNoSigPipe no_sigpipe;
      ERR_clear_error();
      while (out.read < size) {
        std::size_t n = 0;
        const int r = SSL_read_ex(ssl_, p + out.read, size - out.read, &n);
        if (r == 1) {
          out.read += n;
          activity += n;
          continue;
        }
        saved = errno;
        e = SSL_get_error(ssl_, r);
        break;
      }
    }
    if (out.read == size) break;
    if (!Wants(e)) {
      if (IsPeerClose(e, saved)) {
        ERR_clear_error();
        out.eof = true;
        out.status = FromAsio(asio::error::eof, "read");
      } else if (e == SSL_ERROR_SYSCALL && saved != 0) {
        out.status = absl::UnavailableError(fmt::format("read: {}", std::strerror(saved)));
      } else {
        out.status = absl::UnavailableError(fmt::format("read: {}", SslFailure(e, saved)));
      }
      co_return out;
    }
    out.status = co_await WaitFor(e, "read");
    if (!out.status.ok()) co_return out;
  }
  out.status = absl::OkStatus();
  co_return out;
}

asio::awaitable<absl::Status> TlsChannel::SendFile(int fd, std::uint64_t offset, std::size_t size,
                                                   std::uint64_t& activity) {
  if (!kernel_send()) co_return absl::InternalError("bug: SendFile without kernel TLS");
  std::size_t done = 0;
  while (done < size) {
    if (!socket_.is_open()) co_return FromAsio(asio::error::bad_descriptor, "sendfile");
    ERR_clear_error();
    ossl_ssize_t n = 0;
    int e = 0;
    int saved = 0;
    {
      ScopedNoSigPipe no_sigpipe;
      n = SSL_sendfile(ssl_, fd, static_cast<off_t>(offset + done), size - done, 0);
      saved = errno;
      if (n < 0) e = SSL_get_error(ssl_, static_cast<int>(n));
    }
    if (n > 0) {
      done += static_cast<std::size_t>(n);
      activity += static_cast<std::uint64_t>(n);
    } else if (n == 0) {
      co_return absl::AbortedError("source changed size during the transfer");
    } else if (Wants(e)) {
      if (absl::Status s = co_await WaitFor(e, "sendfile"); !s.ok()) co_return s;
    } else if (saved != EINTR) {
      if (saved != 0) co_return absl::UnavailableError(fmt::format("sendfile (kernel TLS): {}", std::strerror(saved)));
      co_return absl::UnavailableError(fmt::format("sendfile (kernel TLS): {}", SslFailure(e, saved)));
    }
  }
  co_return absl::OkStatus();
}

bool TlsChannel::kernel_send() const { return BIO_get_ktls_send(SSL_get_wbio(ssl_)) != 0; }

bool TlsChannel::kernel_receive() const { return BIO_get_ktls_recv(SSL_get_rbio(ssl_)) != 0; }

std::string_view TlsChannel::path() const {
  const bool s = kernel_send();
  const bool r = kernel_receive();
  if (s && r) return "ktls";
  if (s) return "ktls-send";
  if (r) return "ktls-receive";
  return "openssl";
}

bool KernelTlsAvailable(std::string* why) {
  auto fail = [why](std::string reason) {
    if (why != nullptr) *why = std::move(reason);
    return false;
  };
  // Registered already (built in, or the module loaded)?
  std::ifstream ulps("/proc/sys/net/ipv4/tcp_available_ulp");
  std::string list;
  std::getline(ulps, list);
  if ((" " + list + " ").find(" tls ") != std::string::npos) {
    if (why != nullptr) why->clear();
    return true;
  }
  // Else attaching it to a connection loads the module where there is one.
  const int listener = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (listener < 0) return fail(fmt::format("socket: {}", std::strerror(errno)));
  const int client = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  struct Close {
    int a, b;
    ~Close() {
      ::close(a);
      if (b >= 0) ::close(b);
    }
  } close_both{listener, client};
  if (client < 0) return fail(fmt::format("socket: {}", std::strerror(errno)));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof addr;
  if (::bind(listener, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
      ::listen(listener, 1) != 0 ||
      ::getsockname(listener, reinterpret_cast<sockaddr*>(&addr), &len) != 0 ||
      ::connect(client, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    return fail(fmt::format("no loopback TCP connection to try it on: {}", std::strerror(errno)));
  }
  // The connection is established once connect returns (the kernel completes it on loopback
  // without accept); the ULP is only attached, no key is given, and the socket is closed.
  if (::setsockopt(client, SOL_TCP, TCP_ULP, "tls", 3) != 0) {
    const int e = errno;
    return fail(e == ENOENT ? std::string("this kernel has no TLS (CONFIG_TLS off, or `modprobe tls` not done)")
                            : fmt::format("TCP_ULP tls: {}", std::strerror(e)));
  }
  if (why != nullptr) why->clear();
  return true;
}

}  // namespace gfrep::transfer::internal

namespace gfrep::transfer {

// Declared in options.h; defined here so that options.cc (in the fuzz build's JSON target)
// does not pull the socket code in.
std::string DescribeTlsRecordPath() {
  std::string why;
  if (internal::KernelTlsAvailable(&why)) {
    return "the kernel (kTLS) for sessions whose cipher it has (files go out with sendfile under TLS)";
  }
  return fmt::format("OpenSSL in user space, on the socket itself ({})", why);
}

}  // namespace gfrep::transfer
