#include "catalog/identity.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>

namespace gfrep::catalog {
namespace {

std::string_view RoleName(Role r) {
  switch (r) {
    case Role::kNode: return "node";
    case Role::kUser: return "user";
    case Role::kAdmin: return "admin";
    case Role::kCatalog: return "catalog";
  }
  return "?";
}

bool ValidIdentityName(std::string_view name) {
  return !name.empty() && name.size() <= 64 && name.find_first_of("/\\ \t\r\n") == std::string_view::npos;
}

}  // namespace

std::string Identity::ToString() const {
  if (!token_id.empty()) return fmt::format("{} {} (token {})", RoleName(role), name, token_id);
  return fmt::format("{} {}", RoleName(role), name);
}

std::optional<Identity> IdentityFromUri(std::string_view uri) {
  constexpr std::string_view kScheme = "gfrep://";
  if (!uri.starts_with(kScheme)) return std::nullopt;
  uri.remove_prefix(kScheme.size());
  const std::size_t slash = uri.find('/');
  if (slash == std::string_view::npos) return std::nullopt;
  const std::string_view role = uri.substr(0, slash);
  const std::string_view name = uri.substr(slash + 1);
  if (!ValidIdentityName(name)) return std::nullopt;
  Identity id;
  id.name = std::string(name);
  if (role == "node") {
    id.role = Role::kNode;
  } else if (role == "user") {
    id.role = Role::kUser;
  } else if (role == "admin") {
    id.role = Role::kAdmin;
  } else if (role == "catalog") {
    id.role = Role::kCatalog;
  } else {
    return std::nullopt;
  }
  return id;
}

std::optional<Identity> IdentityFromUris(const std::vector<std::string>& uris) {
  std::optional<Identity> out;
  std::vector<std::string> groups;
  for (const std::string& uri : uris) {
    constexpr std::string_view kGroup = "gfrep://group/";
    if (uri.starts_with(kGroup)) {
      const std::string_view g = std::string_view(uri).substr(kGroup.size());
      if (ValidIdentityName(g)) groups.emplace_back(g);
    } else if (!out) {
      out = IdentityFromUri(uri);
    }
  }
  if (out) out->groups = std::move(groups);
  return out;
}

absl::StatusOr<std::vector<Role>> ParseRoles(std::string_view list) {
  std::vector<Role> out;
  if (list.empty()) return absl::InvalidArgumentError("no roles given");
  for (bool more = true; more;) {
    const std::size_t comma = list.find(',');
    const std::string_view word = list.substr(0, comma);
    more = comma != std::string_view::npos;
    if (more) list.remove_prefix(comma + 1);
    std::optional<Identity> id = IdentityFromUri(fmt::format("gfrep://{}/x", word));
    if (!id) {
      return absl::InvalidArgumentError(
          fmt::format("unknown role '{}' (roles: node, user, admin, catalog)", word));
    }
    out.push_back(id->role);
  }
  return out;
}

absl::Status AuthorizeTransferPeer(const std::vector<std::string>& uris, const std::vector<Role>& allowed) {
  std::optional<Identity> id = IdentityFromUris(uris);
  if (!id) {
    return absl::PermissionDeniedError(
        "transfer session: the client certificate names no gfrep identity (a URI SAN "
        "gfrep://ROLE/NAME; gfca issue makes one)");
  }
  for (Role r : allowed) {
    if (r == id->role) return absl::OkStatus();
  }
  return absl::PermissionDeniedError(fmt::format(
      "transfer session: {} may not open one here (this agent serves {})", id->ToString(),
      fmt::join([&] {
        std::vector<std::string_view> names;
        for (Role r : allowed) names.push_back(RoleName(r));
        return names;
      }(), ", ")));
}

std::string_view NodeOfOwner(std::string_view owner) { return owner.substr(0, owner.find('/')); }

absl::Status Authorize(const std::optional<Identity>& who, std::string_view action, Access access,
                       const std::vector<std::string_view>& nodes) {
  if (!who) {
    return absl::PermissionDeniedError(fmt::format(
        "{}: the client certificate names no gfrep identity (a URI SAN gfrep://ROLE/NAME; gfca issue makes one) and no user token was sent",
        action));
  }
  if (who->scopes) {
    const std::string_view need = access == Access::kRead        ? "read"
                                  : access == Access::kReplicate ? "replicate"
                                                                 : "write";
    if (std::find(who->scopes->begin(), who->scopes->end(), need) == who->scopes->end()) {
      return absl::PermissionDeniedError(
          fmt::format("{}: {} may not (its token lacks the scope '{}')", action, who->ToString(), need));
    }
  }
  if (who->role == Role::kAdmin || who->role == Role::kCatalog) return absl::OkStatus();
  switch (access) {
    case Access::kRead:
      return absl::OkStatus();
    case Access::kNamespace:
    case Access::kReplicate:
      if (who->role == Role::kUser) return absl::OkStatus();
      break;
    case Access::kOwnNode:
      if (who->role != Role::kNode) break;
      for (std::string_view n : nodes) {
        if (n != who->name) {
          return absl::PermissionDeniedError(
              fmt::format("{}: {} may act only for itself, not for node '{}'", action, who->ToString(), n));
        }
      }
      return absl::OkStatus();
    case Access::kAdmin:
      break;
  }
  return absl::PermissionDeniedError(fmt::format("{}: {} may not ({})", action, who->ToString(),
                                                 access == Access::kAdmin ? "admin only"
                                                 : access == Access::kNamespace || access == Access::kReplicate
                                                     ? "users and admins"
                                                     : "the node itself or admin"));
}

}  // namespace gfrep::catalog
