#pragma once

// User tokens: signed, expiring bearer credentials for the catalog (gfauth token create).
//
// A token is "gfrep1.PAYLOAD.MAC": PAYLOAD is base64url of a JSON object
//   {"id": 16 random bytes in hex, "sub": user, "groups": [...], "scopes": [...],
//    "iat": unix seconds issued, "exp": unix seconds it stops working}
// and MAC is base64url of HMAC-SHA256(key, "gfrep-token|" + PAYLOAD). The key (32 random
// bytes, hex in a 0600 file that gfca init writes as token.key) is shared by whoever mints
// tokens and gfcatalogd, which verifies them. A client sends its token as gRPC metadata
// "authorization: Bearer TOKEN", only over TLS. Revocation is by id, in the catalog
// (Catalog::RevokeToken), and lasts until the token's own expiry.
//
// Scopes limit what a token's holder may do, on top of its user's permissions:
//   read       reads (stat, list, where, requests, events)
//   write      namespace changes (mkdir, store, remove, rename, chmod)
//   replicate  replication requests (create, change, cancel)

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace gfrep::catalog {

inline constexpr std::string_view kTokenScopes[] = {"read", "write", "replicate"};

struct TokenClaims {
  std::string id;  // hex; MintToken makes one when empty
  std::string user;
  std::vector<std::string> groups;
  std::vector<std::string> scopes;
  std::int64_t issued_unix = 0;
  std::int64_t expires_unix = 0;
};

// 32 random bytes, hex: the contents of a new token.key.
std::string NewTokenKey();

// The key in a token.key file. kInvalidArgument if unreadable, not 64 hex digits, or
// readable by group or others (it mints tokens for any user).
absl::StatusOr<std::string> ReadTokenKey(const std::string& path);

// kInvalidArgument for a bad user or group name, an unknown or missing scope, or
// expires_unix <= issued_unix.
absl::StatusOr<std::string> MintToken(TokenClaims claims, std::string_view key);

// The claims of a token signed with `key` that is valid at `now_unix`, else
// kUnauthenticated saying why (malformed, bad signature, expired at T, not yet valid).
absl::StatusOr<TokenClaims> VerifyToken(std::string_view token, std::string_view key, std::int64_t now_unix);

// "read,write" -> {"read", "write"}; kInvalidArgument naming an unknown scope.
absl::StatusOr<std::vector<std::string>> ParseScopes(std::string_view list);

}  // namespace gfrep::catalog
