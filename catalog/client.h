#pragma once

// CatalogClient is the Catalog interface (catalog/catalog.h) spoken over gRPC to a
// gfcatalogd. replica/, gfsited and the tools use it; none of them sees grpc::Status or
// protobuf types. gRPC status codes map 1:1 to absl::StatusCode; a catalog that cannot be
// reached gives kUnavailable (retry with backoff), a call past options.timeout
// kDeadlineExceeded.
//
// Thread safety: all methods may be called concurrently (one shared HTTP/2 channel).
// Calls block the calling thread; do not call from an executor thread (STYLE rule 14).

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "catalog/catalog.h"

namespace gfrep::catalog {

struct ClientOptions {
  // host:port of gfcatalogd; or, for several front ends on one database (gfcatalogd
  // --shared), a list of IP:PORT separated by commas ("10.0.0.1:7400,10.0.0.2:7400"):
  // calls are spread over the front ends that answer (gRPC round_robin), and one that goes
  // away fails only the calls in flight on it.
  std::string address;
  // PEM of the CA that signed the server certificate. Empty: plaintext (loopback/tests).
  std::string tls_root_pem;
  // PEM client certificate and key (mutual TLS: the caller's identity, catalog/identity.h).
  // Both or neither; only with tls_root_pem.
  std::string tls_cert_pem;
  std::string tls_key_pem;
  // A user token (catalog/token.h, gfauth token create) sent with every call as
  // "authorization: Bearer TOKEN": who you are without a certificate. Only with tls_root_pem.
  std::string token;
  // Per-call deadline for unary calls (ReadEvents adds its wait to this).
  std::chrono::milliseconds timeout{30000};
  // Wait for the connection to come up instead of failing fast with kUnavailable.
  bool wait_for_ready = false;
};

// Cancels a running Watch from another thread.
class WatchHandle {
 public:
  void Cancel();
  bool cancelled() const { return cancelled_.load(); }
  // Internal: set by Watch while the stream runs.
  void Attach(std::function<void()> cancel);

 private:
  std::atomic<bool> cancelled_{false};
  std::function<void()> cancel_;
  std::atomic_flag busy_ = ATOMIC_FLAG_INIT;
};

class CatalogClient final : public Catalog, public TelemetrySink {
 public:
  // Validates options and creates the channel (does not connect yet).
  static absl::StatusOr<std::unique_ptr<CatalogClient>> Create(const ClientOptions& options);
  ~CatalogClient() override;

  // Certificate rotation: calls from now on use a new channel with these PEMs (a CA, and a
  // client certificate with its key or neither); calls already running finish on the old
  // one. kFailedPrecondition for a client made without TLS. Thread-safe.
  absl::Status ReloadCredentials(const std::string& root_pem, const std::string& cert_pem,
                                 const std::string& key_pem);

  // Follows the server-streaming Watch RPC: calls `on_event` for every event with
  // seq > after_seq, in order, until on_event returns false (OK), `handle` is cancelled
  // (kCancelled) or the stream fails (kUnavailable etc.; resume from the last seq seen).
  absl::Status Watch(std::uint64_t after_seq, const std::function<bool(const Event&)>& on_event,
                     WatchHandle* handle = nullptr);

  absl::StatusOr<Attributes> Mkdir(std::string_view path, const MkdirOptions& options) override;
  absl::StatusOr<Attributes> CreateFile(std::string_view path,
                                        const FileContent& content) override;
  absl::StatusOr<WriteReservation> BeginWrite(std::string_view path,
                                              const FileContent& content) override;
  absl::StatusOr<Attributes> CommitFile(std::string_view path, const FileContent& content,
                                        std::string_view writer_node,
                                        std::optional<std::uint64_t> expected_generation) override;
  absl::StatusOr<std::vector<Attributes>> CreateFiles(const std::vector<NewFile>& files) override;
  absl::StatusOr<Attributes> Stat(std::string_view path) override;
  absl::StatusOr<std::vector<absl::StatusOr<Attributes>>> StatMany(
      const std::vector<std::string>& paths) override;
  absl::StatusOr<Attributes> StatInode(InodeId inode) override;
  absl::StatusOr<std::string> PathOf(InodeId inode) override;
  absl::StatusOr<std::vector<DirEntry>> List(std::string_view path,
                                             const ListOptions& options) override;
  absl::Status Remove(std::string_view path, bool recursive) override;
  absl::Status Rename(std::string_view from, std::string_view to) override;
  absl::StatusOr<Attributes> SetAttributes(std::string_view path, const AttributeChange& change) override;
  absl::Status RevokeToken(std::string_view id, std::int64_t expires_unix) override;
  // gfcatalogd's own business, not served over gRPC: kUnimplemented.
  absl::StatusOr<std::vector<std::pair<std::string, std::int64_t>>> RevokedTokens() override;
  absl::Status RecordAudit(std::string_view who, std::string_view what,
                           std::string_view detail) override;
  absl::StatusOr<std::size_t> PurgeFinishedRequests(std::int64_t finished_before_ns,
                                                    std::size_t max) override;
  absl::StatusOr<std::map<std::string, std::uint64_t>> StorageStats() override;

  absl::StatusOr<Location> Locate(std::string_view path) override;
  absl::StatusOr<std::vector<Replica>> GetReplicas(InodeId inode) override;
  absl::Status PutReplica(const Replica& replica) override;
  absl::Status RemoveReplica(InodeId inode, std::string_view node) override;
  absl::StatusOr<std::vector<Replica>> ListNodeReplicas(std::string_view node,
                                                        InodeId start_after,
                                                        std::size_t limit) override;

