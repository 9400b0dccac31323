#pragma once

// A file on an agent (gfsited), read in place over the network: the first bytes arrive one
// round trip after the session is set up, and any range can be read without fetching the
// whole file first.
//
//   transfer::RemoteReadOptions o;
//   o.transfer.shared_key = key;
//   o.transfer.route.streams = 8;
//   absl::StatusOr<std::unique_ptr<transfer::RemoteFile>> f =
//       transfer::RemoteFile::Open(agent, ".gfrep-data/17/3", o);
//   absl::StatusOr<std::size_t> n = (*f)->ReadAt(offset, buf, sizeof buf);
//
// How: Open() authenticates a control connection like a copy does and asks for a read
// session (protocol op "read", transfer/README.md); the agent answers with the file's size
// and sends the first piece (8 KiB, so the first read needs no slow start) on the control
// connection itself, while `route.streams` data connections join. The file is cut into
// pieces: [0, 8 KiB), then `block_size` each. A read asks for the pieces it lacks
// (`fetch`); the agent sends each piece as one frame, with its block checksum, on whichever
// data connection is free, and the reader checks every piece against its checksum before a
// byte of it is returned (a damaged piece is asked for again, up to max_resend_rounds
// times, then kDataLoss). Sequential reads fetch ahead: up to `readahead_bytes` past the
// read, which should be about twice the route's bandwidth-delay product for a reader to
// see the route's speed. Pieces are kept in a bounded cache (`cache_bytes`).
//
// Whole-file check: with `expected_checksum`, the pieces are also hashed in file order as
// they arrive; when the last byte was hashed, a checksum other than the expected one makes
// that read and every later one fail with kDataLoss (the caller should try another replica
// and report this one). If pieces were dropped from the cache before the hash reached them
// (random access over more than the cache), the whole-file check is given up:
// stats().whole_file_verified stays false.
//
// The agent ends the session if the file changes under it (kAborted at the next read), and
// after its session_idle (60 s) without a request; the next read then fails with
// kUnavailable, and the caller reopens (replica::client::Open's reader does, transparently).
//
// Error codes as client.h: kNotFound, kPermissionDenied, kUnavailable, kDeadlineExceeded
// (nothing arrived for io_timeout), kDataLoss, kAborted; kInvalidArgument for bad options
// or an agent that does not know streaming reads (built before 2026-11-25).
//
// Thread safety: ReadAt may be called from several threads at once. The session runs on a
// thread of its own, which the destructor stops (it closes the session).

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "transfer/client.h"
#include "transfer/options.h"

namespace gfrep::transfer {

struct RemoteReadOptions {
  // Authentication, TLS, streams, socket buffers, congestion control, timeouts. The route's
  // stripe unit is ignored (block_size is the unit).
  TransferOptions transfer;
  // Piece size after the first 8 KiB (64 KiB..16 MiB).
  std::uint64_t block_size = 1 << 20;
  // How far sequential reads fetch ahead (at least one block).
  std::uint64_t readahead_bytes = 32ull << 20;
  // Pieces kept in memory, fetched or being fetched (0: readahead_bytes * 2 + 4 blocks).
  std::uint64_t cache_bytes = 0;
  // "<algorithm>:<hex>" of the whole file (e.g. the catalog's); empty: not checked.
  std::string expected_checksum;
  // The size the caller expects (e.g. the catalog's); another size fails Open with
  // kDataLoss. 0: any.
  std::uint64_t expected_size = 0;
};

class RemoteFile {
 public:
  struct Stats {
    std::uint64_t bytes_fetched = 0;      // piece bytes received (verified)
    std::uint64_t pieces_fetched = 0;
    std::uint64_t pieces_damaged = 0;     // failed their block checksum (asked again)
    std::uint64_t reads = 0;              // ReadAt calls
    std::uint64_t reads_waited = 0;       // ... that had to wait for the network
    double open_seconds = 0;              // Open() until the first piece was in hand
    bool whole_file_verified = false;     // every byte hashed and equal to expected_checksum
    bool whole_file_mismatch = false;     // every byte hashed and NOT equal to it (kDataLoss)
  };

  // Opens a read session on `agent` for `path` (relative to its spool).
  static absl::StatusOr<std::unique_ptr<RemoteFile>> Open(const Endpoint& agent,
                                                          std::string_view path,
                                                          const RemoteReadOptions& options);
  ~RemoteFile();
  RemoteFile(const RemoteFile&) = delete;
  RemoteFile& operator=(const RemoteFile&) = delete;

  // Reads up to `n` bytes at `offset` (fewer only at the end of the file; 0 at or past it).
  absl::StatusOr<std::size_t> ReadAt(std::uint64_t offset, void* buffer, std::size_t n);

  std::uint64_t size() const;
  // The agent's identity of the file ("size:mtime:inode").
  const std::string& source_id() const;
  Stats stats() const;

  struct Impl;

 private:
  explicit RemoteFile(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace gfrep::transfer
