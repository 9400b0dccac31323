// gfsite add NAME [--label K=V]... | label NAME K=V... [--unset K]... |
//        list [--select EXPR] [--json] | rm NAME: sites of the federation and their labels
// (which policies' site expressions select by, replica/core/site_expr.h).
#include <algorithm>
#include <iostream>
#include <set>

#include <fmt/format.h>

#include "catalog/client.h"
#include "replica/core/site_expr.h"
#include "tools/internal/catalog_flags.h"
#include "tools/internal/cli.h"

int main(int argc, char** argv) {
  using namespace gfrep;
  constexpr const char* kProgram = "gfsite";
  CLI::App app{"gfsite: add, list and remove sites"};
  tools::CommonFlags common;
  tools::CatalogFlags cat;
  tools::AddCommonFlags(app, common);
  tools::AddCatalogFlags(app, cat);
  app.require_subcommand(1);
  std::vector<std::string> names, labels;
  bool json = false;
  CLI::App* add = app.add_subcommand("add", "Add or update sites");
  add->add_option("NAME", names, "Site names")->required();
  add->add_option("--label", labels, "KEY=VALUE label (repeatable), e.g. region=jp");
  std::vector<std::string> unset;
  std::string label_site, select;
  CLI::App* label = app.add_subcommand("label", "Set (K=V) or remove (--unset K) labels of a site");
  label->add_option("NAME", label_site, "Site name")->required();
  label->add_option("LABEL", labels, "KEY=VALUE labels, e.g. region=jp tier=1");
  label->add_option("--unset", unset, "Label keys to remove (repeatable)");
  CLI::App* list = app.add_subcommand("list", "List sites");
  list->add_flag("--json", json, "JSON array");
  list->add_option("--select", select,
                   "Only the sites a site expression selects, e.g. 'region=jp & !tape'");
  CLI::App* rm = app.add_subcommand("rm", "Remove sites (they must have no nodes)");
  rm->add_option("NAME", names, "Site names")->required();
  CLI11_PARSE(app, argc, argv);
  tools::MakeLogger(kProgram, common);
  auto client = tools::ConnectCatalog(cat);
  if (!client.ok()) return tools::Fail(kProgram, tools::ErrorText(client.status()));
  int rc = 0;
  auto parse_labels = [&](catalog::Site& site) -> bool {
    for (const std::string& l : labels) {
      std::size_t eq = l.find('=');
      if (eq == std::string::npos || eq == 0) {
        rc = tools::Fail(kProgram, "bad label '" + l + "': want KEY=VALUE");
        return false;
      }
      site.labels[l.substr(0, eq)] = l.substr(eq + 1);
    }
    return true;
  };
  if (label->parsed()) {
    absl::StatusOr<std::vector<catalog::Site>> sites = (*client)->ListSites();
    if (!sites.ok()) return tools::Fail(kProgram, tools::ErrorText(sites.status()));
    auto it = std::find_if(sites->begin(), sites->end(),
                           [&](const catalog::Site& s) { return s.name == label_site; });
    if (it == sites->end()) return tools::Fail(kProgram, "no site " + label_site + " (NOT_FOUND)");
    catalog::Site site = *it;
    for (const std::string& k : unset) site.labels.erase(k);
    if (!parse_labels(site)) return rc;
    if (absl::Status s = (*client)->PutSite(site); !s.ok()) return tools::Fail(kProgram, tools::ErrorText(s));
    return 0;
  }
  if (add->parsed()) {
    catalog::Site site;
    if (!parse_labels(site)) return rc;
    for (const std::string& name : names) {
      site.name = name;
      if (absl::Status s = (*client)->PutSite(site); !s.ok()) {
        rc = tools::Fail(kProgram, tools::ErrorText(s));
      }
    }
  } else if (list->parsed()) {
    absl::StatusOr<std::vector<catalog::Site>> sites = (*client)->ListSites();
    if (!sites.ok()) return tools::Fail(kProgram, tools::ErrorText(sites.status()));
    if (!select.empty()) {
      absl::StatusOr<replica::SiteExpr> e = replica::SiteExpr::Parse(select);
      if (!e.ok()) return tools::Fail(kProgram, tools::ErrorText(e.status()));
      std::set<std::string> chosen = e->Evaluate(*sites);
      std::erase_if(*sites, [&](const catalog::Site& s) { return chosen.count(s.name) == 0; });
    }
    if (json) {
      nlohmann::json j = nlohmann::json::array();
      for (const catalog::Site& s : *sites) j.push_back(tools::ToJson(s));
      std::cout << j.dump() << "\n";
    } else {
      for (const catalog::Site& s : *sites) {
        std::string l;
        for (const auto& [k, v] : s.labels) l += fmt::format("{}{}={}", l.empty() ? "" : ",", k, v);
        std::cout << fmt::format("{:<20} {}\n", s.name, l);
      }
    }
  } else if (rm->parsed()) {
    for (const std::string& name : names) {
      if (absl::Status s = (*client)->RemoveSite(name); !s.ok()) {
        rc = tools::Fail(kProgram, tools::ErrorText(s));
      }
    }
  }
  return rc;
}
