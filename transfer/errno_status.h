#pragma once

// An errno value as a status, the one mapping of every library and program: a full disk or
// quota (ENOSPC, EDQUOT) is kResourceExhausted, a missing file kNotFound, a refused access
// kPermissionDenied, a taken name kAlreadyExists, a broken connection kUnavailable, anything
// else kInternal. The message is "CONTEXT: strerror", with " (disk full)" for a full disk.
//
// Thread safety: pure function.

#include <fmt/format.h>

#include <cerrno>
#include <cstring>
#include <string>
#include <string_view>

#include "absl/status/status.h"

namespace gfrep::transfer {

inline absl::Status ErrnoStatus(int e, std::string_view context) {
  std::string msg = fmt::format("{}: {}", context, std::strerror(e));
  switch (e) {
    case ENOSPC:
    case EDQUOT:
      return absl::ResourceExhaustedError(fmt::format("{} (disk full)", msg));
    case ENOENT:
      return absl::NotFoundError(msg);
    case EACCES:
    case EPERM:
      return absl::PermissionDeniedError(msg);
    case EEXIST:
      return absl::AlreadyExistsError(msg);
    case EPIPE:
    case ECONNRESET:
      return absl::UnavailableError(msg);
    default:
      return absl::InternalError(msg);
  }
}

}  // namespace gfrep::transfer
