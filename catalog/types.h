#pragma once

// Domain types of the gfrep catalog: namespace entries and their attributes, replicas,
// topology (sites, nodes, routes), replication requests, transfer tasks and events.
// Plain value types with no protobuf and no storage detail; catalog/catalog.h operates on
// them, catalog/client.h sends them over gRPC, replica/ plans with them.
//
// Times are Unix time in nanoseconds (std::int64_t, suffix _ns). Ids are assigned by the
// catalog and are never reused. Names (of entries, sites, nodes) are validated by
// ValidateName(); paths are absolute, '/'-separated, normalised by SplitPath().
//
// Thread safety: values; no shared state.

#include <chrono>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace gfrep::catalog {

using InodeId = std::uint64_t;
inline constexpr InodeId kRootInode = 1;

// Limits enforced on every input (kInvalidArgument past them).
inline constexpr std::size_t kMaxNameBytes = 255;
inline constexpr std::size_t kMaxPathBytes = 4096;
inline constexpr std::size_t kMaxLabelBytes = 1024;
inline constexpr std::size_t kMaxBatchPaths = 100000;  // paths per request

enum class FileType : std::uint8_t { kDirectory = 1, kFile = 2 };

// Attributes of one namespace entry (an inode). Stored inline with its directory entry.
struct Attributes {
  InodeId inode = 0;
  InodeId parent = 0;
  std::string name;  // last path component; "" for the root
  FileType type = FileType::kFile;
  std::uint64_t size = 0;
  std::uint32_t mode = 0644;  // POSIX bits: 0777 and the sticky bit 01000 (catalog/permissions.h)
  std::string owner;          // user name; "" for entries made by an admin or without TLS
  std::string group;          // "" or a group; a new entry takes its parent directory's group
  std::int64_t mtime_ns = 0;
  std::string checksum_algo;  // e.g. "xxh3-128"; empty: unknown
  std::string checksum;       // hex digest of the current generation's bytes
  // 0 for a file registered without content; incremented by every CommitFile.
  std::uint64_t generation = 0;
};

// One child of a directory, as a listing returns it.
struct DirEntry {
  std::string name;
  Attributes attributes;
};

enum class ReplicaState : std::uint8_t {
  kPending = 1,   // a transfer is (or will be) writing it
  kComplete = 2,  // bytes verified against the catalog's checksum of `generation`
  kStale = 3,     // holds an older generation; never served
  kCorrupt = 4,   // failed verification; never served
  kDeleting = 5,  // file removed (or replica dropped); the node should unlink and forget it
  kLost = 6,      // its bytes are gone from the node (found missing); never served
  // Was complete on a node declared dead (silent past gfcatalogd --node-dead-after): not
  // counted, never served, its copy made again elsewhere (replica/plan/repairer.h). If the
  // node comes back, its agent checks the bytes (stat, then checksum) and the record turns
  // complete again (note kRecheckedNote), or corrupt or lost.
  kUnverified = 7,
};
// The note of a replica record that was unverified and that its node has checked since
// (unverified -> complete): the repairer trims such a copy when the file's holders have
// their counts without it.
inline constexpr std::string_view kRecheckedNote = "checked after its node came back";
// The note of an unverified record whose copy the repairer has made again elsewhere: it
// needs no other copy, and its node drops it if it comes back with it damaged.
inline constexpr std::string_view kRemadeNote = "its copy was made again elsewhere";
// True for the states that say a replica's bytes are damaged or gone (corrupt, lost): the
// copy it was must be made again elsewhere or on the same node (replica/plan/repairer.h).
bool IsBad(ReplicaState state);
std::string_view ToString(ReplicaState state);
absl::StatusOr<ReplicaState> ParseReplicaState(std::string_view text);

