// gfreg LOCALFILE GFPATH [--site S] [--node N]: stores a local file into the federation.
// Uploads it to the agent of a node (the named one, else the least busy live node of the
// site, else of any site) with the transfer engine, then records the new generation in the
// catalog with the checksum the agent verified and that node as the writer, which makes
// every other replica of the path stale.
#include <unistd.h>

#include <cstdlib>
#include <iostream>

#include <fmt/format.h>

#include "catalog/client.h"
#include "replica/placement.h"
#include "replica/spool.h"
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

  absl::StatusOr<std::string> rel = replica::SpoolRelativePath(path);
  if (!rel.ok()) return tools::Fail(kProgram, tools::ErrorText(rel.status()));
  auto client = tools::ConnectCatalog(cat);
  if (!client.ok()) return tools::Fail(kProgram, tools::ErrorText(client.status()));
  catalog::Catalog& c = **client;

  catalog::Node target;
  if (!node.empty()) {
    absl::StatusOr<catalog::Node> n = c.GetNode(node);
    if (!n.ok()) return tools::Fail(kProgram, tools::ErrorText(n.status()));
    if (!site.empty() && n->site != site) {
      return tools::Fail(kProgram, fmt::format("node {} is in site {}, not {}", node, n->site, site));
    }
    target = *n;
  } else {
    std::error_code ec;
    std::uint64_t size = std::filesystem::file_size(local, ec);
    replica::Topology topology;
    absl::StatusOr<std::vector<catalog::Node>> nodes = c.ListNodes(site);
    if (!nodes.ok()) return tools::Fail(kProgram, tools::ErrorText(nodes.status()));
    topology.nodes = std::move(*nodes);
    replica::PlacementRequest place;
    place.file_size = ec ? 0 : size;
    replica::LivenessOptions live;
    live.now_ns = catalog::SystemNowNs();
    std::vector<catalog::Node> best = replica::PlaceReplicas(place, topology, live);
    if (best.empty()) {
      return tools::Fail(kProgram, site.empty() ? "no live node with enough free space"
                                                : fmt::format("no live node with enough free space in site {}", site));
    }
    target = best.front();
  }
  absl::StatusOr<transfer::Endpoint> endpoint = transfer::ParseEndpoint(target.address);
  if (!endpoint.ok()) return tools::Fail(kProgram, tools::ErrorText(endpoint.status()));
  std::filesystem::path key_path =
      key_file.empty() ? transfer::DefaultKeyPath() : std::filesystem::path(key_file);
  absl::StatusOr<std::string> key = transfer::LoadOrCreateSharedKey(key_path);
  if (!key.ok()) return tools::Fail(kProgram, tools::ErrorText(key.status()));

  std::string parent = path.substr(0, path.find_last_of('/'));
  if (!parent.empty()) {
    catalog::MkdirOptions m;
    m.parents = true;
    if (absl::StatusOr<catalog::Attributes> d = c.Mkdir(parent, m); !d.ok()) {
      return tools::Fail(kProgram, tools::ErrorText(d.status()));
    }
  }
  transfer::TransferOptions options;
  options.shared_key = *key;
  options.route.streams = streams;
  options.logger = log;
  absl::StatusOr<transfer::TransferStats> stats = transfer::Push(local, *endpoint, *rel, options);
  if (!stats.ok()) {
    return tools::Fail(kProgram, fmt::format("upload to {} ({}): {}", target.name, target.address,
                                             tools::ErrorText(stats.status())));
  }
  std::size_t colon = stats->checksum.find(':');
  catalog::FileContent content;
  content.size = stats->bytes;
  content.checksum_algo = stats->checksum.substr(0, colon);
  content.checksum = colon == std::string::npos ? "" : stats->checksum.substr(colon + 1);
  if (const char* user = std::getenv("USER"); user != nullptr) content.owner = user;
  absl::StatusOr<catalog::Attributes> a = c.CommitFile(path, content, target.name, std::nullopt);
  if (!a.ok()) return tools::Fail(kProgram, tools::ErrorText(a.status()));
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
