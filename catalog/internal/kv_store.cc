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

absl::StatusOr<std::vector<absl::StatusOr<std::string>>> KvStore::MultiGet(
    Table t, const std::vector<std::string>& keys, std::string_view what,
    const KvSnapshot* snapshot) {
  std::vector<absl::StatusOr<std::string>> out;
  out.reserve(keys.size());
  for (const std::string& k : keys) {
    absl::StatusOr<std::string> v = Get(t, k, what, snapshot);
    if (!v.ok() && !absl::IsNotFound(v.status())) return v.status();
    out.push_back(std::move(v));
  }
  return out;
}

bool IsPostgresUrl(std::string_view location) {
  // "postgresql://" is covered by "postgresql:".
  return location.starts_with("postgresql:") || location.starts_with("postgres://");
}

}  // namespace gfrep::catalog::internal
