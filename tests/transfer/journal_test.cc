#include "transfer/internal/journal.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "tests/support/temp_dir.h"

namespace gfrep::transfer::internal {
namespace {

const JournalHeader kHeader{1000, "1000:123.000000000:42", "xxh3-128"};

TEST(JournalTest, NewJournalIsEmpty) {
  testing::TempDir dir("journal");
  absl::StatusOr<Journal> j = Journal::Open(dir.path() / "j", kHeader);
  ASSERT_TRUE(j.ok()) << j.status();
  EXPECT_FALSE(j->resumed());
  EXPECT_TRUE(j->ranges().empty());
}

TEST(JournalTest, TheFileIsMadeByTheFirstRecordNotByOpen) {
  testing::TempDir dir("journal");
  absl::StatusOr<Journal> j = Journal::Open(dir.path() / "j", kHeader);
  ASSERT_TRUE(j.ok()) << j.status();
  EXPECT_FALSE(std::filesystem::exists(dir.path() / "j"));
  EXPECT_FALSE(j->on_disk());
  ASSERT_TRUE(j->Append({{0, 100}}).ok());
  EXPECT_TRUE(j->on_disk());
  j->Close();
  absl::StatusOr<Journal> k = Journal::Open(dir.path() / "j", kHeader);
  ASSERT_TRUE(k.ok());
  EXPECT_TRUE(k->resumed());
  EXPECT_EQ(k->ranges().Ranges(), (std::vector<ByteRange>{{0, 100}}));
}

TEST(JournalTest, ReopenRestoresAppendedRanges) {
  testing::TempDir dir("journal");
  {
    absl::StatusOr<Journal> j = Journal::Open(dir.path() / "j", kHeader);
    ASSERT_TRUE(j.ok());
    ASSERT_TRUE(j->Append({{0, 100}, {200, 300}}).ok());
    ASSERT_TRUE(j->Append({{100, 150}}).ok());
  }
  absl::StatusOr<Journal> j = Journal::Open(dir.path() / "j", kHeader);
  ASSERT_TRUE(j.ok());
  EXPECT_TRUE(j->resumed());
  EXPECT_EQ(j->ranges().Ranges(), (std::vector<ByteRange>{{0, 150}, {200, 300}}));
  // And appending after a reopen keeps working.
  ASSERT_TRUE(j->Append({{150, 200}}).ok());
  j->Close();
  absl::StatusOr<Journal> k = Journal::Open(dir.path() / "j", kHeader);
  ASSERT_TRUE(k.ok());
  EXPECT_EQ(k->ranges().Ranges(), (std::vector<ByteRange>{{0, 300}}));
}

TEST(JournalTest, DifferentSourceVersionStartsOver) {
  testing::TempDir dir("journal");
  {
    absl::StatusOr<Journal> j = Journal::Open(dir.path() / "j", kHeader);
    ASSERT_TRUE(j.ok());
    ASSERT_TRUE(j->Append({{0, 100}}).ok());
  }
  JournalHeader other = kHeader;
  other.source_id = "1000:999.000000000:42";
  absl::StatusOr<Journal> j = Journal::Open(dir.path() / "j", other);
  ASSERT_TRUE(j.ok());
  EXPECT_FALSE(j->resumed());
  EXPECT_TRUE(j->ranges().empty());
  EXPECT_FALSE(std::filesystem::exists(dir.path() / "j"));  // it describes nothing of ours
}

TEST(JournalTest, TornTailRecordIsIgnored) {
  testing::TempDir dir("journal");
  std::filesystem::path p = dir.path() / "j";
  {
    absl::StatusOr<Journal> j = Journal::Open(p, kHeader);
    ASSERT_TRUE(j.ok());
    ASSERT_TRUE(j->Append({{0, 100}}).ok());
    ASSERT_TRUE(j->Append({{500, 600}}).ok());
  }
  // Crash in the middle of the second record: keep only part of it.
  std::filesystem::resize_file(p, std::filesystem::file_size(p) - 5);
  absl::StatusOr<Journal> j = Journal::Open(p, kHeader);
  ASSERT_TRUE(j.ok());
  EXPECT_EQ(j->ranges().Ranges(), (std::vector<ByteRange>{{0, 100}}));
  ASSERT_TRUE(j->Append({{100, 200}}).ok());
  j->Close();
  absl::StatusOr<Journal> k = Journal::Open(p, kHeader);
  ASSERT_TRUE(k.ok());
  EXPECT_EQ(k->ranges().Ranges(), (std::vector<ByteRange>{{0, 200}}));
}

TEST(JournalTest, CorruptRecordStopsLoading) {
  testing::TempDir dir("journal");
  std::filesystem::path p = dir.path() / "j";
  {
    absl::StatusOr<Journal> j = Journal::Open(p, kHeader);
    ASSERT_TRUE(j.ok());
    ASSERT_TRUE(j->Append({{0, 100}, {200, 300}}).ok());
  }
  // Flip a byte in the last record's end offset.
  std::fstream f(p, std::ios::in | std::ios::out | std::ios::binary);
  f.seekp(-(24 - 9), std::ios::end);
  f.put('\x7f');
  f.close();
  absl::StatusOr<Journal> j = Journal::Open(p, kHeader);
  ASSERT_TRUE(j.ok());
  EXPECT_EQ(j->ranges().Ranges(), (std::vector<ByteRange>{{0, 100}}));
}

// Found by tests/fuzz/journal_fuzz.cc: Open cut only a partial record off the end, so new
// records went after a damaged one, and the next load, which stops there, lost them.
TEST(JournalTest, RecordsAppendedAfterADamagedOneAreLoaded) {
  testing::TempDir dir("journal");
  std::filesystem::path p = dir.path() / "j";
  {
    absl::StatusOr<Journal> j = Journal::Open(p, kHeader);
    ASSERT_TRUE(j.ok());
    ASSERT_TRUE(j->Append({{0, 100}, {200, 300}, {400, 500}}).ok());
  }
  // Damage the middle record's end offset: only the first one loads.
  std::fstream f(p, std::ios::in | std::ios::out | std::ios::binary);
  f.seekp(-(2 * 24 - 9), std::ios::end);
  f.put('\x7f');
  f.close();
  absl::StatusOr<Journal> j = Journal::Open(p, kHeader);
  ASSERT_TRUE(j.ok());
  EXPECT_EQ(j->ranges().Ranges(), (std::vector<ByteRange>{{0, 100}}));
  ASSERT_TRUE(j->Append({{100, 150}}).ok());
  j->Close();
  absl::StatusOr<Journal> k = Journal::Open(p, kHeader);
  ASSERT_TRUE(k.ok());
  EXPECT_EQ(k->ranges().Ranges(), (std::vector<ByteRange>{{0, 150}}));
}

TEST(JournalTest, GarbageFileIsReplaced) {
  testing::TempDir dir("journal");
  std::filesystem::path p = dir.path() / "j";
  std::ofstream(p) << "this is not a journal";
  absl::StatusOr<Journal> j = Journal::Open(p, kHeader);
  ASSERT_TRUE(j.ok());
  EXPECT_FALSE(j->resumed());
}

}  // namespace
}  // namespace gfrep::transfer::internal
