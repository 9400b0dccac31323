#pragma once

// FromRocks: the one place RocksDB statuses become absl::Status (STYLE rule 7).

#include <rocksdb/status.h>

#include <string>
#include <string_view>

#include <fmt/format.h>

#include "absl/status/status.h"

namespace gfrep::catalog::internal {

inline absl::Status FromRocks(const rocksdb::Status& s, std::string_view context) {
  if (s.ok()) return absl::OkStatus();
  std::string msg = fmt::format("{}: {}", context, s.ToString());
  if (s.IsNotFound()) return absl::NotFoundError(msg);
  if (s.IsCorruption()) return absl::DataLossError(msg);
  if (s.IsNoSpace()) return absl::ResourceExhaustedError(msg);
  if (s.IsBusy() || s.IsTryAgain() || s.IsTimedOut()) return absl::UnavailableError(msg);
  if (s.IsInvalidArgument()) return absl::InvalidArgumentError(msg);
  return absl::InternalError(msg);
}

}  // namespace gfrep::catalog::internal
