// gfsite add NAME [--label K=V]... | list [--json] | rm NAME: sites of the federation.
#include <iostream>

#include <fmt/format.h>

#include "catalog/client.h"
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
  CLI::App* list = app.add_subcommand("list", "List sites");
  list->add_flag("--json", json, "JSON array");
  CLI::App* rm = app.add_subcommand("rm", "Remove sites (they must have no nodes)");
  rm->add_option("NAME", names, "Site names")->required();
  CLI11_PARSE(app, argc, argv);
  tools::MakeLogger(kProgram, common);
  auto client = tools::ConnectCatalog(cat);
  if (!client.ok()) return tools::Fail(kProgram, tools::ErrorText(client.status()));
  int rc = 0;
  if (add->parsed()) {
    catalog::Site site;
    for (const std::string& l : labels) {
      std::size_t eq = l.find('=');
      if (eq == std::string::npos || eq == 0) {
        return tools::Fail(kProgram, "bad --label '" + l + "': want KEY=VALUE");
      }
      site.labels[l.substr(0, eq)] = l.substr(eq + 1);
    }
    for (const std::string& name : names) {
      site.name = name;
      if (absl::Status s = (*client)->PutSite(site); !s.ok()) {
        rc = tools::Fail(kProgram, tools::ErrorText(s));
      }
    }
  } else if (list->parsed()) {
    absl::StatusOr<std::vector<catalog::Site>> sites = (*client)->ListSites();
    if (!sites.ok()) return tools::Fail(kProgram, tools::ErrorText(sites.status()));
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
