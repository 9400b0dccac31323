#include "catalog/token.h"

#include <openssl/crypto.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>
#include <sys/stat.h>

#include <algorithm>
#include <cctype>
#include <fstream>
#include <sstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "absl/strings/escaping.h"

namespace gfrep::catalog {
namespace {

constexpr std::string_view kPrefix = "gfrep1.";
constexpr std::size_t kMaxTokenBytes = 4096;

bool ValidTokenName(std::string_view s) {
  if (s.empty() || s.size() > 64) return false;
  return std::all_of(s.begin(), s.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' || c == '-' ||
           c == '_';
  });
}

std::string Mac(std::string_view key, std::string_view payload) {
  const std::string msg = fmt::format("gfrep-token|{}", payload);
  unsigned char out[32];
  unsigned int len = sizeof out;
  HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()), reinterpret_cast<const unsigned char*>(msg.data()),
       msg.size(), out, &len);
  return std::string(reinterpret_cast<const char*>(out), len);
}

std::string Hex(const unsigned char* p, std::size_t n) {
  std::string out;
  for (std::size_t i = 0; i < n; ++i) out += fmt::format("{:02x}", p[i]);
  return out;
}

absl::Status Bad(std::string_view why) {
  return absl::UnauthenticatedError(fmt::format("token refused: {}", why));
}

}  // namespace

std::string NewTokenKey() {
  unsigned char raw[32];
  RAND_bytes(raw, sizeof raw);
  return Hex(raw, sizeof raw);
}

absl::StatusOr<std::string> ReadTokenKey(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    return absl::InvalidArgumentError(fmt::format("cannot read token key {}", path));
  }
  if ((st.st_mode & 077) != 0) {
    return absl::InvalidArgumentError(
        fmt::format("token key {} is readable by others (mode {:o}); chmod 600 it", path, st.st_mode & 0777));
  }
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  std::string hex = ss.str();
  while (!hex.empty() && (hex.back() == '\n' || hex.back() == ' ')) hex.pop_back();
  const bool is_hex = std::all_of(hex.begin(), hex.end(), [](char c) { return std::isxdigit(static_cast<unsigned char>(c)) != 0; });
  if (!in || hex.size() != 64 || !is_hex) {
    return absl::InvalidArgumentError(fmt::format("token key {}: want 64 hex digits (gfca init writes one)", path));
  }
  return absl::HexStringToBytes(hex);
}

absl::StatusOr<std::vector<std::string>> ParseScopes(std::string_view list) {
  std::vector<std::string> out;
  for (bool more = !list.empty(); more;) {
    const std::size_t comma = list.find(',');
    const std::string_view word = list.substr(0, comma);
    more = comma != std::string_view::npos;
    if (more) list.remove_prefix(comma + 1);
    if (std::find(std::begin(kTokenScopes), std::end(kTokenScopes), word) == std::end(kTokenScopes)) {
      return absl::InvalidArgumentError(fmt::format("unknown scope '{}' (scopes: read, write, replicate)", word));
    }
    if (std::find(out.begin(), out.end(), word) == out.end()) out.emplace_back(word);
  }
  if (out.empty()) return absl::InvalidArgumentError("no scopes given (scopes: read, write, replicate)");
  return out;
}

absl::StatusOr<std::string> MintToken(TokenClaims c, std::string_view key) {
  if (!ValidTokenName(c.user)) return absl::InvalidArgumentError(fmt::format("user '{}': 1-64 letters, digits, . - _", c.user));
  for (const std::string& g : c.groups) {
    if (!ValidTokenName(g)) return absl::InvalidArgumentError(fmt::format("group '{}': 1-64 letters, digits, . - _", g));
  }
  std::string scopes;
  for (const std::string& s : c.scopes) scopes += (scopes.empty() ? "" : ",") + s;
  if (absl::StatusOr<std::vector<std::string>> ok = ParseScopes(scopes); !ok.ok()) return ok.status();
  if (c.expires_unix <= c.issued_unix) return absl::InvalidArgumentError("a token must expire after it is issued");
  if (key.size() < 16) return absl::InvalidArgumentError("token key too short");
  if (c.id.empty()) {
    unsigned char raw[16];
    RAND_bytes(raw, sizeof raw);
    c.id = Hex(raw, sizeof raw);
  }
  const nlohmann::json j = {{"id", c.id},         {"sub", c.user},         {"groups", c.groups},
                            {"scopes", c.scopes}, {"iat", c.issued_unix}, {"exp", c.expires_unix}};
  const std::string payload = absl::WebSafeBase64Escape(j.dump());
  return fmt::format("{}{}.{}", kPrefix, payload, absl::WebSafeBase64Escape(Mac(key, payload)));
}

absl::StatusOr<TokenClaims> VerifyToken(std::string_view token, std::string_view key, std::int64_t now_unix) {
  if (token.size() > kMaxTokenBytes) return Bad("longer than 4096 bytes");
  if (!token.starts_with(kPrefix)) return Bad("not a gfrep token (want gfrep1.PAYLOAD.MAC)");
  token.remove_prefix(kPrefix.size());
  const std::size_t dot = token.find('.');
  if (dot == std::string_view::npos) return Bad("malformed (want gfrep1.PAYLOAD.MAC)");
  const std::string_view payload = token.substr(0, dot);
  std::string mac;
  if (!absl::WebSafeBase64Unescape(std::string(token.substr(dot + 1)), &mac)) return Bad("malformed signature");
  const std::string want = Mac(key, payload);
  if (mac.size() != want.size() || CRYPTO_memcmp(mac.data(), want.data(), want.size()) != 0) {
    return Bad("bad signature (not issued with this catalog's token key, or altered)");
  }
  std::string text;
  if (!absl::WebSafeBase64Unescape(std::string(payload), &text)) return Bad("malformed payload");
  const nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  TokenClaims c;
  try {
    if (!j.is_object()) return Bad("payload is not an object");
    c.id = j.at("id").get<std::string>();
    c.user = j.at("sub").get<std::string>();
    c.groups = j.at("groups").get<std::vector<std::string>>();
    c.scopes = j.at("scopes").get<std::vector<std::string>>();
    c.issued_unix = j.at("iat").get<std::int64_t>();
    c.expires_unix = j.at("exp").get<std::int64_t>();
  } catch (const nlohmann::json::exception& e) {
    return Bad(fmt::format("payload: {}", e.what()));
  }
  if (!ValidTokenName(c.user)) return Bad("bad user name");
  if (now_unix >= c.expires_unix) return Bad(fmt::format("token {} of user {} expired {} s ago", c.id, c.user, now_unix - c.expires_unix));
  if (now_unix + 300 < c.issued_unix) return Bad(fmt::format("token {} is not valid yet (issued in the future)", c.id));
  return c;
}

}  // namespace gfrep::catalog
