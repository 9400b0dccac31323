// Fuzzes the site expression parser and evaluator (replica/core/site_expr.h): the `sites:` and
// `source_sites:` of policies and `gfsite list --select`.
//
// The input is the expression. It is evaluated over a few fixed sites and over sites named
// and labelled with the words of the input itself (so that names and label comparisons in
// the expression select something). Asserts:
//  - a refusal is kInvalidArgument naming the column;
//  - an accepted expression keeps its text and selects only sites that exist;
//  - the algebra holds: !(e) selects the complement, (e)|(e) and (e)&* select the same as
//    e, (e)\(e) selects nothing, and spaces around the expression change nothing (an
//    expression nested near the depth limit may refuse the wrapped forms, nothing else).

#include <cctype>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "catalog/types.h"
#include "replica/core/site_expr.h"
#include "tests/fuzz/fuzz_check.h"

namespace gfrep::replica {
namespace {

bool WordChar(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) != 0 || c == '_' || c == '.' || c == ':' ||
         c == '-';
}

std::vector<catalog::Site> SitesFor(std::string_view text) {
  std::vector<catalog::Site> sites = {
      {"kek", {{"region", "jp"}, {"tier", "1"}}},
      {"sdsc", {{"region", "us"}, {"tier", "2"}, {"tape", "true"}}},
      {"tsukuba", {{"region", "jp"}, {"tape", "no"}}},
      {"indiana", {}},
  };
  std::vector<std::string> words;
  for (std::size_t i = 0; i < text.size();) {
    std::size_t j = i;
    while (j < text.size() && WordChar(text[j])) ++j;
    if (j > i) words.emplace_back(text.substr(i, j - i));
    i = j + 1;
  }
  std::set<std::string> names;
  for (const catalog::Site& s : sites) names.insert(s.name);
  // Up to four more sites named after words; the words in pairs become their labels.
  std::vector<catalog::Site> extra;
  for (const std::string& w : words) {
    if (extra.size() < 4 && names.insert(w).second) extra.push_back({w, {}});
  }
  for (std::size_t k = 0; k + 1 < words.size() && !extra.empty(); k += 2) {
    extra[(k / 2) % extra.size()].labels[words[k]] = words[k + 1];
  }
  sites.insert(sites.end(), extra.begin(), extra.end());
  return sites;
}

// The selection of `text`, or nothing when it is refused only for the depth or length
// limits (which wrapping an accepted expression may cross).
std::optional<std::set<std::string>> Select(const std::string& text,
                                            const std::vector<catalog::Site>& sites) {
  absl::StatusOr<SiteExpr> e = SiteExpr::Parse(text);
  if (e.ok()) return e->Evaluate(sites);
  const std::string why(e.status().message());
  FUZZ_CHECK(why.find("nested too deeply") != std::string::npos ||
                 why.find("longer than") != std::string::npos,
             "a wrapped accepted expression was refused for another reason");
  return std::nullopt;
}

}  // namespace
}  // namespace gfrep::replica

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace gfrep::replica;
  const std::string text(reinterpret_cast<const char*>(data), size);
  absl::StatusOr<SiteExpr> e = SiteExpr::Parse(text);
  if (!e.ok()) {
    FUZZ_CHECK(absl::IsInvalidArgument(e.status()), "a refusal must be kInvalidArgument");
    return 0;
  }
  FUZZ_CHECK(e->text() == text, "the expression's text changed");
  const std::vector<gfrep::catalog::Site> sites = SitesFor(text);
  std::set<std::string> all;
  for (const auto& s : sites) all.insert(s.name);
  const std::set<std::string> chosen = e->Evaluate(sites);
  for (const std::string& name : chosen) {
    FUZZ_CHECK(all.contains(name), "selected a site not given");
  }
  FUZZ_CHECK(e->Evaluate(sites) == chosen, "evaluation is not deterministic");

  const std::string g = "(" + text + ")";
  if (auto not_e = Select("!" + g, sites)) {
    std::set<std::string> rest;
    for (const std::string& n : all) {
      if (!chosen.contains(n)) rest.insert(n);
    }
    FUZZ_CHECK(*not_e == rest, "!(e) is not the complement of e");
  }
  if (auto twice = Select(g + "|" + g, sites)) FUZZ_CHECK(*twice == chosen, "(e)|(e) != e");
  if (auto with_all = Select(g + "&*", sites)) FUZZ_CHECK(*with_all == chosen, "(e)&* != e");
  if (auto none = Select(g + "\\" + g, sites)) FUZZ_CHECK(none->empty(), "(e)\\(e) not empty");
  if (auto spaced = Select(" \t" + text + " ", sites)) {
    FUZZ_CHECK(*spaced == chosen, "spaces around the expression changed its selection");
  }
  return 0;
}
