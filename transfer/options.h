#pragma once

// Settings of the transfer engine. RouteOptions are the per-route knobs (what netprobe
// recommends and the catalog's route table stores); TransferOptions add what is per copy.
// Validate() checks ranges; every factory and client call validates before use.

#include <spdlog/logger.h>

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"

namespace gfrep::transfer {

// Hard limits of the wire protocol (a peer asking for more is refused).
inline constexpr int kMaxStreams = 64;
inline constexpr std::uint64_t kMinStripeUnit = 4 * 1024;
inline constexpr std::uint64_t kMaxStripeUnit = 64ull * 1024 * 1024;

struct RouteOptions {
  // Parallel TCP data connections per transfer.
  int streams = 4;
  // Bytes per block dealt to a free stream (also the unit of resend after a bad block).
  std::uint64_t stripe_unit = 4 * 1024 * 1024;
  // SO_SNDBUF/SO_RCVBUF per data connection; 0 keeps the kernel's autotuning.
  std::uint64_t socket_buffer = 0;
  // TCP_CONGESTION by name ("cubic", "bbr", "highspeed", ...); empty = system default.
  // An unavailable algorithm logs a warning and the one actually used is reported.
  std::string congestion;
  // Per-stream pacing (SO_MAX_PACING_RATE), bit/s; 0 = none.
  std::uint64_t stream_rate_bps = 0;
  // Aggregate cap for all streams of all transfers of this process on this route, bit/s;
  // 0 = none. Routes are keyed by `route_name` (default: the peer's host:port).
  std::uint64_t route_rate_bps = 0;
  std::string route_name;
};

// Progress of one transfer, reported at most every ~100 ms and once at the end.
struct Progress {
  std::uint64_t bytes_done = 0;    // bytes present at the receiver (incl. resumed)
  std::uint64_t bytes_total = 0;   // file size
  std::uint64_t resumed_bytes = 0; // present before this run started
  double seconds = 0;              // since the transfer started
  int streams = 0;
  // Bytes each data stream carried in this run (index: the stream; `streams` entries), for
  // per-stream graphs. Their sum is bytes_done - resumed_bytes until the end (which reports
  // the exact total).
  std::vector<std::uint64_t> stream_bytes;
};

struct TlsOptions {
  // PEM files. A server needs cert+key; a client needs ca (to verify the server) and, for
  // certificate authentication, cert+key too.
  std::filesystem::path cert;
  std::filesystem::path key;
  std::filesystem::path ca;
};

// Who encrypts TLS records on this host: "the kernel (kTLS) ..." where the kernel can take a
// TLS session, else "OpenSSL in user space (WHY the kernel cannot)". Each connection's own
// answer is TransferStats::tls.
std::string DescribeTlsRecordPath();

struct TransferOptions {
  RouteOptions route;
  // End-to-end file checksum verified before the file is renamed into place. xxh3-tree is
  // computed in the same pass as the block checks (checksum.h); the others take a second.
  std::string checksum = "xxh3-tree";
  // Checksum carried by each data frame.
  std::string block_checksum = "xxh3-64";
  // Pulls: the file's checksum as its owner recorded it ("ALGO:HEX", ALGO one of checksum.h's;
  // empty: none known) and its size. The end-to-end checksum is then computed in ALGO, and
  // the file is installed only if it and the size match: otherwise nothing is installed and
  // the pull fails with ExpectedChecksumMismatch (checksum.h). Such an install never
  // replaces an existing file (kAlreadyExists): a name for known content is written once. As
  // XrdCl's checkSumPreset and gfal2's user checksum; a site agent passes the catalog's.
  std::string expected_checksum;
  std::optional<std::uint64_t> expected_size;
  // Encrypt the control and data connections with TLS. Never falls back to clear text.
  bool tls = false;
  // TLS on the control connection only (implied by `tls`): the agent is verified against
  // tls_options.ca and, with tls_options.cert/key, we authenticate by certificate (mutual
  // TLS); data connections join in clear text with a MAC keyed from the TLS session, so bulk
  // bytes cost no encryption. Block checksums and the end-to-end checksum, which travels on
  // the protected control connection, catch damage.
  bool tls_control = false;
  TlsOptions tls_options;
  // The shared key (raw bytes) for challenge-response authentication; see auth.h.
  std::string shared_key;
  // A connection idle this long (no bytes) fails the transfer with kDeadlineExceeded.
  std::chrono::milliseconds io_timeout{30000};
  // Rounds of re-sending blocks that arrived damaged before giving up with kDataLoss.
  int max_resend_rounds = 3;
  // The receiver makes its restart markers durable after this many new bytes.
  std::uint64_t journal_interval = 256ull * 1024 * 1024;
  // The receiver writes each verified block in calls of at most this many bytes (0: the whole
  // block in one call). A site agent sets it, and journal_interval, from its node's disk
  // profile (`gfprobe disk --store`, catalog DiskProfile).
  std::uint64_t write_io_size = 0;
  // Receiver memory for blocks that arrive ahead of the end-to-end checksum's frontier: they
  // are received into buffers kept until the frontier reaches them (hashed from memory, not
  // read back from the partial file). Also capped at 2 x streams blocks. A block that does
  // not fit is read back from the partial file as before. 0 = always read back. Not used
  // with xxh3-tree, whose leaves are hashed in the block pass in any order.
  std::uint64_t receive_pool_bytes = 256ull * 1024 * 1024;
  // Called on the transfer's executor thread; keep it cheap.
  std::function<void(const Progress&)> progress;
  // Null: spdlog::default_logger().
  std::shared_ptr<spdlog::logger> logger;

  // Test hooks (hidden flags of gfcp/gfsited). The sender flips one byte of the block
  // containing this offset, `test_corrupt_times` times; -1 = off.
  std::int64_t test_corrupt_offset = -1;
  int test_corrupt_times = 0;
  // The sender reads its source with pread instead of hashing it in place from a mapping
  // (what it does on a file system that cannot map files).
  bool test_no_map = false;
};

absl::Status Validate(const RouteOptions& options);
absl::Status Validate(const TransferOptions& options);

}  // namespace gfrep::transfer