// A copy of a file's bytes on one node. Keyed (inode, node), indexed (node, inode).
struct Replica {
  InodeId inode = 0;
  std::string node;
  ReplicaState state = ReplicaState::kPending;
  std::uint64_t generation = 0;  // the generation of the bytes it holds
  std::uint64_t size = 0;
  std::int64_t verified_ns = 0;  // when the bytes were last verified; 0 never
  std::int64_t updated_ns = 0;   // set by the catalog
  // The replica file's modification time as its node saw it when the replica became
  // complete (or was last verified): a file whose mtime differs was written since and is
  // not served as complete. 0: not recorded (then only the size is checked on read).
  std::int64_t mtime_ns = 0;
  // Why the record is in its state, for corrupt and lost ones ("checksum ... != catalog ...",
  // "missing"); empty otherwise.
  std::string note;
};

// A compare-and-set on one replica record (Catalog::TransitionReplicas): applied only if the
// record (inode, node) is in state `from` at `generation`. The transitions allowed:
//   complete -> complete   re-verified: verified_ns = now if `verified`, mtime_ns if non-zero
//                          (no event: a scrub pass over 10,000 replicas writes no log)
//   complete -> corrupt    the bytes do not match (size, mtime stamp or checksum); `note` why
//   complete -> lost       the file is missing
//   corrupt|lost|stale -> deleting   the node should unlink what is left and forget the record
//   complete -> deleting   only while another complete replica of the generation remains
//                          (kFailedPrecondition otherwise: never the last one)
//   complete -> unverified its node was declared dead (the repairer)
//   unverified -> complete its node checked the bytes after coming back (`verified`, `mtime_ns`,
//                          `note` kRecheckedNote); -> corrupt, lost, deleting as from complete
//   unverified -> unverified   only the note changes (kRemadeNote: the repairer's)
struct ReplicaTransition {
  InodeId inode = 0;
  std::string node;
  std::uint64_t generation = 0;
  ReplicaState from = ReplicaState::kComplete;
  ReplicaState to = ReplicaState::kComplete;
  bool verified = false;    // complete -> complete: the checksum was computed just now
  std::int64_t mtime_ns = 0;  // complete -> complete: the stamp to record (0: keep)
  std::string note;           // why (kept on the record and in the event's detail)
};

// Where a path's bytes are: the entry plus its replicas.
struct Location {
  std::string path;
  Attributes attributes;
  std::vector<Replica> replicas;
};

struct Site {
  std::string name;
  std::map<std::string, std::string> labels;  // e.g. region=jp
};

// How to write to a node's spool file system: the storage "standard characteristic" that
// `gfprobe disk DIR --store NODE` measures (netprobe/disk_probe.h) and the engine reads.
// write_io_size_bytes 0: never measured (use the engine's defaults).
struct DiskProfile {
  std::string dir;                         // the directory measured (the node's spool)
  std::uint64_t write_io_size_bytes = 0;   // size of each write call
  bool direct = false;                     // write with O_DIRECT (aligned buffers)
  std::uint64_t flush_interval_bytes = 0;  // fdatasync after this many bytes per file
  double write_mbps = 0;                   // best write rate measured, 10^6 bytes/s
  double read_mbps = 0;                    // best read rate measured, 10^6 bytes/s
  std::int64_t measured_ns = 0;            // when (Unix ns)
};
inline constexpr std::uint64_t kMaxDiskIoSize = 1ull << 30;
inline constexpr std::size_t kMaxDiskDirBytes = 4096;
// kInvalidArgument naming the field: an io size above kMaxDiskIoSize (or, with direct, not a
// multiple of 4096), a negative or NaN rate, a dir longer than kMaxDiskDirBytes.
absl::Status Validate(const DiskProfile& d);

// What a node is for, set by an operator (gfnode mode, gfnode drain): normal (takes new
// replicas), read-only (serves reads and copies from it, takes no new replica; Gfarm's
// read-only hosts) or draining (as read-only, and every replica it holds is made again
// elsewhere, after which its copy is dropped: the node can then be removed).
enum class NodeMode : std::uint8_t { kNormal = 0, kReadOnly = 1, kDraining = 2 };
std::string_view ToString(NodeMode mode);
absl::StatusOr<NodeMode> ParseNodeMode(std::string_view text);

