#pragma once

// The cancellable awaitable forms of the client operations (client.h), defined in client.cc:
// the pull behind AsyncPull, with the receiver's commit mode (the agent's pull_from into a
// replica name, spool_names.h, is create-only), and the push and third-party copy behind
// Push and ThirdParty, which transfer/copy.cc runs under a CopyHandle.

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

// As Push, cancellable like PullFile (kCancelled; the agent keeps the partial file for a
// resume and nothing appears under `remote_path`).
asio::awaitable<absl::StatusOr<TransferStats>> PushFile(std::filesystem::path local, Endpoint agent,
                                                        std::string remote_path,
                                                        TransferOptions options);

// As ThirdParty, cancellable like PullFile: a cancellation closes the control connection to
// the destination agent, which then stops its pull within about half a second (agent.cc,
// ServePullFrom) and keeps the partial file for a resume.
asio::awaitable<absl::StatusOr<TransferStats>> ThirdPartyFile(Endpoint src, std::string src_path,
                                                              Endpoint dst, std::string dst_path,
                                                              TransferOptions options);

}  // namespace gfrep::transfer::internal
