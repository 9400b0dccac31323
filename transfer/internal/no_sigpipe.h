#pragma once

// Writing to a socket whose peer has gone raises SIGPIPE, which kills a process that has not
// ignored it. send() has MSG_NOSIGNAL; sendfile(2) and the write(2) inside OpenSSL's socket
// BIO have no such flag, and a library must not rely on its program ignoring SIGPIPE.
// ScopedNoSigPipe blocks SIGPIPE in the calling thread for its lifetime and takes back a
// SIGPIPE raised meanwhile (also one that came with a partial success) before restoring the
// mask, so such calls fail with EPIPE instead. errno is kept across the destructor. Never
// hold one across a co_await: other coroutines of the thread would run with the mask.

#include <signal.h>

#include <cerrno>
#include <ctime>

namespace gfrep::transfer::internal {

class ScopedNoSigPipe {
 public:
  ScopedNoSigPipe() {
    sigemptyset(&pipe_only_);
    sigaddset(&pipe_only_, SIGPIPE);
    ::pthread_sigmask(SIG_BLOCK, &pipe_only_, &old_);
    sigset_t pending;
    sigemptyset(&pending);
    ::sigpending(&pending);
    pending_before_ = sigismember(&pending, SIGPIPE) == 1;
  }
  ~ScopedNoSigPipe() {
    const int saved = errno;
    if (!pending_before_) {
      sigset_t pending;
      sigemptyset(&pending);
      ::sigpending(&pending);
      if (sigismember(&pending, SIGPIPE) == 1) {
        const struct timespec now {};
        while (::sigtimedwait(&pipe_only_, nullptr, &now) < 0 && errno == EINTR) {
        }
      }
    }
    ::pthread_sigmask(SIG_SETMASK, &old_, nullptr);
    errno = saved;
  }
  ScopedNoSigPipe(const ScopedNoSigPipe&) = delete;
  ScopedNoSigPipe& operator=(const ScopedNoSigPipe&) = delete;

 private:
  sigset_t pipe_only_;
  sigset_t old_;
  bool pending_before_ = false;
};

}  // namespace gfrep::transfer::internal
