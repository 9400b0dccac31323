#pragma once

// The restart-marker journal kept beside a partial file in the spool's .gfrep-tmp/.
//
// Layout: u32 magic "GFRJ", u32 n, n bytes of JSON header {"size", "source_id",
// "checksum"}, u64 xxh3-64 of those n bytes; then 24-byte records {u64 begin, u64 end,
// u64 xxh3-64(begin,end)}, each meaning "bytes [begin,end) of the partial file are durable".
// Loading stops at the first torn or damaged record (crash while appending, bad disk); Open
// drops it and everything after it, so that new records follow the valid ones. The receiver
// fdatasyncs the partial file before appending records for it, so a record never
// claims bytes that could be lost.
//
// Not thread-safe; used by one transfer (appends run on its blocking-I/O thread).

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "transfer/internal/range_set.h"

namespace gfrep::transfer::internal {

struct JournalHeader {
  std::uint64_t size = 0;
  std::string source_id;  // identity of the source version (size, mtime, ...)
  std::string checksum;   // end-to-end checksum algorithm name
  friend bool operator==(const JournalHeader&, const JournalHeader&) = default;
};

class Journal {
 public:
  Journal() = default;
  ~Journal();
  Journal(Journal&& other) noexcept;
  Journal& operator=(Journal&& other) noexcept;
  Journal(const Journal&) = delete;
  Journal& operator=(const Journal&) = delete;

  // Opens the journal at `path`. If it exists with an equal header, its ranges are loaded
  // (`resumed()` is true); one with another header is removed. A journal that is not there
  // is made by the first Append: a copy that ends before it has anything to record (every
  // file under the journal interval that does not fail) never writes one.
  static absl::StatusOr<Journal> Open(const std::filesystem::path& path,
                                      const JournalHeader& header);

  // Appends records (creating the journal with its header first if needed) and fdatasyncs
  // the journal. REQUIRES: the bytes are already durable.
  absl::Status Append(const std::vector<ByteRange>& ranges);

  const RangeSet& ranges() const { return ranges_; }
  bool resumed() const { return resumed_; }
  // The journal's file is there (loaded by Open or made by Append) and open.
  bool on_disk() const { return fd_ >= 0; }
  void Close();

 private:
  int fd_ = -1;
  std::filesystem::path path_;  // empty once closed
  std::string header_;          // the file's first bytes, for the Append that makes it
  RangeSet ranges_;
  bool resumed_ = false;
};

}  // namespace gfrep::transfer::internal
