#pragma once

// Key and record encoding of the RocksDB catalog (see catalog/README.md).
//
// Keys are built so that RocksDB's bytewise order is the order we scan in: integers are
// fixed 8-byte big-endian; a variable-length string that is followed by more key bytes is
// terminated by a NUL (names never contain NUL, ValidateName refuses it).
//
//   dentries       BE64(parent) name                  -> Attributes   (listing = prefix scan)
//   inodes         BE64(inode)                        -> BE64(parent) name
//   replicas       BE64(inode) node                   -> Replica
//   node_replicas  node \0 BE64(inode)                -> ""           (reverse index)
//   sites          name                               -> Site
//   nodes          name                               -> Node
//   routes         src \0 dst                         -> Route
//   requests       BE64(id)                           -> Request
//   tasks          BE64(id)                           -> Task
//   node_tasks     dst_node \0 BE64(id)               -> ""           (open tasks only)
//   request_tasks  BE64(request) BE64(task)           -> ""
//   events         BE64(seq)                          -> Event
//   request_files  BE64(request) BE64(file id)        -> RequestFile
//   request_wanted BE64(request) BE64(file id)        -> ""           (wanted files only)
//   default        "inode_hwm"                        -> BE64(next unused inode block end)
//   default        "reserved_generation" BE64(inode)  -> BE64(highest generation reserved
//                                                        by BeginWrite; absent: none above
//                                                        the file's generation)
//
// Records are a version byte followed by fields in a fixed order (varints, length-prefixed
// strings, doubles as 8 raw bytes). Decoders return kDataLoss on anything malformed.
//
// Thread safety: pure functions.

#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "catalog/types.h"

namespace gfrep::catalog::internal {

void PutBigEndian64(std::string& out, std::uint64_t v);
// kDataLoss unless `in` is exactly 8 bytes from `pos`.
absl::StatusOr<std::uint64_t> GetBigEndian64(std::string_view in, std::size_t pos = 0);

std::string U64Key(std::uint64_t v);
std::string DentryKey(InodeId parent, std::string_view name);
std::string DentryPrefix(InodeId parent);
std::string ReplicaKey(InodeId inode, std::string_view node);
std::string NodeReplicaKey(std::string_view node, InodeId inode);
std::string NodePrefix(std::string_view node);  // node \0
std::string RouteKey(std::string_view src, std::string_view dst);
std::string NodeTaskKey(std::string_view node, std::uint64_t task);
std::string RequestTaskKey(std::uint64_t request, std::uint64_t task);
// request_files and request_wanted (file: RequestFile::id).
std::string RequestFileKey(std::uint64_t request, std::uint64_t file);
// Key (in the default column family) of an inode's generation reservation mark.
std::string ReservedGenerationKey(InodeId inode);

// The smallest key greater than every key starting with `prefix` ("" if none exists).
std::string PrefixSuccessor(std::string_view prefix);

std::string EncodeAttributes(const Attributes& a);
absl::StatusOr<Attributes> DecodeAttributes(std::string_view in);
std::string EncodeInodeRef(InodeId parent, std::string_view name);
absl::StatusOr<std::pair<InodeId, std::string>> DecodeInodeRef(std::string_view in);
std::string EncodeReplica(const Replica& r);
absl::StatusOr<Replica> DecodeReplica(std::string_view in);
std::string EncodeSite(const Site& s);
absl::StatusOr<Site> DecodeSite(std::string_view in);
std::string EncodeNode(const Node& n);
absl::StatusOr<Node> DecodeNode(std::string_view in);
std::string EncodeRoute(const Route& r);
absl::StatusOr<Route> DecodeRoute(std::string_view in);
std::string EncodePolicyDocument(const PolicyDocument& d);
absl::StatusOr<PolicyDocument> DecodePolicyDocument(std::string_view in);
std::string EncodeRequest(const Request& r);
absl::StatusOr<Request> DecodeRequest(std::string_view in);
std::string EncodeRequestFile(const RequestFile& f);
absl::StatusOr<RequestFile> DecodeRequestFile(std::string_view in);
std::string EncodeTask(const Task& t);
absl::StatusOr<Task> DecodeTask(std::string_view in);
std::string EncodeEvent(const Event& e);
absl::StatusOr<Event> DecodeEvent(std::string_view in);

}  // namespace gfrep::catalog::internal
