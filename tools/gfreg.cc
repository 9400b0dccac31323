// gfreg LOCALFILE GFPATH [--site S] [--node N]: stores a local file into the federation
// with replica::Store (replica/writer.h): reserves a new generation, uploads the bytes to
// the agent of a node (the named one, else the least busy live node of the site, else of
// any site) under that generation's own name, then commits the generation with that node
// as the writer, which makes every other replica of the path stale. A failure at any step
// leaves the previous version in place and served.
#include <unistd.h>

#include <cstdlib>
#include <iostream>

#include <fmt/format.h>

#include "catalog/client.h"
#include "replica/writer.h"
#include "tools/internal/catalog_flags.h"
#include "tools/internal/cli.h"
#include "transfer/auth.h"
#include "transfer/client.h"

namespace {

std::string EnvOr(const std::string& value, const char* name) {
  if (!value.empty()) return value;
  const char* env = std::getenv(name);
  return env == nullptr ? "" : env;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace gfrep;
  constexpr const char* kProgram = "gfreg";
  CLI::App app{"gfreg: store a local file into the gfrep federation (upload, checksum, register)"};
  tools::CommonFlags common;
  tools::CatalogFlags cat;
  std::string local, path, site, node, key_file;
  int streams = 4;
  bool json = false;
  tools::AddCommonFlags(app, common);
  tools::AddCatalogFlags(app, cat);
  app.add_option("LOCALFILE", local, "File to store")->required()->check(CLI::ExistingFile);
  app.add_option("GFPATH", path, "Catalog path, e.g. /exp/run001.dat")->required();
  app.add_option("--site", site, "Store at a node of this site (default: $GFREP_SITE)");
  app.add_option("--node", node, "Store at this node (default: $GFREP_NODE)");
  app.add_option("--key-file", key_file, "Shared key file (default ~/.gfrep/shared_key)");
  app.add_option("--streams", streams, "Parallel data connections")
      ->check(CLI::Range(1, transfer::kMaxStreams))
      ->capture_default_str();
  app.add_flag("--json", json, "Print the result as one JSON object");
  CLI11_PARSE(app, argc, argv);
  auto log = tools::MakeLogger(kProgram, common);
  site = EnvOr(site, "GFREP_SITE");
  node = EnvOr(node, "GFREP_NODE");

  auto client = tools::ConnectCatalog(cat);
  if (!client.ok()) return tools::Fail(kProgram, tools::ErrorText(client.status()));
  std::filesystem::path key_path =
      key_file.empty() ? transfer::DefaultKeyPath() : std::filesystem::path(key_file);
  absl::StatusOr<std::string> key = transfer::LoadOrCreateSharedKey(key_path);
  if (!key.ok()) return tools::Fail(kProgram, tools::ErrorText(key.status()));

  replica::StoreOptions options;
  options.node = node;
  options.site = site;
  options.transfer.shared_key = *key;
  options.transfer.route.streams = streams;
  options.transfer.logger = log;
  if (const char* user = std::getenv("USER"); user != nullptr) options.owner = user;
  absl::StatusOr<replica::StoreResult> stored = replica::Store(**client, local, path, options);
  if (!stored.ok()) return tools::Fail(kProgram, tools::ErrorText(stored.status()));
  const catalog::Attributes* a = &stored->attributes;
  const catalog::Node& target = stored->node;
  const transfer::TransferStats* stats = &stored->upload;
  if (json) {
    nlohmann::json j = {{"path", path},       {"node", target.name},
                        {"site", target.site}, {"size", a->size},
                        {"generation", a->generation},
                        {"checksum", stats->checksum},
                        {"seconds", stats->seconds}};
    std::cout << j.dump() << "\n";
  } else {
    std::cout << fmt::format("{}: {} bytes at {} ({}), generation {}\n", path, a->size,
                             target.name, target.site, a->generation);
  }
  return 0;
}
