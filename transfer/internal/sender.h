#pragma once

// The sending side of a session: the source file and the core that moves its missing ranges
// over N data connections.
//
// The source is read with pread (never mapped), so a file that shrinks while it is sent
// fails that transfer with kAborted ("source changed size during the transfer") instead of
// killing the process with SIGBUS. A source whose identity (size, mtime, inode) changed by
// the end of the transfer fails the same way.
//
// Runs on the session's executor; the whole-file checksum of a resumed transfer runs on its
// own thread, which owns the SourceFile it reads (shared_ptr) and stops when abandoned.

#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "transfer/internal/engine.h"

namespace gfrep::transfer::internal {

// An open source file and its identity "size:mtime:inode".
struct SourceFile {
  std::filesystem::path path;
  int fd = -1;
  std::uint64_t size = 0;
  std::string source_id;
  ~SourceFile();
};
absl::StatusOr<std::shared_ptr<SourceFile>> OpenSource(const std::filesystem::path& path);

// Reads exactly `n` bytes at `offset`. kAborted if the file is shorter now.
absl::Status ReadSource(const SourceFile& src, std::uint64_t offset, void* buf, std::size_t n);

// The block size for `bytes` still to send over `streams`: the stripe unit, or less for a
// small file so that every stream carries a share of it (a 4 MiB file over 8 streams goes as
// 8 blocks of 512 KiB, not as one block on one stream that needs a 4 MiB window), never
// below 256 KiB (or the stripe unit, if smaller). Multiples of 64 KiB; with `whole_leaves`
// (the xxh3-tree checksum), multiples of its leaf, so that the blocks are tree frames
// (checksum.h) when the stripe unit is too.
std::uint64_t BlockSize(std::uint64_t bytes, std::size_t streams, std::uint64_t stripe_unit,
                        bool whole_leaves = false);

// Pipelined gets on a warm session (agent.cc ServeGets): a client may send the next file's
// get before it has answered this file's finish, so that the next file's bytes follow this
// one's without a round trip in between.
struct Pipeline {
  // In: the outcome of the file sent before on this session is still to be read (its get
  // came ahead); it is read right after this file's finish and must be "done" (a client
  // that sent a get ahead never asks for a re-send). `previous_done` is told of it.
  bool previous_pending = false;
  std::function<void()> previous_done;
  // Out: the next get, when it came instead of this file's outcome; this file's outcome is
  // then still to be read (RunSender returned after its finish).
  std::optional<Json> ahead;
};

// Sends the missing ranges over `data` (work stealing), then FINISH with the file checksum
// on `ctrl`, re-sending blocks the receiver reports damaged. Returns when the receiver
// confirmed the file is in place, or (with `pipeline`) when the next get came ahead of that
// confirmation. A failure of our own (the source) is reported to the receiver on `ctrl`.
asio::awaitable<absl::StatusOr<TransferStats>> RunSender(Conn& ctrl, std::vector<ConnPtr> data,
                                                         std::shared_ptr<SourceFile> src,
                                                         std::vector<ByteRange> missing,
                                                         const TransferOptions& options,
                                                         std::string congestion,
                                                         std::uint64_t resumed_bytes,
                                                         Pipeline* pipeline = nullptr);

}  // namespace gfrep::transfer::internal
