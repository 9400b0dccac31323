// gfca: a development certificate authority for a gfrep federation.
//   gfca init [--dir DIR] [--name NAME] [--days 3650]
//   gfca issue ROLE NAME [--dir DIR] [--out DIR] [--days 365] [--host H]... [--group G]...
// ROLE is node (a gfsited), catalog (gfcatalogd), admin or user. Files: DIR/ca.pem, DIR/ca.key,
// DIR/token.key (signs user tokens: gfauth), OUT/NAME.pem, OUT/NAME.key (keys 0600). DIR defaults to $GFREP_CA_DIR or ./gfrep-ca.
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "catalog/token.h"
#include "tools/internal/ca.h"
#include "tools/internal/cli.h"

namespace fs = std::filesystem;

namespace {

absl::StatusOr<std::string> Slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  if (!in) return absl::NotFoundError("cannot read " + p.string() + " (run gfca init first?)");
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

}  // namespace

int main(int argc, char** argv) {
  using namespace gfrep;
  constexpr const char* kProgram = "gfca";
  CLI::App app{"gfca: a development certificate authority for a gfrep federation"};
  app.require_subcommand(1);
  tools::CommonFlags common;
  tools::AddCommonFlags(app, common);
  const char* env_dir = std::getenv("GFREP_CA_DIR");
  std::string dir = env_dir != nullptr ? env_dir : "gfrep-ca";
  std::string ca_name = "gfrep-dev-ca";
  int ca_days = 3650;
  bool force = false;
  CLI::App* init = app.add_subcommand("init", "Make a new CA (ca.pem, ca.key) in --dir");
  init->add_option("--dir", dir, "CA directory (default $GFREP_CA_DIR or ./gfrep-ca)");
  init->add_option("--name", ca_name, "The CA's common name")->capture_default_str();
  init->add_option("--days", ca_days, "Days valid")->capture_default_str();
  init->add_flag("--force", force, "Replace an existing CA (every certificate it issued stops working)");

  tools::IssueOptions issue_options;
  std::string out;
  CLI::App* issue = app.add_subcommand("issue", "Issue a certificate and key signed by the CA");
  issue->add_option("ROLE", issue_options.role, "node, catalog, admin or user")->required();
  issue->add_option("NAME", issue_options.name, "The node's, user's or catalog's name")->required();
  issue->add_option("--dir", dir, "CA directory (default $GFREP_CA_DIR or ./gfrep-ca)");
  issue->add_option("--out", out, "Where NAME.pem and NAME.key go (default: the CA directory)");
  issue->add_option("--days", issue_options.days,
                    "Days valid (a negative number issues one that has already expired, for tests)")
      ->capture_default_str();
  issue->add_option("--group", issue_options.groups,
                    "A group the holder belongs to, for the group bits of the namespace's modes (repeatable)");
  issue->add_option("--host", issue_options.hosts,
                    "A DNS name or IP address the holder serves on (repeatable; node and catalog)");
  CLI11_PARSE(app, argc, argv);
  tools::MakeLogger(kProgram, common);

  std::error_code ec;
  if (init->parsed()) {
    fs::create_directories(dir, ec);
    if (ec) return tools::Fail(kProgram, "create " + dir + ": " + ec.message());
    fs::permissions(dir, fs::perms::owner_all, ec);
    if (fs::exists(fs::path(dir) / "ca.key") && !force) {
      return tools::Fail(kProgram, dir + "/ca.key exists; --force replaces it (and voids what it issued)");
    }
    absl::StatusOr<tools::Pem> ca = tools::MakeCa(ca_name, ca_days);
    if (!ca.ok()) return tools::Fail(kProgram, std::string(ca.status().message()));
    for (auto [name, text, mode] : {std::tuple{"ca.key", ca->key, 0600u}, std::tuple{"ca.pem", ca->cert, 0644u},
                                    std::tuple{"token.key", catalog::NewTokenKey() + "\n", 0600u}}) {
      if (absl::Status s = tools::WriteFileMode(fs::path(dir) / name, text, mode); !s.ok()) {
        return tools::Fail(kProgram, std::string(s.message()));
      }
    }
    std::printf("CA '%s' in %s: ca.pem (give it to every daemon and user), ca.key (keep it here), "
                "token.key (gfcatalogd --token-key; gfauth token create)\n",
                ca_name.c_str(), dir.c_str());
    return 0;
  }
  absl::StatusOr<std::string> cert = Slurp(fs::path(dir) / "ca.pem");
  absl::StatusOr<std::string> key = Slurp(fs::path(dir) / "ca.key");
  if (!cert.ok()) return tools::Fail(kProgram, std::string(cert.status().message()));
  if (!key.ok()) return tools::Fail(kProgram, std::string(key.status().message()));
  absl::StatusOr<tools::Pem> issued = tools::Issue({*cert, *key}, issue_options);
  if (!issued.ok()) return tools::Fail(kProgram, std::string(issued.status().message()));
  const fs::path to = out.empty() ? fs::path(dir) : fs::path(out);
  fs::create_directories(to, ec);
  if (ec) return tools::Fail(kProgram, "create " + to.string() + ": " + ec.message());
  const fs::path pem = to / (issue_options.name + ".pem");
  const fs::path pkey = to / (issue_options.name + ".key");
  if (absl::Status s = tools::WriteFileMode(pkey, issued->key, 0600); !s.ok()) return tools::Fail(kProgram, std::string(s.message()));
  if (absl::Status s = tools::WriteFileMode(pem, issued->cert, 0644); !s.ok()) return tools::Fail(kProgram, std::string(s.message()));
  std::printf("%s %s: %s, %s\n", issue_options.role.c_str(), issue_options.name.c_str(), pem.c_str(), pkey.c_str());
  return 0;
}
