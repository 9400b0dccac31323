// gftopo: builds a test-bed topology of network namespaces joined by gfwanem links.
//   gftopo up TOPO | down TOPO | status TOPO | addr TOPO NODE | nodes TOPO | stats TOPO | check TOPO
// TOPO is a file path, or a name looked up as tools/topologies/NAME.topo in the source tree.

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>

#include "netprobe/testbed.h"
#include "netprobe/topology.h"
#include "tools/internal/cli.h"

namespace {

namespace fs = std::filesystem;
using gfrep::tools::Fail;
constexpr std::string_view kProgram = "gftopo";

absl::StatusOr<gfrep::netprobe::Topology> LoadTopology(const std::string& arg) {
  fs::path path = arg;
  if (arg.find('/') == std::string::npos && !fs::exists(path)) {
    path = fs::path(GFREP_TOPOLOGY_DIR) / (arg + ".topo");
  }
  std::ifstream in(path);
  if (!in) return absl::NotFoundError("cannot read topology " + path.string());
  std::ostringstream text;
  text << in.rdbuf();
  absl::StatusOr<gfrep::netprobe::Topology> topology =
      gfrep::netprobe::ParseTopology(text.str());
  if (!topology.ok()) {
    return absl::InvalidArgumentError(path.string() + ": " +
                                      std::string(topology.status().message()));
  }
  return topology;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Builds sites (network namespaces) and routes (gfwanem links) from a topology file."};
  app.require_subcommand(1);
  app.fallthrough();
  gfrep::tools::CommonFlags common;
  gfrep::tools::AddCommonFlags(app, common);
  gfrep::netprobe::TestbedOptions options;
  std::string state_dir = options.state_dir.string();
  app.add_option("--state-dir", state_dir, "pid files, logs, saved sysctls")->capture_default_str();
  std::string topo;
  std::string node;
  auto add = [&](const char* name, const char* help) {
    CLI::App* sub = app.add_subcommand(name, help);
    sub->add_option("topology", topo, "file, or name in tools/topologies/")->required();
    return sub;
  };
  CLI::App* up = add("up", "build the topology (idempotent)");
  CLI::App* down = add("down", "tear it down, restore host sysctls (idempotent)");
  CLI::App* status = add("status", "show what exists; exit 0 if up, 3 if down, 4 if partial");
  CLI::App* stats = add("stats", "emulator counters of every route as JSON");
  CLI::App* nodes = add("nodes", "list nodes: NAME NETNS ADDRESS");
  CLI::App* check = add("check", "parse the topology file only");
  CLI::App* addr = add("addr", "print a node's address");
  addr->add_option("node", node, "e.g. jp-n1")->required();
  CLI11_PARSE(app, argc, argv);
  options.logger = gfrep::tools::MakeLogger(std::string(kProgram), common);
  options.state_dir = state_dir;
  options.emulator = fs::read_symlink("/proc/self/exe").parent_path() / "gfwanem";

  absl::StatusOr<gfrep::netprobe::Topology> topology = LoadTopology(topo);
  if (!topology.ok()) return Fail(kProgram, std::string(topology.status().message()));

  if (up->parsed()) {
    if (absl::Status s = gfrep::netprobe::TestbedUp(*topology, options); !s.ok()) {
      return Fail(kProgram, "up: " + std::string(s.message()));
    }
    std::cout << "topology " << topology->name << " is up\n";
  } else if (down->parsed()) {
    if (absl::Status s = gfrep::netprobe::TestbedDown(*topology, options); !s.ok()) {
      return Fail(kProgram, "down: " + std::string(s.message()));
    }
    std::cout << "topology " << topology->name << " is down\n";
  } else if (status->parsed()) {
    gfrep::netprobe::TestbedStatus st = gfrep::netprobe::GetTestbedStatus(*topology, options);
    std::cout << st.text << '\n';
    return st.up ? 0 : (st.partial ? 4 : 3);
  } else if (stats->parsed()) {
    absl::StatusOr<std::string> json = gfrep::netprobe::TestbedStats(*topology, options);
    if (!json.ok()) return Fail(kProgram, "stats: " + std::string(json.status().message()));
    std::cout << *json << '\n';
  } else if (nodes->parsed()) {
    for (const gfrep::netprobe::NodeInfo& n : gfrep::netprobe::Nodes(*topology)) {
      std::cout << n.name << ' ' << n.netns << ' ' << n.address << '\n';
    }
  } else if (check->parsed()) {
    std::cout << "topology " << topology->name << ": " << topology->sites.size() << " sites, "
              << topology->routes.size() << " routes\n";
  } else if (addr->parsed()) {
    absl::StatusOr<gfrep::netprobe::NodeInfo> n = gfrep::netprobe::FindNode(*topology, node);
    if (!n.ok()) return Fail(kProgram, std::string(n.status().message()));
    std::cout << n->address << '\n';
  }
  return 0;
}
