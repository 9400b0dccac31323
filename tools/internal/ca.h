#pragma once

// A development certificate authority for a gfrep federation (gfca): one CA key and
// certificate, and certificates for the federation's identities signed by it. Each issued
// certificate names its holder twice: CN=NAME and the URI subject alternative name
// gfrep://ROLE/NAME, which gfcatalogd reads as the caller's identity (catalog/identity.h).
// Node and catalog certificates also carry DNS:NAME and any extra DNS names or IP addresses
// given, so that clients can verify the host they dial. Keys are EC P-256; files holding
// keys are written 0600. An organisation's own CA works the same way as long as its
// certificates carry the gfrep:// URI (see tools/README or catalog/README "Authentication").

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace gfrep::tools {

struct Pem {
  std::string cert;
  std::string key;
};

// A new self-signed CA valid for `days` days.
absl::StatusOr<Pem> MakeCa(const std::string& name, int days);

struct IssueOptions {
  std::string role;  // node, user, admin, catalog
  std::string name;
  // Days valid from now. Negative: a certificate that has already expired (notBefore
  // 2*|days| ago, notAfter |days| ago), for tests of refusals.
  int days = 365;
  std::vector<std::string> hosts;  // extra DNS names or IP addresses (SANs)
  std::vector<std::string> groups;  // users: gfrep://group/G URI SANs (catalog/permissions.h)
};

// A certificate for `options` signed by `ca`. kInvalidArgument for a bad role, name or host.
absl::StatusOr<Pem> Issue(const Pem& ca, const IssueOptions& options);

// Writes `text` to `path` with mode `mode` (0600 for keys), replacing it.
absl::Status WriteFileMode(const std::filesystem::path& path, const std::string& text, unsigned mode);

}  // namespace gfrep::tools
