// gfexport PATH: writes a file of the federation to stdout through the local read path
// (replica/client/reader.h): this node's complete replica through a plain descriptor when it has
// one, else the best remote replica, streamed (pieces fetched as they are read, read-ahead
// from the route; --no-stream fetches the whole file and verifies it first). The reader is named by
// --site/--node or $GFREP_SITE/$GFREP_NODE; with neither it reads as a client outside
// every site. A local replica is served only if it is as recorded at commit (size, mtime
// stamp; with --verify also its checksum); else it is reported and a remote one is read.
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>

#include "catalog/client.h"
#include "replica/client/reader.h"
#include "tools/internal/catalog_flags.h"
#include "tools/internal/cli.h"
#include "transfer/auth.h"

namespace {

std::string EnvOr(const std::string& value, const char* name) {
  if (!value.empty()) return value;
  const char* env = std::getenv(name);
  return env == nullptr ? "" : env;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace gfrep;
  constexpr const char* kProgram = "gfexport";
  CLI::App app{"gfexport: write a gfrep file to stdout (local replica first, else the best remote one)"};
  tools::CommonFlags common;
  tools::CatalogFlags cat;
  std::string path, site, node, key_file, tmp_dir;
  tools::AddCommonFlags(app, common);
  tools::AddCatalogFlags(app, cat);
  app.add_option("PATH", path, "Catalog path of the file")->required();
  app.add_option("--site", site, "Site of the reading node (default: $GFREP_SITE)");
  app.add_option("--node", node, "Name of the reading node (default: $GFREP_NODE)");
  app.add_option("--key-file", key_file, "Shared key file (default ~/.gfrep/shared_key)");
  app.add_option("--tmp-dir", tmp_dir, "Where a remote replica is staged (default: $TMPDIR or /tmp)");
  bool verify = false;
  app.add_flag("--verify", verify,
               "Also checksum this node's own replica before the first byte is written (a "
               "mismatch is reported and another replica is read)");
  bool no_stream = false, stats = false, replicate_on_read = false;
  std::uint64_t readahead = 0, length = 0;
  app.add_flag("--no-stream", no_stream,
               "Fetch a remote replica whole (and verify its checksum) before the first byte");
  app.add_option("--readahead", readahead,
                 "Bytes a streamed read fetches ahead (default: twice the route's BDP)");
  app.add_flag("--replicate-on-read", replicate_on_read,
               "Read from another site also asks the catalog for a copy at this site");
  app.add_option("--length", length, "Write only the first N bytes (default: the whole file)");
  app.add_flag("--stats", stats,
               "Print timings as JSON on stderr: open_s, first_byte_s, seconds (from the start "
               "of the program), bytes, source, local, streaming, failovers, whole_file_verified");
  CLI11_PARSE(app, argc, argv);
  const auto started = std::chrono::steady_clock::now();
  auto since_start = [&] {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  };
  auto log = tools::MakeLogger(kProgram, common);
  std::signal(SIGPIPE, SIG_IGN);

  auto client = tools::ConnectCatalog(cat);
  if (!client.ok()) return tools::Fail(kProgram, tools::ErrorText(client.status()));
  replica::client::ReaderOptions options;
  options.identity.site = EnvOr(site, "GFREP_SITE");
  options.identity.node = EnvOr(node, "GFREP_NODE");
  options.tmp_dir = tmp_dir;
  options.verify_local = verify;
  options.stream = !no_stream;
  options.replicate_on_read = replicate_on_read;
  options.readahead_bytes = readahead;
  options.transfer.logger = log;
  std::filesystem::path key_path =
      key_file.empty() ? transfer::DefaultKeyPath() : std::filesystem::path(key_file);
  absl::StatusOr<std::string> key = transfer::LoadOrCreateSharedKey(key_path);
  if (!key.ok()) return tools::Fail(kProgram, tools::ErrorText(key.status()));
  options.transfer.shared_key = *key;

  absl::StatusOr<std::unique_ptr<replica::client::FileReader>> reader =
      replica::client::Open(**client, path, options);
  if (!reader.ok()) return tools::Fail(kProgram, tools::ErrorText(reader.status()));
  const double open_s = since_start();
  double first_byte_s = 0;
  log->info("reading {} from {} ({})", path, (*reader)->source_node(),
            (*reader)->local() ? "local replica"
                               : ((*reader)->streaming() ? "remote replica, streamed" : "remote replica"));
  std::vector<char> buffer(1 << 20);
  std::uint64_t total = 0;
  const std::uint64_t want = length != 0 ? std::min(length, (*reader)->size()) : (*reader)->size();
  while (total < want) {
    const std::size_t ask = static_cast<std::size_t>(std::min<std::uint64_t>(
        buffer.size(), total == 0 ? std::min<std::uint64_t>(want, 4096) : want - total));
    absl::StatusOr<std::size_t> n = (*reader)->Read(buffer.data(), ask);
    if (!n.ok()) return tools::Fail(kProgram, tools::ErrorText(n.status()));
    if (*n == 0) break;
    std::size_t off = 0;
    while (off < *n) {
      ssize_t w = ::write(STDOUT_FILENO, buffer.data() + off, *n - off);
      if (w < 0) {
        if (errno == EINTR) continue;
        return tools::Fail(kProgram, fmt::format("write stdout: {}", std::strerror(errno)));
      }
      off += static_cast<std::size_t>(w);
    }
    if (total == 0) first_byte_s = since_start();
    total += *n;
  }
  if (total != want) {
    return tools::Fail(kProgram, fmt::format("{}: read {} bytes, expected {}", path, total, want));
  }
  if (stats) {
    nlohmann::json j{{"open_s", open_s},
                     {"first_byte_s", first_byte_s},
                     {"seconds", since_start()},
                     {"bytes", total},
                     {"source", (*reader)->source_node()},
                     {"local", (*reader)->local()},
                     {"streaming", (*reader)->streaming()},
                     {"failovers", (*reader)->failovers()},
                     {"whole_file_verified", (*reader)->stream_stats().whole_file_verified}};
    fmt::print(stderr, "{}\n", j.dump());
  }
  return 0;
}
