#pragma once

// TLS on a connected, non-blocking TCP socket, with OpenSSL reading and writing the socket
// itself. asio::ssl::stream put a memory BIO pair and two buffers of its own between OpenSSL
// and the socket, so every byte was copied twice more on each side (asio's memmove was 10-12 %
// of each side's TLS profile, tests/bench/RESULTS.md). Here a record goes straight between
// the socket and OpenSSL's record buffer, and the receiver reads ahead (one recv per record).
//
// Kernel TLS: the context asks OpenSSL 3 for it (SSL_OP_ENABLE_KTLS, MakeTlsContext). Where
// the kernel has it (CONFIG_TLS, `modprobe tls`) and the cipher suits it, OpenSSL hands the
// session's keys to the kernel after the handshake: the kernel then encrypts what is written
// (and decrypts what is read, where OpenSSL supports it for the version), and SendFile sends
// file pages under TLS with sendfile(2). path() says which one this connection got.
//
// Thread safety: at most one coroutine reading and one writing at a time, on one executor
// (the same rule as asio::ssl::stream). An OpenSSL call never spans a co_await.

#include <openssl/ssl.h>

#include <boost/asio.hpp>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace gfrep::transfer::internal {

class TlsChannel {
 public:
  // A session of `ctx` on `socket` (connected; made non-blocking here), which must outlive
  // the channel. kInternal if OpenSSL cannot make one.
  static absl::StatusOr<std::unique_ptr<TlsChannel>> Create(SSL_CTX* ctx,
                                                            boost::asio::ip::tcp::socket& socket);
  ~TlsChannel();
  TlsChannel(const TlsChannel&) = delete;
  TlsChannel& operator=(const TlsChannel&) = delete;

  SSL* ssl() const { return ssl_; }

  // The handshake as `server` or client. On failure the message is OpenSSL's reason
  // ("certificate verify failed", ...) or the socket's error.
  boost::asio::awaitable<absl::Status> Handshake(bool server);

  // Writes all `size` bytes; `activity` grows as records leave. Failures read "WHAT: ...".
  boost::asio::awaitable<absl::Status> Write(const void* data, std::size_t size,
                                             std::uint64_t& activity, std::string_view what);

  struct ReadResult {
    absl::Status status;
    std::size_t read = 0;  // bytes that arrived, also on failure
    bool eof = false;      // the peer closed (with or without close_notify)
  };
  // Reads exactly `size` bytes; `activity` grows as they arrive.
  boost::asio::awaitable<ReadResult> Read(void* data, std::size_t size, std::uint64_t& activity);

  // REQUIRES: kernel_send(). Sends [offset, offset + size) of `fd` as TLS records that the
  // kernel encrypts (sendfile: no copy through user space). kAborted if the file ends first.
  boost::asio::awaitable<absl::Status> SendFile(int fd, std::uint64_t offset, std::size_t size,
                                                std::uint64_t& activity);

  // After the handshake: whether the kernel encrypts what this side sends, decrypts what it
  // receives.
  bool kernel_send() const;
  bool kernel_receive() const;
  // "ktls" (the kernel both ways), "ktls-send", "ktls-receive", or "openssl" (user space).
  std::string_view path() const;

 private:
  TlsChannel(SSL* ssl, boost::asio::ip::tcp::socket& socket) : ssl_(ssl), socket_(socket) {}
  // Waits until the socket can do what OpenSSL's `ssl_error` (SSL_ERROR_WANT_READ/WRITE)
  // asks for.
  boost::asio::awaitable<absl::Status> WaitFor(int ssl_error, std::string_view what);

  SSL* ssl_;
  boost::asio::ip::tcp::socket& socket_;
};

// Whether this kernel can take a TLS session from user space at all: "tls" is among its TCP
// upper-layer protocols (/proc/sys/net/ipv4/tcp_available_ulp), or attaching it (TCP_ULP) to
// a TCP connection on loopback works, which loads the module where there is one. It needs
// CONFIG_TLS. `why` says what refused it. Used to report the path.
bool KernelTlsAvailable(std::string* why = nullptr);

}  // namespace gfrep::transfer::internal
