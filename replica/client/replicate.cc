#include "replica/client/replicate.h"

#include <fmt/format.h>

#include <algorithm>
#include <optional>
#include <thread>

#include "catalog/event_cursor.h"
#include "replica/core/retry.h"

namespace gfrep::replica::client {

namespace {

using Clock = std::chrono::steady_clock;

constexpr std::uint32_t kMaxCopies = 64;
// The catalog may restart while we follow a request: keep asking this long.
constexpr std::chrono::seconds kUnavailableBudget{30};

bool Changed(const catalog::Request& a, const catalog::Request& b) {
  return a.state != b.state || a.files_done != b.files_done || a.files_failed != b.files_failed ||
         a.files_total != b.files_total || a.bytes_done != b.bytes_done ||
         a.bytes_total != b.bytes_total || a.in_flight_bytes != b.in_flight_bytes;
}

absl::StatusOr<catalog::Request> Outcome(const catalog::Request& r) {
  switch (r.state) {
    case catalog::RequestState::kDone:
      return r;
    case catalog::RequestState::kCancelled:
      return absl::CancelledError(fmt::format("request {} was cancelled", r.id));
    default:
      return absl::AbortedError(fmt::format("request {} failed: {} of {} files failed: {}", r.id,
                                            r.files_failed, r.files_total, r.error));
  }
}

}  // namespace

absl::Status Validate(const ReplicateOptions& options) {
  if (options.copies < 1 || options.copies > kMaxCopies) {
    return absl::InvalidArgumentError(
        fmt::format("copies: {} is outside 1..{}", options.copies, kMaxCopies));
  }
  if (options.timeout.count() < 0) return absl::InvalidArgumentError("timeout: negative");
  return absl::OkStatus();
}

absl::StatusOr<catalog::Request> Replicate(const catalog::Roles& catalog, std::string_view path,
                                           const ReplicateOptions& options) {
  if (absl::Status s = Validate(options); !s.ok()) return s;
  if (!path.starts_with('/')) {
    return absl::InvalidArgumentError(fmt::format("'{}' is not an absolute catalog path", path));
  }
  catalog::RequestSpec spec;
  spec.paths = {std::string(path)};
  spec.copies = options.copies;
  spec.src_site = options.src_site;
  spec.dst_sites = options.dst_sites;
  spec.recursive = options.recursive;
  spec.priority = options.priority;
  spec.owner = options.owner.empty() ? "gfrep-library" : options.owner;
  spec.parallel = options.parallel;
  absl::StatusOr<catalog::Request> created = catalog.work->CreateRequest(spec);
  if (!created.ok()) return created.status();
  return WaitForRequest(catalog, created->id, options);
}

absl::StatusOr<catalog::Request> WaitForRequest(const catalog::Roles& catalog, std::uint64_t id,
                                                const ReplicateOptions& options) {
  if (options.timeout.count() < 0) return absl::InvalidArgumentError("timeout: negative");
  const Clock::time_point start = Clock::now();
  const bool bounded = options.timeout.count() > 0;
  const Clock::time_point deadline = start + options.timeout;
  catalog::EventCursor events(*catalog.view);
  if (!events.Start().ok()) events.Seek(0);
  std::optional<catalog::Request> seen;
  Clock::time_point unavailable_since{};
  for (;;) {
    absl::StatusOr<catalog::Request> r = catalog.view->GetRequest(id);
    if (!r.ok()) {
      if (!IsRetryableCall(r.status())) return r.status();
      const Clock::time_point now = Clock::now();
      if (unavailable_since == Clock::time_point{}) unavailable_since = now;
      if (now - unavailable_since > kUnavailableBudget) return r.status();
    } else {
      unavailable_since = Clock::time_point{};
      if (options.progress && (!seen || Changed(*seen, *r))) options.progress(*r);
      seen = *r;
      if (catalog::IsFinished(r->state)) return Outcome(*r);
    }
    const Clock::time_point now = Clock::now();
    if (bounded && now >= deadline) {
      return absl::DeadlineExceededError(
          fmt::format("request {} still running after {} ms (it goes on in the catalog)", id,
                      options.timeout.count()));
    }
    // Sleep until the next catalog change, a second at most (or the deadline).
    auto wait = std::chrono::milliseconds(1000);
    if (bounded) {
      wait = std::min(wait, std::chrono::duration_cast<std::chrono::milliseconds>(deadline - now) +
                                std::chrono::milliseconds(1));
    }
    if (!events.Read(wait).ok()) {
      // A catalog without events (or one restarting): poll instead.
      std::this_thread::sleep_for(std::min(wait, std::chrono::milliseconds(250)));
    }
  }
}

}  // namespace gfrep::replica::client
