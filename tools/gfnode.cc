// gfnode add NAME --site S --address HOST:PORT [--spool DIR] [--capacity SIZE]
//        | list [--site S] [--json] | rm NAME: storage nodes of the federation.
#include <iostream>

#include <fmt/format.h>

#include "catalog/client.h"
#include "tools/internal/catalog_flags.h"
#include "tools/internal/cli.h"

int main(int argc, char** argv) {
  using namespace gfrep;
  constexpr const char* kProgram = "gfnode";
  CLI::App app{"gfnode: register, list and remove storage nodes"};
  tools::CommonFlags common;
  tools::CatalogFlags cat;
  tools::AddCommonFlags(app, common);
  tools::AddCatalogFlags(app, cat);
  app.require_subcommand(1);
  std::vector<std::string> names;
  std::string site, address, spool, capacity = "0";
  bool json = false;
  CLI::App* add = app.add_subcommand("add", "Register or update a node");
  add->add_option("NAME", names, "Node name")->required()->expected(1);
  add->add_option("--site", site, "Site the node belongs to")->required();
  add->add_option("--address", address, "HOST:PORT of its gfsited")->required();
  add->add_option("--spool", spool, "Spool directory on the node");
  add->add_option("--capacity", capacity, "Capacity, e.g. 2T");
  CLI::App* list = app.add_subcommand("list", "List nodes");
  list->add_option("--site", site, "Only this site");
  list->add_flag("--json", json, "JSON array");
  CLI::App* rm = app.add_subcommand("rm", "Remove nodes");
  rm->add_option("NAME", names, "Node names")->required();
  CLI11_PARSE(app, argc, argv);
  tools::MakeLogger(kProgram, common);
  auto client = tools::ConnectCatalog(cat);
  if (!client.ok()) return tools::Fail(kProgram, tools::ErrorText(client.status()));
  int rc = 0;
  if (add->parsed()) {
    absl::StatusOr<std::uint64_t> cap = tools::ParseSize(capacity);
    if (!cap.ok()) return tools::Fail(kProgram, std::string(cap.status().message()));
    catalog::Node n;
    n.name = names.front();
    n.site = site;
    n.address = address;
    n.spool = spool;
    n.capacity_bytes = *cap;
    n.free_bytes = *cap;
    if (absl::Status s = (*client)->RegisterNode(n); !s.ok()) {
      rc = tools::Fail(kProgram, tools::ErrorText(s));
    }
  } else if (list->parsed()) {
    absl::StatusOr<std::vector<catalog::Node>> nodes = (*client)->ListNodes(site);
    if (!nodes.ok()) return tools::Fail(kProgram, tools::ErrorText(nodes.status()));
    if (json) {
      nlohmann::json j = nlohmann::json::array();
      for (const catalog::Node& n : *nodes) j.push_back(tools::ToJson(n));
      std::cout << j.dump() << "\n";
    } else {
      for (const catalog::Node& n : *nodes) {
        std::cout << fmt::format("{:<16} {:<12} {:<22} {:<8} free={} load={:.2f} active={} seen={}\n",
                                 n.name, n.site, n.address, n.liveness.empty() ? "-" : n.liveness,
                                 n.free_bytes, n.load, n.active_transfers,
                                 tools::FormatTime(n.last_heartbeat_ns));
      }
    }
  } else if (rm->parsed()) {
    for (const std::string& name : names) {
      if (absl::Status s = (*client)->RemoveNode(name); !s.ok()) {
        rc = tools::Fail(kProgram, tools::ErrorText(s));
      }
    }
  }
  return rc;
}
