// Fuzzes the cron schedules of scheduled policies (replica/core/cron.h): the `schedule:` of a
// policy file, parsed and then asked for run times by the policy engine.
//
// Input: a byte choosing the time zone (among zones with daylight saving, half-hour shifts
// and a skipped day), 8 bytes giving a reference time within 2000..2100 and a gap, then the
// five-field spec. Asserts, for a spec Parse accepts:
//  - it keeps the spec and the zone ("UTC" for none);
//  - Next(t) is after t and at most 8 years and 2 days later, and nothing is scheduled
//    between t and Next(t): Next(Next(t) - 1ns) == Next(t);
//  - Due(last, now) agrees with Next: it is the latest run in (last, now], so it lies in
//    that interval and no run follows it before now; when it says "none", Next(last) is
//    after now.

#include <fuzzer/FuzzedDataProvider.h>

#include <cstddef>
#include <cstdint>
#include <iterator>
#include <optional>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "replica/core/cron.h"
#include "tests/fuzz/fuzz_check.h"

namespace gfrep::replica {
namespace {

constexpr std::string_view kZones[] = {
    "",  // the default, UTC
    "UTC",
    "Asia/Tokyo",        // no daylight saving
    "America/New_York",  // an hour skipped in spring and repeated in autumn
    "Europe/London",
    "Australia/Lord_Howe",  // shifts by half an hour
    "Pacific/Apia",         // skipped 2011-12-30 entirely
    "America/Santiago",     // changes at midnight
};

void Check(const CronSchedule& s, absl::Time last, absl::Time now) {
  const absl::Time next = s.Next(last);
  if (next != absl::InfiniteFuture()) {
    FUZZ_CHECK(next > last, "Next is not after its argument");
    FUZZ_CHECK(next - last <= absl::Hours(24 * (366 * 8 + 2)), "Next beyond its 8-year window");
    FUZZ_CHECK(s.Next(next - absl::Nanoseconds(1)) == next, "a run was skipped: Next is not first");
  }
  const std::optional<absl::Time> due = s.Due(last, now);
  if (due) {
    FUZZ_CHECK(*due > last && *due <= now, "Due outside (last, now]");
    FUZZ_CHECK(s.Next(*due) > now, "Due is not the latest run before now");
    FUZZ_CHECK(s.Next(*due - absl::Nanoseconds(1)) == *due, "Due is not a run Next knows");
  } else if (last < now && next != absl::InfiniteFuture() &&
             next - last <= absl::Hours(24 * 366 * 7)) {
    // Latest looks back 8 years from `now`: within 7 years of `last` both windows see it.
    FUZZ_CHECK(next > now, "Due found no run although Next has one in (last, now]");
  }
}

}  // namespace
}  // namespace gfrep::replica

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace gfrep::replica;
  FuzzedDataProvider in(data, size);
  const std::string_view zone = kZones[in.ConsumeIntegral<std::uint8_t>() % std::size(kZones)];
  // 2000-01-01 .. 2100-01-01, and a gap up to ~2 years (both in seconds).
  const auto base = in.ConsumeIntegralInRange<std::int64_t>(946684800, 4102444800);
  const auto gap = in.ConsumeIntegralInRange<std::int64_t>(-86400, 2 * 366 * 86400);
  const std::string spec = in.ConsumeRemainingBytesAsString();

  absl::StatusOr<CronSchedule> s = CronSchedule::Parse(spec, zone);
  if (!s.ok()) {
    FUZZ_CHECK(absl::IsInvalidArgument(s.status()), "a refusal must be kInvalidArgument");
    return 0;
  }
  FUZZ_CHECK(s->spec() == spec, "the schedule's spec changed");
  FUZZ_CHECK(s->time_zone() == (zone.empty() ? "UTC" : zone), "the schedule's zone changed");
  const absl::Time last = absl::FromUnixSeconds(base);
  Check(*s, last, last + absl::Seconds(gap));
  return 0;
}
