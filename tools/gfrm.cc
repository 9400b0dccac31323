// gfrm [-r] [-f] PATH...: remove files and directories from the gfrep catalog.
#include "catalog/client.h"
#include "tools/internal/catalog_flags.h"
#include "tools/internal/cli.h"

int main(int argc, char** argv) {
  using namespace gfrep;
  constexpr const char* kProgram = "gfrm";
  CLI::App app{"gfrm: remove files and directories (replicas are deleted by their nodes)"};
  tools::CommonFlags common;
  tools::CatalogFlags cat;
  bool recursive = false, force = false;
  std::vector<std::string> paths;
  tools::AddCommonFlags(app, common);
  tools::AddCatalogFlags(app, cat);
  app.add_flag("-r,-R,--recursive", recursive, "Remove directories and their contents");
  app.add_flag("-f,--force", force, "Ignore paths that do not exist");
  app.add_option("PATH", paths, "Paths")->required();
  CLI11_PARSE(app, argc, argv);
  tools::MakeLogger(kProgram, common);
  auto client = tools::ConnectCatalog(cat);
  if (!client.ok()) return tools::Fail(kProgram, tools::ErrorText(client.status()));
  int rc = 0;
  for (const std::string& path : paths) {
    absl::Status s = (*client)->Remove(path, recursive);
    if (s.ok() || (force && absl::IsNotFound(s))) continue;
    if (absl::IsFailedPrecondition(s) && !recursive &&
        std::string(s.message()).find("not empty") != std::string::npos) {
      rc = tools::Fail(kProgram, tools::ErrorText(s) + "; use -r");
      continue;
    }
    rc = tools::Fail(kProgram, tools::ErrorText(s));
  }
  return rc;
}
