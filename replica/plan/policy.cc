#include "replica/plan/policy.h"

#include <fmt/format.h>
#include <yaml-cpp/yaml.h>

#include <cctype>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <fstream>
#include <set>
#include <sstream>

#include "catalog/types.h"
#include "replica/core/split.h"
#include "transfer/errno_status.h"

namespace gfrep::replica::plan {
namespace {

bool MatchComponent(std::string_view pat, std::string_view name) {
  // '*' any run within the component, '?' one character; iterative with backtracking.
  std::size_t p = 0, n = 0, star = std::string_view::npos, mark = 0;
  while (n < name.size()) {
    if (p < pat.size() && (pat[p] == '?' || pat[p] == name[n])) {
      ++p;
      ++n;
    } else if (p < pat.size() && pat[p] == '*') {
      star = p++;
      mark = n;
    } else if (star != std::string_view::npos) {
      p = star + 1;
      n = ++mark;
    } else {
      return false;
    }
  }
  while (p < pat.size() && pat[p] == '*') ++p;
  return p == pat.size();
}

std::vector<std::string_view> Components(std::string_view path) {
  return Split(path, '/', true);
}

// Whether the components `pat` match the components `path`. Filled from the end in a table,
// ok[i][j] = pat[i..] matches path[j..]: O(|pat| x |path|). (Backtracking over each "**" took
// exponential time: /**/**/**/**/**/**/**/**/x against a 48-component path ran for over a
// minute; found by tests/fuzz/policy_fuzz.cc.)
bool MatchComponents(const std::vector<std::string_view>& pat, const std::vector<std::string_view>& path) {
  const std::size_t n = pat.size(), m = path.size();
  std::vector<std::vector<char>> ok(n + 1, std::vector<char>(m + 1, 0));
  ok[n][m] = 1;
  for (std::size_t i = n; i-- > 0;) {
    if (pat[i] == "**") {  // any number of components: some k >= j where the rest matches
      char any = 0;
      for (std::size_t j = m + 1; j-- > 0;) {
        any = any || ok[i + 1][j];
        ok[i][j] = any;
      }
    } else {
      for (std::size_t j = 0; j < m; ++j) ok[i][j] = ok[i + 1][j + 1] && MatchComponent(pat[i], path[j]);
    }
  }
  return ok[0][0] != 0;
}

// Errors at a node's place in the file.
class PolicyFileReader {
 public:
  explicit PolicyFileReader(std::string_view file) : file_(file) {}

  absl::Status Error(const YAML::Mark& mark, std::string_view what) const {
    if (mark.line < 0) return absl::InvalidArgumentError(fmt::format("{}: {}", file_, what));
    return absl::InvalidArgumentError(
        fmt::format("{}:{}:{}: {}", file_, mark.line + 1, mark.column + 1, what));
  }

  absl::StatusOr<std::string> Scalar(const YAML::Node& n, std::string_view key) const {
    if (!n.IsScalar()) return Error(n.Mark(), fmt::format("{}: expected a single value", key));
    return n.Scalar();
  }

  absl::StatusOr<long long> Integer(const YAML::Node& n, std::string_view key, long long lo,
                                    long long hi) const {
    absl::StatusOr<std::string> s = Scalar(n, key);
    if (!s.ok()) return s.status();
    long long v = 0;
    auto [end, ec] = std::from_chars(s->data(), s->data() + s->size(), v);
    if (ec != std::errc() || end != s->data() + s->size() || v < lo || v > hi) {
      return Error(n.Mark(), fmt::format("{}: must be a whole number {}..{}, not '{}'", key, lo, hi, *s));
    }
    return v;
  }

  absl::StatusOr<bool> Bool(const YAML::Node& n, std::string_view key) const {
    absl::StatusOr<std::string> s = Scalar(n, key);
    if (!s.ok()) return s.status();
    if (*s == "true" || *s == "yes") return true;
    if (*s == "false" || *s == "no") return false;
    return Error(n.Mark(), fmt::format("{}: must be true or false, not '{}'", key, *s));
  }

