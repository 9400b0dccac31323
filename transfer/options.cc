#include "transfer/options.h"

#include <fmt/format.h>

#include "transfer/checksum.h"

namespace gfrep::transfer {

absl::Status Validate(const RouteOptions& o) {
  if (o.streams < 1 || o.streams > kMaxStreams) {
    return absl::InvalidArgumentError(
        fmt::format("streams must be 1..{}, got {}", kMaxStreams, o.streams));
  }
  if (o.stripe_unit < kMinStripeUnit || o.stripe_unit > kMaxStripeUnit) {
    return absl::InvalidArgumentError(fmt::format("stripe unit must be {}..{} bytes, got {}",
                                                  kMinStripeUnit, kMaxStripeUnit, o.stripe_unit));
  }
  if (o.socket_buffer > (1ull << 30)) {
    return absl::InvalidArgumentError(
        fmt::format("socket buffer {} bytes is larger than 1 GiB", o.socket_buffer));
  }
  if (o.congestion.size() > 15) {
    return absl::InvalidArgumentError(
        fmt::format("congestion control name '{}' is too long", o.congestion));
  }
  return absl::OkStatus();
}

absl::Status Validate(const TransferOptions& o) {
  if (absl::Status s = Validate(o.route); !s.ok()) return s;
  if (auto a = ParseChecksumAlgorithm(o.checksum); !a.ok()) return a.status();
  if (auto a = ParseBlockChecksumAlgorithm(o.block_checksum); !a.ok()) return a.status();
  if (o.io_timeout.count() <= 0) return absl::InvalidArgumentError("io timeout must be positive");
  if (o.max_resend_rounds < 0 || o.max_resend_rounds > 100) {
    return absl::InvalidArgumentError("max resend rounds must be 0..100");
  }
  if (o.receive_pool_bytes > (16ull << 30)) {
    return absl::InvalidArgumentError(
        fmt::format("receive pool {} bytes is larger than 16 GiB", o.receive_pool_bytes));
  }
  if (o.write_io_size != 0 && (o.write_io_size < 4096 || o.write_io_size > (1ull << 30))) {
    return absl::InvalidArgumentError(fmt::format(
        "write io size must be 0 (whole blocks) or 4096..{} bytes, got {}", 1ull << 30,
        o.write_io_size));
  }
  if (o.shared_key.empty()) {
    return absl::InvalidArgumentError("no shared key (load one with LoadOrCreateSharedKey)");
  }
  return absl::OkStatus();
}

}  // namespace gfrep::transfer