// Whether a node is heard from: live (a heartbeat within the heartbeat timeout, gfcatalogd
// --node-timeout), suspect (silent longer: no new tasks, its open ones re-placed, its replicas
// still counted) or dead (silent past --node-dead-after: its replicas are unverified and made
// again elsewhere).
enum class NodeLiveness : std::uint8_t { kLive, kSuspect, kDead };
std::string_view ToString(NodeLiveness liveness);
NodeLiveness LivenessOf(std::int64_t last_heartbeat_ns, std::int64_t now_ns,
                        std::chrono::nanoseconds timeout, std::chrono::nanoseconds dead_after);

struct Node {
  std::string name;
  std::string site;
  std::string address;  // host:port of its gfsited
  std::string spool;    // spool directory on that host
  std::uint64_t capacity_bytes = 0;
  std::uint64_t free_bytes = 0;
  double load = 0;  // e.g. 1-minute load average
  std::uint32_t active_transfers = 0;
  std::int64_t last_heartbeat_ns = 0;  // set by the catalog on register/heartbeat
  // Copies its site agent runs at once (gfsited --workers; 0: not reported). The planner
  // keeps at least 4 x this many tasks open for the node, so that claims made ahead and
  // commits in flight do not starve the workers.
  std::uint32_t workers = 0;
  // Set only by PutNodeDisk; RegisterNode keeps the stored one (a re-registering agent does
  // not know it).
  DiskProfile disk;
  // Its agent refuses data connections in clear (gfsited --require-tls): whoever pulls from
  // or stores at it encrypts the data (set by the agent when it registers).
  bool requires_data_tls = false;
  // Set only by SetNodeMode; RegisterNode keeps the stored one.
  NodeMode mode = NodeMode::kNormal;
  // Filled by the catalog server's ListNodes (LivenessOf with its daemon's timeouts): "live",
  // "suspect", "dead"; empty where no server judged it (an embedded catalog).
  std::string liveness;
};

// What a node reports periodically.
// What a destination node saw of the traffic from one source site since its last heartbeat
// (passive route learning: the copies themselves are the measurement, no probe traffic).
struct RouteObservation {
  std::string src_site;
  std::uint64_t bytes = 0;     // received over the route in the period
  double min_rtt_ms = 0;       // least RTT the senders' TCP saw on the copies (0: none ended)
  double srtt_ms = 0;          // their smoothed RTT, averaged by bytes (0: unknown)
  double loss = 0;             // bytes re-sent / sent by the senders' TCP, 0..1
  std::uint64_t peak_bps = 0;  // best 10-s average goodput in the period (bit/s)
  // The congestion control the senders' sockets really used on the latest copy (what
  // TCP_CONGESTION read back; empty: no copy ended). Differs from the route's setting when
  // that setting did not take.
  std::string congestion;
};
// Bounds a heartbeat's observations are checked against (kInvalidArgument otherwise).
inline constexpr std::size_t kMaxRouteObservations = 1024;
inline constexpr double kMaxObservedRttMs = 60'000;
inline constexpr std::uint64_t kMaxObservedBps = 10'000'000'000'000ull;  // 10 Tbit/s

struct Heartbeat {
  std::string node;
  std::uint64_t free_bytes = 0;
  double load = 0;
  std::uint32_t active_transfers = 0;
  std::vector<RouteObservation> routes;  // routes into this node's site that carried copies
};
// kInvalidArgument naming the field for a NaN, negative or out-of-bounds observation.
absl::Status Validate(const RouteObservation& o);

// What the copies over a route taught the catalog (RouteObservation folded in).
struct RouteObserved {
  double rtt_ms = 0;            // least RTT of the latest copies (0: none yet)
  double srtt_ms = 0;           // their smoothed RTT (well above rtt_ms: a standing queue)
  double loss = 0;              // share of bytes re-sent, latest report
  std::uint64_t peak_bps = 0;   // best 10-s goodput one destination node reached
  std::int64_t peak_ns = 0;     // when (a peak older than a day gives way to a newer one)
  std::uint64_t bytes = 0;      // bytes copied over the route, all nodes together
  std::int64_t at_ns = 0;       // latest observation
  std::string congestion;       // the algorithm the latest copies' senders really used
};

