#pragma once

// The pull behind AsyncPull (client.h), with the receiver's commit mode: the agent's
// pull_from into a replica name (spool_names.h) is create-only. Defined in client.cc.

#include <filesystem>
#include <string>

#include "absl/status/statusor.h"
#include "transfer/internal/engine.h"

namespace gfrep::transfer::internal {

// As AsyncPull, cancellation included (never throws; a cancelled pull ends with
// kCancelled); with `create_only` an existing final file is never replaced (kAlreadyExists).
// `name` is how errors name the destination ("" = the final path); `cache`: see
// SessionCache (client.h).
asio::awaitable<absl::StatusOr<TransferStats>> PullFile(Endpoint agent, std::string remote_path,
                                                        std::filesystem::path final_path,
                                                        std::filesystem::path tmp_dir,
                                                        TransferOptions options, bool create_only,
                                                        std::string name,
                                                        SessionCache* cache = nullptr);

}  // namespace gfrep::transfer::internal
