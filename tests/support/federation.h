#pragma once

// FederationTest is a gtest fixture that runs a gfrep federation as real processes on
// loopback: one gfcatalogd (embedded RocksDB, running the planner) and one gfsited site
// agent per node, driven by gfreg, gfrep, gfwhere, gfexport, ... exactly as a user would,
// with a CatalogClient for checks. Integration tests derive from it:
//
//   class MyTest : public testing::FederationTest {
//    protected:
//     MyTest() : FederationTest("my") {}
//     void SetUp() override { StartFederation({{"a1", "A"}, {"b1", "B"}}); }
//   };
//
// Processes are stopped by pid when the fixture ends (Subprocess kills what still runs).
// Helpers report problems through gtest (EXPECT/ADD_FAILURE), as the test body would.
//
// Thread safety: none; owned by one test.

#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "catalog/client.h"
#include "tests/support/subprocess.h"
#include "tests/support/temp_dir.h"

namespace gfrep::testing {

struct FederationOptions {
  // Extra gfcatalogd flags (e.g. {"--node-timeout", "10"}).
  std::vector<std::string> catalogd_flags;
  // gfcatalogd's --db (empty: a RocksDB directory in the test's directory).
  std::string db;
  // Spool directories by node (a node not listed: <dir>/spool-<node>).
  std::map<std::string, std::filesystem::path> spools;
  // gfcatalogd processes on `db`. More than one: each runs with --shared (db must be a
  // PostgreSQL database) and catalog_ lists them all ("IP:PORT,IP:PORT").
  int front_ends = 1;
  // Extra flags for every gfsited.
  std::vector<std::string> agent_flags = {"--lease", "3"};
  // Mutual TLS with gfca's certificates (in <dir>/ca): the catalog's, one per node (the
  // agents present theirs), and an admin "root" used by client_ and the tools.
  bool mutual_tls = false;
};

class FederationTest : public ::testing::Test {
 protected:
  // `name` names the temporary directory holding the database, spools and key.
  explicit FederationTest(const std::string& name = "federation") : dir_(name) {}

  // Starts gfcatalogd and one agent per node of `site_of` (node -> site), and waits until
  // every node has registered. Fails the test (fatally) on trouble: call from SetUp().
  void StartFederation(const std::map<std::string, std::string>& site_of,
                       const FederationOptions& options = {});

  // Stops gfcatalogd (SIGTERM, waits; every front end) and starts it again on the same
  // addresses, database and flags (StartFederation starts it the first time).
  void StopCatalog();
  void StartCatalog();
  // Front end i of options.front_ends (0: catalogd_), and its HOST:PORT.
  Subprocess& FrontEnd(int i) { return i == 0 ? catalogd_ : more_catalogds_.at(i - 1); }
  const std::string& FrontEndAddress(int i) const { return front_end_addresses_.at(i); }

  // Starts (or restarts) the agent of `node`, with the site given to StartFederation.
  void StartAgent(const std::string& node);
  void WaitForNodes(std::size_t n);

  std::filesystem::path Spool(const std::string& node) const {
    if (auto it = options_.spools.find(node); it != options_.spools.end()) return it->second;
    return dir_.path() / ("spool-" + node);
  }

  // Runs a tool (argv[0] is its name) against the catalog, with the shared key if it talks
  // to site agents (gfreg, gfexport, gfcp).
  RunResult Tool(std::vector<std::string> argv,
                 std::chrono::seconds timeout = std::chrono::seconds(120));
  // The environment tools need (GFREP_CATALOG and, with mutual TLS, GFREP_CATALOG_CA,
  // GFREP_CERT, GFREP_KEY of the admin), for tools started as Subprocess.
  SubprocessOptions ToolOptions() const;
  // With mutual TLS: runs gfca issue ROLE NAME into <dir>/ca (extra args appended); the
  // certificate is Ca(NAME + ".pem"), its key Ca(NAME + ".key").
  void IssueCert(const std::string& role, const std::string& name, std::vector<std::string> extra = {});
  std::string Ca(const std::string& file) const { return (dir_.path() / "ca" / file).string(); }
  // The options StartFederation was given (and the flags it added); StartCatalog uses them.
  FederationOptions& federation_options() { return options_; }
  // Client options for the catalog as `name` (a certificate IssueCert made).
  catalog::ClientOptions ClientAs(const std::string& name) const;

  // Writes a local file of `size` random bytes (from `seed`) and stores it at `node` with
  // gfreg. Returns the bytes.
  std::string Store(const std::string& path, std::uint64_t size, std::uint64_t seed,
                    const std::string& node = "a1");

  // The bytes of the current generation of `path` in `node`'s spool, by identity
  // ("<spool>/.gfrep-data/<inode>/<generation>"); "" if there are none.
  std::string Replica(const std::string& node, const std::string& path);

  // gfwhere --json of `path`, and its replica states by node.
  nlohmann::json Where(const std::string& path);
  std::map<std::string, std::string> States(const std::string& path);

  // Waits until request `id` is done or failed (following catalog events).
  catalog::Request WaitRequest(std::uint64_t id, std::chrono::seconds timeout);

  TempDir dir_;
  std::string key_ = dir_.Sub("shared_key");
  Subprocess catalogd_;
  std::vector<Subprocess> more_catalogds_;  // front ends 1.. (FederationOptions::front_ends)
  std::vector<std::string> front_end_addresses_;
  std::string catalog_;  // gfcatalogd's HOST:PORT (several: comma-separated)
  std::unique_ptr<catalog::CatalogClient> client_;
  std::map<std::string, Subprocess> agents_;

 private:
  std::map<std::string, std::string> site_of_;
  FederationOptions options_;
};

}  // namespace gfrep::testing
