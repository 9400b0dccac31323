#pragma once

// Names inside an agent's spool that the agents themselves manage. Every top-level name
// starting with ".gfrep-" is reserved: the transfer agent refuses it over the network,
// except the replica area below, whose names are exactly "<kReplicaDirName>/<inode>/
// <generation>" (catalog replicas by identity, see replica/core/spool.h).
//
// Thread safety: pure functions.

#include <cstdint>
#include <string>
#include <string_view>

namespace gfrep::transfer {

// Top-level spool directory holding catalog replicas by identity (replica/core/spool.h).
inline constexpr std::string_view kReplicaDirName = ".gfrep-data";

// ".gfrep-data/<inode>/<generation>" (decimal, no leading zeros): the spool-relative name
// of a replica's bytes.
std::string ReplicaRelativePath(std::uint64_t inode, std::uint64_t generation);

// True if `relative` is exactly such a name.
bool IsReplicaRelativePath(std::string_view relative);

}  // namespace gfrep::transfer