  absl::Status PutSite(const Site& site) override;
  absl::Status RemoveSite(std::string_view name) override;
  absl::StatusOr<std::vector<Site>> ListSites() override;
  absl::Status RegisterNode(const Node& node) override;
  absl::Status PutNodeDisk(std::string_view node, const DiskProfile& disk) override;
  absl::Status SetNodeMode(std::string_view node, NodeMode mode) override;
  absl::Status RemoveNode(std::string_view name) override;
  absl::StatusOr<Node> GetNode(std::string_view name) override;
  absl::StatusOr<std::vector<Node>> ListNodes(std::string_view site) override;
  absl::Status SendHeartbeat(const Heartbeat& heartbeat) override;
  absl::Status PutRoute(const Route& route) override;
  absl::Status RemoveRoute(std::string_view src_site, std::string_view dst_site) override;
  absl::StatusOr<Route> GetRoute(std::string_view src_site, std::string_view dst_site) override;
  absl::StatusOr<std::vector<Route>> ListRoutes() override;

  absl::StatusOr<Request> CreateRequest(const RequestSpec& spec) override;
  absl::StatusOr<Request> GetRequest(std::uint64_t id) override;
  absl::StatusOr<std::vector<Request>> ListRequests(bool any_state, RequestState state,
                                                    std::size_t limit) override;
  absl::StatusOr<Request> UpdateRequest(const RequestUpdate& update) override;
  absl::StatusOr<std::vector<RequestFile>> ListRequestFiles(
      std::uint64_t request_id, const RequestFileFilter& filter) override;
  // The planner's (gfcatalogd's own): kUnimplemented, as PurgeFinishedRequests.
  absl::StatusOr<Request> AddRequestFiles(std::uint64_t request_id,
                                          const std::vector<RequestFileInput>& files,
                                          bool last) override;
  absl::StatusOr<RequestFile> SettleRequestFile(std::uint64_t request_id, std::uint64_t file_id,
                                                RequestFileState state,
                                                std::string_view reason) override;
  absl::StatusOr<std::vector<Task>> CreateTasks(const std::vector<TaskSpec>& specs) override;
  absl::StatusOr<Task> GetTask(std::uint64_t id) override;
  absl::StatusOr<std::vector<Task>> ListTasks(const TaskFilter& filter) override;
  absl::StatusOr<Task> ClaimTask(std::string_view node, std::string_view owner,
                                 std::chrono::milliseconds lease) override;
  // Against a catalog server without the batch calls (kUnimplemented), these fall back to
  // one ClaimTask / CompleteTask call per item.
  absl::StatusOr<std::vector<Task>> ClaimTasks(std::string_view node,
                                               const std::vector<std::string>& owners,
                                               std::chrono::milliseconds lease,
                                               std::chrono::milliseconds wait) override;
  // Against a catalog without RenewLeases (older), one RenewLease call per item.
  absl::StatusOr<std::vector<absl::Status>> RenewLeases(const std::vector<LeaseRenewal>& items,
                                                        std::chrono::milliseconds lease) override;
  absl::StatusOr<Task> RenewLease(std::uint64_t id, std::string_view owner,
                                  std::chrono::milliseconds lease) override;
  absl::StatusOr<Task> CompleteTask(std::uint64_t id, std::string_view owner) override;
  absl::StatusOr<std::vector<absl::StatusOr<Task>>> CompleteTasks(
      const std::vector<TaskCompletion>& items) override;
  absl::StatusOr<std::vector<absl::Status>> TransitionReplicas(
      const std::vector<ReplicaTransition>& items) override;
  absl::StatusOr<PolicyDocument> GetPolicies() override;
  // TelemetrySink: to the Telemetry service of the same server.
  absl::Status Publish(const TelemetryBatch& batch) override;
  absl::StatusOr<PolicyDocument> PutPolicies(std::string_view text, std::string_view source,
                                             std::optional<std::uint64_t> expected_version) override;
  absl::StatusOr<Task> FailTask(std::uint64_t id, std::string_view owner, std::string_view error,
                                bool retryable, std::chrono::milliseconds retry_after) override;
  // Against a catalog without YieldTask (older): FailTask, retryable, without delay (the same
  // source is tried again).
  absl::StatusOr<Task> YieldTask(std::uint64_t id, std::string_view owner,
                                 std::string_view reason) override;
  absl::StatusOr<std::size_t> ExpireLeases() override;
  absl::StatusOr<Task> AbandonTask(std::uint64_t id, std::string_view reason) override;
  absl::Status CancelRequest(std::uint64_t id) override;

  absl::StatusOr<std::vector<Event>> ReadEvents(std::uint64_t after_seq, std::size_t max,
                                                std::chrono::milliseconds wait) override;
  absl::StatusOr<std::uint64_t> LastEventSeq() override;

 private:
  absl::StatusOr<std::vector<Task>> ClaimOneByOne(std::string_view node,
                                                  const std::vector<std::string>& owners,
                                                  std::chrono::milliseconds lease);
  absl::StatusOr<std::vector<absl::StatusOr<Task>>> CompleteOneByOne(
      const std::vector<TaskCompletion>& items);
  struct Impl;
  explicit CatalogClient(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace gfrep::catalog
