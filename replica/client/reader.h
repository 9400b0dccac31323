#pragma once

// The node-local read path: open a logical catalog path for reading.
//
//   absl::StatusOr<std::unique_ptr<replica::client::FileReader>> r =
//       replica::client::Open(catalog, "/exp/run001", {.identity = {"tsukuba", "node1"}, ...});
//
// Open() asks the catalog at open time only (Locate, and the topology: node addresses,
// spools, routes) and never again while reading:
//   - if this node holds a complete replica of the current generation, the reader is a
//     plain file descriptor on its identity file "<spool>/.gfrep-data/<inode>/<generation>"
//     (replica/core/spool.h; no network, no copy), so a renamed file reads the same bytes and
//     no other generation's bytes can ever be opened for it;
//   - else the best remote replica (replica/core/selection.h, seen from the reader's site) is
//     read in place over the network (transfer/remote_file.h): Open returns once the
//     session is set up and the first 8 KiB are here (a few round trips), every read
//     fetches the pieces it needs over the route's striped streams, sequential reads fetch
//     ahead by about twice the route's bandwidth-delay product (readahead_bytes), and every
//     piece is checked against its block checksum before a byte of it is returned. The
//     identity path names the generation, and the agent's size must be the catalog's, so a
//     stale replica is never read. A reader that reads the file front to back also gets the
//     whole-file check: the pieces are hashed in order and the read that reaches the end
//     fails with kDataLoss if the file's checksum is not the catalog's (the bytes returned
//     before came from a replica that no longer matches its record; its node's scrubber
//     marks it corrupt). Random access verifies each piece, not the whole file.
//     Fail-over: a source that dies, closes the session or sends damaged pieces beyond
//     repair is replaced by the next best one at the same offset, and the read goes on;
//     the caller sees an error only when every source failed.
//     With `stream = false` (or an agent that cannot stream: "unknown request 'read'") the
//     whole file is pulled into a private temporary file under options.tmp_dir first,
//     verified against the catalog's checksum, unlinked while kept open, and read from there.
// Stale, pending, corrupt or lost replicas are never read. This node's own replica is read
// only if its file is a regular file of the recorded size whose mtime is the stamp the node
// recorded when the replica became complete (Replica::mtime_ns; and, with verify_local,
// whose checksum is the catalog's); otherwise the reader reports it to the catalog (lost if
// missing, else corrupt: the repairer makes the copy again, replica/plan/repairer.h) and reads a
// remote replica instead. A reader with no identity is a client outside every site (always
// the remote path).
//
// Error codes: kNotFound (no such path, or no complete replica of the current
// generation), kFailedPrecondition (a directory; a file without content), kUnavailable
// (every source failed; the last error is in the message), kDataLoss (the whole-file check
// of a streamed file failed at its end).
//
// Thread safety: a FileReader is used by one thread at a time. Open() blocks (catalog and
// transfer calls); do not call it on an executor thread.

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "catalog/catalog.h"
#include "replica/core/selection.h"
#include "transfer/options.h"
#include "transfer/remote_file.h"

namespace gfrep::replica::client {

// The catalog roles a read uses: the views, the replica registry (a replica of this node
// that fails its check is reported) and the work queue (replicate_on_read asks for a copy).
// Never the namespace's writers.
struct ReaderCatalog {
  // Implicit: a whole catalog, or some roles of one.
  ReaderCatalog(catalog::Catalog& c)  // NOLINT(google-explicit-constructor)
      : view(&c), replicas(&c), work(&c) {}
  ReaderCatalog(const catalog::Roles& r)  // NOLINT(google-explicit-constructor)
      : view(r.view), replicas(r.replicas), work(r.work) {}

