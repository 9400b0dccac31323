// gfmkdir [-p] [-m MODE] PATH...: make directories in the gfrep catalog.
#include "catalog/client.h"
#include "tools/internal/catalog_flags.h"
#include "tools/internal/cli.h"

int main(int argc, char** argv) {
  using namespace gfrep;
  constexpr const char* kProgram = "gfmkdir";
  CLI::App app{"gfmkdir: make directories in the gfrep catalog"};
  tools::CommonFlags common;
  tools::CatalogFlags cat;
  bool parents = false;
  std::string mode = "755";
  std::vector<std::string> paths;
  tools::AddCommonFlags(app, common);
  tools::AddCatalogFlags(app, cat);
  app.add_flag("-p,--parents", parents, "Make parents as needed; no error if it exists");
  app.add_option("-m,--mode", mode, "Permission bits, octal")->capture_default_str();
  app.add_option("PATH", paths, "Directories to make")->required();
  CLI11_PARSE(app, argc, argv);
  tools::MakeLogger(kProgram, common);
  catalog::MkdirOptions options;
  options.parents = parents;
  try {
    std::size_t used = 0;
    unsigned long m = std::stoul(mode, &used, 8);
    if (used != mode.size() || m > 07777) throw std::invalid_argument("mode");
    options.mode = static_cast<std::uint32_t>(m);
  } catch (const std::exception&) {
    return tools::Fail(kProgram, "bad --mode '" + mode + "': want octal like 755");
  }
  if (const char* user = std::getenv("USER"); user != nullptr) options.owner = user;
  auto client = tools::ConnectCatalog(cat);
  if (!client.ok()) return tools::Fail(kProgram, tools::ErrorText(client.status()));
  int rc = 0;
  for (const std::string& path : paths) {
    absl::StatusOr<catalog::Attributes> a = (*client)->Mkdir(path, options);
    if (!a.ok()) rc = tools::Fail(kProgram, tools::ErrorText(a.status()));
  }
  return rc;
}
