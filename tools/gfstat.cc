// gfstat [--json] PATH...: show the catalog attributes of paths.
#include <iostream>

#include <fmt/format.h>

#include "catalog/client.h"
#include "tools/internal/catalog_flags.h"
#include "tools/internal/cli.h"

int main(int argc, char** argv) {
  using namespace gfrep;
  constexpr const char* kProgram = "gfstat";
  CLI::App app{"gfstat: show catalog attributes (type, size, mode, checksum, generation)"};
  tools::CommonFlags common;
  tools::CatalogFlags cat;
  bool json = false;
  std::vector<std::string> paths;
  tools::AddCommonFlags(app, common);
  tools::AddCatalogFlags(app, cat);
  app.add_flag("--json", json, "One JSON object per line");
  app.add_option("PATH", paths, "Paths")->required();
  CLI11_PARSE(app, argc, argv);
  tools::MakeLogger(kProgram, common);
  auto client = tools::ConnectCatalog(cat);
  if (!client.ok()) return tools::Fail(kProgram, tools::ErrorText(client.status()));
  // One round trip for all the paths.
  absl::StatusOr<std::vector<absl::StatusOr<catalog::Attributes>>> results =
      (*client)->StatMany(paths);
  if (!results.ok()) return tools::Fail(kProgram, tools::ErrorText(results.status()));
  int rc = 0;
  for (std::size_t i = 0; i < paths.size(); ++i) {
    const std::string& path = paths[i];
    const absl::StatusOr<catalog::Attributes>& a = (*results)[i];
    if (!a.ok()) {
      rc = tools::Fail(kProgram, tools::ErrorText(a.status()));
      continue;
    }
    if (json) {
      nlohmann::json j = tools::ToJson(*a);
      j["path"] = path;
      std::cout << j.dump() << "\n";
      continue;
    }
    std::cout << fmt::format(
        "  File: {}\n  Type: {}\n  Size: {}\n  Mode: {:04o}\n Owner: {}\n Group: {}\n Inode: {}\n"
        " Mtime: {}\n   Gen: {}\n   Sum: {}{}{}\n",
        path, tools::TypeName(a->type), a->size, a->mode, a->owner.empty() ? "-" : a->owner, a->group.empty() ? "-" : a->group, a->inode,
        tools::FormatTime(a->mtime_ns), a->generation, a->checksum_algo,
        a->checksum_algo.empty() ? "" : ":", a->checksum);
  }
  return rc;
}
