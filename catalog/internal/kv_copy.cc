#include "catalog/internal/kv_copy.h"

#include <openssl/evp.h>

#include <memory>

#include <fmt/format.h>

namespace gfrep::catalog::internal {
namespace {

void HashLengthPrefixed(EVP_MD_CTX* ctx, std::string_view s) {
  unsigned char len[8];
  std::uint64_t n = s.size();
  for (int i = 7; i >= 0; --i, n >>= 8) len[i] = static_cast<unsigned char>(n & 0xff);
  EVP_DigestUpdate(ctx, len, sizeof len);
  EVP_DigestUpdate(ctx, s.data(), s.size());
}

absl::StatusOr<TableDigest> DigestTable(KvStore& store, Table t) {
  std::unique_ptr<EVP_MD_CTX, decltype(&EVP_MD_CTX_free)> ctx(EVP_MD_CTX_new(), &EVP_MD_CTX_free);
  if (!ctx || EVP_DigestInit_ex(ctx.get(), EVP_sha256(), nullptr) != 1) {
    return absl::InternalError("SHA-256 unavailable");
  }
  TableDigest d;
  absl::Status s = store.Scan(t, "", "", [&](std::string_view k, std::string_view v) {
    HashLengthPrefixed(ctx.get(), k);
    HashLengthPrefixed(ctx.get(), v);
    d.rows += 1;
    d.bytes += k.size() + v.size();
    return true;
  });
  if (!s.ok()) return s;
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  EVP_DigestFinal_ex(ctx.get(), md, &len);
  for (unsigned int i = 0; i < len; ++i) d.sha256 += fmt::format("{:02x}", md[i]);
  return d;
}

}  // namespace

absl::StatusOr<StoreDigest> DigestStore(KvStore& store) {
  StoreDigest out;
  for (int t = 0; t < kNumTables; ++t) {
    absl::StatusOr<TableDigest> d = DigestTable(store, static_cast<Table>(t));
    if (!d.ok()) return d.status();
    out[t] = std::move(*d);
  }
  return out;
}

absl::StatusOr<StoreDigest> CopyStore(KvStore& from, KvStore& to, std::size_t batch_rows,
                                      const std::function<void(Table, std::uint64_t)>& progress) {
  if (batch_rows == 0) batch_rows = 1;
  for (int t = 0; t < kNumTables; ++t) {
    bool empty = true;
    absl::Status s = to.Scan(static_cast<Table>(t), "", "", [&](std::string_view, std::string_view) {
      empty = false;
      return false;
    });
    if (!s.ok()) return s;
    if (!empty) {
      return absl::FailedPreconditionError(fmt::format(
          "{}: table {} is not empty (copy only into a new catalog)", to.Describe(), kTableNames[t]));
    }
  }
  for (int ti = 0; ti < kNumTables; ++ti) {
    const Table t = static_cast<Table>(ti);
    KvBatch batch;
    std::uint64_t rows = 0;
    absl::Status failed;
    absl::Status s = from.Scan(t, "", "", [&](std::string_view k, std::string_view v) {
      batch.Put(t, k, v);
      if (batch.Count() < batch_rows) return true;
      failed = to.Write(batch, /*sync=*/true, fmt::format("copy {}", kTableNames[t]));
      rows += batch.Count();
      batch.Clear();
      if (failed.ok() && progress) progress(t, rows);
      return failed.ok();
    });
    if (!failed.ok()) return failed;
    if (!s.ok()) return s;
    rows += batch.Count();
    if (absl::Status w = to.Write(batch, /*sync=*/true, fmt::format("copy {}", kTableNames[t]));
        !w.ok()) {
      return w;
    }
    if (progress) progress(t, rows);
  }
  absl::StatusOr<StoreDigest> a = DigestStore(from);
  if (!a.ok()) return a.status();
  absl::StatusOr<StoreDigest> b = DigestStore(to);
  if (!b.ok()) return b.status();
  for (int t = 0; t < kNumTables; ++t) {
    if (!((*a)[t] == (*b)[t])) {
      return absl::DataLossError(fmt::format(
          "table {}: source has {} rows (sha256 {}), copy has {} rows (sha256 {})", kTableNames[t],
          (*a)[t].rows, (*a)[t].sha256, (*b)[t].rows, (*b)[t].sha256));
    }
  }
  return *a;
}

}  // namespace gfrep::catalog::internal
