// gfnode add NAME --site S --address HOST:PORT [--spool DIR] [--capacity SIZE]
//        | list [--site S] [--json] | mode NAME normal|read-only|draining
//        | drain NAME [--status] [--wait SECONDS] | rm [--force] NAME: storage nodes of the
// federation, their modes (read-only: serves, takes no new replica; draining: as read-only,
// and everything it holds is made again elsewhere) and their removal.
#include <chrono>
#include <iostream>
#include <thread>

#include <fmt/format.h>

#include "catalog/client.h"
#include "tools/internal/catalog_flags.h"
#include "tools/internal/cli.h"

namespace {

// What a node's replica records say it holds (a drain is done when nothing is needed).
struct NodeHoldings {
  std::uint64_t complete = 0, unverified = 0, pending = 0, deleting = 0, other = 0;
  std::uint64_t Needed() const { return complete + unverified + pending; }
};

absl::StatusOr<NodeHoldings> HoldingsOf(gfrep::catalog::CatalogClient& client, const std::string& node) {
  using gfrep::catalog::ReplicaState;
  if (absl::StatusOr<gfrep::catalog::Node> n = client.GetNode(node); !n.ok()) return n.status();
  NodeHoldings h;
  gfrep::catalog::InodeId after = 0;
  constexpr std::size_t kPage = 1000;
  for (;;) {
    absl::StatusOr<std::vector<gfrep::catalog::Replica>> page = client.ListNodeReplicas(node, after, kPage);
    if (!page.ok()) return page.status();
    for (const gfrep::catalog::Replica& r : *page) {
      after = r.inode;
      switch (r.state) {
        case ReplicaState::kComplete: h.complete += 1; break;
        case ReplicaState::kUnverified: h.unverified += 1; break;
        case ReplicaState::kPending: h.pending += 1; break;
        case ReplicaState::kDeleting: h.deleting += 1; break;
        default: h.other += 1; break;
      }
    }
    if (page->size() < kPage) break;
  }
  return h;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace gfrep;
  constexpr const char* kProgram = "gfnode";
  CLI::App app{"gfnode: register, list and remove storage nodes"};
  tools::CommonFlags common;
  tools::CatalogFlags cat;
  tools::AddCommonFlags(app, common);
  tools::AddCatalogFlags(app, cat);
  app.require_subcommand(1);
  std::vector<std::string> names;
  std::string site, address, spool, capacity = "0";
  bool json = false;
  CLI::App* add = app.add_subcommand("add", "Register or update a node");
  add->add_option("NAME", names, "Node name")->required()->expected(1);
  add->add_option("--site", site, "Site the node belongs to")->required();
  add->add_option("--address", address, "HOST:PORT of its gfsited")->required();
  add->add_option("--spool", spool, "Spool directory on the node");
  add->add_option("--capacity", capacity, "Capacity, e.g. 2T");
  CLI::App* list = app.add_subcommand("list", "List nodes");
  list->add_option("--site", site, "Only this site");
  list->add_flag("--json", json, "JSON array");
  std::string mode_name;
  CLI::App* mode = app.add_subcommand(
      "mode", "Set a node's mode: normal, read-only (serves reads, takes no new replica) or "
              "draining (as read-only, and every replica it holds is made again elsewhere)");
  mode->add_option("NAME", names, "Node name")->required()->expected(1);
  mode->add_option("MODE", mode_name, "normal, read-only or draining")->required();
  bool status_only = false;
  double wait_s = 0;
  CLI::App* drain = app.add_subcommand(
      "drain", "Drain a node: no new replicas, every replica it holds made again elsewhere "
               "(respecting the rules' sites) and then dropped from it; or say how far it is");
  drain->add_option("NAME", names, "Node name")->required()->expected(1);
  drain->add_flag("--status", status_only, "Only say what the node still holds");
  drain->add_option("--wait", wait_s, "Wait up to SECONDS until the node is drained (exit 1 if not)")
      ->check(CLI::NonNegativeNumber);
  bool force = false;
  CLI::App* rm = app.add_subcommand("rm", "Remove nodes (refused while they hold replicas)");
  rm->add_option("NAME", names, "Node names")->required();
  rm->add_flag("--force", force, "Remove even a node that still holds replicas");
  CLI11_PARSE(app, argc, argv);
  tools::MakeLogger(kProgram, common);
  auto client = tools::ConnectCatalog(cat);
  if (!client.ok()) return tools::Fail(kProgram, tools::ErrorText(client.status()));
  int rc = 0;
  if (add->parsed()) {
    absl::StatusOr<std::uint64_t> cap = tools::ParseSize(capacity);
    if (!cap.ok()) return tools::Fail(kProgram, std::string(cap.status().message()));
    catalog::Node n;
    n.name = names.front();
    n.site = site;
    n.address = address;
    n.spool = spool;
    n.capacity_bytes = *cap;
    n.free_bytes = *cap;
    if (absl::Status s = (*client)->RegisterNode(n); !s.ok()) {
      rc = tools::Fail(kProgram, tools::ErrorText(s));
    }
  } else if (list->parsed()) {
    absl::StatusOr<std::vector<catalog::Node>> nodes = (*client)->ListNodes(site);
    if (!nodes.ok()) return tools::Fail(kProgram, tools::ErrorText(nodes.status()));
    if (json) {
      nlohmann::json j = nlohmann::json::array();
      for (const catalog::Node& n : *nodes) j.push_back(tools::ToJson(n));
      std::cout << j.dump() << "\n";
    } else {
      for (const catalog::Node& n : *nodes) {
        std::cout << fmt::format(
            "{:<16} {:<12} {:<22} {:<8} {:<9} free={} load={:.2f} active={} seen={}\n", n.name,
            n.site, n.address, n.liveness.empty() ? "-" : n.liveness, catalog::ToString(n.mode),
            n.free_bytes, n.load, n.active_transfers, tools::FormatTime(n.last_heartbeat_ns));
      }
    }
  } else if (mode->parsed()) {
    absl::StatusOr<catalog::NodeMode> m = catalog::ParseNodeMode(mode_name);
    if (!m.ok()) return tools::Fail(kProgram, std::string(m.status().message()));
    if (absl::Status s = (*client)->SetNodeMode(names.front(), *m); !s.ok()) {
      rc = tools::Fail(kProgram, tools::ErrorText(s));
    }
  } else if (drain->parsed()) {
    const std::string& name = names.front();
    if (!status_only) {
      if (absl::Status s = (*client)->SetNodeMode(name, catalog::NodeMode::kDraining); !s.ok()) {
        return tools::Fail(kProgram, tools::ErrorText(s));
      }
    }
    const auto deadline = std::chrono::steady_clock::now() +
                          std::chrono::milliseconds(static_cast<std::int64_t>(wait_s * 1000));
    for (;;) {
      absl::StatusOr<NodeHoldings> held = HoldingsOf(**client, name);
      if (!held.ok()) return tools::Fail(kProgram, tools::ErrorText(held.status()));
      const bool done = held->Needed() == 0;
      if (done || std::chrono::steady_clock::now() >= deadline) {
        absl::StatusOr<catalog::Node> n = (*client)->GetNode(name);
        const std::string m = n.ok() ? std::string(catalog::ToString(n->mode)) : "?";
        if (done) {
          std::cout << fmt::format("{}: drained ({}): holds no replica anything needs ({} being "
                                   "deleted); gfnode rm {} removes it\n",
                                   name, m, held->deleting, name);
        } else {
          std::cout << fmt::format("{}: {}: still holds {} complete, {} unverified, {} pending "
                                   "replica{} ({} being deleted)\n",
                                   name, m, held->complete, held->unverified, held->pending,
                                   held->Needed() == 1 ? "" : "s", held->deleting);
        }
        if (!done && wait_s > 0) rc = 1;
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(500));
    }
  } else if (rm->parsed()) {
    for (const std::string& name : names) {
      if (!force) {
        absl::StatusOr<NodeHoldings> held = HoldingsOf(**client, name);
        if (!held.ok()) {
          rc = tools::Fail(kProgram, tools::ErrorText(held.status()));
          continue;
        }
        if (held->Needed() > 0) {
          rc = tools::Fail(kProgram,
                           fmt::format("{} still holds {} replica{} (complete, unverified or "
                                       "pending): gfnode drain {} --wait first, or --force "
                                       "(FAILED_PRECONDITION)",
                                       name, held->Needed(), held->Needed() == 1 ? "" : "s", name));
          continue;
        }
      }
      if (absl::Status s = (*client)->RemoveNode(name); !s.ok()) {
        rc = tools::Fail(kProgram, tools::ErrorText(s));
      }
    }
  }
  return rc;
}
