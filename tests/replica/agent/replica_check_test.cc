#include "replica/agent/replica_check.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <spdlog/sinks/null_sink.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>

#include <fstream>
#include <vector>

#include "replica/core/spool.h"
#include "tests/support/scratch_catalog.h"
#include "tests/support/temp_dir.h"
#include "transfer/checksum.h"

namespace gfrep::replica::agent {
namespace {

namespace fs = std::filesystem;
using catalog::ReplicaState;

std::int64_t MtimeOf(const fs::path& file) {
  struct stat st {};
  EXPECT_EQ(::stat(file.c_str(), &st), 0);
  return static_cast<std::int64_t>(st.st_mtim.tv_sec) * 1'000'000'000 + st.st_mtim.tv_nsec;
}

void SetMtime(const fs::path& file, std::int64_t ns) {
  struct timespec times[2];
  times[0].tv_sec = 0;
  times[0].tv_nsec = UTIME_OMIT;
  times[1].tv_sec = ns / 1'000'000'000;
  times[1].tv_nsec = ns % 1'000'000'000;
  ASSERT_EQ(::utimensat(AT_FDCWD, file.c_str(), times, 0), 0);
}

class ReplicaCheckTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto c = gfrep::testing::OpenScratchCatalog(dir_.Sub("db"));
    ASSERT_TRUE(c.ok()) << c.status();
    cat_ = std::move(*c);
    ASSERT_TRUE(cat_->PutSite({"S", {}}).ok());
    catalog::Node node;
    node.name = "n1";
    node.site = "S";
    node.address = "127.0.0.1:1";
    node.spool = spool_.string();
    ASSERT_TRUE(cat_->RegisterNode(node).ok());
  }

  // A file of `size` random bytes committed with n1 as its writer (complete there, no mtime
  // stamp: as an upload's replica is).
  catalog::Attributes Put(const std::string& path, std::uint64_t size, std::uint64_t seed) {
    auto reserved = cat_->BeginWrite(path, catalog::FileContent{});
    EXPECT_TRUE(reserved.ok()) << reserved.status();
    fs::path file = ReplicaFile(spool_, reserved->attributes.inode, reserved->generation);
    fs::create_directories(file.parent_path());
    gfrep::testing::WriteRandomFile(file, size, seed);
    auto sum = transfer::ComputeFileChecksum(file, transfer::ChecksumAlgorithm::kXxh3_128);
    EXPECT_TRUE(sum.ok());
    catalog::FileContent c;
    c.size = size;
    c.checksum_algo = "xxh3-128";
    c.checksum = sum->substr(sum->find(':') + 1);
    c.generation = reserved->generation;
    auto a = cat_->CommitFile(path, c, "n1", std::nullopt);
    EXPECT_TRUE(a.ok()) << a.status();
    return *a;
  }

  catalog::Replica Record(catalog::InodeId inode) {
    auto all = cat_->GetReplicas(inode);
    EXPECT_TRUE(all.ok());
    for (const catalog::Replica& r : *all) {
      if (r.node == "n1") return r;
    }
    ADD_FAILURE() << "no record";
    return {};
  }

  fs::path FileOf(const catalog::Attributes& a) { return ReplicaFile(spool_, a.inode, a.generation); }

  ReplicaChecker Checker(bool report = true) {
    ReplicaCheckerOptions o;
    o.catalog = cat_.get();
    o.node = "n1";
    o.spool = spool_;
    o.scrub_rate_bytes = 0;
    o.scrub_period = std::chrono::hours(1);
    o.report = report;
    o.logger = std::make_shared<spdlog::logger>("test", std::make_shared<spdlog::sinks::null_sink_mt>());
    return ReplicaChecker(o);
  }

  gfrep::testing::TempDir dir_{"replica-check"};
  fs::path spool_ = dir_.path() / "spool";
  std::unique_ptr<catalog::Catalog> cat_;
};

TEST_F(ReplicaCheckTest, AScrubVerifiesGoodReplicasAndStampsThem) {
  catalog::Attributes a = Put("/good", 300000, 1);
  EXPECT_EQ(Record(a.inode).mtime_ns, 0);
  auto s = Checker().ScrubPass();
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->checked, 1u);
  EXPECT_EQ(s->good, 1u);
  EXPECT_EQ(s->bytes_read, 300000u);
  EXPECT_EQ(s->reported, 1u);
  catalog::Replica r = Record(a.inode);
  EXPECT_EQ(r.state, ReplicaState::kComplete);
  EXPECT_EQ(r.mtime_ns, MtimeOf(FileOf(a)));
  EXPECT_GT(r.verified_ns, 0);
  // Verified within the period: the next pass leaves it alone.
  s = Checker().ScrubPass();
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->checked, 0u);
  // The stat check agrees with it.
  s = Checker().StatPass();
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->good, 1u);
  EXPECT_EQ(s->reported, 0u) << "a stat check alone never vouches for bytes";
}

