#pragma once

// Site expressions select sites by name and label, after Rucio's RSE expressions:
//
//   kek                 the site named "kek", and every site with a label "kek" whose value is
//                       not false/no/0 (a flag label: `gfsite label x tape=true` makes `tape`
//                       select x)
//   region=jp           sites whose label region is "jp" (region!=jp: every other site)
//   tier<2, tier>0      sites whose label tier is a number below / above
//   *                   every site
//   A|B  A&B  A\B  !A   union, intersection, difference, complement (of all sites)
//   ( ... )             grouping
//
// Precedence: `!` binds tightest, then `&` and `\` (left to right), then `|`. Names and
// values are [A-Za-z0-9_.:-]+; spaces between tokens are ignored. Parse errors are
// kInvalidArgument naming the column ("site expression 'a|': column 3: expected a site or
// label").
//
// Thread safety: a parsed SiteExpr is immutable; share it freely.

#include <memory>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "catalog/types.h"

namespace gfrep::replica {

class SiteExpr {
 public:
  // "*": every site.
  SiteExpr();
  static absl::StatusOr<SiteExpr> Parse(std::string_view text);

  // The names of the sites of `sites` that the expression selects.
  std::set<std::string> Evaluate(const std::vector<catalog::Site>& sites) const;

  // As written.
  const std::string& text() const { return text_; }

  struct Node;

 private:
  SiteExpr(std::string text, std::shared_ptr<const Node> root)
      : text_(std::move(text)), root_(std::move(root)) {}
  std::string text_;
  std::shared_ptr<const Node> root_;
};

}  // namespace gfrep::replica
