#pragma once

// The node-local read path: open a logical catalog path for reading.
//
//   absl::StatusOr<std::unique_ptr<replica::FileReader>> r =
//       replica::Open(catalog, "/exp/run001", {.identity = {"tsukuba", "node1"}, ...});
//
// Open() asks the catalog at open time only (Locate, and the topology: node addresses,
// spools, routes) and never again while reading:
//   - if this node holds a complete replica of the current generation, the reader is a
//     plain file descriptor on its identity file "<spool>/.gfrep-data/<inode>/<generation>"
//     (replica/spool.h; no network, no copy), so a renamed file reads the same bytes and
//     no other generation's bytes can ever be opened for it;
//   - else the best remote replica (replica/selection.h, seen from the reader's site) is
//     pulled with the transfer engine into a private temporary file under
//     options.tmp_dir, verified against the catalog's checksum, unlinked while kept open,
//     and read from there. Whole-file fetch-then-read: simple, verified before the first
//     byte is served, at the cost of a first-byte latency of one transfer and temporary
//     disk space of one file. If a source fails, the next best is tried.
// Stale, pending, corrupt or lost replicas are never read. This node's own replica is read
// only if its file is a regular file of the recorded size whose mtime is the stamp the node
// recorded when the replica became complete (Replica::mtime_ns; and, with verify_local,
// whose checksum is the catalog's); otherwise the reader reports it to the catalog (lost if
// missing, else corrupt: the repairer makes the copy again, replica/repairer.h) and reads a
// remote replica instead. A reader with no identity is a client outside every site (always
// the remote path).
//
// Error codes: kNotFound (no such path, or no complete replica of the current
// generation), kFailedPrecondition (a directory; a file without content), kUnavailable
// (every source failed; the last error is in the message), kDataLoss.
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
#include "replica/selection.h"
#include "transfer/options.h"

namespace gfrep::replica {

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

  // The open descriptor (owned by the reader; valid until it is destroyed).
  int fd() const { return fd_; }
  std::uint64_t size() const { return size_; }
  std::uint64_t generation() const { return generation_; }
  // True when reading this node's own replica.
  bool local() const { return local_; }
  // The node whose replica is read.
  const std::string& source_node() const { return source_node_; }

 private:
  friend absl::StatusOr<std::unique_ptr<FileReader>> Open(catalog::Catalog& catalog,
                                                          std::string_view path,
                                                          const ReaderOptions& options);
  FileReader() = default;

  int fd_ = -1;
  std::uint64_t size_ = 0;
  std::uint64_t generation_ = 0;
  bool local_ = false;
  std::string source_node_;
};

absl::StatusOr<std::unique_ptr<FileReader>> Open(catalog::Catalog& catalog, std::string_view path,
                                                 const ReaderOptions& options);

}  // namespace gfrep::replica