// Transfer settings and measurements for traffic from src_site to dst_site.
struct Route {
  std::string src_site;
  std::string dst_site;
  std::uint32_t streams = 0;               // 0: the engine's default
  std::uint64_t socket_buffer_bytes = 0;   // 0: kernel autotuning
  std::uint64_t stripe_unit_bytes = 0;     // 0: the engine's default
  std::uint64_t stream_rate_bps = 0;       // per-stream pacing cap, 0: none
  std::uint64_t route_rate_bps = 0;        // shared by all streams on the route, 0: none
  std::string congestion_control;          // "cubic", "bbr", ...; empty: kernel default
  bool data_tls = false;                   // copies on the route encrypt their data connections
  std::uint32_t max_concurrent_tasks = 0;  // planner limit, 0: no limit
  // The route's stream budget: data streams of all open tasks on the route together, over
  // all nodes of both sites (the planner hands each task its share); 0: no budget.
  std::uint32_t total_streams = 0;
  double rtt_ms = 0;                       // measured
  std::uint64_t bandwidth_bps = 0;         // measured
  std::int64_t measured_ns = 0;
  // Learned passively from the copies (destination agents' heartbeats); only heartbeats
  // write it: PutRoute keeps the stored one.
  RouteObserved observed;
};

// `learned` with observation `o` (from one destination node, at `now_ns`) folded in: RTTs
// and loss from the latest report that has them, the peak kept unless beaten or older than
// a day, bytes summed. REQUIRES Validate(o).ok().
RouteObserved WithObservation(RouteObserved learned, const RouteObservation& o,
                              std::int64_t now_ns);

enum class RequestState : std::uint8_t {
  kQueued = 1,     // created, not yet planned
  kRunning = 2,    // planner made tasks
  kDone = 3,       // every file has its copies
  kFailed = 4,     // some files failed after their retries
  kCancelled = 5,
};
std::string_view ToString(RequestState state);
absl::StatusOr<RequestState> ParseRequestState(std::string_view text);

// Done, failed or cancelled: the request changes no more (the catalog refuses new tasks and
// state changes for it with kFailedPrecondition).
constexpr bool IsFinished(RequestState state) {
  return state == RequestState::kDone || state == RequestState::kFailed ||
         state == RequestState::kCancelled;
}

// Who made a request. What holds its files' copies afterwards (replica/plan/holds.h), which
// requests the repairer follows and whose quota a request counts against go by this field,
// never by the owner's name: a user called "repair" is a user.
enum class RequestOrigin : std::uint8_t {
  kUser = 1,    // gfrep, Replicate(), a read; `owner` names the user or program
  kPolicy = 2,  // a placement policy (replica/plan/policy_engine.h); `owner` is the rule's name
  kRepair = 3,  // the repairer restoring copies (replica/plan/repairer.h)
};
std::string_view ToString(RequestOrigin origin);
absl::StatusOr<RequestOrigin> ParseRequestOrigin(std::string_view text);

// The highest priority a user's request may ask for (CreateRequest refuses more with
// kPermissionDenied): repairs of damaged replicas run at 1000, and of a file's last copy at
// 2000 (replica/plan/repairer.h), ahead of every user. Admins, nodes and policies may go higher.
inline constexpr std::int32_t kMaxUserRequestPriority = 999;

// What gfrep (or a policy) asks for.
struct RequestSpec {
  std::vector<std::string> paths;
  std::uint32_t copies = 1;            // wanted complete replicas per file
  std::string src_site;                // empty: any
  std::vector<std::string> dst_sites;  // empty: any
  bool recursive = false;
  std::int32_t priority = 0;  // higher first
  RequestOrigin origin = RequestOrigin::kUser;
  std::string owner;  // who asked: the user, the policy rule's name, "repair"
  // At most this many files of the request are copied at once (gfrep -j); 0: no limit
  // beyond the planner's per-node and per-route limits.
  std::uint32_t parallel = 0;
};

// How a request's owner is shown: "policy:RULE" for a policy's request, the owner otherwise.
std::string DescribeOwner(const RequestSpec& spec);

