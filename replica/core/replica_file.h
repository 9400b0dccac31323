#pragma once

// One replica's file against its catalog record (complete, or unverified: on a node that was
// dead): the check the site agent's passes
// (replica/agent/replica_check.h), gfsck and the read path share, and the compare-and-set
// that reports a bad replica. The identity file "<spool>/.gfrep-data/<inode>/<generation>"
// must exist (else `lost`), be a regular file of the record's size and carry the mtime the
// node recorded when the replica became complete (else `corrupt`); with the file's attributes
// its bytes are hashed and compared with the catalog's checksum too.
//
// Thread safety: free functions, no shared state. Blocking: file reads (CheckReplicaFile).

#include <cstdint>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <string_view>

#include "catalog/catalog.h"

namespace gfrep::replica {

// What one check of one replica found.
enum class ReplicaVerdict {
  kGood,     // as recorded (and, if checksummed, matching the catalog)
  kLost,     // the file is missing
  kCorrupt,  // wrong type, size, mtime stamp or checksum
  kSkipped,  // not checkable now (record not complete, file changed generation, no checksum)
};

struct ReplicaFinding {
  catalog::Replica replica;
  ReplicaVerdict verdict = ReplicaVerdict::kSkipped;
  std::string note;           // why (lost, corrupt, skipped)
  bool checksummed = false;   // the bytes were read and hashed
  std::int64_t mtime_ns = 0;  // the file's mtime as seen (0: no file)
};

// Stats the replica file of `replica` (a record of this node) in `spool`. With
// `attributes` (the file's catalog entry) the bytes are read and hashed too; `pace`, if set,
// is called with each chunk's size before it is read (rate limiting) and may return false to
// stop (then kSkipped). No catalog call.
ReplicaFinding CheckReplicaFile(const std::filesystem::path& spool, const catalog::Replica& replica,
                                const catalog::Attributes* attributes,
                                const std::function<bool(std::size_t)>& pace = nullptr);

// The compare-and-set that reports a complete replica of (inode, node, generation) as `to`
// (lost or corrupt) because of `note` (truncated to fit a record). What the checks, the read
// path and a copy's destination all send.
catalog::ReplicaTransition MarkBad(catalog::InodeId inode, std::string_view node,
                                   std::uint64_t generation, catalog::ReplicaState to,
                                   std::string_view note);

// The compare-and-set that reports `finding` (none for kSkipped, and for kGood unless it
// teaches the catalog something: a checksum pass, or an mtime the record lacks). A record
// `unverified` (its node was dead) turns complete only after a checksum pass (noted
// catalog::kRecheckedNote); damaged, it turns lost or corrupt, or straight to `deleting`
// when its copy was made again meanwhile (noted catalog::kRemadeNote).
std::optional<catalog::ReplicaTransition> TransitionFor(const ReplicaFinding& finding);

}  // namespace gfrep::replica
