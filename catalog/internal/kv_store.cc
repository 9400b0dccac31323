#include "catalog/internal/kv_store.h"

#include "catalog/internal/codec.h"

namespace gfrep::catalog::internal {

absl::StatusOr<std::uint64_t> LastU64Key(KvStore& store, Table t) {
  std::string last;
  bool found = false;
  absl::Status s = store.Scan(
      t, "", "",
      [&](std::string_view key, std::string_view) {
        last = std::string(key);
        found = true;
        return false;
      },
      nullptr, /*reverse=*/true);
  if (!s.ok()) return s;
  if (!found) return 0;
  return GetBigEndian64(last);
}

bool IsPostgresUrl(std::string_view location) {
  // "postgresql://" is covered by "postgresql:".
  return location.starts_with("postgresql:") || location.starts_with("postgres://");
}

}  // namespace gfrep::catalog::internal