struct Request {
  std::uint64_t id = 0;
  RequestSpec spec;
  RequestState state = RequestState::kQueued;
  std::string error;
  std::uint64_t files_total = 0;
  std::uint64_t files_done = 0;
  std::uint64_t files_failed = 0;
  std::uint64_t bytes_total = 0;
  std::uint64_t bytes_done = 0;
  std::int64_t created_ns = 0;
  std::int64_t updated_ns = 0;
  // The planner has listed every file of the request (AddRequestFiles with `last`): the
  // counters' totals are final, and the catalog ends the request (done or failed) in the
  // write that settles its last file.
  bool expanded = false;
  // Received so far by the request's running copies (from the agents' live telemetry; not
  // stored: filled in by a gfcatalogd that keeps telemetry, 0 elsewhere).
  std::uint64_t in_flight_bytes = 0;
};

// A request's state set by the planner: only to fail a request that cannot be expanded
// (more than kMaxBatchPaths files). Counters and done/failed move with the request's files
// (RequestFile), in the catalog's own writes.
struct RequestUpdate {
  std::uint64_t id = 0;
  bool set_state = false;
  RequestState state = RequestState::kQueued;
  std::string error;  // replaces the error when set_state
};

// One file of a request, as the catalog follows it (table request_files). Written once when
// the planner expands the request (AddRequestFiles), then moved by the catalog in the same
// atomic write as the task changes that concern it:
//   wanted  -> copying  CreateTasks made a task of the request for the file;
//   copying -> done     its last open task settled and the file has its copies
//                       (complete, current, in the requested sites);
//   copying -> failed   its last open task settled, one of its copies gave up (FailTask after
//                       max_attempts, the last lease expired) from a source that still holds
//                       the file, and it has not its copies; or it was removed mid-copy;
//   copying -> wanted   its last open task settled otherwise (abandoned, cancelled as
//                       obsolete, the file changed generation, a bad source): planned again;
//   wanted  -> done/failed  the planner found it already has its copies or cannot get them
//                       (SettleRequestFile).
// Each move to done or failed moves the request's counters in the same write, and the one
// that settles the request's last file (once expanded) ends the request.
enum class RequestFileState : std::uint8_t { kWanted = 1, kCopying = 2, kDone = 3, kFailed = 4 };
std::string_view ToString(RequestFileState state);
absl::StatusOr<RequestFileState> ParseRequestFileState(std::string_view text);
constexpr bool IsSettled(RequestFileState state) {
  return state == RequestFileState::kDone || state == RequestFileState::kFailed;
}

// Ids of request files that named nothing at expansion (no such path, a directory without
// -r): this bit and an ordinal; otherwise the id is the file's inode.
inline constexpr std::uint64_t kUnresolvedRequestFile = std::uint64_t{1} << 63;

struct RequestFile {
  std::uint64_t request_id = 0;
  std::uint64_t id = 0;  // the inode, or kUnresolvedRequestFile | ordinal
  std::string path;      // as expanded (a rename later does not change it)
  std::uint64_t size = 0;
  RequestFileState state = RequestFileState::kWanted;
  // failed: why; otherwise the error of its last failed attempt ("" if none).
  std::string reason;
  std::uint32_t attempts = 0;       // failed attempts of the request's copies of the file
  std::uint32_t open_tasks = 0;     // the request's open (queued or leased) tasks for it
  std::uint32_t failed_copies = 0;  // its copies that gave up from a source still holding it
  std::int64_t updated_ns = 0;
  // Source nodes whose copies of the file a destination gave back as too slow (YieldTask),
  // oldest first: the planner copies the file from another replica while there is one.
  std::vector<std::string> slow_sources;
};

// One file the planner lists for a request (AddRequestFiles).
struct RequestFileInput {
  std::string path;
  // Empty: the catalog looks the path up (a file: wanted; gone meanwhile: failed).
  // Otherwise the file fails with this reason (no such path, a directory without -r).
  std::string error;
};

// Which of a request's files ListRequestFiles returns: in id order after `after`.
struct RequestFileFilter {
  bool any_state = true;
  RequestFileState state = RequestFileState::kWanted;  // when !any_state
  std::uint64_t after = 0;
  std::size_t limit = 1000;
};

