#include "replica/core/cron.h"

#include <gtest/gtest.h>

namespace gfrep::replica {
namespace {

absl::Time At(const char* zone, int y, int mo, int d, int h, int mi) {
  absl::TimeZone tz;
  EXPECT_TRUE(absl::LoadTimeZone(zone, &tz)) << zone;
  return absl::FromCivil(absl::CivilMinute(y, mo, d, h, mi), tz);
}

std::string Utc(absl::Time t) { return absl::FormatTime("%Y-%m-%d %H:%M:%S", t, absl::UTCTimeZone()); }

TEST(CronTest, EveryNightAtTwoInTokyo) {
  auto s = CronSchedule::Parse("0 2 * * *", "Asia/Tokyo");
  ASSERT_TRUE(s.ok()) << s.status();
  // 02:00 JST is 17:00 UTC the day before.
  EXPECT_EQ(Utc(s->Next(At("Asia/Tokyo", 2026, 11, 24, 1, 0))), "2026-11-23 17:00:00");
  EXPECT_EQ(Utc(s->Next(At("Asia/Tokyo", 2026, 11, 24, 2, 0))), "2026-11-24 17:00:00")
      << "strictly after";
}

// A step near INT_MAX (found by tests/fuzz/cron_fuzz.cc: the loop's int overflowed).
TEST(CronTest, AHugeStepMeansTheFirstValueOnly) {
  auto s = CronSchedule::Parse("59/2147483647 * * * *", "UTC");
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(Utc(s->Next(At("UTC", 2026, 11, 24, 10, 0))), "2026-11-24 10:59:00");
  EXPECT_EQ(Utc(s->Next(At("UTC", 2026, 11, 24, 10, 59))), "2026-11-24 11:59:00");
}

TEST(CronTest, FieldsListsRangesStepsAndDays) {
  auto s = CronSchedule::Parse("*/15 9-17 * * 1-5", "UTC");
  ASSERT_TRUE(s.ok()) << s.status();
  // Friday 2026-11-27 17:50 -> Monday 09:00.
  EXPECT_EQ(Utc(s->Next(At("UTC", 2026, 11, 27, 17, 50))), "2026-11-30 09:00:00");
  EXPECT_EQ(Utc(s->Next(At("UTC", 2026, 11, 30, 9, 0))), "2026-11-30 09:15:00");
  // Day of month and day of week both restricted: either matches (the 1st, or a Sunday).
  auto either = CronSchedule::Parse("0 0 1 * 0", "UTC");
  ASSERT_TRUE(either.ok());
  EXPECT_EQ(Utc(either->Next(At("UTC", 2026, 11, 24, 0, 0))), "2026-11-29 00:00:00");  // Sunday
  EXPECT_EQ(Utc(either->Next(At("UTC", 2026, 11, 29, 0, 0))), "2026-12-01 00:00:00");
  auto sunday7 = CronSchedule::Parse("30 4 * * 7", "UTC");
  ASSERT_TRUE(sunday7.ok());
  EXPECT_EQ(Utc(sunday7->Next(At("UTC", 2026, 11, 24, 0, 0))), "2026-11-29 04:30:00");
  auto never = CronSchedule::Parse("0 0 31 2 *", "UTC");
  ASSERT_TRUE(never.ok());
  EXPECT_EQ(never->Next(At("UTC", 2026, 1, 1, 0, 0)), absl::InfiniteFuture());
}

TEST(CronTest, DaylightSavingTimeGapRunsAtTheJumpAndTheFoldRunsOnce) {
  // Europe/Berlin: 2027-03-28 02:00 -> 03:00 (no 02:30 that day); 2027-10-31 03:00 -> 02:00
  // (02:30 happens twice).
  auto s = CronSchedule::Parse("30 2 * * *", "Europe/Berlin");
  ASSERT_TRUE(s.ok()) << s.status();
  absl::Time gap = s->Next(At("UTC", 2027, 3, 27, 12, 0));
  EXPECT_EQ(Utc(gap), "2027-03-28 01:00:00") << "at the jump (03:00 CEST = 01:00 UTC)";
  EXPECT_EQ(Utc(s->Next(gap)), "2027-03-29 00:30:00") << "then 02:30 CEST as usual";
  absl::Time fold = s->Next(At("UTC", 2027, 10, 30, 12, 0));
  EXPECT_EQ(Utc(fold), "2027-10-31 00:30:00") << "the first 02:30 (CEST)";
  EXPECT_EQ(Utc(s->Next(fold)), "2027-11-01 01:30:00") << "not the second 02:30 (CET) again";
}

TEST(CronTest, AMissedRunIsMadeUpOnceNotOncePerMissedRun) {
  auto s = CronSchedule::Parse("0 2 * * *", "UTC");
  ASSERT_TRUE(s.ok());
  absl::Time last = At("UTC", 2026, 11, 20, 2, 0);
  absl::Time now = At("UTC", 2026, 11, 24, 9, 0);  // down for four nights
  std::optional<absl::Time> due = s->Due(last, now);
  ASSERT_TRUE(due.has_value());
  EXPECT_EQ(Utc(*due), "2026-11-24 02:00:00") << "the latest missed run, once";
  EXPECT_FALSE(s->Due(*due, now).has_value()) << "nothing more until the next night";
  EXPECT_FALSE(s->Due(now, At("UTC", 2026, 11, 25, 1, 59)).has_value());
  EXPECT_TRUE(s->Due(now, At("UTC", 2026, 11, 25, 2, 0)).has_value());
}

TEST(CronTest, MistakesNameTheField) {
  const std::pair<const char*, const char*> cases[] = {
      {"0 2 * *", "want 5 fields"},
      {"60 2 * * *", "minute field '60': values must be 0..59"},
      {"0 24 * * *", "hour field"},
      {"0 0 0 * *", "day-of-month field"},
      {"0 0 * 13 *", "month field"},
      {"0 0 * * 8", "day-of-week field"},
      {"*/0 * * * *", "the step must be a number >= 1"},
      {"5-1 * * * *", "values must be 0..59"},
      {"a * * * *", "expected *, N, A-B"},
  };
  for (const auto& [spec, want] : cases) {
    auto s = CronSchedule::Parse(spec, "UTC");
    ASSERT_FALSE(s.ok()) << spec;
    EXPECT_NE(std::string(s.status().message()).find(want), std::string::npos)
        << spec << ": " << s.status();
  }
  auto zone = CronSchedule::Parse("0 0 * * *", "Mars/Olympus_Mons");
  ASSERT_FALSE(zone.ok());
  EXPECT_NE(std::string(zone.status().message()).find("unknown time zone"), std::string::npos);
}

}  // namespace
}  // namespace gfrep::replica
