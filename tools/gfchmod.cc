// gfchmod MODE PATH...: change the mode of entries in the gfrep catalog (octal, e.g. 750 or
// 1777 for a sticky shared directory). Only an entry's owner (or an admin) may.
#include <fmt/format.h>

#include "catalog/client.h"
#include "tools/internal/catalog_flags.h"
#include "tools/internal/cli.h"

int main(int argc, char** argv) {
  using namespace gfrep;
  constexpr const char* kProgram = "gfchmod";
  CLI::App app{"gfchmod: change the mode (octal permission bits, 1000 = sticky) of catalog entries"};
  tools::CommonFlags common;
  tools::CatalogFlags cat;
  std::string mode_text;
  std::vector<std::string> paths;
  tools::AddCommonFlags(app, common);
  tools::AddCatalogFlags(app, cat);
  app.add_option("MODE", mode_text, "Octal mode, e.g. 755, 770, or 1777 (a sticky shared directory)")->required();
  app.add_option("PATHS", paths, "Entries to change")->required();
  CLI11_PARSE(app, argc, argv);
  tools::MakeLogger(kProgram, common);
  std::uint32_t mode = 0;
  if (mode_text.empty() || mode_text.size() > 4 ||
      mode_text.find_first_not_of("01234567") != std::string::npos ||
      (mode = static_cast<std::uint32_t>(std::stoul(mode_text, nullptr, 8))) > 01777) {
    return tools::Fail(kProgram, fmt::format("mode '{}': want octal permission bits up to 1777", mode_text), 2);
  }
  auto client = tools::ConnectCatalog(cat);
  if (!client.ok()) return tools::Fail(kProgram, tools::ErrorText(client.status()));
  int rc = 0;
  for (const std::string& path : paths) {
    catalog::AttributeChange change;
    change.mode = mode;
    absl::StatusOr<catalog::Attributes> a = (*client)->SetAttributes(path, change);
    if (!a.ok()) rc = tools::Fail(kProgram, tools::ErrorText(a.status()));
  }
  return rc;
}
