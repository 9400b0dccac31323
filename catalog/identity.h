#pragma once

// Who calls the catalog, and what each kind of caller may do (gfcatalogd with mutual TLS).
//
// A caller's identity comes from its client certificate: the URI subject alternative name
// gfrep://ROLE/NAME (gfca puts it there; an organisation's CA must too). Roles:
//   node     a site agent (gfsited) named NAME: reads; registers itself, heartbeats, claims
//            and completes its own tasks, records and removes its own replicas, publishes
//            its telemetry; nothing else (not the namespace: a stolen node key cannot delete
//            files, only lie about its own replicas)
//   user     reads; writes the namespace (mkdir, store, remove, rename); makes, changes and
//            cancels replication requests
//   admin    everything, including topology (sites, nodes, routes), policies and tasks
//   catalog  the catalog's own certificate: as admin
// Without mutual TLS (plaintext on loopback, development only) there are no identities and
// every call is allowed; gfcatalogd says so loudly at start.

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace gfrep::catalog {

enum class Role { kNode, kUser, kAdmin, kCatalog };

struct Identity {
  Role role = Role::kUser;
  std::string name;
  // The groups it belongs to: gfrep://group/G URI SANs of its certificate, or a token's
  // "groups". Used for the group bits of a namespace entry's mode (catalog/permissions.h).
  std::vector<std::string> groups;
  // A token's scopes (catalog/token.h) and id; a certificate's holder has every scope.
  std::optional<std::vector<std::string>> scopes;
  std::string token_id;
  std::string ToString() const;  // "node kek1", "user alice", "user alice (token 1f2e...)"
};

// gfrep://ROLE/NAME -> identity; nullopt for anything else.
std::optional<Identity> IdentityFromUri(std::string_view uri);

// What a call needs.
enum class Access {
  kRead,       // any identity
  kNamespace,  // user, admin
  kReplicate,  // user, admin: replication requests
  kOwnNode,    // node acting for itself (the nodes named in the call), admin
  kAdmin,      // admin
};

// OK or kPermissionDenied naming the action and the identity. `nodes`: for kOwnNode, the
// nodes the call acts for (each must be the caller's name).
absl::Status Authorize(const std::optional<Identity>& who, std::string_view action, Access access,
                       const std::vector<std::string_view>& nodes = {});

// The identity among a certificate's URI subject alternative names (the first gfrep:// one
// that parses, with the groups of every gfrep://group/G); nullopt without one.
std::optional<Identity> IdentityFromUris(const std::vector<std::string>& uris);

// "node,admin,user" -> roles. kInvalidArgument naming an unknown role or an empty list.
absl::StatusOr<std::vector<Role>> ParseRoles(std::string_view list);

// Whether a site agent serves a transfer session to the holder of a certificate with these
// URI SANs (gfsited --tls-peers): OK if it names a gfrep identity whose role is in `allowed`,
// else kPermissionDenied naming the identity.
absl::Status AuthorizeTransferPeer(const std::vector<std::string>& uris, const std::vector<Role>& allowed);

// The node a lease owner string belongs to ("kek1/1234-abcd#7" -> "kek1").
std::string_view NodeOfOwner(std::string_view owner);

}  // namespace gfrep::catalog