TEST_F(ReplicaCheckTest, TheStatCheckFindsMissingResizedAndRewrittenReplicas) {
  catalog::Attributes gone = Put("/gone", 1000, 1);
  catalog::Attributes shrunk = Put("/shrunk", 1000, 2);
  catalog::Attributes rewritten = Put("/rewritten", 1000, 3);
  catalog::Attributes fine = Put("/fine", 1000, 4);
  // Stamp them all (as a commit of a copy does).
  ASSERT_TRUE(Checker().ScrubPass().ok());
  fs::remove(FileOf(gone));
  fs::resize_file(FileOf(shrunk), 999);
  gfrep::testing::FlipByte(FileOf(rewritten), 10);
  SetMtime(FileOf(rewritten), MtimeOf(FileOf(rewritten)) + 1'000'000'000);  // written later

  auto s = Checker().StatPass();
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->checked, 4u);
  EXPECT_EQ(s->lost, 1u);
  EXPECT_EQ(s->corrupt, 2u);
  EXPECT_EQ(s->good, 1u);
  EXPECT_EQ(s->reported, 3u);
  EXPECT_EQ(Record(gone.inode).state, ReplicaState::kLost);
  EXPECT_EQ(Record(gone.inode).note, "missing from the spool");
  EXPECT_EQ(Record(shrunk.inode).state, ReplicaState::kCorrupt);
  EXPECT_NE(Record(shrunk.inode).note.find("999 bytes"), std::string::npos);
  EXPECT_EQ(Record(rewritten.inode).state, ReplicaState::kCorrupt);
  EXPECT_NE(Record(rewritten.inode).note.find("modified after it was committed"), std::string::npos);
  EXPECT_EQ(Record(fine.inode).state, ReplicaState::kComplete);
  // Bad ones are not looked at again (they are no longer complete).
  s = Checker().StatPass();
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->checked, 1u);
}

TEST_F(ReplicaCheckTest, OnlyTheScrubFindsAFlippedByteWhoseMtimeWasPutBack) {
  catalog::Attributes a = Put("/rot", 2 << 20, 5);
  ASSERT_TRUE(Checker().ScrubPass().ok());
  const std::int64_t stamp = MtimeOf(FileOf(a));
  gfrep::testing::FlipByte(FileOf(a), (1 << 20) + 7);
  SetMtime(FileOf(a), stamp);  // bit rot: nothing on the file says it changed

  auto s = Checker().StatPass();
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->good, 1u);
  EXPECT_EQ(Record(a.inode).state, ReplicaState::kComplete);

  s = Checker().ScrubPass(/*everything=*/true);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->corrupt, 1u);
  catalog::Replica r = Record(a.inode);
  EXPECT_EQ(r.state, ReplicaState::kCorrupt);
  EXPECT_NE(r.note.find("the catalog says"), std::string::npos) << r.note;
}

// The scrub reads in pieces of at most 1 MiB into a buffer no bigger than the replica: the
// last byte of replicas below, at and past one piece is still read and judged.
TEST_F(ReplicaCheckTest, TheScrubJudgesTheLastByteOfSmallAndPieceSizedReplicas) {
  const std::uint64_t sizes[] = {1, 65536, 1 << 20, (1 << 20) + 1};
  std::vector<catalog::Attributes> put;
  for (std::uint64_t size : sizes) put.push_back(Put(fmt::format("/edge-{}", size), size, size));
  ASSERT_TRUE(Checker().ScrubPass().ok());
  for (const catalog::Attributes& a : put) {
    EXPECT_EQ(Record(a.inode).state, ReplicaState::kComplete) << a.size;
    const std::int64_t stamp = MtimeOf(FileOf(a));
    gfrep::testing::FlipByte(FileOf(a), a.size - 1);
    SetMtime(FileOf(a), stamp);
  }
  auto s = Checker().ScrubPass(/*everything=*/true);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->corrupt, put.size());
  for (const catalog::Attributes& a : put) {
    EXPECT_EQ(Record(a.inode).state, ReplicaState::kCorrupt) << a.size;
  }
}

