// Fuzzes the restart-marker journal (transfer/internal/journal.h): the file a receiver reads
// back from its spool's .gfrep-tmp/ to resume a copy, written by an earlier run that may have
// died in the middle of an append, or damaged on disk. Journal::Open loads it.
//
// The first input byte picks the mode:
//  - '0' (even), raw: the rest is the whole file, loaded with a fixed expected header. The
//    ranges must be what an oracle written here from the header comment's layout reads (the
//    records up to the first one with a wrong hash, begin > end or end past the size);
//  - '1' (odd), written: a journal written by the product's own writer (Open, then Append of
//    fuzzed batches of ranges, some beyond the size or inverted), then cut short, one bit
//    flipped, or garbage appended at a fuzzed place. It must load exactly the ranges of the
//    records before the first damaged or invalid one: a prefix of what was written, never
//    more, and nothing if the header was damaged.
// In both modes:
//  - Open succeeds; the loaded ranges are sorted, disjoint, non-empty and within the size;
//  - a torn or damaged tail is dropped: after Open the file ends after the last record
//    loaded (or is gone: one whose header is not the expected one describes nothing of
//    ours, and a new journal is made by its first record), so that a range appended now is
//    loaded after a reopen, together with the ones loaded before.

#include <fuzzer/FuzzedDataProvider.h>
#include <unistd.h>
#include <xxhash.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "tests/fuzz/fuzz_check.h"
#include "transfer/internal/journal.h"
#include "transfer/internal/range_set.h"

