#include "replica/core/cron.h"

#include <fmt/format.h>

#include <charconv>
#include <vector>

#include "replica/core/split.h"

namespace gfrep::replica {
namespace {

constexpr int kYears = 8;

std::optional<int> Int(std::string_view s) {
  int v = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || end != s.data() + s.size() || s.empty()) return std::nullopt;
  return v;
}

// Sets the bits of `field` (lo..hi) that `text` names. `restricted` is false for "*".
template <std::size_t N>
absl::Status ParseField(std::string_view text, std::string_view name, int lo, int hi,
                        std::bitset<N>& bits, bool& restricted) {
  restricted = text != "*";
  auto bad = [&](std::string_view why) {
    return absl::InvalidArgumentError(fmt::format("{} field '{}': {}", name, text, why));
  };
  for (std::string_view item : Split(text, ',', false)) {
    int step = 1;
    if (std::size_t slash = item.find('/'); slash != std::string_view::npos) {
      std::optional<int> s = Int(item.substr(slash + 1));
      if (!s || *s < 1) return bad("the step must be a number >= 1");
      step = *s;
      item = item.substr(0, slash);
    }
    int from = lo, to = hi;
    if (item != "*") {
      std::size_t dash = item.find('-');
      std::optional<int> a = Int(item.substr(0, dash));
      std::optional<int> b = dash == std::string_view::npos ? a : Int(item.substr(dash + 1));
      if (!a || !b) return bad("expected *, N, A-B, with optional /STEP, comma-separated");
      from = *a;
      to = dash == std::string_view::npos && step > 1 ? hi : *b;
    }
    if (from < lo || to > hi || from > to) {
      return bad(fmt::format("values must be {}..{}", lo, hi));
    }
    // In a wider type: a step near INT_MAX would overflow an int.
    for (std::int64_t v = from; v <= to; v += step) bits.set(static_cast<std::size_t>(v));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<CronSchedule> CronSchedule::Parse(std::string_view spec, std::string_view time_zone) {
  std::vector<std::string_view> fields = Split(spec, ' ', true);
  if (fields.size() != 5) {
    return absl::InvalidArgumentError(fmt::format(
        "schedule '{}': want 5 fields (minute hour day-of-month month day-of-week)", spec));
  }
  CronSchedule s;
  s.spec_ = std::string(spec);
  s.zone_name_ = time_zone.empty() ? "UTC" : std::string(time_zone);
  if (!absl::LoadTimeZone(s.zone_name_, &s.zone_)) {
    return absl::InvalidArgumentError(fmt::format("unknown time zone '{}'", s.zone_name_));
  }
  bool unused = false;
  std::bitset<8> dow;
  if (absl::Status st = ParseField(fields[0], "minute", 0, 59, s.minutes_, unused); !st.ok()) return st;
  if (absl::Status st = ParseField(fields[1], "hour", 0, 23, s.hours_, unused); !st.ok()) return st;
  if (absl::Status st = ParseField(fields[2], "day-of-month", 1, 31, s.days_, s.days_restricted_);
      !st.ok()) {
    return st;
  }
  if (absl::Status st = ParseField(fields[3], "month", 1, 12, s.months_, unused); !st.ok()) return st;
  if (absl::Status st = ParseField(fields[4], "day-of-week", 0, 7, dow, s.weekdays_restricted_);
      !st.ok()) {
    return st;
  }
  for (int d = 0; d < 7; ++d) s.weekdays_[static_cast<std::size_t>(d)] = dow[static_cast<std::size_t>(d)];
  if (dow[7]) s.weekdays_.set(0);
  return s;
}

bool CronSchedule::DayMatches(const absl::CivilDay& day) const {
  if (!months_[static_cast<std::size_t>(day.month())]) return false;
  const bool dom = days_[static_cast<std::size_t>(day.day())];
  const int wd = static_cast<int>(absl::GetWeekday(day));  // absl: Monday 0 .. Sunday 6
  const bool dow = weekdays_[static_cast<std::size_t>((wd + 1) % 7)];
  if (days_restricted_ && weekdays_restricted_) return dom || dow;
  return dom && dow;
}

absl::Time CronSchedule::Instant(const absl::CivilDay& day, int hour, int minute) const {
  absl::TimeZone::TimeInfo ti =
      zone_.At(absl::CivilSecond(day.year(), day.month(), day.day(), hour, minute, 0));
  // Skipped (the clock jumped over it): at the jump. Repeated: the first time only.
  return ti.kind == absl::TimeZone::TimeInfo::SKIPPED ? ti.trans : ti.pre;
}

absl::Time CronSchedule::Next(absl::Time after) const {
  // A day back: around a repeated hour an earlier civil day's minute can map later.
  absl::CivilDay day = absl::ToCivilDay(after, zone_) - 1;
  const absl::CivilDay last = day + 366 * kYears;
  for (; day <= last; ++day) {
    if (!DayMatches(day)) continue;
    for (int h = 0; h < 24; ++h) {
      if (!hours_[static_cast<std::size_t>(h)]) continue;
      for (int m = 0; m < 60; ++m) {
        if (!minutes_[static_cast<std::size_t>(m)]) continue;
        absl::Time t = Instant(day, h, m);
        if (t > after) return t;
      }
    }
  }
  return absl::InfiniteFuture();
}

absl::Time CronSchedule::Latest(absl::Time at) const {
  absl::CivilDay day = absl::ToCivilDay(at, zone_) + 1;
  const absl::CivilDay first = day - 366 * kYears;
  for (; day >= first; --day) {
    if (!DayMatches(day)) continue;
    for (int h = 23; h >= 0; --h) {
      if (!hours_[static_cast<std::size_t>(h)]) continue;
      for (int m = 59; m >= 0; --m) {
        if (!minutes_[static_cast<std::size_t>(m)]) continue;
        absl::Time t = Instant(day, h, m);
        if (t <= at) return t;
      }
    }
  }
  return absl::InfinitePast();
}

std::optional<absl::Time> CronSchedule::Due(absl::Time last_run, absl::Time now) const {
  absl::Time t = Latest(now);
  if (t == absl::InfinitePast() || t <= last_run) return std::nullopt;
  return t;
}

}  // namespace gfrep::replica