  catalog::CatalogView* view;
  catalog::ReplicaRegistry* replicas;
  catalog::WorkQueue* work;
};

struct ReaderOptions {
  // Who reads: site and node names (empty: outside every site).
  Reader identity;
  // Engine settings for remote reads (shared key, TLS...). Route fields are defaults.
  transfer::TransferOptions transfer;
  // Where remote reads stage the file. Empty: the system temporary directory.
  std::filesystem::path tmp_dir;
  // Nodes silent for longer are not read from.
  std::chrono::milliseconds heartbeat_timeout{30000};
  // Also checksum this node's own replica before serving it (gfexport --verify): one more
  // read of the file, which then comes from the page cache. Without it the local replica is
  // served when its size and mtime stamp are as recorded at commit.
  bool verify_local = false;
  // Remote replicas are read in place (streaming); false: fetched whole into tmp_dir first.
  bool stream = true;
  // How far a streaming sequential read fetches ahead. 0: twice the route's bandwidth-delay
  // product from the catalog's route (measured rtt and bandwidth, or its rate cap), at least
  // 8 MiB and at most 256 MiB; 32 MiB when the catalog knows no route.
  std::uint64_t readahead_bytes = 0;
  // Piece size of streaming reads (transfer::RemoteReadOptions::block_size).
  std::uint64_t block_size = 1 << 20;
  // Replicate on read (Gfarm's): when a remote replica is read, ask the catalog for a copy
  // at the reader's site (a replication request: copies 1, destination the reader's site,
  // owner "read:<node>"), made, verified and registered by the planner and the site's agents
  // like any other copy, so the next reader there reads it locally. Best effort: a request
  // the catalog refuses is logged, the read goes on. Needs an identity with a site.
  bool replicate_on_read = false;
};

class FileReader {
 public:
  ~FileReader();
  FileReader(const FileReader&) = delete;
  FileReader& operator=(const FileReader&) = delete;

  // Reads up to `n` bytes at the current position; 0 at the end.
  absl::StatusOr<std::size_t> Read(void* buffer, std::size_t n);
  // Reads up to `n` bytes at `offset` (does not move the position).
  absl::StatusOr<std::size_t> ReadAt(std::uint64_t offset, void* buffer, std::size_t n);

  // The open descriptor (owned by the reader; valid until it is destroyed); -1 when a
  // remote replica is streamed.
  int fd() const { return fd_; }
  std::uint64_t size() const { return size_; }
  // The catalog inode and generation read (the path's current ones at Open).
  catalog::InodeId inode() const { return inode_; }
  std::uint64_t generation() const { return generation_; }
  // True when reading this node's own replica.
  bool local() const { return local_; }
  // The node whose replica is read (the current one, after a fail-over).
  const std::string& source_node() const { return source_node_; }
  // True when a remote replica is read in place (not fetched whole first).
  bool streaming() const { return remote_ != nullptr; }
  // Sources given up on during this reader's life (streaming fail-overs).
  int failovers() const { return failovers_; }
  // The replication request replicate_on_read made (0: none).
  std::uint64_t replication_request() const { return replication_request_; }
  // Streaming statistics of the current source (zeros otherwise).
  transfer::RemoteFile::Stats stream_stats() const;

 private:
  friend absl::StatusOr<std::unique_ptr<FileReader>> Open(const ReaderCatalog& catalog,
                                                          std::string_view path,
                                                          const ReaderOptions& options);
  FileReader() = default;

  // Streaming: opens sources_[from...] in turn until one opens (remote_ set), else returns
  // the last error.
  absl::Status OpenStream(std::size_t from, absl::Status last);

  int fd_ = -1;
  std::uint64_t position_ = 0;  // Read()'s position when streaming
  std::unique_ptr<transfer::RemoteFile> remote_;
  std::vector<SourceChoice> sources_;
  std::size_t source_index_ = 0;
  int failovers_ = 0;
  bool retried_same_ = false;
  std::uint64_t replication_request_ = 0;   // the current source was reopened once after it closed
  std::string rel_;             // the replica's path in a spool
  std::string expected_checksum_;
  ReaderOptions options_;
  std::uint64_t size_ = 0;
  catalog::InodeId inode_ = 0;
  std::uint64_t generation_ = 0;
  bool local_ = false;
  std::string source_node_;
};

absl::StatusOr<std::unique_ptr<FileReader>> Open(const ReaderCatalog& catalog,
                                                 std::string_view path,
                                                 const ReaderOptions& options);

// The read-ahead of a streaming read over `route` (null: unknown): twice its bandwidth-delay
// product (measured bandwidth, or the rate cap if lower), within 8..256 MiB; 32 MiB unknown.
std::uint64_t ReadaheadFor(const catalog::Route* route);

}  // namespace gfrep::replica::client