namespace gfrep::transfer::internal {
namespace {

namespace fs = std::filesystem;

constexpr std::size_t kRecordBytes = 24;
constexpr std::size_t kMaxRecords = 64;
const JournalHeader kRawHeader{1'000'000, "1000000:1764201600.000000000:42", "xxh3-tree"};

// The header's JSON as the layout has it: nlohmann::json's dump of an object, keys sorted.
// (Only plain ASCII strings here, so no escaping.)
std::string HeaderJson(const JournalHeader& h) {
  return "{\"checksum\":\"" + h.checksum + "\",\"size\":" + std::to_string(h.size) +
         ",\"source_id\":\"" + h.source_id + "\"}";
}

std::size_t HeaderBytes(const JournalHeader& h) { return 16 + HeaderJson(h).size(); }

std::uint64_t Get64(const std::string& s, std::size_t at) {
  std::uint64_t v;
  std::memcpy(&v, s.data() + at, 8);
  return v;
}

// Sorted, merged ranges of `in` (empty ones dropped): an oracle for RangeSet.
std::vector<ByteRange> Merge(std::vector<ByteRange> in) {
  std::erase_if(in, [](const ByteRange& r) { return r.begin >= r.end; });
  std::sort(in.begin(), in.end(),
            [](const ByteRange& a, const ByteRange& b) { return a.begin < b.begin; });
  std::vector<ByteRange> out;
  for (const ByteRange& r : in) {
    if (!out.empty() && r.begin <= out.back().end) {
      out.back().end = std::max(out.back().end, r.end);
    } else {
      out.push_back(r);
    }
  }
  return out;
}

struct Loaded {
  std::vector<ByteRange> records;  // the valid ones, in file order
};

// Reads `file` by the layout: u32 magic "GFRJ", u32 n, n bytes of JSON, u64 xxh3-64 of them,
// then 24-byte records {begin, end, xxh3-64 of begin and end}, up to the first bad one.
std::optional<Loaded> OracleLoad(const std::string& file, const JournalHeader& h) {
  const std::string json = HeaderJson(h);
  if (file.size() < 8) return std::nullopt;
  std::uint32_t magic, n;
  std::memcpy(&magic, file.data(), 4);
  std::memcpy(&n, file.data() + 4, 4);
  if (std::memcmp(&magic, "GFRJ", 4) != 0 || n != json.size()) return std::nullopt;
  if (file.size() < 16 + json.size() || file.compare(8, n, json) != 0) return std::nullopt;
  if (Get64(file, 8 + n) != XXH3_64bits(json.data(), json.size())) return std::nullopt;
  Loaded out;
  for (std::size_t at = 16 + n; at + kRecordBytes <= file.size(); at += kRecordBytes) {
    const ByteRange r{Get64(file, at), Get64(file, at + 8)};
    if (Get64(file, at + 16) != XXH3_64bits(file.data() + at, 16)) break;
    if (r.begin > r.end || r.end > h.size) break;
    out.records.push_back(r);
  }
  return out;
}

std::string ReadFile(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

void WriteFile(const fs::path& p, std::string_view bytes) {
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

// The journal file of this process. The journal fdatasyncs at every write: on tmpfs that
// costs nothing, on a disk it would cost most of the run.
const fs::path& JournalPath() {
  static const fs::path path = [] {
    const fs::path dir = fs::exists("/dev/shm") ? fs::path("/dev/shm") : fs::temp_directory_path();
    return dir / ("gfrep_journal_fuzz." + std::to_string(::getpid()));
  }();
  return path;
}

// Opens the journal as it is on disk and checks what it loaded against `expected` (the
// records a correct loader keeps, in order; nullopt: no journal for this header), then that
// a range appended now survives a reopen.
void CheckOpen(const JournalHeader& h, const std::optional<Loaded>& expected, std::uint64_t pick) {
  const fs::path& path = JournalPath();
  absl::StatusOr<Journal> j = Journal::Open(path, h);
  FUZZ_CHECK(j.ok(), "Journal::Open failed on a regular file");
  FUZZ_CHECK(j->resumed() == expected.has_value(), "resumed() disagrees with the header check");
  const std::vector<ByteRange> want =
      expected ? Merge(expected->records) : std::vector<ByteRange>{};
  const std::vector<ByteRange> got = j->ranges().Ranges();
  std::uint64_t prev_end = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    FUZZ_CHECK(got[i].begin < got[i].end, "an empty range was loaded");
    FUZZ_CHECK(got[i].end <= h.size, "a range past the file size was loaded");
    FUZZ_CHECK(i == 0 || got[i].begin > prev_end, "loaded ranges are not sorted and disjoint");
    prev_end = got[i].end;
  }
  FUZZ_CHECK(got == want, "loaded other ranges than the valid records before the first bad one");

  if (expected) {
    FUZZ_CHECK(fs::file_size(path) == HeaderBytes(h) + expected->records.size() * kRecordBytes,
               "the torn or damaged tail was not dropped");
  } else {
    FUZZ_CHECK(!fs::exists(path), "a journal of another header was left in place");
  }

  // A new range: must be loaded after a reopen, with the old ones.
  if (h.size == 0) return;
  const std::uint64_t begin = pick % h.size;
  const ByteRange fresh{begin, begin + 1 + (pick >> 32) % (h.size - begin)};
  FUZZ_CHECK(j->Append({fresh}).ok(), "Append failed");
  j->Close();
  absl::StatusOr<Journal> again = Journal::Open(path, h);
  FUZZ_CHECK(again.ok() && again->resumed(), "a journal just appended to does not load");
  std::vector<ByteRange> with = expected ? expected->records : std::vector<ByteRange>{};
  with.push_back(fresh);
  FUZZ_CHECK(again->ranges().Ranges() == Merge(with),
             "a range appended after a reopen is lost at the next reopen");
}

void Raw(std::string_view file, std::uint64_t pick) {
  const std::string bytes(file);
  WriteFile(JournalPath(), bytes);
  CheckOpen(kRawHeader, OracleLoad(bytes, kRawHeader), pick);
}

void Written(FuzzedDataProvider& in) {
  JournalHeader h = kRawHeader;
  h.size = std::uint64_t{in.ConsumeIntegral<std::uint16_t>()} * 1000;
  const int damage = in.ConsumeIntegralInRange(0, 3);  // none, cut, bit flip, garbage
  const auto where = in.ConsumeIntegral<std::uint32_t>();
  const std::uint64_t pick = in.ConsumeIntegral<std::uint64_t>();

  const fs::path& path = JournalPath();
  std::error_code ignored;
  fs::remove(path, ignored);
  std::vector<ByteRange> written;
  {
    absl::StatusOr<Journal> j = Journal::Open(path, h);
    FUZZ_CHECK(j.ok() && !j->resumed() && j->ranges().empty(), "a new journal is not empty");
    while (in.remaining_bytes() > 0 && written.size() < kMaxRecords) {
      std::vector<ByteRange> batch(in.ConsumeIntegralInRange<std::size_t>(1, 4));
      for (ByteRange& r : batch) {
        // Units of 1000 bytes so that ranges meet, overlap and pass the size.
        r.begin = std::uint64_t{in.ConsumeIntegral<std::uint16_t>()} * 1000;
        r.end = std::uint64_t{in.ConsumeIntegral<std::uint16_t>()} * 1000;
      }
      FUZZ_CHECK(j->Append(batch).ok(), "Append failed");
      written.insert(written.end(), batch.begin(), batch.end());
    }
  }
  if (written.empty()) {  // nothing recorded: no file
    FUZZ_CHECK(!fs::exists(path), "a journal without records was written");
    CheckOpen(h, std::nullopt, pick);
    return;
  }
  // What a correct loader keeps of an intact file: the records before the first invalid one.
  std::size_t keep = 0;
  while (keep < written.size() && written[keep].begin <= written[keep].end &&
         written[keep].end <= h.size) {
    ++keep;
  }

  std::string file = ReadFile(path);
  const std::size_t header = HeaderBytes(h);
  FUZZ_CHECK(file.size() == header + written.size() * kRecordBytes,
             "the writer wrote other than a header and 24 bytes per record");
  bool header_intact = true;
  if (damage == 1) {  // cut: only whole records before the cut remain
    const std::size_t at = where % (file.size() + 1);
    file.resize(at);
    if (at < header) {
      header_intact = false;
    } else {
      keep = std::min(keep, (at - header) / kRecordBytes);
    }
  } else if (damage == 2) {  // one bit flipped: the record (or header) holding it is bad
    const std::size_t at = where / 8 % file.size();
    file[at] = static_cast<char>(file[at] ^ (1 << (where % 8)));
    if (at < header) {
      header_intact = false;
    } else {
      keep = std::min(keep, (at - header) / kRecordBytes);
    }
  } else if (damage == 3) {  // a torn append, or garbage after the records
    file.append(where % 100, static_cast<char>(where >> 8));
    // Garbage is never a valid record (its hash would have to match).
  }
  WriteFile(path, file);

  std::optional<Loaded> expected;
  if (header_intact) expected = Loaded{{written.begin(), written.begin() + keep}};
  CheckOpen(h, expected, pick);
}

}  // namespace
}  // namespace gfrep::transfer::internal

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace gfrep::transfer::internal;
  if (size < 1) return 0;
  if (data[0] % 2 == 0) {
    // The whole rest is the file (seeds are real journals); its hash picks the range
    // appended after the load.
    Raw(std::string_view(reinterpret_cast<const char*>(data + 1), size - 1),
        XXH3_64bits(data + 1, size - 1));
  } else {
    FuzzedDataProvider in(data + 1, size - 1);
    Written(in);
  }
  return 0;
}