enum class TaskState : std::uint8_t {
  kQueued = 1,  // waiting for next_attempt_ns, then claimable by its destination node
  kLeased = 2,  // claimed; lease_owner must renew before lease_expiry_ns
  kDone = 3,    // replica committed complete
  kFailed = 4,  // gave up after max_attempts (last_error says why)
  kCancelled = 5,
};
std::string_view ToString(TaskState state);
absl::StatusOr<TaskState> ParseTaskState(std::string_view text);

// TaskSpec::dst_share_ppm of a node that has the whole route.
inline constexpr std::uint32_t kWholeRoutePpm = 1'000'000;

// One file copy from a source node to a destination node (planned by replica/).
struct TaskSpec {
  std::uint64_t request_id = 0;  // 0: not part of a request
  std::string path;
  std::string src_node;
  std::string dst_node;
  std::int32_t priority = 0;
  std::uint32_t max_attempts = 5;
  std::int64_t not_before_ns = 0;  // first attempt not before this time
  // The task's share of its route's budget (set by the planner when the route has one):
  // data streams to use, and the pacing rate of the source agent for the route (bit/s,
  // shared by the tasks from the same source node). 0: the route's own settings.
  std::uint32_t streams = 0;
  std::uint64_t route_rate_bps = 0;
  // The destination node's part of the open tasks on the task's route when the planner made
  // it, in parts per million (0: not known, as in tasks made before this field: the whole
  // route; more than kWholeRoutePpm is read as the whole). The destination agent starts a
  // burst of work with that part of the route's bytes in flight, so that the agents of one
  // site together start at what one would alone.
  std::uint32_t dst_share_ppm = 0;
};

struct Task {
  std::uint64_t id = 0;
  TaskSpec spec;
  InodeId inode = 0;             // resolved from spec.path at creation
  std::uint64_t generation = 0;  // the file generation to copy
  std::uint64_t size = 0;
  TaskState state = TaskState::kQueued;
  std::uint32_t attempts = 0;  // claims so far
  std::string lease_owner;
  std::int64_t lease_expiry_ns = 0;
  std::int64_t next_attempt_ns = 0;
  std::string last_error;
  std::int64_t created_ns = 0;
  std::int64_t updated_ns = 0;
  // Set by ClaimTasks only (not stored): the file's checksum at the task's generation, as
  // the catalog recorded it, so the claimant can check its copy without another call. Empty
  // elsewhere (and from a catalog that predates it: ask StatInode then).
  std::string checksum_algo;
  std::string checksum;
};

// kInvalidArgument unless `t` is one of the transitions ReplicaTransition allows (and its
// node a valid name, its note at most kMaxLabelBytes of UTF-8).
absl::Status Validate(const ReplicaTransition& t);

// One item of Catalog::CompleteTasks.
struct TaskCompletion {
  std::uint64_t id = 0;
  std::string owner;
  // The replica file's mtime on the destination node (Replica::mtime_ns); 0: unknown.
  std::int64_t mtime_ns = 0;
};

// One item of Catalog::RenewLeases.
struct LeaseRenewal {
  std::uint64_t id = 0;
  std::string owner;
};

struct TaskFilter {
  std::uint64_t request_id = 0;  // 0: any
  std::string dst_node;          // empty: any
  bool any_state = true;
  TaskState state = TaskState::kQueued;
  // Only open (queued or leased) tasks, found through the open-task index: cheap however
  // many finished tasks the request has (the planner's view of what is in flight).
  bool open_only = false;
  std::size_t limit = 10000;
};

// kAudit: a refused call (node = the caller's identity, state = "denied", detail = the
// refusal), written by gfcatalogd with mutual TLS. kRoute: an operator's route settings
// (PutRoute: state "set"; RemoveRoute: "removed"; node = the destination site, detail =
// "SRC->DST"); what copies teach a route (heartbeats) makes no event.
enum class EventKind : std::uint8_t {
  kReplica = 1, kTask = 2, kRequest = 3, kNode = 4, kAudit = 5, kRoute = 6
};
std::string_view ToString(EventKind kind);

