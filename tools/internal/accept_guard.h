#pragma once

// AcceptGuard keeps gRPC's listener alive when the process runs short of file descriptors.
//
// Why: gRPC 1.51's POSIX TCP server (src/core/lib/iomgr/tcp_server_posix.cc, on_read) loops
// on accept4() until EAGAIN and then re-arms its read notification. Any other error, EMFILE
// and ENFILE included, takes its `goto error` path: the listener is never re-armed, and with
// edge-triggered epoll nothing calls it again. From then on connections pile up in the
// kernel's accept queue and the daemon answers no new client until it is restarted
// (gRPC issue 20418; fixed upstream only in 1.57, PR 33656).
//
// How: gfcatalogd defines accept4() itself (accept_guard.cc). The dynamic linker binds
// libgrpc's call to the executable's definition, which calls the C library's through
// dlsym(RTLD_NEXT) and, for a non-blocking listening socket once Install() ran:
//   - closes an accepted connection whose descriptor lies within `reserve` of the soft
//     RLIMIT_NOFILE ("shed": the client sees the connection closed and retries later);
//   - on EMFILE/ENFILE, closes a spare descriptor kept for this, accepts the waiting
//     connection, closes it and opens the spare again (the queue is drained, not left to rot);
//   - retries past the errors Linux reports for a connection already gone (ECONNABORTED,
//     EPROTO, ENETUNREACH, ...; accept(2), "Error handling"), which gRPC would also take for fatal;
//   - returns EAGAIN once the queue is empty (or on ENOBUFS/ENOMEM), the one answer that
//     makes gRPC re-arm the listener.
// Nothing else in gfcatalogd calls accept4 (Asio, for the HTTP server, calls accept()), and
// blocking sockets pass straight through.
//
// Thread safety: every function may be called from any thread.

#include <cstdint>

namespace gfrep::tools {

struct AcceptGuardCounters {
  std::uint64_t accepted = 0;  // connections handed to the caller
  std::uint64_t shed = 0;      // connections closed at once (reserve reached, or table full)
  std::uint64_t dropped = 0;   // errors skipped for connections already gone
};

// Turns the guard on: keep `reserve` descriptors free below the soft RLIMIT_NOFILE (0: shed
// only when the table is full) and open the spare descriptor. Before it, accept4 only counts.
void InstallAcceptGuard(int reserve);

// Counters since the start of the process.
AcceptGuardCounters GetAcceptGuardCounters();

// How many times accept4 was called on listening socket `fd` (a progress mark for the
// listener watchdog); kNotTracked for descriptors above the table this keeps.
inline constexpr std::uint64_t kNotTracked = ~std::uint64_t{0};
std::uint64_t AcceptCallsOn(int fd);

// True if calls to accept4 in this process reach the guard (the executable's definition won
// over the C library's); false means the binary was linked without exporting it.
bool AcceptGuardInterposed();

}  // namespace gfrep::tools