 private:
  std::string_view file_;
};

absl::StatusOr<PolicyRule> ParseRule(const PolicyFileReader& rd, const YAML::Node& n) {
  if (!n.IsMap()) return rd.Error(n.Mark(), "a rule must be a mapping (name: ..., paths: ...)");
  static const std::set<std::string> kKeys = {"name",     "paths",      "path",      "copies",
                                              "sites",    "source_sites", "priority", "lifetime",
                                              "continuous", "schedule",  "timezone"};
  PolicyRule r;
  r.line = n.Mark().line + 1;
  bool has_continuous = false;
  std::string timezone;
  YAML::Node schedule_node;
  bool has_schedule = false;
  for (const auto& kv : n) {
    const std::string key = kv.first.as<std::string>("");
    const YAML::Node& v = kv.second;
    if (kKeys.count(key) == 0) {
      return rd.Error(kv.first.Mark(), fmt::format("unknown key '{}'", key));
    }
    if (key == "name") {
      absl::StatusOr<std::string> s = rd.Scalar(v, key);
      if (!s.ok()) return s.status();
      bool ok = !s->empty() && s->size() <= 128;
      for (char c : *s) {
        ok = ok && (std::isalnum(static_cast<unsigned char>(c)) != 0 || c == '_' || c == '-' || c == '.');
      }
      if (!ok) return rd.Error(v.Mark(), fmt::format("name: '{}' is not [A-Za-z0-9_.-]{{1,128}}", *s));
      r.name = *s;
    } else if (key == "paths" || key == "path") {
      std::vector<YAML::Node> items;
      if (v.IsSequence()) {
        for (const YAML::Node& i : v) items.push_back(i);
      } else {
        items.push_back(v);
      }
      if (items.empty()) return rd.Error(v.Mark(), "paths: at least one pattern");
      for (const YAML::Node& i : items) {
        absl::StatusOr<std::string> s = rd.Scalar(i, key);
        if (!s.ok()) return s.status();
        if (s->empty() || s->front() != '/' || s->size() > catalog::kMaxPathBytes ||
            s->find("//") != std::string::npos) {
          return rd.Error(i.Mark(), fmt::format("{}: '{}' is not an absolute path pattern", key, *s));
        }
        r.paths.push_back(*s);
      }
    } else if (key == "copies") {
      absl::StatusOr<long long> c = rd.Integer(v, key, 1, 100);
      if (!c.ok()) return c.status();
      r.copies = static_cast<std::uint32_t>(*c);
    } else if (key == "priority") {
      absl::StatusOr<long long> p = rd.Integer(v, key, -1000000, 1000000);
      if (!p.ok()) return p.status();
      r.priority = static_cast<std::int32_t>(*p);
    } else if (key == "sites" || key == "source_sites") {
      absl::StatusOr<std::string> s = rd.Scalar(v, key);
      if (!s.ok()) return s.status();
      absl::StatusOr<SiteExpr> e = SiteExpr::Parse(*s);
      if (!e.ok()) return rd.Error(v.Mark(), fmt::format("{}: {}", key, std::string(e.status().message())));
      if (key == "sites") {
        r.sites = std::move(*e);
      } else {
        r.source_sites = std::move(*e);
      }
    } else if (key == "lifetime") {
      absl::StatusOr<std::string> s = rd.Scalar(v, key);
      if (!s.ok()) return s.status();
      absl::StatusOr<std::chrono::seconds> d = ParseDuration(*s);
      if (!d.ok()) return rd.Error(v.Mark(), fmt::format("lifetime: {}", std::string(d.status().message())));
      r.lifetime = *d;
    } else if (key == "continuous") {
      absl::StatusOr<bool> b = rd.Bool(v, key);
      if (!b.ok()) return b.status();
      r.continuous = *b;
      has_continuous = true;
    } else if (key == "schedule") {
      schedule_node = v;
      has_schedule = true;
    } else if (key == "timezone") {
      absl::StatusOr<std::string> s = rd.Scalar(v, key);
      if (!s.ok()) return s.status();
      timezone = *s;
    }
  }
  if (r.name.empty()) return rd.Error(n.Mark(), "a rule needs a name");
  if (r.paths.empty()) return rd.Error(n.Mark(), fmt::format("rule {}: needs paths", r.name));
  if (!n["sites"]) return rd.Error(n.Mark(), fmt::format("rule {}: needs sites", r.name));
  if (has_schedule) {
    absl::StatusOr<std::string> s = rd.Scalar(schedule_node, "schedule");
    if (!s.ok()) return s.status();
    absl::StatusOr<CronSchedule> c = CronSchedule::Parse(*s, timezone);
    if (!c.ok()) {
      return rd.Error(n["timezone"] && absl::IsInvalidArgument(c.status()) &&
                              std::string(c.status().message()).rfind("unknown time zone", 0) == 0
                          ? n["timezone"].Mark()
                          : schedule_node.Mark(),
                      fmt::format("schedule: {}", std::string(c.status().message())));
    }
    r.schedule = std::move(*c);
    if (!has_continuous) r.continuous = false;
  } else if (!timezone.empty()) {
    return rd.Error(n["timezone"].Mark(), "timezone: only with a schedule");
  }
  return r;
}

}  // namespace

bool MatchPath(std::string_view pattern, std::string_view path) {
  return MatchComponents(Components(pattern), Components(path));
}

bool Matches(const PolicyRule& rule, std::string_view path) {
  for (const std::string& p : rule.paths) {
    if (MatchPath(p, path)) return true;
  }
  return false;
}

absl::StatusOr<std::chrono::seconds> ParseDuration(std::string_view text) {
  if (text.size() < 2) return absl::InvalidArgumentError(fmt::format("'{}' is not a duration like 30d, 12h, 90m", text));
  long long n = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size() - 1, n);
  if (ec != std::errc() || end != text.data() + text.size() - 1 || n <= 0 || n > 100000) {
    return absl::InvalidArgumentError(fmt::format("'{}' is not a duration like 30d, 12h, 90m", text));
  }
  switch (text.back()) {
    case 's': return std::chrono::seconds(n);
    case 'm': return std::chrono::seconds(n * 60);
    case 'h': return std::chrono::seconds(n * 3600);
    case 'd': return std::chrono::seconds(n * 86400);
    case 'w': return std::chrono::seconds(n * 7 * 86400);
    default:
      return absl::InvalidArgumentError(fmt::format("'{}' is not a duration like 30d, 12h, 90m", text));
  }
}

