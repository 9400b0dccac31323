// gfls [-l] [-R] [-d] [--json] [PATH...]: list directories of the gfrep catalog.
#include <iostream>

#include <fmt/format.h>

#include "catalog/client.h"
#include "tools/internal/catalog_flags.h"
#include "tools/internal/cli.h"

namespace {

using gfrep::catalog::Attributes;
using gfrep::catalog::DirEntry;
using gfrep::catalog::FileType;

constexpr std::size_t kPage = 10000;

std::string Join(const std::string& dir, const std::string& name) {
  return dir == "/" ? "/" + name : dir + "/" + name;
}

std::string LongLine(const Attributes& a, const std::string& name) {
  std::string perms = a.type == FileType::kDirectory ? "d" : "-";
  for (int shift = 6; shift >= 0; shift -= 3) {
    unsigned bits = (a.mode >> shift) & 7;
    perms += (bits & 4) ? 'r' : '-';
    perms += (bits & 2) ? 'w' : '-';
    perms += (bits & 1) ? 'x' : '-';
  }
  if ((a.mode & 01000) != 0) perms.back() = perms.back() == 'x' ? 't' : 'T';
  return fmt::format("{} {:<8} {:<8} {:>14} {} g{:<3} {}", perms, a.owner.empty() ? "-" : a.owner,
                     a.group.empty() ? "-" : a.group, a.size, gfrep::tools::FormatTime(a.mtime_ns), a.generation, name);
}

}  // namespace

int main(int argc, char** argv) {
  using namespace gfrep;
  constexpr const char* kProgram = "gfls";
  CLI::App app{"gfls: list directories of the gfrep catalog"};
  tools::CommonFlags common;
  tools::CatalogFlags cat;
  bool long_format = false, recursive = false, directory = false, json = false;
  std::vector<std::string> paths;
  tools::AddCommonFlags(app, common);
  tools::AddCatalogFlags(app, cat);
  app.add_flag("-l", long_format, "Long format: mode, owner, group, size, mtime, generation");
  app.add_flag("-R,--recursive", recursive, "List subdirectories recursively");
  app.add_flag("-d,--directory", directory, "List directories themselves, not their contents");
  app.add_flag("--json", json, "One JSON object per line: {path, ...attributes}");
  app.add_option("PATH", paths, "Paths (default /)");
  CLI11_PARSE(app, argc, argv);
  tools::MakeLogger(kProgram, common);
  if (paths.empty()) paths.push_back("/");
  auto client = tools::ConnectCatalog(cat);
  if (!client.ok()) return tools::Fail(kProgram, tools::ErrorText(client.status()));

  int rc = 0;
  auto print = [&](const std::string& path, const Attributes& a, const std::string& shown) {
    if (json) {
      nlohmann::json j = tools::ToJson(a);
      j["path"] = path;
      std::cout << j.dump() << "\n";
    } else if (long_format) {
      std::cout << LongLine(a, shown) << "\n";
    } else {
      std::cout << shown << "\n";
    }
  };
  // Lists one directory page by page; returns the subdirectories for -R.
  auto list_dir = [&](const std::string& dir, bool header) -> std::vector<std::string> {
    std::vector<std::string> subdirs;
    if (header && !json) std::cout << dir << ":\n";
    catalog::ListOptions options;
    options.limit = kPage;
    while (true) {
      absl::StatusOr<std::vector<DirEntry>> page = (*client)->List(dir, options);
      if (!page.ok()) {
        rc = tools::Fail(kProgram, tools::ErrorText(page.status()));
        break;
      }
      for (const DirEntry& e : *page) {
        print(Join(dir, e.name), e.attributes, json ? Join(dir, e.name) : e.name);
        if (e.attributes.type == FileType::kDirectory) subdirs.push_back(Join(dir, e.name));
      }
      if (page->size() < kPage) break;
      options.start_after = page->back().name;
    }
    return subdirs;
  };

  bool headers = paths.size() > 1 || recursive;
  bool first = true;
  for (const std::string& path : paths) {
    absl::StatusOr<Attributes> a = (*client)->Stat(path);
    if (!a.ok()) {
      rc = tools::Fail(kProgram, tools::ErrorText(a.status()));
      continue;
    }
    if (a->type != FileType::kDirectory || directory) {
      print(path, *a, path);
      continue;
    }
    std::vector<std::string> queue{path};
    while (!queue.empty()) {
      std::string dir = queue.front();
      queue.erase(queue.begin());
      if (headers && !json && !first) std::cout << "\n";
      first = false;
      std::vector<std::string> subdirs = list_dir(dir, headers);
      if (recursive) queue.insert(queue.begin(), subdirs.begin(), subdirs.end());
    }
  }
  return rc;
}
