#pragma once

// The agent's side of a streaming read session (op "read"; transfer/remote_file.h is the
// client): after the agent answered `read_ok` (and sent the first piece on the control
// connection), the client asks for pieces of the file with `fetch` messages and the agent
// sends each requested range as one data frame (block checksum in the header) on whichever
// data connection is free, until the client closes the session.
//
//   client -> {"op":"fetch","ranges":[[b,e],...]}   (each range at most the session's
//                                                    stripe unit; at most kMaxReadQueue
//                                                    ranges waiting at a time)
//   agent  -> data frames, in the order asked, spread over the data connections
//   client -> {"op":"close"} or closes the control connection: the session ends.
//
// A source that changed (size, mtime or inode) since the session opened fails the session
// with kAborted on the control connection: a reader never gets bytes of two versions.

#include <cstddef>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "transfer/internal/engine.h"
#include "transfer/internal/sender.h"

namespace gfrep::transfer::internal {

// Ranges a client may have asked for and not received yet.
inline constexpr std::size_t kMaxReadQueue = 4096;

// Sends `ranges` of `src` as data frames on `conn` (one frame per range, each checked
// against the source's identity first). Used for the first piece, on the control connection.
asio::awaitable<absl::Status> SendRanges(Conn& conn, const SourceFile& src,
                                         const std::vector<ByteRange>& ranges,
                                         BlockChecksumAlgorithm alg);

// Serves `fetch` requests on `ctrl` over `data` until the client ends the session (OK), a
// message is bad, the source changed, or no request came for `idle` while nothing was
// queued. Errors of ours are reported to the client on `ctrl`.
asio::awaitable<absl::Status> ServeReadSession(ConnPtr ctrl, std::vector<ConnPtr> data,
                                               std::shared_ptr<SourceFile> src,
                                               const TransferOptions& options,
                                               std::chrono::milliseconds idle);

// The ranges of a read request's "first" or a fetch's "ranges": each within the file, non
// empty and at most `max_range` bytes; at most `max_count` of them.
absl::StatusOr<std::vector<ByteRange>> ReadRangesFromJson(const Json& list, std::uint64_t size,
                                                          std::uint64_t max_range,
                                                          std::size_t max_count);

}  // namespace gfrep::transfer::internal
