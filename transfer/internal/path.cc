#include "transfer/internal/path.h"

#include <fmt/format.h>

#include "absl/status/status.h"
#include "transfer/spool_names.h"

namespace gfrep::transfer::internal {

absl::StatusOr<std::filesystem::path> ResolveSpoolPath(const std::filesystem::path& spool,
                                                       std::string_view relative) {
  if (relative.empty()) return absl::InvalidArgumentError("empty path");
  if (relative.size() > 4096) return absl::InvalidArgumentError("path longer than 4096 bytes");
  for (char c : relative) {
    const auto u = static_cast<unsigned char>(c);
    if (u < 0x20 || u == 0x7f) {
      // Never echoed: a newline here would forge a line of the agent's log.
      return absl::InvalidArgumentError(fmt::format(
          "path contains the control character 0x{:02x}", static_cast<unsigned>(u)));
    }
  }
  if (relative.front() == '/') {
    return absl::InvalidArgumentError(
        fmt::format("path '{}' is absolute; paths are relative to the spool", relative));
  }
  std::string_view rest = relative;
  bool first = true;
  while (!rest.empty() || first) {
    std::size_t slash = rest.find('/');
    std::string_view comp = rest.substr(0, slash);
    if (comp.empty()) return absl::InvalidArgumentError(fmt::format("path '{}' has an empty component", relative));
    if (comp == "." || comp == "..") {
      return absl::InvalidArgumentError(
          fmt::format("path '{}' has a '{}' component (escapes are refused)", relative, comp));
    }
    if (comp.size() > 255) return absl::InvalidArgumentError("path component longer than 255 bytes");
    if (first && comp.starts_with(kReservedPrefix) && !IsReplicaRelativePath(relative)) {
      return absl::InvalidArgumentError(fmt::format(
          "path '{}' is in the reserved '{}' (top-level names starting with '{}' belong to the "
          "agents; only {}/<inode>/<generation> is served)",
          relative, comp, kReservedPrefix, kReplicaDirName));
    }
    first = false;
    if (slash == std::string_view::npos) break;
    rest = rest.substr(slash + 1);
    if (rest.empty()) return absl::InvalidArgumentError(fmt::format("path '{}' ends with '/'", relative));
  }
  std::filesystem::path full = spool / std::filesystem::path(std::string(relative));
  std::error_code ec;
  std::filesystem::path resolved = std::filesystem::weakly_canonical(full, ec);
  if (ec) return absl::InternalError(fmt::format("resolve '{}': {}", relative, ec.message()));
  std::string base = spool.string();
  if (!base.ends_with('/')) base += '/';
  if (!resolved.string().starts_with(base)) {
    return absl::PermissionDeniedError(
        fmt::format("path '{}' leaves the spool through a symlink", relative));
  }
  return full;
}

}  // namespace gfrep::transfer::internal
