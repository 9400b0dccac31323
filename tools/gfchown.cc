// gfchown OWNER[:GROUP] PATH... | gfchown :GROUP PATH...: change the owner and/or group of
// entries in the gfrep catalog. Owners change only by an admin; an entry's owner may give it
// to one of its own groups. An empty OWNER or GROUP after the colon ("alice:") clears it.
#include <fmt/format.h>

#include "catalog/client.h"
#include "tools/internal/catalog_flags.h"
#include "tools/internal/cli.h"

int main(int argc, char** argv) {
  using namespace gfrep;
  constexpr const char* kProgram = "gfchown";
  CLI::App app{"gfchown: change the owner (admins) and/or group of catalog entries"};
  tools::CommonFlags common;
  tools::CatalogFlags cat;
  std::string spec;
  std::vector<std::string> paths;
  bool recursive = false;
  tools::AddCommonFlags(app, common);
  tools::AddCatalogFlags(app, cat);
  app.add_option("OWNER", spec, "OWNER, OWNER:GROUP or :GROUP")->required();
  app.add_option("PATHS", paths, "Entries to change")->required();
  app.add_flag("-R,--recursive", recursive, "Also everything below each directory");
  CLI11_PARSE(app, argc, argv);
  tools::MakeLogger(kProgram, common);
  catalog::AttributeChange change;
  const std::size_t colon = spec.find(':');
  if (colon != 0) change.owner = spec.substr(0, colon);
  if (colon != std::string::npos) change.group = spec.substr(colon + 1);
  if (!change.owner && !change.group) return tools::Fail(kProgram, "nothing to change", 2);
  auto client = tools::ConnectCatalog(cat);
  if (!client.ok()) return tools::Fail(kProgram, tools::ErrorText(client.status()));
  int rc = 0;
  std::vector<std::string> todo(paths.rbegin(), paths.rend());
  while (!todo.empty()) {
    const std::string path = std::move(todo.back());
    todo.pop_back();
    absl::StatusOr<catalog::Attributes> a = (*client)->SetAttributes(path, change);
    if (!a.ok()) {
      rc = tools::Fail(kProgram, tools::ErrorText(a.status()));
      continue;
    }
    if (!recursive || a->type != catalog::FileType::kDirectory) continue;
    catalog::ListOptions o;
    o.limit = 10000;
    for (;;) {
      absl::StatusOr<std::vector<catalog::DirEntry>> page = (*client)->List(path, o);
      if (!page.ok()) {
        rc = tools::Fail(kProgram, tools::ErrorText(page.status()));
        break;
      }
      for (const catalog::DirEntry& e : *page) todo.push_back(path == "/" ? "/" + e.name : path + "/" + e.name);
      if (page->empty() || page->size() < 10000) break;
      o.start_after = page->back().name;
    }
  }
  return rc;
}
