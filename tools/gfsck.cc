// gfsck: checks this node's replicas against the catalog (Gfarm's name; replica/agent/fsck.h).
//
//   gfsck [--node N] [--spool DIR] [-c] [--rate 100M] [--repair] [-r] [--json] [PATH...]
//
// Without PATH: every replica record of the node (missing: lost; other size or mtime stamp:
// corrupt; with -c also the checksum) and the files in its spool no record vouches for
// ("dark"). With PATHs: the node's replicas of those files (-r: directories too).
// Report-only unless --repair: then what it found is reported to the catalog (gfcatalogd's
// repairer makes the copies again) and dark files past the grace period are removed.
// Exit status: 0 nothing wrong, 1 something found (or an error).
#include <cstdlib>
#include <iostream>

#include <fmt/format.h>

#include "catalog/client.h"
#include "replica/agent/fsck.h"
#include "tools/internal/catalog_flags.h"
#include "tools/internal/cli.h"

namespace {

std::string EnvOr(const std::string& value, const char* name) {
  if (!value.empty()) return value;
  const char* env = std::getenv(name);
  return env == nullptr ? "" : env;
}

std::string_view VerdictName(gfrep::replica::ReplicaVerdict v) {
  switch (v) {
    case gfrep::replica::ReplicaVerdict::kGood: return "good";
    case gfrep::replica::ReplicaVerdict::kLost: return "lost";
    case gfrep::replica::ReplicaVerdict::kCorrupt: return "corrupt";
    case gfrep::replica::ReplicaVerdict::kSkipped: return "skipped";
  }
  return "?";
}

}  // namespace

int main(int argc, char** argv) {
  using namespace gfrep;
  constexpr const char* kProgram = "gfsck";
  CLI::App app{"gfsck: check this node's replicas (and spool) against the catalog"};
  tools::CommonFlags common;
  tools::CatalogFlags cat;
  std::string node, spool, rate = "0";
  std::vector<std::string> paths;
  bool checksum = false, repair = false, recursive = false, json = false;
  double grace_h = 1;
  tools::AddCommonFlags(app, common);
  tools::AddCatalogFlags(app, cat);
  app.add_option("--node", node, "The node whose spool this is (default: $GFREP_NODE)");
  app.add_option("--spool", spool, "Its spool directory (default: the one it registered)");
  app.add_flag("-c,--checksum", checksum, "Read every replica and compare its checksum");
  app.add_option("--rate", rate, "Bytes per second for -c reads (e.g. 100M; 0: unlimited)")
      ->capture_default_str();
  app.add_flag("--repair", repair,
               "Report what is found to the catalog (the copies are then made again) and "
               "remove dark files older than --grace");
  app.add_option("--grace", grace_h, "Hours a file without a replica record is kept")
      ->check(CLI::Range(0.0, 24.0 * 365))
      ->capture_default_str();
  app.add_flag("-r,--recursive", recursive, "Check every file below directories in PATH");
  app.add_flag("--json", json, "One JSON object: findings and counts");
  app.add_option("PATH", paths, "Files to check (default: every replica of the node)");
  CLI11_PARSE(app, argc, argv);
  auto log = tools::MakeLogger(kProgram, common);

  absl::StatusOr<std::uint64_t> rate_bytes = tools::ParseSize(rate);
  if (!rate_bytes.ok()) return tools::Fail(kProgram, "--rate: " + tools::ErrorText(rate_bytes.status()));
  node = EnvOr(node, "GFREP_NODE");
  if (node.empty()) return tools::Fail(kProgram, "which node? give --node or set $GFREP_NODE");
  auto client = tools::ConnectCatalog(cat);
  if (!client.ok()) return tools::Fail(kProgram, tools::ErrorText(client.status()));

  replica::agent::FsckOptions o;
  o.catalog = client->get();
  o.node = node;
  o.spool = spool;
  o.paths = paths;
  o.recursive = recursive;
  o.checksum = checksum;
  o.rate_bytes = *rate_bytes;
  o.repair = repair;
  o.orphan_grace = std::chrono::milliseconds(static_cast<std::int64_t>(grace_h * 3600 * 1000));
  o.logger = log;
  absl::StatusOr<replica::agent::FsckReport> report = replica::agent::RunFsck(o);
  if (!report.ok()) return tools::Fail(kProgram, tools::ErrorText(report.status()));
  const replica::agent::CheckSummary& s = report->replicas;

  auto path_of = [&](catalog::InodeId inode) {
    absl::StatusOr<std::string> p = (*client)->PathOf(inode);
    return p.ok() ? *p : fmt::format("(inode {})", inode);
  };
  const bool found = s.lost + s.corrupt > 0 || !report->dark.empty();
  if (json) {
    nlohmann::json j = {{"node", node},
                        {"checked", s.checked},
                        {"good", s.good},
                        {"lost", s.lost},
                        {"corrupt", s.corrupt},
                        {"skipped", s.skipped},
                        {"reported", s.reported},
                        {"bytes_read", s.bytes_read},
                        {"dark_removed", report->dark_removed},
                        {"bad", nlohmann::json::array()},
                        {"dark", nlohmann::json::array()}};
    for (const replica::ReplicaFinding& f : s.bad) {
      j["bad"].push_back({{"path", path_of(f.replica.inode)},
                          {"inode", f.replica.inode},
                          {"generation", f.replica.generation},
                          {"state", std::string(VerdictName(f.verdict))},
                          {"note", f.note}});
    }
    for (const replica::agent::DarkFile& d : report->dark) {
      j["dark"].push_back({{"file", d.file.string()}, {"why", d.why}, {"due", d.due}});
    }
    std::cout << j.dump() << "\n";
    return found ? 1 : 0;
  }
  for (const replica::ReplicaFinding& f : s.bad) {
    std::cout << fmt::format("{:<8} {} (generation {}): {}\n", VerdictName(f.verdict),
                             path_of(f.replica.inode), f.replica.generation, f.note);
  }
  for (const replica::agent::DarkFile& d : report->dark) {
    std::cout << fmt::format("dark     {}: {}{}\n", d.file.string(), d.why,
                             d.due ? "" : " (within the grace period)");
  }
  std::cout << fmt::format(
      "{}: {} replicas checked{}: {} good, {} lost, {} corrupt, {} skipped; {} dark file(s){}\n",
      node, s.checked, checksum ? fmt::format(" ({} bytes read)", s.bytes_read) : "", s.good,
      s.lost, s.corrupt, s.skipped, report->dark.size(),
      repair ? fmt::format("; {} reported to the catalog, {} dark removed", s.reported,
                           report->dark_removed)
             : (found ? "; nothing changed (report only: --repair acts)" : ""));
  return found ? 1 : 0;
}
