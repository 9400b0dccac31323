// Fuzzes the parsers of sizes, rates and durations given on command lines and in files:
// tools' ParseSize / ParseRate (tools/internal/cli.h: --scrub-rate 32M, --chunk 4MiB, ...),
// the topology values ParseDuration / ParseBitRate / ParseByteSize (netprobe/topology.h) and
// a policy's lifetime, replica::plan::ParseDuration (replica/plan/policy.h).
//
// The first input byte picks the parser; the rest is the argument. Beside "never crashes",
// each parser is compared with an oracle for the plain forms its header documents
// (DIGITS[.DIGITS] with a unit), written here independently:
//  - ParseSize / ParseRate: a plain form must be accepted exactly when its value is below
//    2^64 and give that value rounded to the nearest integer; anything accepted is finite;
//  - topology values: a plain form within the documented bound (20 s, 400G, 4G) must be
//    accepted with that value, one above it refused; nothing accepted is out of bounds;
//  - lifetimes: "N" + s/m/h/d/w with 1 <= N <= 100000 accepted with N units, all else
//    refused.

#include <cctype>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "netprobe/topology.h"
#include "replica/plan/policy.h"
#include "tests/fuzz/fuzz_check.h"
#include "tools/internal/cli.h"

namespace gfrep {
namespace {

struct Plain {
  double number = 0;
  std::string_view unit;  // what follows the number
};

// DIGITS[.DIGITS] then the rest, or nothing for any other form (signs, exponents, spaces,
// hex and words are left to "never crashes").
std::optional<Plain> SplitPlain(std::string_view s) {
  std::size_t i = 0;
  while (i < s.size() && std::isdigit(static_cast<unsigned char>(s[i]))) ++i;
  if (i == 0) return std::nullopt;
  if (i < s.size() && s[i] == '.') {
    std::size_t j = i + 1;
    while (j < s.size() && std::isdigit(static_cast<unsigned char>(s[j]))) ++j;
    if (j == i + 1) return std::nullopt;
    i = j;
  }
  // "46E4" is an exponent to the parsers that take one, not a unit "E4".
  if (i < s.size() && (s[i] == 'e' || s[i] == 'E')) return std::nullopt;
  // strtod rounds correctly, as the parsers' from_chars and SimpleAtod do.
  return Plain{std::strtod(std::string(s.substr(0, i)).c_str(), nullptr), s.substr(i)};
}

std::string Lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

// The multiplier of a tools unit such as "Ki", "MiB", "gbit/s" (base 1024 or 1000), or
// nullopt if `unit` is not one ParseSize (`size`) / ParseRate accepts.
std::optional<double> ToolsUnit(std::string_view unit, bool size) {
  std::string u = Lower(unit);
  const std::string_view words[] = {"bit/s", "bps", "bit", "ib", "b"};
  for (std::string_view w : words) {
    const bool allowed = size ? (w == "ib" || w == "b") : (w != "ib");
    if (allowed && std::string_view(u).ends_with(w)) {
      u.resize(u.size() - w.size());
      break;
    }
  }
  const double base = size ? 1024 : 1000;
  if (u.empty()) return 1.0;
  if (u.size() != 1) return std::nullopt;
  switch (u[0]) {
    case 'k':
      return base;
    case 'm':
      return base * base;
    case 'g':
      return base * base * base;
    case 't':
      return base * base * base * base;
    default:
      return std::nullopt;
  }
}

void CheckTools(std::string_view text, bool size) {
  absl::StatusOr<std::uint64_t> v = size ? tools::ParseSize(text) : tools::ParseRate(text);
  if (!v.ok()) FUZZ_CHECK(absl::IsInvalidArgument(v.status()), "refusal code");
  std::optional<Plain> plain = SplitPlain(text);
  if (!plain) return;
  std::optional<double> mult = ToolsUnit(plain->unit, size);
  if (!mult) return;
  const double value = plain->number * *mult;
  if (!(value < 18446744073709551616.0)) {  // 2^64
    FUZZ_CHECK(!v.ok(), "accepted a value of 2^64 or more");
    return;
  }
  FUZZ_CHECK(v.ok(), "refused a plain size/rate below 2^64");
  // Round half away from zero, as llround does; exact in double for every value here.
  const auto expected = static_cast<std::uint64_t>(std::round(value));
  if (*v != expected) {
    std::fprintf(stderr, "'%.*s' parsed to %llu, expected %llu\n", static_cast<int>(text.size()),
                 text.data(), static_cast<unsigned long long>(*v),
                 static_cast<unsigned long long>(expected));
  }
  FUZZ_CHECK(*v == expected, "plain size/rate parsed to another value");
}

// netprobe's values: `kind` 0 duration (us), 1 bit rate, 2 byte size.
void CheckTopologyValue(std::string_view text, int kind) {
  std::optional<double> got;
  if (kind == 0) {
    auto d = netprobe::ParseDuration(text);
    if (d.ok()) {
      FUZZ_CHECK(d->count() >= 0 && d->count() <= 20'000'000, "duration outside [0, 20 s]");
      got = static_cast<double>(d->count());
    }
  } else if (kind == 1) {
    auto r = netprobe::ParseBitRate(text);
    if (r.ok()) {
      FUZZ_CHECK(*r <= 400'000'000'000ull, "rate over 400G");
      got = static_cast<double>(*r);
    }
  } else {
    auto b = netprobe::ParseByteSize(text);
    if (b.ok()) {
      FUZZ_CHECK(*b <= (4ull << 30), "size over 4G");
      got = static_cast<double>(*b);
    }
  }
  std::optional<Plain> plain = SplitPlain(text);
  if (!plain) return;
  double mult = 0, bound = 0;
  const std::string_view u = plain->unit;
  if (kind == 0) {
    bound = 20e6;
    mult = u == "us" ? 1 : u == "ms" ? 1e3 : u == "s" ? 1e6 : 0;
  } else if (kind == 1) {
    bound = 400e9;
    mult = u.empty() ? 1 : (u == "k" || u == "K") ? 1e3 : u == "M" ? 1e6 : u == "G" ? 1e9 : 0;
  } else {
    bound = 4294967296.0;
    mult = u.empty() ? 1 : u == "K" ? 1024.0 : u == "M" ? 1048576.0 : u == "G" ? 1073741824.0 : 0;
  }
  if (mult == 0) {
    FUZZ_CHECK(!got, "accepted an unknown unit");
    return;
  }
  const double value = plain->number * mult;
  if (value > bound) {
    FUZZ_CHECK(!got, "accepted a value over the documented bound");
    return;
  }
  FUZZ_CHECK(got.has_value(), "refused a plain value within the bound");
  FUZZ_CHECK(*got == std::round(value), "plain value parsed to another value");
}

void CheckLifetime(std::string_view text) {
  absl::StatusOr<std::chrono::seconds> d = replica::plan::ParseDuration(text);
  std::optional<std::int64_t> expect;
  if (text.size() >= 2) {
    const std::string_view digits = text.substr(0, text.size() - 1);
    bool all = true;
    for (char c : digits) all = all && std::isdigit(static_cast<unsigned char>(c));
    // strtoll saturates on overflow, which is out of range here too.
    const std::int64_t n = all ? std::strtoll(std::string(digits).c_str(), nullptr, 10) : 0;
    const std::int64_t unit = text.back() == 's'   ? 1
                              : text.back() == 'm' ? 60
                              : text.back() == 'h' ? 3600
                              : text.back() == 'd' ? 86400
                              : text.back() == 'w' ? 7 * 86400
                                                   : 0;
    if (all && n >= 1 && n <= 100000 && unit != 0) expect = n * unit;
  }
  if (expect) {
    FUZZ_CHECK(d.ok() && d->count() == *expect, "lifetime: a plain duration parsed wrong");
  } else {
    FUZZ_CHECK(!d.ok() && absl::IsInvalidArgument(d.status()), "lifetime: accepted a bad duration");
  }
}

}  // namespace
}  // namespace gfrep

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace gfrep;
  if (size < 1) return 0;
  const std::string_view text(reinterpret_cast<const char*>(data + 1), size - 1);
  switch (data[0] % 6) {
    case 0:
      CheckTools(text, true);
      break;
    case 1:
      CheckTools(text, false);
      break;
    case 2:
      CheckTopologyValue(text, 0);
      break;
    case 3:
      CheckTopologyValue(text, 1);
      break;
    case 4:
      CheckTopologyValue(text, 2);
      break;
    default:
      CheckLifetime(text);
      break;
  }
  return 0;
}