TEST_F(ReplicaCheckTest, ReplicasBackFromADeadNodeCountAgainOnlyOnceReadAndGoodAgain) {
  // Three replicas of n1 marked unverified while n1 was dead (the repairer's); one of them
  // had its copy made again elsewhere meanwhile (kRemadeNote).
  catalog::Attributes good = Put("/good", 200000, 1);
  catalog::Attributes rotted = Put("/rotted", 200000, 2);
  catalog::Attributes remade = Put("/remade", 200000, 3);
  // Verified just now: a complete replica would not be due for another hour.
  ASSERT_TRUE(Checker().ScrubPass().ok());
  auto mark = [&](const catalog::Attributes& a, std::string note) {
    catalog::ReplicaTransition t;
    t.inode = a.inode;
    t.node = "n1";
    t.generation = a.generation;
    t.from = ReplicaState::kComplete;
    t.to = ReplicaState::kUnverified;
    auto r = cat_->TransitionReplicas({t});
    ASSERT_TRUE(r.ok() && (*r)[0].ok());
    if (note.empty()) return;
    t.from = ReplicaState::kUnverified;
    t.note = std::move(note);
    r = cat_->TransitionReplicas({t});
    ASSERT_TRUE(r.ok() && (*r)[0].ok());
  };
  mark(good, "");
  mark(rotted, "");
  mark(remade, std::string(catalog::kRemadeNote));
  // Bit rot that keeps the size and mtime, in two of them.
  for (const catalog::Attributes* a : {&rotted, &remade}) {
    const std::int64_t mtime = MtimeOf(FileOf(*a));
    std::fstream f(FileOf(*a), std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(1000);
    const char byte = static_cast<char>(f.get());
    f.seekp(1000);
    f.put(static_cast<char>(byte ^ 0x5a));
    f.close();
    SetMtime(FileOf(*a), mtime);
  }
  // The stat check cannot vouch for them: they stay unverified.
  auto st = Checker().StatPass();
  ASSERT_TRUE(st.ok()) << st.status();
  EXPECT_EQ(st->checked, 3u);
  EXPECT_EQ(Record(good.inode).state, ReplicaState::kUnverified);
  // The scrub reads them at once (always due).
  auto s = Checker().ScrubPass();
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->checked, 3u);
  EXPECT_EQ(s->good, 1u);
  EXPECT_EQ(s->corrupt, 2u);
  EXPECT_EQ(Record(good.inode).state, ReplicaState::kComplete);
  EXPECT_EQ(Record(good.inode).note, catalog::kRecheckedNote);
  EXPECT_EQ(Record(rotted.inode).state, ReplicaState::kCorrupt) << "to be made again";
  EXPECT_EQ(Record(remade.inode).state, ReplicaState::kDeleting) << "made again already: dropped";
}

TEST_F(ReplicaCheckTest, AReportOnlyCheckChangesNothing) {
  catalog::Attributes a = Put("/f", 1000, 6);
  fs::remove(FileOf(a));
  auto s = Checker(/*report=*/false).StatPass();
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->lost, 1u);
  EXPECT_EQ(s->reported, 0u);
  ASSERT_EQ(s->bad.size(), 1u);
  EXPECT_EQ(s->bad[0].replica.inode, a.inode);
  EXPECT_EQ(Record(a.inode).state, ReplicaState::kComplete);
  // CheckFiles reports what it finds for the files it is given.
  s = Checker().CheckFiles({a.inode}, /*checksum=*/true);
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->lost, 1u);
  EXPECT_EQ(s->reported, 1u);
  EXPECT_EQ(Record(a.inode).state, ReplicaState::kLost);
}

TEST_F(ReplicaCheckTest, AReplicaChangedMeanwhileIsNotJudgedFromAStaleRecord) {
  catalog::Attributes a = Put("/f", 1000, 7);
  catalog::Replica seen = Record(a.inode);
  fs::remove(FileOf(a));
  // The file is written again (a new generation) after the checker read the record.
  Put("/f", 500, 8);
  ReplicaFinding f = CheckReplicaFile(spool_, seen, nullptr);
  EXPECT_EQ(f.verdict, ReplicaVerdict::kLost);
  std::optional<catalog::ReplicaTransition> t = TransitionFor(f);
  ASSERT_TRUE(t.has_value());
  auto r = cat_->TransitionReplicas({*t});
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(absl::IsAborted((*r)[0])) << (*r)[0];
  EXPECT_EQ(Record(a.inode).state, ReplicaState::kComplete);
  EXPECT_EQ(Record(a.inode).generation, 2u);
}

TEST_F(ReplicaCheckTest, APacedScrubStopsWhenAsked) {
  catalog::Attributes a = Put("/big", 4 << 20, 9);
  int chunks = 0;
  ReplicaFinding f = CheckReplicaFile(spool_, Record(a.inode), &a, [&](std::size_t n) {
    EXPECT_LE(n, std::size_t{1} << 20);
    return ++chunks < 2;
  });
  EXPECT_EQ(f.verdict, ReplicaVerdict::kSkipped);
  EXPECT_EQ(chunks, 2);
  EXPECT_FALSE(TransitionFor(f).has_value());
}

}  // namespace
}  // namespace gfrep::replica::agent
