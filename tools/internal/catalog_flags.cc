#include "tools/internal/catalog_flags.h"

#include <cstdlib>
#include <ctime>
#include <fstream>
#include <sstream>

#include <fmt/format.h>

namespace gfrep::tools {

void AddCatalogFlags(CLI::App& app, CatalogFlags& flags) {
  app.add_option("--catalog", flags.catalog,
                 "gfcatalogd address HOST:PORT (default: $GFREP_CATALOG)");
  app.add_option("--tls-ca", flags.tls_ca,
                 "PEM CA certificate for a TLS catalog (default: $GFREP_CATALOG_CA)");
  app.add_option("--cert", flags.cert,
                 "PEM client certificate: who you are to a catalog with mutual TLS (default: $GFREP_CERT)");
  app.add_option("--key", flags.key, "PEM key of --cert (default: $GFREP_KEY)");
  app.add_option("--token-file", flags.token_file,
                 "File holding a user token (gfauth token create): who you are without a certificate "
                 "(default: $GFREP_TOKEN_FILE, or the token in $GFREP_TOKEN)");
  app.add_option("--timeout", flags.timeout_s, "Seconds per catalog call")
      ->check(CLI::Range(0.1, 3600.0))
      ->capture_default_str();
}

absl::StatusOr<std::unique_ptr<catalog::CatalogClient>> ConnectCatalog(const CatalogFlags& flags) {
  catalog::ClientOptions options;
  options.address = flags.catalog;
  if (options.address.empty()) {
    if (const char* env = std::getenv("GFREP_CATALOG"); env != nullptr) options.address = env;
  }
  if (options.address.empty()) {
    return absl::InvalidArgumentError("no catalog: pass --catalog HOST:PORT or set GFREP_CATALOG");
  }
  auto flag_or_env = [](const std::string& flag, const char* env) {
    const char* v = std::getenv(env);
    return !flag.empty() ? flag : v != nullptr ? std::string(v) : std::string();
  };
  if (const std::string file = flag_or_env(flags.token_file, "GFREP_TOKEN_FILE"); !file.empty()) {
    std::ifstream in(file);
    if (!in) return absl::InvalidArgumentError(fmt::format("cannot read token file {}", file));
    std::getline(in, options.token);
    if (options.token.empty()) return absl::InvalidArgumentError(fmt::format("token file {} is empty", file));
  } else if (const char* env = std::getenv("GFREP_TOKEN"); env != nullptr) {
    options.token = env;
  }
  if (!options.token.empty() && !flags.cert.empty()) {
    return absl::InvalidArgumentError("give --cert or a token, not both");
  }
  const std::string ca = flag_or_env(flags.tls_ca, "GFREP_CATALOG_CA");
  // A token stands instead of the certificate in $GFREP_CERT.
  const std::string cert = options.token.empty() ? flag_or_env(flags.cert, "GFREP_CERT") : "";
  const std::string key = options.token.empty() ? flag_or_env(flags.key, "GFREP_KEY") : "";
  for (auto [path, what, out] : {std::tuple{&ca, "CA", &options.tls_root_pem},
                                 std::tuple{&cert, "certificate", &options.tls_cert_pem},
                                 std::tuple{&key, "key", &options.tls_key_pem}}) {
    if (path->empty()) continue;
    absl::StatusOr<std::string> pem = ReadPemFile(*path, what);
    if (!pem.ok()) return pem.status();
    *out = *pem;
  }
  options.timeout = std::chrono::milliseconds(static_cast<std::int64_t>(flags.timeout_s * 1000));
  return catalog::CatalogClient::Create(options);
}

transfer::TlsOptions AgentTlsOptions(const CatalogFlags& flags) {
  auto flag_or_env = [](const std::string& flag, const char* env) -> std::string {
    if (!flag.empty()) return flag;
    const char* v = std::getenv(env);
    return v == nullptr ? "" : v;
  };
  transfer::TlsOptions o;
  o.ca = flag_or_env(flags.tls_ca, "GFREP_CATALOG_CA");
  o.cert = flag_or_env(flags.cert, "GFREP_CERT");
  o.key = flag_or_env(flags.key, "GFREP_KEY");
  return o;
}

absl::StatusOr<std::string> ReadPemFile(const std::string& path, std::string_view what) {
  std::ifstream in(path);
  if (!in) return absl::InvalidArgumentError(fmt::format("cannot read {} file {}", what, path));
  std::stringstream ss;
  ss << in.rdbuf();
  if (ss.str().find("-----BEGIN ") == std::string::npos) {
    return absl::InvalidArgumentError(fmt::format("{} file {} is not PEM", what, path));
  }
  return ss.str();
}

std::string ErrorText(const absl::Status& status) {
  std::string code = absl::StatusCodeToString(status.code());
  for (char& c : code) {
    c = c == ' ' ? '_' : static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  }
  std::string msg(status.message());
  for (char& c : msg) {
    if (c == '\n') c = ' ';
  }
  return fmt::format("{} ({})", msg, code);
}

std::string TypeName(catalog::FileType type) {
  return type == catalog::FileType::kDirectory ? "directory" : "file";
}

std::string FormatTime(std::int64_t unix_ns) {
  std::time_t t = static_cast<std::time_t>(unix_ns / 1'000'000'000);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

nlohmann::json ToJson(const catalog::Attributes& a) {
  return {{"inode", a.inode},       {"name", a.name},
          {"type", TypeName(a.type)}, {"size", a.size},
          {"mode", fmt::format("{:04o}", a.mode)}, {"owner", a.owner}, {"group", a.group},
          {"mtime", FormatTime(a.mtime_ns)}, {"mtime_ns", a.mtime_ns},
          {"checksum_algo", a.checksum_algo}, {"checksum", a.checksum},
          {"generation", a.generation}};
}

nlohmann::json ToJson(const catalog::Replica& r) {
  return {{"node", r.node},
          {"state", std::string(catalog::ToString(r.state))},
          {"generation", r.generation},
          {"size", r.size},
          {"verified_ns", r.verified_ns},
          {"updated_ns", r.updated_ns},
          {"mtime_ns", r.mtime_ns},
          {"note", r.note}};
}

nlohmann::json ToJson(const catalog::Site& s) {
  nlohmann::json labels = nlohmann::json::object();
  for (const auto& [k, v] : s.labels) labels[k] = v;
  return {{"name", s.name}, {"labels", labels}};
}

nlohmann::json ToJson(const catalog::Node& n) {
  return {{"name", n.name},
          {"site", n.site},
          {"address", n.address},
          {"spool", n.spool},
          {"capacity_bytes", n.capacity_bytes},
          {"free_bytes", n.free_bytes},
          {"load", n.load},
          {"active_transfers", n.active_transfers},
          {"workers", n.workers},
          {"last_heartbeat", FormatTime(n.last_heartbeat_ns)},
          {"liveness", n.liveness},
          {"mode", catalog::ToString(n.mode)},
          {"disk", ToJson(n.disk)},
          {"requires_data_tls", n.requires_data_tls}};
}

nlohmann::json ToJson(const catalog::DiskProfile& d) {
  if (d.measured_ns == 0) return nullptr;  // never measured
  return {{"dir", d.dir},
          {"write_io_size_bytes", d.write_io_size_bytes},
          {"direct", d.direct},
          {"flush_interval_bytes", d.flush_interval_bytes},
          {"write_mbps", d.write_mbps},
          {"read_mbps", d.read_mbps},
          {"measured", FormatTime(d.measured_ns)}};
}

nlohmann::json ToJson(const catalog::Route& r) {
  return {{"src_site", r.src_site},
          {"dst_site", r.dst_site},
          {"streams", r.streams},
          {"socket_buffer_bytes", r.socket_buffer_bytes},
          {"stripe_unit_bytes", r.stripe_unit_bytes},
          {"stream_rate_bps", r.stream_rate_bps},
          {"route_rate_bps", r.route_rate_bps},
          {"congestion_control", r.congestion_control},
          {"data_tls", r.data_tls},
          {"max_concurrent_tasks", r.max_concurrent_tasks},
          {"total_streams", r.total_streams},
          {"rtt_ms", r.rtt_ms},
          {"bandwidth_bps", r.bandwidth_bps},
          {"measured_ns", r.measured_ns},
          {"observed",
           {{"rtt_ms", r.observed.rtt_ms},
            {"srtt_ms", r.observed.srtt_ms},
            {"loss", r.observed.loss},
            {"peak_bps", r.observed.peak_bps},
            {"peak_ns", r.observed.peak_ns},
            {"bytes", r.observed.bytes},
            {"at_ns", r.observed.at_ns},
            {"congestion", r.observed.congestion}}}};
}

}  // namespace gfrep::tools
