#pragma once

// Flags and helpers shared by the catalog tools (gfmkdir, gfls, gfstat, gfwhere, gfrm, gfmv,
// gfsite, gfnode, gfroute, ...): --catalog / GFREP_CATALOG, --tls-ca / GFREP_CATALOG_CA,
// --cert/--key / GFREP_CERT/GFREP_KEY, --token-file / GFREP_TOKEN_FILE / GFREP_TOKEN,
// one-line error text for a status, and JSON/text renderings of catalog records.

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "catalog/client.h"
#include "transfer/options.h"

namespace gfrep::tools {

struct CatalogFlags {
  std::string catalog;  // host:port; default $GFREP_CATALOG
  std::string tls_ca;   // PEM file of the CA; default $GFREP_CATALOG_CA; empty: plaintext
  std::string cert;     // PEM client certificate (gfca issue user|admin NAME); default $GFREP_CERT
  std::string key;      // its key; default $GFREP_KEY
  std::string token_file;  // a user token (gfauth token create); default $GFREP_TOKEN_FILE, or $GFREP_TOKEN itself
  double timeout_s = 30;
};

void AddCatalogFlags(CLI::App& app, CatalogFlags& flags);

// kInvalidArgument when no address is given (flag or environment) or a PEM file is unreadable.
absl::StatusOr<std::unique_ptr<catalog::CatalogClient>> ConnectCatalog(const CatalogFlags& flags);

// The same certificate set for sessions with site agents (gfreg to an agent that requires
// TLS): the flags, else GFREP_CATALOG_CA, GFREP_CERT, GFREP_KEY (file paths; empty when unset).
transfer::TlsOptions AgentTlsOptions(const CatalogFlags& flags);

// "message (NOT_FOUND)": what the tools print after "<program>: ".
std::string ErrorText(const absl::Status& status);

// The contents of a PEM file named by a flag (`what` names it in the error).
absl::StatusOr<std::string> ReadPemFile(const std::string& path, std::string_view what);

std::string TypeName(catalog::FileType type);
std::string FormatTime(std::int64_t unix_ns);
nlohmann::json ToJson(const catalog::Attributes& a);
nlohmann::json ToJson(const catalog::Replica& r);
nlohmann::json ToJson(const catalog::Site& s);
nlohmann::json ToJson(const catalog::Node& n);
// null when never measured.
nlohmann::json ToJson(const catalog::DiskProfile& d);
nlohmann::json ToJson(const catalog::Route& r);

}  // namespace gfrep::tools