absl::StatusOr<std::vector<PolicyRule>> ParsePolicies(std::string_view text, std::string_view file) {
  PolicyFileReader rd(file);
  YAML::Node root;
  try {
    root = YAML::Load(std::string(text));
  } catch (const YAML::Exception& e) {
    return rd.Error(e.mark, e.msg);
  }
  std::vector<PolicyRule> rules;
  if (root.IsNull()) return rules;  // an empty file: no rules
  if (!root.IsMap()) return rd.Error(root.Mark(), "expected 'rules:' at the top");
  for (const auto& kv : root) {
    const std::string key = kv.first.as<std::string>("");
    if (key != "rules") return rd.Error(kv.first.Mark(), fmt::format("unknown key '{}' (expected 'rules')", key));
  }
  YAML::Node list = root["rules"];
  if (list.IsNull()) return rules;
  if (!list.IsSequence()) return rd.Error(list.Mark(), "rules: expected a list of rules");
  std::set<std::string> names;
  for (const YAML::Node& n : list) {
    absl::StatusOr<PolicyRule> r = ParseRule(rd, n);
    if (!r.ok()) return r.status();
    if (!names.insert(r->name).second) {
      return rd.Error(n["name"].Mark(), fmt::format("rule name '{}' is used twice", r->name));
    }
    rules.push_back(std::move(*r));
  }
  return rules;
}

absl::StatusOr<std::vector<PolicyRule>> LoadPolicyFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return transfer::ErrnoStatus(errno, path);
  }
  std::ostringstream text;
  text << in.rdbuf();
  if (text.str().size() > (16u << 20)) return absl::InvalidArgumentError(path + ": larger than 16 MiB");
  return ParsePolicies(text.str(), path);
}

}  // namespace gfrep::replica::plan
