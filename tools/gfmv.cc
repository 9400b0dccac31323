// gfmv SRC DST | gfmv SRC... DIR: rename or move entries in the gfrep catalog.
#include "catalog/client.h"
#include "tools/internal/catalog_flags.h"
#include "tools/internal/cli.h"

int main(int argc, char** argv) {
  using namespace gfrep;
  constexpr const char* kProgram = "gfmv";
  CLI::App app{"gfmv: rename SRC to DST, or move SRC... into directory DIR"};
  tools::CommonFlags common;
  tools::CatalogFlags cat;
  std::vector<std::string> args;
  tools::AddCommonFlags(app, common);
  tools::AddCatalogFlags(app, cat);
  app.add_option("PATHS", args, "SRC DST, or SRC... DIR")->required()->expected(2, -1);
  CLI11_PARSE(app, argc, argv);
  tools::MakeLogger(kProgram, common);
  auto client = tools::ConnectCatalog(cat);
  if (!client.ok()) return tools::Fail(kProgram, tools::ErrorText(client.status()));
  std::string target = args.back();
  args.pop_back();
  absl::StatusOr<catalog::Attributes> t = (*client)->Stat(target);
  bool into_dir = t.ok() && t->type == catalog::FileType::kDirectory;
  if (args.size() > 1 && !into_dir) {
    return tools::Fail(kProgram, target + ": target of several sources must be a directory");
  }
  int rc = 0;
  for (const std::string& src : args) {
    std::string dst = target;
    if (into_dir) {
      absl::StatusOr<std::vector<std::string>> parts = catalog::SplitPath(src);
      if (!parts.ok()) {
        rc = tools::Fail(kProgram, tools::ErrorText(parts.status()));
        continue;
      }
      if (parts->empty()) {
        rc = tools::Fail(kProgram, "/: cannot move the root (FAILED_PRECONDITION)");
        continue;
      }
      dst = (target == "/" ? "" : target) + "/" + parts->back();
    }
    absl::Status s = (*client)->Rename(src, dst);
    if (!s.ok()) rc = tools::Fail(kProgram, tools::ErrorText(s));
  }
  return rc;
}
