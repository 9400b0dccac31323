// gfauth: user tokens for the gfrep catalog (catalog/token.h).
//   gfauth token create USER [--ttl 12h] [--scope read,write,replicate] [--group G]... [--key FILE]
//       prints a signed token; the user gives it to the tools with --token-file or $GFREP_TOKEN
//   gfauth token show TOKEN [--key FILE]      its claims (and whether the key verifies it)
//   gfauth token revoke TOKEN [catalog flags] the catalog refuses it from now on (admin)
// The key is the catalog's token.key (gfca init writes it next to the CA; default
// $GFREP_CA_DIR/token.key or ./gfrep-ca/token.key).
#include <chrono>
#include <cstdio>
#include <cstdlib>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "absl/strings/escaping.h"
#include "catalog/token.h"
#include "tools/internal/catalog_flags.h"
#include "tools/internal/cli.h"

namespace {

std::int64_t NowUnix() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// "90s", "30m", "12h", "7d" -> seconds; 0 for anything else.
std::int64_t ParseTtl(const std::string& s) {
  if (s.size() < 2 || s.find_first_not_of("0123456789") != s.size() - 1 || s.size() > 8) return 0;
  const std::int64_t n = std::stoll(s.substr(0, s.size() - 1));
  switch (s.back()) {
    case 's': return n;
    case 'm': return n * 60;
    case 'h': return n * 3600;
    case 'd': return n * 86400;
    default: return 0;
  }
}

std::string DefaultKey() {
  const char* dir = std::getenv("GFREP_CA_DIR");
  return fmt::format("{}/token.key", dir != nullptr ? dir : "gfrep-ca");
}

}  // namespace

int main(int argc, char** argv) {
  using namespace gfrep;
  constexpr const char* kProgram = "gfauth";
  CLI::App app{"gfauth: user tokens for the gfrep catalog"};
  app.require_subcommand(1);
  tools::CommonFlags common;
  tools::AddCommonFlags(app, common);
  CLI::App* token = app.add_subcommand("token", "Create, show or revoke user tokens");
  token->require_subcommand(1);

  std::string key_file;
  catalog::TokenClaims claims;
  std::string ttl = "12h", scopes = "read,write,replicate";
  CLI::App* create = token->add_subcommand("create", "Print a new signed token for USER");
  create->add_option("USER", claims.user, "The user it names")->required();
  create->add_option("--ttl", ttl, "How long it works: 90s, 30m, 12h, 7d (at most 90d)")->capture_default_str();
  create->add_option("--scope", scopes, "What it may do: read, write, replicate (comma-separated)")
      ->capture_default_str();
  create->add_option("--group", claims.groups, "A group of the user (repeatable)");
  create->add_option("--key", key_file, "The catalog's token key (default $GFREP_CA_DIR/token.key)");

  std::string text;
  CLI::App* show = token->add_subcommand("show", "Print a token's claims");
  show->add_option("TOKEN", text, "The token")->required();
  show->add_option("--key", key_file, "Also verify it with this key");

  tools::CatalogFlags cat;
  CLI::App* revoke = token->add_subcommand("revoke", "Make the catalog refuse a token (admin)");
  revoke->add_option("TOKEN", text, "The token (or a file holding it)")->required();
  tools::AddCatalogFlags(*revoke, cat);
  CLI11_PARSE(app, argc, argv);
  tools::MakeLogger(kProgram, common);

  if (create->parsed()) {
    const std::int64_t seconds = ParseTtl(ttl);
    if (seconds <= 0 || seconds > 90 * 86400) {
      return tools::Fail(kProgram, fmt::format("--ttl {}: want N followed by s, m, h or d, at most 90d", ttl), 2);
    }
    absl::StatusOr<std::vector<std::string>> s = catalog::ParseScopes(scopes);
    if (!s.ok()) return tools::Fail(kProgram, std::string(s.status().message()), 2);
    claims.scopes = *s;
    absl::StatusOr<std::string> key = catalog::ReadTokenKey(key_file.empty() ? DefaultKey() : key_file);
    if (!key.ok()) return tools::Fail(kProgram, std::string(key.status().message()), 2);
    claims.issued_unix = NowUnix();
    claims.expires_unix = claims.issued_unix + seconds;
    absl::StatusOr<std::string> t = catalog::MintToken(claims, *key);
    if (!t.ok()) return tools::Fail(kProgram, std::string(t.status().message()), 2);
    std::printf("%s\n", t->c_str());
    return 0;
  }

  // show / revoke: the token may be given in a file.
  if (FILE* f = std::fopen(text.c_str(), "r"); f != nullptr) {
    char buf[4100] = {};
    const std::size_t n = std::fread(buf, 1, sizeof buf - 1, f);
    std::fclose(f);
    text.assign(buf, n);
    while (!text.empty() && (text.back() == '\n' || text.back() == '\r')) text.pop_back();
  }
  // The claims without the signature checked (only the catalog's key can check it).
  const std::size_t dot1 = text.find('.'), dot2 = text.rfind('.');
  std::string payload;
  if (dot1 == std::string::npos || dot2 == dot1 ||
      !absl::WebSafeBase64Unescape(text.substr(dot1 + 1, dot2 - dot1 - 1), &payload)) {
    return tools::Fail(kProgram, "not a gfrep token (want gfrep1.PAYLOAD.MAC)", 2);
  }
  const nlohmann::json j = nlohmann::json::parse(payload, nullptr, false);
  if (!j.is_object() || !j.contains("id") || !j.contains("exp") || !j["id"].is_string() ||
      !j["exp"].is_number_integer()) {
    return tools::Fail(kProgram, "the token's payload is not a gfrep token's", 2);
  }
  if (show->parsed()) {
    nlohmann::json out = j;
    if (!key_file.empty()) {
      absl::StatusOr<std::string> key = catalog::ReadTokenKey(key_file);
      if (!key.ok()) return tools::Fail(kProgram, std::string(key.status().message()), 2);
      absl::Status v = catalog::VerifyToken(text, *key, NowUnix()).status();
      out["verified"] = v.ok() ? "yes" : std::string(v.message());
    }
    std::printf("%s\n", out.dump(2).c_str());
    return 0;
  }
  auto client = tools::ConnectCatalog(cat);
  if (!client.ok()) return tools::Fail(kProgram, tools::ErrorText(client.status()));
  if (absl::Status s = (*client)->RevokeToken(j["id"].get<std::string>(), j["exp"].get<std::int64_t>()); !s.ok()) {
    return tools::Fail(kProgram, tools::ErrorText(s));
  }
  std::printf("revoked token %s\n", j["id"].get<std::string>().c_str());
  return 0;
}