// A change, in commit order. Seq is strictly increasing (gaps allowed).
struct Event {
  std::uint64_t seq = 0;
  EventKind kind = EventKind::kReplica;
  std::int64_t time_ns = 0;
  std::uint64_t id = 0;  // task or request id; inode for replicas
  std::string node;      // replica node, task dst node, node name
  std::string state;     // new state, as ToString() spells it
  std::string detail;    // e.g. a path or an error
};

// Whether `e` queued a task for `node` (what a claim's long poll and an agent's watch wait
// for).
bool QueuesTaskFor(const Event& e, std::string_view node);

// Live telemetry for the dashboard (replica/web/telemetry.h): what one site agent's running copies
// had received, sampled every 100 ms and sent in batches (the catalog server's Telemetry service).
// Not stored: the catalog's process keeps the last minutes in memory.
struct TelemetryCopy {
  std::uint64_t task_id = 0;
  std::uint64_t request_id = 0;
  std::string src_node;
  std::string src_site;
  std::uint64_t size = 0;
  std::uint32_t streams = 0;
  std::uint64_t received = 0;  // bytes the copy had received when the batch was sent
};
struct TelemetryPoint {
  std::int64_t time_ns = 0;          // the agent's clock, end of the sample
  std::vector<std::uint64_t> bytes;  // received by each copy (in `copies` order) since the
                                     // previous point (the first: since the copy began)
  // Empty (not reported) or, for each copy in order, what each of its `streams` data streams
  // carried since the previous point (their sum may lag `bytes` by what the end reports).
  std::vector<std::uint64_t> stream_bytes;
};
struct TelemetryBatch {
  std::string node;  // the destination node (the agent's)
  std::string site;
  std::int64_t sent_ns = 0;  // the agent's clock when sent (corrects for clock offsets)
  std::vector<TelemetryCopy> copies;
  std::vector<TelemetryPoint> points;
};
inline constexpr std::size_t kMaxTelemetryCopies = 4096;
inline constexpr std::size_t kMaxTelemetryPoints = 600;
inline constexpr std::uint32_t kMaxTelemetryStreams = 64;  // per copy (transfer::kMaxStreams)
// kInvalidArgument unless node/site names are valid, the sizes within bounds, every point
// has one count per copy and the points' times are increasing.
absl::Status Validate(const TelemetryBatch& batch);

// The federation's replication policies: one YAML document (its format: replica/plan/policy.h),
// stored by the catalog as text, versioned (each put adds one), and enforced by
// gfcatalogd's policy engine. The catalog does not parse it; writers check it first.
struct PolicyDocument {
  std::string text;
  std::uint64_t version = 0;  // 0: never put
  std::int64_t updated_ns = 0;
  std::string source;  // where it came from (a file name, "gfpolicy rm NAME", ...)
};
inline constexpr std::size_t kMaxPolicyBytes = 1u << 20;

// Checks one path component: non-empty, not "." or "..", no '/', no control character
// (U+0000..U+001F, U+007F: a newline in a name could forge log lines and breaks line-based
// tools), at most 255 bytes, valid UTF-8 (names travel in protobuf string fields, which must
// be UTF-8). kInvalidArgument naming the problem otherwise.
absl::Status ValidateName(std::string_view name);

// True if `text` is well-formed UTF-8 (no overlong forms, surrogates or code points
// above U+10FFFF), as protobuf requires of string fields.
bool IsValidUtf8(std::string_view text);

// The longest prefix of `text` of at most `max_bytes` that does not end inside a UTF-8
// sequence (so truncating valid UTF-8 keeps it valid).
std::string_view TruncateUtf8(std::string_view text, std::size_t max_bytes);

// Splits an absolute path into validated components ("/" gives none). Repeated and
// trailing slashes are accepted ("/a//b/" is /a/b). kInvalidArgument for relative paths,
// paths over 4096 bytes and bad components.
absl::StatusOr<std::vector<std::string>> SplitPath(std::string_view path);

// Joins components back into "/a/b" ("/" for none).
std::string JoinPath(const std::vector<std::string>& components);

}  // namespace gfrep::catalog
