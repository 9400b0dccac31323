#pragma once

// Copy: one file from A to B, where A and B are each a local path or an agent's file,
// "gf://HOST:PORT/PATH" (PATH inside that gfsited's spool). This is the library's front door
// for site-to-site copies; gfcp is a thin command line around it.
//
//   local -> gf://   push: this process sends to the agent
//   gf:// -> local   pull: the agent sends to this process (a local directory gets the
//                    source's file name)
//   gf:// -> gf://   third party: the destination agent pulls from the source agent and the
//                    bytes never pass through this process; options (streams, rates, TLS,
//                    checksums) are passed on to it, and progress comes from it
//   local -> local   refused (kInvalidArgument): use cp
//
// Every copy authenticates (options.shared_key, or TLS certificates), moves the file over
// options.route.streams parallel connections and verifies it end to end (options.checksum)
// before the receiver renames it into place: nothing partial ever appears under the
// destination's name. An interrupted or cancelled copy leaves its partial file and restart
// journal at the receiver (for a local destination in `<dir>/.gfrep-tmp/`), and copying the
// same source to the same destination again resumes it.
//
//   gfrep::transfer::TransferOptions o;
//   o.route.streams = 8;
//   o.shared_key = *gfrep::transfer::LoadOrCreateSharedKey("/etc/gfrep/shared_key");
//   absl::StatusOr<gfrep::transfer::TransferStats> s =
//       gfrep::transfer::Copy("run1.dat", "gf://siteb:7000/run1.dat", o);
//
// Errors (absl::Status codes; client.h lists them per operation): kInvalidArgument (a bad URL,
// two local paths, options that fail Validate()), kNotFound (the source is missing),
// kPermissionDenied (authentication, a path escaping the spool), kUnavailable (an agent
// cannot be reached or a connection was lost: retry, it resumes), kDeadlineExceeded (a peer
// silent for options.io_timeout), kResourceExhausted (disk full), kDataLoss (the checksum
// still mismatched after options.max_resend_rounds; nothing was put in place), kCancelled
// (CopyHandle::Cancel).
//
// Threads: Copy() runs the copy on the calling thread (its own asio io_context) and calls
// options.progress there. StartCopy() runs it on a thread of its own, which calls
// options.progress; a CopyHandle may be used from any thread. Several copies may run at once,
// in one process: they share only the process-wide rate caps (RouteOptions::route_rate_bps,
// per route name) and a small pool for fsync and checksums.

#include <memory>
#include <string_view>

#include "absl/status/statusor.h"
#include "transfer/client.h"
#include "transfer/options.h"

namespace gfrep::transfer {

// Copies `source` to `destination` (each a local path or gf://HOST:PORT/PATH) and returns
// once the file is in place and verified, with the figures of the run.
absl::StatusOr<TransferStats> Copy(std::string_view source, std::string_view destination,
                                   const TransferOptions& options);

// A copy running on its own thread (StartCopy). Movable, not copyable.
//
// Thread safety: Wait(), Cancel() and Done() may be called from any thread, concurrently.
class CopyHandle {
 public:
  CopyHandle(CopyHandle&&) noexcept;
  CopyHandle& operator=(CopyHandle&&) noexcept;
  CopyHandle(const CopyHandle&) = delete;
  CopyHandle& operator=(const CopyHandle&) = delete;
  // Cancels the copy if it still runs and waits for it to end (an abandoned copy never keeps
  // running behind the caller's back).
  ~CopyHandle();

  // Blocks until the copy ended and returns its result (the same on every call).
  absl::StatusOr<TransferStats> Wait();
  // Asks the copy to stop and returns at once; Wait() then returns kCancelled within about a
  // second (the connections are closed; a third-party copy's destination agent stops its pull
  // when it notices its client went away, ~0.5 s). A copy that completed before the request
  // keeps its result. Calling it again, or after the end, does nothing.
  void Cancel();
  // True once the copy ended (Wait() will not block).
  bool Done() const;

  struct State;  // copy.cc

 private:
  friend CopyHandle StartCopy(std::string_view, std::string_view, TransferOptions);
  explicit CopyHandle(std::shared_ptr<State> state);
  std::shared_ptr<State> state_;
};

// Starts copying `source` to `destination` as Copy() would, on a new thread, and returns at
// once. Errors, including bad arguments, are reported by the handle's Wait().
CopyHandle StartCopy(std::string_view source, std::string_view destination,
                     TransferOptions options);

}  // namespace gfrep::transfer
