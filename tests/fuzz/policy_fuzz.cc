// Fuzzes the replication policy file parser (replica/plan/policy.h): YAML that gfcatalogd
// --policies and gfpolicy apply/add read, and that any catalog client can store. The
// parser runs yaml-cpp and, inside it, the site expression and cron parsers (fuzzed alone
// by site_expr_fuzz and cron_fuzz).
//
// The input is the file's text. Asserts, beside "no crash, no exception escapes":
//  - a refusal is kInvalidArgument that names the file;
//  - every accepted rule keeps the documented limits: a unique [A-Za-z0-9_.-]{1,128} name,
//    absolute patterns without "//" of at most 4096 bytes, copies 1..100, priority within
//    +-1,000,000, a positive lifetime, site expressions and a schedule that parse again;
//  - the rules written back as YAML parse to the same rules (when their text is UTF-8:
//    yaml-cpp's emitter replaces other bytes);
//  - each pattern matches a path made from it (each '*' and '?' replaced by a letter, "**"
//    dropped), and a pattern ending in "**" also matches what lies below that path;
//  - matching a pattern against a deep path returns (the -timeout of the run bounds it).

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "catalog/types.h"
#include "replica/plan/policy.h"
#include "tests/fuzz/fuzz_check.h"

namespace gfrep::replica::plan {
namespace {

constexpr std::string_view kFile = "fuzz.yaml";

// Some of the stored paths a rule is matched against: 48 components, so a pattern with
// many "**" that backtracks shows up as a slow input.
const std::string& DeepPath() {
  static const std::string path = [] {
    std::string p;
    for (int i = 0; i < 48; ++i) p += "/d";
    return p;
  }();
  return path;
}

void CheckRule(const PolicyRule& r) {
  FUZZ_CHECK(!r.name.empty() && r.name.size() <= 128, "rule name length");
  for (char c : r.name) {
    FUZZ_CHECK(std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.' || c == '-',
               "rule name character");
  }
  FUZZ_CHECK(!r.paths.empty(), "rule without paths");
  for (const std::string& p : r.paths) {
    FUZZ_CHECK(!p.empty() && p.front() == '/' && p.size() <= catalog::kMaxPathBytes &&
                   p.find("//") == std::string::npos,
               "path pattern not absolute, too long or with an empty component");
  }
  FUZZ_CHECK(r.copies >= 1 && r.copies <= 100, "copies outside 1..100");
  FUZZ_CHECK(r.priority >= -1000000 && r.priority <= 1000000, "priority outside +-1,000,000");
  FUZZ_CHECK(SiteExpr::Parse(r.sites.text()).ok(), "sites do not parse again");
  if (r.source_sites) {
    FUZZ_CHECK(SiteExpr::Parse(r.source_sites->text()).ok(), "source_sites do not parse again");
  }
  if (r.lifetime) FUZZ_CHECK(r.lifetime->count() > 0, "lifetime not positive");
  if (r.schedule) {
    FUZZ_CHECK(CronSchedule::Parse(r.schedule->spec(), r.schedule->time_zone()).ok(),
               "schedule does not parse again");
  }
}

// `pattern` with every wildcard replaced so that it must match.
std::string Instance(std::string_view pattern) {
  std::string out;
  std::size_t i = 0;
  while (i < pattern.size()) {
    std::size_t j = pattern.find('/', i);
    if (j == std::string_view::npos) j = pattern.size();
    std::string_view comp = pattern.substr(i, j - i);
    if (!comp.empty() && comp != "**") {
      out += '/';
      for (char c : comp) out += c == '*' ? 's' : c == '?' ? 'q' : c;
    }
    i = j + 1;
  }
  return out.empty() ? "/" : out;
}

void CheckMatching(const PolicyRule& r) {
  for (const std::string& p : r.paths) {
    const std::string path = Instance(p);
    FUZZ_CHECK(MatchPath(p, path), "a pattern does not match a path made from it");
    if (std::string_view(p).ends_with("/**")) {
      FUZZ_CHECK(MatchPath(p, path + (path == "/" ? "below" : "/below")),
                 "a pattern ending in ** does not match below its directory");
    }
    // Only that it returns: the answer depends on the pattern.
    (void)MatchPath(p, DeepPath());
  }
}

// In the largest unit that divides it: ParseDuration takes at most 100000 of a unit, so
// 30d must not be written as 2592000s. The count never exceeds the one that was read.
std::string LifetimeText(std::chrono::seconds d) {
  constexpr std::pair<std::int64_t, char> kUnits[] = {
      {7 * 86400, 'w'}, {86400, 'd'}, {3600, 'h'}, {60, 'm'}, {1, 's'}};
  for (auto [secs, suffix] : kUnits) {
    if (d.count() % secs == 0) return std::to_string(d.count() / secs) + suffix;
  }
  return std::to_string(d.count()) + "s";
}

std::string Emit(const std::vector<PolicyRule>& rules) {
  YAML::Emitter out;
  out << YAML::BeginMap << YAML::Key << "rules" << YAML::Value << YAML::BeginSeq;
  for (const PolicyRule& r : rules) {
    out << YAML::BeginMap;
    out << YAML::Key << "name" << YAML::Value << YAML::DoubleQuoted << r.name;
    out << YAML::Key << "paths" << YAML::Value << YAML::BeginSeq;
    for (const std::string& p : r.paths) out << YAML::DoubleQuoted << p;
    out << YAML::EndSeq;
    out << YAML::Key << "copies" << YAML::Value << r.copies;
    out << YAML::Key << "sites" << YAML::Value << YAML::DoubleQuoted << r.sites.text();
    if (r.source_sites) {
      out << YAML::Key << "source_sites" << YAML::Value << YAML::DoubleQuoted
          << r.source_sites->text();
    }
    out << YAML::Key << "priority" << YAML::Value << r.priority;
    if (r.lifetime) out << YAML::Key << "lifetime" << YAML::Value << LifetimeText(*r.lifetime);
    out << YAML::Key << "continuous" << YAML::Value << (r.continuous ? "true" : "false");
    if (r.schedule) {
      out << YAML::Key << "schedule" << YAML::Value << YAML::DoubleQuoted << r.schedule->spec();
      out << YAML::Key << "timezone" << YAML::Value << YAML::DoubleQuoted
          << r.schedule->time_zone();
    }
    out << YAML::EndMap;
  }
  out << YAML::EndSeq << YAML::EndMap;
  return out.c_str();
}

bool AllUtf8(const PolicyRule& r) {
  bool ok = catalog::IsValidUtf8(r.name) && catalog::IsValidUtf8(r.sites.text());
  for (const std::string& p : r.paths) ok = ok && catalog::IsValidUtf8(p);
  if (r.source_sites) ok = ok && catalog::IsValidUtf8(r.source_sites->text());
  if (r.schedule) ok = ok && catalog::IsValidUtf8(r.schedule->spec());
  return ok;
}

bool Same(const PolicyRule& a, const PolicyRule& b) {
  auto text = [](const std::optional<SiteExpr>& e) { return e ? e->text() : std::string("-"); };
  return a.name == b.name && a.paths == b.paths && a.copies == b.copies &&
         a.sites.text() == b.sites.text() && text(a.source_sites) == text(b.source_sites) &&
         a.priority == b.priority && a.lifetime == b.lifetime && a.continuous == b.continuous &&
         a.schedule.has_value() == b.schedule.has_value() &&
         (!a.schedule || (a.schedule->spec() == b.schedule->spec() &&
                          a.schedule->time_zone() == b.schedule->time_zone()));
}

}  // namespace
}  // namespace gfrep::replica::plan

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace gfrep::replica::plan;
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  absl::StatusOr<std::vector<PolicyRule>> rules = ParsePolicies(text, kFile);
  if (!rules.ok()) {
    FUZZ_CHECK(absl::IsInvalidArgument(rules.status()), "a refused file must be kInvalidArgument");
    FUZZ_CHECK(std::string(rules.status().message()).starts_with(kFile), "error without file name");
    return 0;
  }
  std::set<std::string> names;
  for (const PolicyRule& r : *rules) {
    CheckRule(r);
    FUZZ_CHECK(names.insert(r.name).second, "two rules with one name");
    CheckMatching(r);
  }
  // yaml-cpp's emitter writes bytes that are not UTF-8 as U+FFFD, so only such rules can be
  // compared after a round trip (the parser keeps the bytes; catalog paths are UTF-8).
  for (const PolicyRule& r : *rules) {
    if (!AllUtf8(r)) return 0;
  }
  const std::string emitted = Emit(*rules);
  absl::StatusOr<std::vector<PolicyRule>> again = ParsePolicies(emitted, kFile);
  if (!again.ok() || again->size() != rules->size() ||
      !std::equal(rules->begin(), rules->end(), again->begin(), Same)) {
    std::fprintf(stderr, "rules written back:\n%s\n", emitted.c_str());
  }
  FUZZ_CHECK(again.ok(), "rules written back as YAML are refused");
  FUZZ_CHECK(again->size() == rules->size(), "rules written back as YAML: another count");
  for (std::size_t i = 0; i < rules->size(); ++i) {
    FUZZ_CHECK(Same((*rules)[i], (*again)[i]), "a rule changed when written back as YAML");
  }
  return 0;
}
