// gfwhere [--json] PATH...: where the replicas of files are, and in which state.
#include <iostream>
#include <map>

#include <fmt/format.h>

#include "catalog/client.h"
#include "tools/internal/catalog_flags.h"
#include "tools/internal/cli.h"

int main(int argc, char** argv) {
  using namespace gfrep;
  constexpr const char* kProgram = "gfwhere";
  CLI::App app{"gfwhere: show replica locations and states of files"};
  tools::CommonFlags common;
  tools::CatalogFlags cat;
  bool json = false;
  std::vector<std::string> paths;
  tools::AddCommonFlags(app, common);
  tools::AddCatalogFlags(app, cat);
  app.add_flag("--json", json, "One JSON object per path: {path, generation, replicas:[...]}");
  app.add_option("PATH", paths, "Files")->required();
  CLI11_PARSE(app, argc, argv);
  tools::MakeLogger(kProgram, common);
  auto client = tools::ConnectCatalog(cat);
  if (!client.ok()) return tools::Fail(kProgram, tools::ErrorText(client.status()));
  int rc = 0;
  // Whether each node is live, suspect or dead (the catalog server judges it): a replica on a
  // node that is not live is marked.
  std::map<std::string, std::string> liveness;
  if (absl::StatusOr<std::vector<catalog::Node>> nodes = (*client)->ListNodes(""); nodes.ok()) {
    for (const catalog::Node& n : *nodes) liveness[n.name] = n.liveness;
  }
  auto mark = [&](const std::string& node) -> std::string {
    auto it = liveness.find(node);
    if (it == liveness.end()) return "(no such node)";
    return it->second.empty() || it->second == "live" ? "" : "(" + it->second + ")";
  };
  for (const std::string& path : paths) {
    absl::StatusOr<catalog::Location> loc = (*client)->Locate(path);
    if (!loc.ok()) {
      rc = tools::Fail(kProgram, tools::ErrorText(loc.status()));
      continue;
    }
    if (loc->attributes.type == catalog::FileType::kDirectory) {
      rc = tools::Fail(kProgram, path + ": is a directory (FAILED_PRECONDITION)");
      continue;
    }
    if (json) {
      nlohmann::json j = {{"path", path},
                          {"generation", loc->attributes.generation},
                          {"size", loc->attributes.size},
                          {"replicas", nlohmann::json::array()}};
      for (const catalog::Replica& r : loc->replicas) {
        nlohmann::json jr = tools::ToJson(r);
        auto it = liveness.find(r.node);
        jr["node_liveness"] = it == liveness.end() ? "unregistered" : it->second;
        j["replicas"].push_back(std::move(jr));
      }
      std::cout << j.dump() << "\n";
      continue;
    }
    if (paths.size() > 1) std::cout << path << ":\n";
    if (loc->replicas.empty()) std::cout << "  (no replicas)\n";
    for (const catalog::Replica& r : loc->replicas) {
      std::cout << fmt::format("  {:<20} {:<10} g{}{}{}\n",
                               fmt::format("{} {}", r.node, mark(r.node)), catalog::ToString(r.state),
                               r.generation,
                               r.generation == loc->attributes.generation ? "" : " (old)",
                               r.note.empty() ? "" : "  " + r.note);
    }
  }
  return rc;
}
