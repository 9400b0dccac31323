// gfreg LOCALFILE GFPATH [--site S] [--node N]: stores a local file into the federation
// (gfreg -r LOCALDIR GFDIR stores every regular file under LOCALDIR at the same relative path
// under GFDIR, -j at once, and reports each failure without stopping the others)
// with replica::client::Store (replica/client/writer.h): reserves a new generation, uploads the bytes to
// the agent of a node (the named one, else the least busy live node of the site, else of
// any site) under that generation's own name, then commits the generation with that node
// as the writer, which makes every other replica of the path stale. A failure at any step
// leaves the previous version in place and served.
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <iostream>
#include <mutex>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "catalog/client.h"
#include "replica/client/writer.h"
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

// Regular files under `dir` (symbolic links are not followed), in name order.
absl::StatusOr<std::vector<std::filesystem::path>> FilesUnder(const std::filesystem::path& dir) {
  std::error_code ec;
  std::vector<std::filesystem::path> files;
  std::filesystem::recursive_directory_iterator it(dir, ec), end;
  for (; !ec && it != end; it.increment(ec)) {
    if (it->is_regular_file(ec) && !it->is_symlink(ec)) files.push_back(it->path());
  }
  if (ec) return absl::InvalidArgumentError(fmt::format("{}: {}", dir.string(), ec.message()));
  std::sort(files.begin(), files.end());
  return files;
}

// gfreg -r: stores `files` (under `dir`) at `gfdir`/<relative path>, `jobs` at once.
int StoreTree(gfrep::catalog::Catalog& catalog, const std::filesystem::path& dir,
              const std::vector<std::filesystem::path>& files, const std::string& gfdir,
              const gfrep::replica::client::StoreOptions& options, int jobs, bool json) {
  std::atomic<std::size_t> next{0};
  std::mutex mu;
  std::uint64_t bytes = 0;
  std::size_t stored = 0;
  std::vector<std::pair<std::string, std::string>> failed;  // path, error
  auto worker = [&] {
    for (std::size_t i = next++; i < files.size(); i = next++) {
      const std::string rel = files[i].lexically_relative(dir).generic_string();
      const std::string path = (gfdir == "/" ? "" : gfdir) + "/" + rel;
      absl::StatusOr<gfrep::replica::client::StoreResult> r =
          gfrep::replica::client::Store(catalog, files[i], path, options);
      std::lock_guard<std::mutex> lock(mu);
      if (r.ok()) {
        ++stored;
        bytes += r->attributes.size;
      } else {
        failed.emplace_back(path, gfrep::tools::ErrorText(r.status()));
        if (!json) std::cerr << fmt::format("gfreg: {}: {}\n", path, failed.back().second);
      }
    }
  };
  std::vector<std::thread> threads;
  for (int j = 0; j < jobs; ++j) threads.emplace_back(worker);
  for (std::thread& t : threads) t.join();
  if (json) {
    nlohmann::json f = nlohmann::json::array();
    for (const auto& [path, error] : failed) f.push_back({{"path", path}, {"error", error}});
    std::cout << nlohmann::json{{"files", stored}, {"bytes", bytes}, {"failed", f}}.dump() << "\n";
  } else {
    std::cout << fmt::format("{} files, {} bytes stored under {}{}\n", stored, bytes, gfdir,
                             failed.empty() ? "" : fmt::format("; {} failed", failed.size()));
  }
  return failed.empty() ? 0 : 1;
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
  int jobs = 4;
  bool json = false;
  bool recursive = false;
  tools::AddCommonFlags(app, common);
  tools::AddCatalogFlags(app, cat);
  app.add_option("LOCALFILE", local, "File to store (with -r: a directory)")->required()->check(CLI::ExistingPath);
  app.add_option("GFPATH", path, "Catalog path, e.g. /exp/run001.dat (with -r: the directory to store under)")->required();
  app.add_flag("-r,--recursive", recursive,
               "Store every regular file under the directory LOCALFILE at its relative path under GFPATH");
  app.add_option("-j,--jobs", jobs, "With -r: files stored at once")
      ->check(CLI::Range(1, 64))
      ->capture_default_str();
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

  replica::client::StoreOptions options;
  options.node = node;
  options.site = site;
  options.transfer.shared_key = *key;
  options.transfer.route.streams = streams;
  options.transfer.logger = log;
  // Used only for a node whose agent requires TLS (replica/client/writer.h).
  options.transfer.tls_options = tools::AgentTlsOptions(cat);
  if (const char* user = std::getenv("USER"); user != nullptr) options.owner = user;
  if (recursive) {
    if (!std::filesystem::is_directory(local)) {
      return tools::Fail(kProgram, fmt::format("{} is not a directory (-r)", local));
    }
    if (path.empty() || path[0] != '/') {
      return tools::Fail(kProgram, fmt::format("{}: the catalog directory must be absolute", path));
    }
    while (path.size() > 1 && path.back() == '/') path.pop_back();
    absl::StatusOr<std::vector<std::filesystem::path>> files = FilesUnder(local);
    if (!files.ok()) return tools::Fail(kProgram, tools::ErrorText(files.status()));
    return StoreTree(**client, local, *files, path, options, jobs, json);
  }
  if (!std::filesystem::is_regular_file(local)) {
    return tools::Fail(kProgram, fmt::format("{} is not a regular file (a directory needs -r)", local));
  }
  absl::StatusOr<replica::client::StoreResult> stored = replica::client::Store(**client, local, path, options);
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
