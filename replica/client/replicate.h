#pragma once

// Replicate: asks the catalog for N complete copies of a logical path and waits until they
// exist. The catalog's planner (gfcatalogd) turns the request into copies between the site
// agents (gfsited), which pull the bytes from each other; this call only creates the request
// and follows it, as `gfrep PATH` does. The request is the catalog's: it goes on if the
// caller stops waiting (timeout), and `gfrep status ID` / `gfrep cancel ID` work on it.
//
// A program needs three calls (catalog/client.h has the connection options: TLS, token):
//   gfrep::catalog::ClientOptions c;
//   c.address = "catalog.example.org:7100";
//   absl::StatusOr<std::unique_ptr<gfrep::catalog::CatalogClient>> client =
//       gfrep::catalog::CatalogClient::Create(c);
//   gfrep::replica::client::ReplicateOptions r;
//   r.copies = 3;
//   absl::StatusOr<gfrep::catalog::Request> done =
//       gfrep::replica::client::Replicate(**client, "/run1/big.dat", r);
//
// Threads: blocks the calling thread on catalog calls (blocking gRPC); call it from a plain
// thread, never from an executor thread. Several calls may run at once on one client.

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "catalog/catalog.h"

namespace gfrep::replica::client {

struct ReplicateOptions {
  // Complete replicas wanted per file, 1..64 (the file's existing replicas count).
  std::uint32_t copies = 2;
  // Copy from replicas in this site only; empty: any site.
  std::string src_site;
  // Put the copies in these sites; empty: wherever the planner's placement chooses.
  std::vector<std::string> dst_sites;
  // The path is a directory: every file below it.
  bool recursive = false;
  // Requests with a higher priority are planned first.
  std::int32_t priority = 0;
  // Who asks, as `gfrep list` shows it; empty: "gfrep-library".
  std::string owner;
  // At most this many files of the request copied at once; 0: only the planner's limits.
  std::uint32_t parallel = 0;
  // Stop waiting after this long (the request goes on in the catalog); 0: wait until it ends.
  std::chrono::milliseconds timeout{0};
  // Called on the calling thread with the request whenever its counters or state changed
  // (files_done, bytes_done, ...), and once at the end. May be empty.
  std::function<void(const catalog::Request&)> progress;
};

// kInvalidArgument naming the field (copies outside 1..64, a negative timeout).
absl::Status Validate(const ReplicateOptions& options);

// Creates a request for `options.copies` copies of `path` (absolute, in the catalog's
// namespace) and waits for it. Returns the finished request (state kDone) when every file
// has its copies. Errors: kInvalidArgument (options, or the catalog refused the path); the
// catalog's own answers to CreateRequest (kPermissionDenied, kUnavailable: the catalog cannot
// be reached); kAborted when the request ended failed (a path that does not exist, or files
// that failed after their retries: the message names the request and its error);
// kCancelled when the request was cancelled (`gfrep cancel ID`); kDeadlineExceeded after
// options.timeout (the message names the request, which keeps running).
absl::StatusOr<catalog::Request> Replicate(const catalog::Roles& catalog, std::string_view path,
                                           const ReplicateOptions& options);

// Waits for the existing request `id` as Replicate does (options.timeout and progress; the
// other fields are not used). Also kNotFound for an unknown id.
absl::StatusOr<catalog::Request> WaitForRequest(const catalog::Roles& catalog, std::uint64_t id,
                                                const ReplicateOptions& options);

}  // namespace gfrep::replica::client
