#pragma once

// The receiving side of a session: the partial file (with its restart journal) and the core
// that receives the missing ranges over N data connections, verifies the whole file and
// commits it under its final name.
//
// Guarantees:
// - One writer per destination: the partial file is locked (flock, exclusive, non-blocking)
//   before the partial file or its journal is touched, and stays locked until it is renamed
//   into place or dropped. A second session for the same destination fails at once with
//   kUnavailable ("another transfer is writing PATH": busy, retry later) and never
//   truncates or writes the first's files. The names stay "<tmp>/<xxh3-64 of the final path>.part/.journal", so a rerun
//   resumes.
// - Nothing unverified reaches the disk: a data frame is received whole into memory and
//   checked against its block checksum before any byte of it is written. A frame that
//   overlaps bytes already received (in this session or resumed) or being received fails the
//   session (kDataLoss, "peer sent an overlapping block") and is never written. So every byte
//   of the committed file was hashed by the end-to-end checksum exactly as it lies on disk.
// - The commit is durable (commit.h); a create-only destination is never replaced.
//
// Runs on the session's executor. Jobs on BlockingPool() (block writes, one in flight per
// stream; journal flushes, the final verify and commit) own the DestinationFile and receiver state they use (shared_ptr), so a
// cancelled or failed session never leaves a job touching freed state.

#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "transfer/internal/engine.h"
#include "transfer/internal/journal.h"

namespace gfrep::transfer::internal {

struct DestinationSpec {
  // Where the verified file goes (absolute).
  std::filesystem::path final_path;
  // Holds the partial file and its journal.
  std::filesystem::path tmp_dir;
  std::uint64_t size = 0;
  // Identity of the source version (a changed source restarts from scratch).
  std::string source_id;
  // End-to-end checksum algorithm name (part of the journal header).
  std::string checksum;
  // How error messages name the destination (e.g. the spool-relative PATH).
  std::string name;
  // Never replace an existing final file: kAlreadyExists up front, and at the commit if one
  // appeared meanwhile (the partial file is then removed).
  bool create_only = false;
};

struct DestinationFile {
  std::filesystem::path final_path;
  std::filesystem::path part_path;
  std::filesystem::path journal_path;
  std::string name;
  bool create_only = false;
  int fd = -1;  // the partial file; holds the exclusive lock while open
  std::uint64_t size = 0;
  Journal journal;
  RangeSet received;
  std::uint64_t resumed_bytes = 0;
  ~DestinationFile();
};

// Opens (resuming when its journal matches) or creates the partial file of `spec`, locked.
// kAborted if another session holds it; kAlreadyExists for an existing create-only
// destination; kResourceExhausted when the disk lacks room.
absl::StatusOr<std::shared_ptr<DestinationFile>> OpenDestination(const DestinationSpec& spec);

// True if a restart journal exists for the destination `final_path` (absolute) in `tmp_dir`:
// a previous run left bytes to resume from. A pull without one asks for the whole file in
// its request and saves the round trip of the "ranges" message.
bool HasRestartJournal(const std::filesystem::path& final_path, const std::filesystem::path& tmp_dir);

asio::awaitable<absl::StatusOr<TransferStats>> RunReceiver(Conn& ctrl, std::vector<ConnPtr> data,
                                                           std::shared_ptr<DestinationFile> dst,
                                                           const TransferOptions& options,
                                                           std::string congestion,
                                                           std::function<bool()> ahead_sent = {});

}  // namespace gfrep::transfer::internal
