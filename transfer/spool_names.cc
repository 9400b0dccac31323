#include "transfer/spool_names.h"

#include <fmt/format.h>

namespace gfrep::transfer {
namespace {

// A decimal uint64 without sign or leading zeros ("0" itself is fine).
bool IsDecimal(std::string_view s) {
  if (s.empty() || s.size() > 20 || (s.size() > 1 && s[0] == '0')) return false;
  for (char c : s) {
    if (c < '0' || c > '9') return false;
  }
  return s.size() < 20 || s <= "18446744073709551615";
}

}  // namespace

std::string ReplicaRelativePath(std::uint64_t inode, std::uint64_t generation) {
  return fmt::format("{}/{}/{}", kReplicaDirName, inode, generation);
}

bool IsReplicaRelativePath(std::string_view relative) {
  if (relative.size() <= kReplicaDirName.size() + 1 ||
      relative.substr(0, kReplicaDirName.size()) != kReplicaDirName ||
      relative[kReplicaDirName.size()] != '/') {
    return false;
  }
  std::string_view rest = relative.substr(kReplicaDirName.size() + 1);
  std::size_t slash = rest.find('/');
  if (slash == std::string_view::npos) return false;
  return IsDecimal(rest.substr(0, slash)) && IsDecimal(rest.substr(slash + 1));
}

}  // namespace gfrep::transfer
