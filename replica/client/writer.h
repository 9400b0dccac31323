#pragma once

// Storing a local file into the federation: what gfreg does, as a library call.
//
//   absl::StatusOr<replica::client::StoreResult> r =
//       replica::client::Store(catalog, "run001.mdst", "/exp/run001.mdst", {.site = "kek"});
//
// Order of events, and what each failure leaves behind:
//   1. Catalog::BeginWrite reserves a new generation G (creating the entry, without
//      content, if the path is new). Readers see no change.
//   2. The bytes are uploaded to the chosen node's agent under their identity name
//      "<spool>/.gfrep-data/<inode>/G" (replica/core/spool.h), create-only: nothing the node
//      holds is overwritten. The agent verifies the end-to-end checksum and fsyncs.
//   3. Catalog::CommitFile with generation G and that node as the writer: the node's
//      replica becomes complete at G and every other replica stale, in one durable write.
// Until step 3 succeeds every reader keeps seeing (and being served) the previous
// generation; the uploaded file is then an unrecorded file that the node's agent removes
// after its orphan grace. A concurrent writer that committed a newer generation first
// wins: this one fails with kAborted and changes nothing.
//
// Error codes: those of the catalog and the transfer engine; kAborted when a newer
// generation was committed meanwhile; kFailedPrecondition when no live node qualifies.
// Blocking (catalog and transfer calls); not on an executor thread.

#include <filesystem>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "catalog/catalog.h"
#include "transfer/client.h"
#include "transfer/options.h"

namespace gfrep::replica::client {

struct StoreOptions {
  // Where to store: this node; else the least busy live node of `site` with room; else of
  // any site.
  std::string node;
  std::string site;
  // Engine settings for the upload (shared key, TLS, streams, ...). A node whose agent
  // requires TLS (Node::requires_data_tls) is written to in TLS with transfer.tls_options,
  // whatever transfer.tls says (kFailedPrecondition without a CA there).
  transfer::TransferOptions transfer;
  // Recorded as the file's owner and mode.
  std::string owner;
  std::uint32_t mode = 0644;
};

struct StoreResult {
  catalog::Attributes attributes;  // the committed entry (its new generation)
  catalog::Node node;              // where the bytes are
  transfer::TransferStats upload;
};

absl::StatusOr<StoreResult> Store(const catalog::Roles& catalog, const std::filesystem::path& local,
                                  std::string_view path, const StoreOptions& options);

}  // namespace gfrep::replica::client
