#pragma once

// Cron schedules in a named time zone, for scheduled replication policies ("every night at
// 02:00 Asia/Tokyo mirror /sim/** to sdsc").
//
//   absl::StatusOr<CronSchedule> s = CronSchedule::Parse("0 2 * * *", "Asia/Tokyo");
//   absl::Time next = s->Next(absl::Now());
//
// Five fields, as crontab(5): minute (0-59), hour (0-23), day of month (1-31), month (1-12),
// day of week (0-7, 0 and 7 are Sunday); each `*`, a number, a range `a-b`, a list `a,b,c`
// and steps `*/n` or `a-b/n`. When both day fields are restricted a day matching either
// runs (as cron does). Daylight-saving time, as cronie does: a time that does not exist
// (the clock jumps over it) runs at the jump; a time that happens twice runs once, the
// first time. Time zones come from the system's zoneinfo (Debian's tzdata); "UTC" always
// works.
//
// After downtime a schedule is made up once, not once per missed run: Due(last, now) is the
// latest scheduled time in (last, now], if any.
//
// Thread safety: immutable after Parse.

#include <bitset>
#include <optional>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "absl/time/civil_time.h"
#include "absl/time/time.h"

namespace gfrep::replica {

class CronSchedule {
 public:
  // kInvalidArgument naming the field, or the time zone that cannot be loaded.
  static absl::StatusOr<CronSchedule> Parse(std::string_view spec, std::string_view time_zone);

  // The first scheduled time strictly after `after` (within 8 years; InfiniteFuture if the
  // schedule never fires, e.g. "0 0 31 2 *").
  absl::Time Next(absl::Time after) const;

  // The latest scheduled time in (last_run, now], or nullopt: what to run once now.
  std::optional<absl::Time> Due(absl::Time last_run, absl::Time now) const;

  const std::string& spec() const { return spec_; }
  const std::string& time_zone() const { return zone_name_; }

 private:
  CronSchedule() = default;
  bool DayMatches(const absl::CivilDay& day) const;
  // The latest scheduled time at or before `at` (within 8 years), or InfinitePast.
  absl::Time Latest(absl::Time at) const;
  // The instant a scheduled civil minute happens at (see the DST rules above).
  absl::Time Instant(const absl::CivilDay& day, int hour, int minute) const;

  std::string spec_;
  std::string zone_name_;
  absl::TimeZone zone_;
  std::bitset<60> minutes_;
  std::bitset<24> hours_;
  std::bitset<32> days_;    // 1..31
  std::bitset<13> months_;  // 1..12
  std::bitset<8> weekdays_;  // 0..6 (Sunday 0)
  bool days_restricted_ = false;
  bool weekdays_restricted_ = false;
};

}  // namespace gfrep::replica
