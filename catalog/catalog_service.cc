#include "catalog/catalog_service.h"

#include <fmt/format.h>
#include <google/protobuf/descriptor.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/security/server_credentials.h>
#include <grpcpp/security/tls_certificate_provider.h>
#include <grpcpp/security/tls_credentials_options.h>
#include <grpcpp/support/server_interceptor.h>

#include <algorithm>
#include <atomic>
#include <boost/asio/post.hpp>
#include <boost/asio/thread_pool.hpp>
#include <chrono>
#include <cstdint>

#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "catalog/authorization.h"
#include "catalog/identity.h"
#include "catalog/internal/convert.h"
#include "catalog/internal/event_waiters.h"
#include "catalog/internal/rate_limiter.h"
#include "catalog/proto/catalog.grpc.pb.h"
#include "catalog/token.h"

namespace gfrep::catalog {
namespace {

using internal::FromProto;
using internal::ToGrpc;
using internal::ToProto;
namespace v1 = ::gfrep::catalog::v1;
using namespace std::chrono_literals;

constexpr std::size_t kMaxListEntries = 1'000'000;
constexpr std::size_t kMaxEventBatch = 1000;

template <typename T, typename P>
absl::Status Fill(const absl::StatusOr<T>& result, P* out) {
  if (result.ok()) ToProto(*result, out);
  return result.status();
}

template <typename T, typename P, typename Add>
absl::Status FillList(const absl::StatusOr<std::vector<T>>& result, Add add) {
  if (result.ok()) {
    for (const T& x : *result) ToProto(x, add());
  }
  return result.status();
}

// One result per item of a batch call: code 0 and the payload, or the item's error.
template <typename T, typename Add, typename Payload>
absl::Status FillResults(const std::vector<absl::StatusOr<T>>& results, Add add, Payload payload) {
  for (const absl::StatusOr<T>& r : results) {
    auto* out = add();
    out->set_code(static_cast<int>(r.status().code()));
    if (r.ok()) {
      ToProto(*r, payload(out));
    } else {
      out->set_message(std::string(r.status().message()));
    }
  }
  return absl::OkStatus();
}

std::size_t Limit(std::uint64_t requested, std::size_t max) {
  return requested == 0 || requested > max ? max : static_cast<std::size_t>(requested);
}

class Service;

// Who makes a call, as the transport tells (what it may do: authorization.h).
struct Caller {
  std::optional<Identity> who;  // nullopt: none given (or none checked)
  std::string peer;
  bool checked = false;  // the server checks identities (it has a client CA)
};

// One Watch stream: reads the event log on the worker pool, writes one EventList per batch,
// and between batches waits without a thread (EventWaiters) for the next event, or a second
// (to notice a cancellation). Finishes when the client cancels or the server shuts down.
// Never more than one read, wait or write is outstanding, so the members need no lock; the
// reactor is deleted (OnDone) only after Finish, which only Poll calls.
class WatchReactor final : public grpc::ServerWriteReactor<v1::EventList> {
 public:
  WatchReactor(Catalog& catalog, boost::asio::thread_pool& pool, internal::EventWaiters& waiters,
               std::string identity, std::uint64_t after_seq, const std::atomic<bool>& stopping)
      : catalog_(catalog),
        pool_(pool),
        waiters_(waiters),
        identity_(std::move(identity)),
        after_seq_(after_seq),
        stopping_(stopping) {
    Schedule();
  }

  void OnWriteDone(bool ok) override {
    if (!ok) {
      Finish(grpc::Status(grpc::StatusCode::UNAVAILABLE, "watch stream broken"));
      return;
    }
    Schedule();
  }
  void OnCancel() override { cancelled_ = true; }
  void OnDone() override { delete this; }

 private:
  void Schedule() {
    boost::asio::post(pool_, [this] { Poll(); });
  }

  void Poll() {
    if (cancelled_ || stopping_) {
      Finish(grpc::Status(grpc::StatusCode::CANCELLED, "watch ended"));
      return;
    }
    absl::StatusOr<std::vector<Event>> events = catalog_.ReadEvents(after_seq_, kMaxEventBatch, 0ms);
    if (!events.ok()) {
      Finish(ToGrpc(events.status()));
      return;
    }
    if (events->empty()) {
      absl::Status s = waiters_.Wait(after_seq_, std::chrono::steady_clock::now() + 1s, identity_,
                                     [this](bool) { Schedule(); });
      if (!s.ok()) Finish(ToGrpc(s));
      return;
    }
    batch_.Clear();
    for (const Event& e : *events) ToProto(e, batch_.add_events());
    after_seq_ = events->back().seq;
    StartWrite(&batch_);
  }

  Catalog& catalog_;
  boost::asio::thread_pool& pool_;
  internal::EventWaiters& waiters_;
  const std::string identity_;
  std::uint64_t after_seq_;
  const std::atomic<bool>& stopping_;
  std::atomic<bool> cancelled_{false};
  v1::EventList batch_;
};

// A Watch refused before it started.
class RefusedWatch final : public grpc::ServerWriteReactor<v1::EventList> {
 public:
  explicit RefusedWatch(const grpc::Status& s) { Finish(s); }
  void OnDone() override { delete this; }
};

class Service final : public v1::Catalog::CallbackService {
 public:
  friend class TelemetryService;

  Service(Catalog& catalog, const ServerOptions& options)
      : catalog_(catalog),
        options_(options),
        authorizer_(catalog, AuthorizerOptions{.max_open_requests_per_user =
                                                   options.max_open_requests_per_user}),
        pool_(static_cast<std::size_t>(options.worker_threads)),
        waiters_(
            catalog, [this](std::function<void()> fn) { boost::asio::post(pool_, std::move(fn)); },
            internal::EventWaitersOptions{.max_per_identity =
                                              options.max_long_polls_per_identity}) {
    if (options.max_calls_per_identity > 0) {
      const double burst = options.max_call_burst_per_identity > 0 ? options.max_call_burst_per_identity
                                                                   : 2 * options.max_calls_per_identity;
      limiter_ = std::make_unique<internal::RateLimiter>(options.max_calls_per_identity, std::max(1.0, burst));
    }
  }

  std::uint64_t rate_limited() const { return rate_limited_.load(); }
  std::size_t long_polls_waiting() const { return waiters_.size(); }

  void Stop() {
    stopping_ = true;
    // Every waiting long poll and Watch answers now (on the pool, which Join drains).
    waiters_.Stop();
  }
  void Join() { pool_.join(); }

  std::uint64_t denied() const { return denied_.load(); }
  const ServerOptions& options() const { return options_; }

  // Loads the revoked tokens again if options_.revocation_refresh has passed since the last
  // time (a failed read leaves the set as it is, and is tried again after the interval).
  void RefreshRevokedTokens() {
    if (options_.revocation_refresh.count() <= 0) return;
    const auto now = std::chrono::steady_clock::now();
    {
      absl::MutexLock l(&revoked_mu_);
      if (now - revoked_loaded_ < options_.revocation_refresh) return;
      revoked_loaded_ = now;
    }
    (void)LoadRevokedTokens();  // ignored: see above
  }

  // The revoked tokens recorded in the catalog (at start, and by RefreshRevokedTokens).
  absl::Status LoadRevokedTokens() {
    absl::StatusOr<std::vector<std::pair<std::string, std::int64_t>>> list = catalog_.RevokedTokens();
    if (absl::IsUnimplemented(list.status())) return absl::OkStatus();
    if (!list.ok()) return list.status();
    absl::MutexLock l(&revoked_mu_);
    for (auto& [id, exp] : *list) revoked_.emplace(std::move(id), exp);
    return absl::OkStatus();
  }

 private:
  // Whose long polls a poll counts against (EventWaitersOptions::max_per_identity): the
  // caller's identity, else (no mutual TLS) its address without the port.
  std::string PollerOf(const grpc::CallbackServerContext* c) {
    absl::StatusOr<std::optional<Identity>> who = IdentityOf(c);
    if (who.ok() && who->has_value()) return (*who)->ToString();
    std::string peer = c->peer();
    if (std::size_t colon = peer.rfind(':'); colon != std::string::npos && colon > 5) {
      peer.resize(colon);
    }
    return peer;
  }

  // The caller's identity: the gfrep:// URI SANs of its verified client certificate, else a
  // user token in "authorization: Bearer TOKEN" (when the catalog has a token key). nullopt
  // for neither; kUnauthenticated for a token that is malformed, forged, expired or revoked.
  absl::StatusOr<std::optional<Identity>> IdentityOf(const grpc::CallbackServerContext* c) {
    std::shared_ptr<const grpc::AuthContext> auth = c->auth_context();
    if (auth != nullptr && auth->IsPeerAuthenticated()) {
      std::vector<std::string> uris;
      for (const grpc::string_ref& uri : auth->FindPropertyValues(GRPC_PEER_URI_PROPERTY_NAME)) {
        uris.emplace_back(uri.data(), uri.size());
      }
      if (std::optional<Identity> id = IdentityFromUris(uris)) return id;
    }
    const auto& meta = c->client_metadata();
    auto it = meta.find("authorization");
    if (it == meta.end() || options_.token_key.empty()) return std::optional<Identity>();
    std::string_view value(it->second.data(), it->second.size());
    constexpr std::string_view kBearer = "Bearer ";
    if (!value.starts_with(kBearer)) {
      return absl::UnauthenticatedError("authorization metadata: want 'Bearer TOKEN'");
    }
    const std::int64_t now = std::chrono::duration_cast<std::chrono::seconds>(
                                 std::chrono::system_clock::now().time_since_epoch())
                                 .count();
    absl::StatusOr<TokenClaims> claims = VerifyToken(value.substr(kBearer.size()), options_.token_key, now);
    if (!claims.ok()) return claims.status();
    RefreshRevokedTokens();
    {
      absl::MutexLock l(&revoked_mu_);
      if (revoked_.contains(claims->id)) {
        return absl::UnauthenticatedError(
            fmt::format("token refused: token {} of user {} was revoked", claims->id, claims->user));
      }
    }
    Identity id;
    id.role = Role::kUser;
    id.name = claims->user;
    id.groups = std::move(claims->groups);
    id.scopes = std::move(claims->scopes);
    id.token_id = claims->id;
    return std::optional<Identity>(std::move(id));
  }

  // Lets the call of `c` in: nullptr, with *caller set, when it may go on (its identity is
  // known, or the server checks none, and it is within its rate); otherwise the call,
  // finished (UNAUTHENTICATED: a bad token, audited; RESOURCE_EXHAUSTED: over its rate).
  // What the caller may do is the AuthorizedCatalog's business (As).
  grpc::ServerUnaryReactor* Admit(grpc::CallbackServerContext* c, std::string_view action,
                                  Caller* caller) {
    if (options_.tls_client_ca_pem.empty()) return nullptr;
    absl::StatusOr<std::optional<Identity>> identified = IdentityOf(c);
    if (!identified.ok()) {
      denied_ += 1;
      if (options_.on_denied) options_.on_denied(identified.status());
      Audit("unidentified", fmt::format("{}: {} [from {}]", action, std::string(identified.status().message()), c->peer()));
      grpc::ServerUnaryReactor* reactor = c->DefaultReactor();
      reactor->Finish(ToGrpc(identified.status()));
      return reactor;
    }
    caller->who = *identified;
    caller->peer = c->peer();
    caller->checked = true;
    if (!caller->who.has_value()) return nullptr;  // refused by the AuthorizedCatalog
    return OverRate(c, action, *caller->who);
  }

  // The catalog as `caller` may use it; its refusals are counted, logged and audited.
  AuthorizedCatalog As(const Caller& caller) {
    return authorizer_.As(caller.who, caller.checked, [this, caller](const absl::Status& s) {
      denied_ += 1;
      if (options_.on_denied) options_.on_denied(s);
      Audit(caller.who ? caller.who->ToString() : "unidentified",
            fmt::format("{} [from {}]", std::string(s.message()), caller.peer));
    });
  }

  // Admits the call and runs fn(catalog as the caller may use it) on the worker pool.
  template <typename Fn>
  grpc::ServerUnaryReactor* Run(grpc::CallbackServerContext* c, std::string_view action, Fn fn) {
    Caller caller;
    if (grpc::ServerUnaryReactor* refused = Admit(c, action, &caller)) return refused;
    return Offload(c, [this, caller = std::move(caller), fn = std::move(fn)]() mutable {
      AuthorizedCatalog cat = As(caller);
      return fn(static_cast<Catalog&>(cat));
    });
  }
  // The same on the gRPC thread, for short point lookups.
  template <typename Fn>
  grpc::ServerUnaryReactor* RunInline(grpc::CallbackServerContext* c, std::string_view action,
                                      Fn fn) {
    Caller caller;
    if (grpc::ServerUnaryReactor* refused = Admit(c, action, &caller)) return refused;
    return Inline(c, [&] {
      AuthorizedCatalog cat = As(caller);
      return fn(static_cast<Catalog&>(cat));
    });
  }

  // The rate limit of an authorized caller: nullptr while it is within its rate; otherwise
  // the call, finished with RESOURCE_EXHAUSTED and when to retry.
  grpc::ServerUnaryReactor* OverRate(grpc::CallbackServerContext* c, std::string_view action,
                                     const Identity& who) {
    if (limiter_ == nullptr) return nullptr;
    Identity key = who;  // one rate per user, whichever token or certificate it uses
    key.token_id.clear();
    const std::chrono::milliseconds wait = limiter_->Acquire(key.ToString());
    if (wait.count() == 0) return nullptr;
    rate_limited_ += 1;
    c->AddTrailingMetadata("gfrep-retry-after-ms", std::to_string(wait.count()));
    grpc::ServerUnaryReactor* reactor = c->DefaultReactor();
    reactor->Finish(grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED,
                                 fmt::format("{}: {} is over its rate of {:g} calls a second; retry in {} ms",
                                             action, who.ToString(), options_.max_calls_per_identity,
                                             wait.count())));
    return reactor;
  }

  // An audit event for a refused call, written off the gRPC thread. At most kAuditPerSecond
  // a second: a flood of refused calls must not become a flood of fsyncs; the next record
  // says how many were left out.
  static constexpr int kAuditPerSecond = 100;
  void Audit(std::string who, std::string detail) {
    {
      absl::MutexLock lock(&audit_mu_);
      const auto now = std::chrono::steady_clock::now();
      if (now - audit_window_ >= std::chrono::seconds(1)) {
        audit_window_ = now;
        audit_in_window_ = 0;
      }
      if (audit_in_window_ >= kAuditPerSecond) {
        audit_skipped_ += 1;
        return;
      }
      audit_in_window_ += 1;
      if (audit_skipped_ > 0) {
        detail += fmt::format(" ({} earlier refusals not recorded: more than {} a second)", audit_skipped_,
                              kAuditPerSecond);
        audit_skipped_ = 0;
      }
    }
    boost::asio::post(pool_, [this, who = std::move(who), detail = std::move(detail)] {
      absl::Status s = catalog_.RecordAudit(who, "denied", detail);
      if (!s.ok() && !absl::IsUnimplemented(s) && options_.on_denied) {
        options_.on_denied(absl::Status(s.code(), fmt::format("audit event for {} not recorded: {}", who, std::string(s.message()))));
      }
    });
  }

  // One ClaimTasks long poll (ClaimTasks above).
  struct ClaimPoll {
    grpc::ServerUnaryReactor* reactor = nullptr;
    const v1::ClaimTasksRequest* req = nullptr;
    v1::TaskList* resp = nullptr;
    Caller caller;
    std::vector<std::string> owners;
    std::string identity;
    std::chrono::steady_clock::time_point deadline;
    std::uint64_t seen = 0;  // events up to this one were looked at
  };
  // On the pool: the first time, notes the log's end and claims; woken by EventWaiters,
  // reads the new events and claims only if one of them queued a task for the node. With
  // nothing claimed, waits again (until the deadline: then the answer is empty).
  void ClaimOrWait(const std::shared_ptr<ClaimPoll>& poll, bool woken) {
    auto finish = [&poll](absl::StatusOr<std::vector<Task>> claimed) {
      v1::TaskList* resp = poll->resp;
      poll->reactor->Finish(ToGrpc(
          FillList<Task, v1::Task>(std::move(claimed), [resp] { return resp->add_tasks(); })));
    };
    const v1::ClaimTasksRequest& req = *poll->req;
    bool queued = !woken;
    if (!woken) {
      absl::StatusOr<std::uint64_t> last = catalog_.LastEventSeq();
      if (!last.ok()) return finish(last.status());
      poll->seen = *last;  // before the claim: a task queued after it is a later event
    } else {
      absl::StatusOr<std::vector<Event>> events = catalog_.ReadEvents(poll->seen, kMaxEventBatch, 0ms);
      if (!events.ok()) return finish(std::vector<Task>{});  // nothing claimed, as if timed out
      for (const Event& e : *events) queued = queued || QueuesTaskFor(e, req.node());
      if (!events->empty()) poll->seen = events->back().seq;
    }
    if (queued) {
      AuthorizedCatalog cat = As(poll->caller);
      absl::StatusOr<std::vector<Task>> claimed = static_cast<Catalog&>(cat).ClaimTasks(
          req.node(), poll->owners, std::chrono::milliseconds(req.lease_ms()), 0ms);
      if (!claimed.ok() || !claimed->empty() || poll->owners.empty()) {
        return finish(std::move(claimed));
      }
    }
    if (stopping_ || std::chrono::steady_clock::now() >= poll->deadline) {
      return finish(std::vector<Task>{});
    }
    // The waiter's callback runs on the pool (EventWaiters' dispatch).
    absl::Status s = waiters_.Wait(poll->seen, poll->deadline, poll->identity,
                                   [this, poll](bool timed_out) {
                                     if (timed_out) {
                                       poll->reactor->Finish(grpc::Status::OK);  // none claimed
                                     } else {
                                       ClaimOrWait(poll, /*woken=*/true);
                                     }
                                   });
    if (!s.ok()) finish(s);
  }

  // Runs fn (returning absl::Status) on the worker pool and finishes the call with it.
  template <typename Fn>
  grpc::ServerUnaryReactor* Offload(grpc::CallbackServerContext* context, Fn fn) {
    return OffloadTo(pool_, context, std::move(fn));
  }
  template <typename Fn>
  grpc::ServerUnaryReactor* OffloadTo(boost::asio::thread_pool& pool,
                                      grpc::CallbackServerContext* context, Fn fn) {
    grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
    boost::asio::post(pool, [reactor, fn = std::move(fn)]() mutable {
      reactor->Finish(ToGrpc(fn()));
    });
    return reactor;
  }
  // For short point lookups: runs fn on the gRPC thread.
  template <typename Fn>
  grpc::ServerUnaryReactor* Inline(grpc::CallbackServerContext* context, Fn fn) {
    grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
    reactor->Finish(ToGrpc(fn()));
    return reactor;
  }

  grpc::ServerUnaryReactor* Mkdir(grpc::CallbackServerContext* c, const v1::MkdirRequest* req,
                                  v1::Attributes* resp) override {
    return Run(c, "Mkdir", [req, resp](Catalog& cat) {
      MkdirOptions o;
      o.parents = req->parents();
      o.mode = req->mode();
      o.owner = req->owner();
      return Fill(cat.Mkdir(req->path(), o), resp);
    });
  }

  grpc::ServerUnaryReactor* CreateFile(grpc::CallbackServerContext* c,
                                       const v1::CreateFileRequest* req,
                                       v1::Attributes* resp) override {
    return Run(c, "CreateFile", [req, resp](Catalog& cat) {
      FileContent content = FromProto(req->content());
      return Fill(cat.CreateFile(req->path(), content), resp);
    });
  }

  grpc::ServerUnaryReactor* BeginWrite(grpc::CallbackServerContext* c,
                                       const v1::CreateFileRequest* req,
                                       v1::WriteReservation* resp) override {
    return Run(c, "BeginWrite", [req, resp](Catalog& cat) {
      FileContent content = FromProto(req->content());
      absl::StatusOr<WriteReservation> r = cat.BeginWrite(req->path(), content);
      if (r.ok()) {
        ToProto(r->attributes, resp->mutable_attributes());
        resp->set_generation(r->generation);
      }
      return r.status();
    });
  }

  grpc::ServerUnaryReactor* CommitFile(grpc::CallbackServerContext* c,
                                       const v1::CommitFileRequest* req,
                                       v1::Attributes* resp) override {
    return Run(c, "CommitFile", [req, resp](Catalog& cat) {
      FileContent content = FromProto(req->content());
      std::optional<std::uint64_t> expected;
      if (req->has_expected_generation()) expected = req->expected_generation();
      return Fill(cat.CommitFile(req->path(), content, req->writer_node(), expected), resp);
    });
  }

  grpc::ServerUnaryReactor* CreateFiles(grpc::CallbackServerContext* c,
                                        const v1::CreateFilesRequest* req,
                                        v1::AttributesList* resp) override {
    return Run(c, "CreateFiles", [req, resp](Catalog& cat) {
      std::vector<NewFile> files;
      files.reserve(static_cast<std::size_t>(req->files_size()));
      for (const v1::CreateFileRequest& f : req->files()) {
        NewFile n{f.path(), FromProto(f.content())};
        files.push_back(std::move(n));
      }
      return FillList<Attributes, v1::Attributes>(cat.CreateFiles(files),
                                                  [resp] { return resp->add_attributes(); });
    });
  }

  grpc::ServerUnaryReactor* StatMany(grpc::CallbackServerContext* c,
                                     const v1::StatManyRequest* req,
                                     v1::StatManyResponse* resp) override {
    return Run(c, "StatMany", [req, resp](Catalog& cat) {
      std::vector<std::string> paths(req->paths().begin(), req->paths().end());
      absl::StatusOr<std::vector<absl::StatusOr<Attributes>>> results = cat.StatMany(paths);
      if (!results.ok()) return results.status();
      return FillResults(*results, [resp] { return resp->add_results(); },
                         [](v1::StatResult* out) { return out->mutable_attributes(); });
    });
  }

  grpc::ServerUnaryReactor* Stat(grpc::CallbackServerContext* c, const v1::PathRequest* req,
                                 v1::Attributes* resp) override {
    return RunInline(c, "Stat", [&](Catalog& cat) { return Fill(cat.Stat(req->path()), resp); });
  }

  grpc::ServerUnaryReactor* StatInode(grpc::CallbackServerContext* c, const v1::InodeRequest* req,
                                      v1::Attributes* resp) override {
    return RunInline(c, "StatInode",
                     [&](Catalog& cat) { return Fill(cat.StatInode(req->inode()), resp); });
  }

  grpc::ServerUnaryReactor* PathOf(grpc::CallbackServerContext* c, const v1::InodeRequest* req,
                                   v1::PathResponse* resp) override {
    return RunInline(c, "PathOf", [&](Catalog& cat) {
      absl::StatusOr<std::string> p = cat.PathOf(req->inode());
      if (p.ok()) resp->set_path(*p);
      return p.status();
    });
  }

  grpc::ServerUnaryReactor* List(grpc::CallbackServerContext* c, const v1::ListRequest* req,
                                 v1::ListResponse* resp) override {
    return Run(c, "List", [req, resp](Catalog& cat) {
      ListOptions o;
      o.start_after = req->start_after();
      o.limit = Limit(req->limit(), kMaxListEntries);
      absl::StatusOr<std::vector<DirEntry>> list = cat.List(req->path(), o);
      if (!list.ok()) return list.status();
      resp->mutable_entries()->Reserve(static_cast<int>(list->size()));
      for (const DirEntry& e : *list) {
        v1::DirEntry* out = resp->add_entries();
        out->set_name(e.name);
        ToProto(e.attributes, out->mutable_attributes());
      }
      return absl::OkStatus();
    });
  }

  grpc::ServerUnaryReactor* Remove(grpc::CallbackServerContext* c, const v1::RemoveRequest* req,
                                   v1::Empty*) override {
    return Run(c, "Remove",
               [req](Catalog& cat) { return cat.Remove(req->path(), req->recursive()); });
  }

  grpc::ServerUnaryReactor* Rename(grpc::CallbackServerContext* c, const v1::RenameRequest* req,
                                   v1::Empty*) override {
    return Run(c, "Rename", [req](Catalog& cat) { return cat.Rename(req->from(), req->to()); });
  }

  grpc::ServerUnaryReactor* SetAttributes(grpc::CallbackServerContext* c, const v1::SetAttributesRequest* req,
                                          v1::Attributes* resp) override {
    return Run(c, "SetAttributes", [req, resp](Catalog& cat) {
      AttributeChange change;
      if (req->has_mode()) change.mode = req->mode();
      if (req->has_owner()) change.owner = req->owner();
      if (req->has_group()) change.group = req->group();
      return Fill(cat.SetAttributes(req->path(), change), resp);
    });
  }

  grpc::ServerUnaryReactor* RevokeToken(grpc::CallbackServerContext* c, const v1::RevokeTokenRequest* req,
                                        v1::Empty*) override {
    return Run(c, "RevokeToken", [this, req](Catalog& cat) {
      if (absl::Status s = cat.RevokeToken(req->id(), req->expires_unix()); !s.ok()) return s;
      absl::MutexLock l(&revoked_mu_);
      revoked_[req->id()] = req->expires_unix();
      // Expired tokens are refused as such: their revocations need not be held (the catalog
      // deleted its records of them just now).
      const std::int64_t now = std::chrono::duration_cast<std::chrono::seconds>(
                                   std::chrono::system_clock::now().time_since_epoch()).count();
      for (auto it = revoked_.begin(); it != revoked_.end();) {
        if (it->second < now) {
          revoked_.erase(it++);
        } else {
          ++it;
        }
      }
      return absl::OkStatus();
    });
  }

  grpc::ServerUnaryReactor* Locate(grpc::CallbackServerContext* c, const v1::PathRequest* req,
                                   v1::Location* resp) override {
    return Run(c, "Locate",
               [req, resp](Catalog& cat) { return Fill(cat.Locate(req->path()), resp); });
  }

  grpc::ServerUnaryReactor* GetReplicas(grpc::CallbackServerContext* c,
                                        const v1::InodeRequest* req,
                                        v1::ReplicaList* resp) override {
    return Run(c, "GetReplicas", [req, resp](Catalog& cat) {
      return FillList<Replica, v1::Replica>(cat.GetReplicas(req->inode()),
                                            [resp] { return resp->add_replicas(); });
    });
  }

  grpc::ServerUnaryReactor* PutReplica(grpc::CallbackServerContext* c, const v1::Replica* req,
                                       v1::Empty*) override {
    return Run(c, "PutReplica", [req](Catalog& cat) {
      absl::StatusOr<Replica> r = FromProto(*req);
      if (!r.ok()) return r.status();
      return cat.PutReplica(*r);
    });
  }

  grpc::ServerUnaryReactor* RemoveReplica(grpc::CallbackServerContext* c,
                                          const v1::RemoveReplicaRequest* req,
                                          v1::Empty*) override {
    return Run(c, "RemoveReplica",
               [req](Catalog& cat) { return cat.RemoveReplica(req->inode(), req->node()); });
  }

  grpc::ServerUnaryReactor* ListNodeReplicas(grpc::CallbackServerContext* c,
                                             const v1::ListNodeReplicasRequest* req,
                                             v1::ReplicaList* resp) override {
    return Run(c, "ListNodeReplicas", [req, resp](Catalog& cat) {
      return FillList<Replica, v1::Replica>(
          cat.ListNodeReplicas(req->node(), req->start_after(),
                               Limit(req->limit(), kMaxListEntries)),
          [resp] { return resp->add_replicas(); });
    });
  }

  grpc::ServerUnaryReactor* PutSite(grpc::CallbackServerContext* c, const v1::Site* req,
                                    v1::Empty*) override {
    return Run(c, "PutSite", [req](Catalog& cat) { return cat.PutSite(FromProto(*req)); });
  }

  grpc::ServerUnaryReactor* RemoveSite(grpc::CallbackServerContext* c, const v1::NameRequest* req,
                                       v1::Empty*) override {
    return Run(c, "RemoveSite", [req](Catalog& cat) { return cat.RemoveSite(req->name()); });
  }

  grpc::ServerUnaryReactor* ListSites(grpc::CallbackServerContext* c, const v1::Empty*,
                                      v1::SiteList* resp) override {
    return Run(c, "ListSites", [resp](Catalog& cat) {
      return FillList<Site, v1::Site>(cat.ListSites(), [resp] { return resp->add_sites(); });
    });
  }

  grpc::ServerUnaryReactor* RegisterNode(grpc::CallbackServerContext* c, const v1::Node* req,
                                         v1::Empty*) override {
    return Run(c, "RegisterNode",
               [req](Catalog& cat) -> absl::Status {
                 absl::StatusOr<Node> n = FromProto(*req);
                 if (!n.ok()) return n.status();
                 return cat.RegisterNode(*n);
               });
  }

  grpc::ServerUnaryReactor* PutNodeDisk(grpc::CallbackServerContext* c, const v1::PutNodeDiskRequest* req,
                                        v1::Empty*) override {
    return Run(c, "PutNodeDisk", [req](Catalog& cat) {
      return cat.PutNodeDisk(req->node(), FromProto(req->disk()));
    });
  }

  grpc::ServerUnaryReactor* SetNodeMode(grpc::CallbackServerContext* c,
                                        const v1::SetNodeModeRequest* req, v1::Empty*) override {
    return Run(c, "SetNodeMode", [req](Catalog& cat) -> absl::Status {
      if (req->mode() < v1::NODE_NORMAL || req->mode() > v1::NODE_DRAINING) {
        return absl::InvalidArgumentError(fmt::format("bad node mode {}", static_cast<int>(req->mode())));
      }
      return cat.SetNodeMode(req->node(), static_cast<NodeMode>(req->mode()));
    });
  }

  grpc::ServerUnaryReactor* RemoveNode(grpc::CallbackServerContext* c, const v1::NameRequest* req,
                                       v1::Empty*) override {
    return Run(c, "RemoveNode", [req](Catalog& cat) { return cat.RemoveNode(req->name()); });
  }

  grpc::ServerUnaryReactor* GetNode(grpc::CallbackServerContext* c, const v1::NameRequest* req,
                                    v1::Node* resp) override {
    return RunInline(c, "GetNode",
                     [&](Catalog& cat) { return Fill(cat.GetNode(req->name()), resp); });
  }

  grpc::ServerUnaryReactor* ListNodes(grpc::CallbackServerContext* c,
                                      const v1::ListNodesRequest* req,
                                      v1::NodeList* resp) override {
    return Run(c, "ListNodes", [this, req, resp](Catalog& cat) {
      absl::StatusOr<std::vector<Node>> nodes = cat.ListNodes(req->site());
      if (nodes.ok() && options_.node_timeout.count() > 0) {
        const std::int64_t now = SystemNowNs();
        for (Node& n : *nodes) {
          n.liveness = std::string(ToString(LivenessOf(n.last_heartbeat_ns, now,
                                                       options_.node_timeout,
                                                       options_.node_dead_after)));
        }
      }
      return FillList<Node, v1::Node>(nodes, [resp] { return resp->add_nodes(); });
    });
  }

  grpc::ServerUnaryReactor* SendHeartbeat(grpc::CallbackServerContext* c,
                                          const v1::HeartbeatRequest* req, v1::Empty*) override {
    return Run(c, "SendHeartbeat",
               [req](Catalog& cat) { return cat.SendHeartbeat(FromProto(*req)); });
  }

  grpc::ServerUnaryReactor* PutRoute(grpc::CallbackServerContext* c, const v1::Route* req,
                                     v1::Empty*) override {
    return Run(c, "PutRoute", [req](Catalog& cat) { return cat.PutRoute(FromProto(*req)); });
  }

  grpc::ServerUnaryReactor* RemoveRoute(grpc::CallbackServerContext* c, const v1::RouteKey* req,
                                        v1::Empty*) override {
    return Run(c, "RemoveRoute",
               [req](Catalog& cat) { return cat.RemoveRoute(req->src_site(), req->dst_site()); });
  }

  grpc::ServerUnaryReactor* GetRoute(grpc::CallbackServerContext* c, const v1::RouteKey* req,
                                     v1::Route* resp) override {
    return RunInline(c, "GetRoute", [&](Catalog& cat) {
      return Fill(cat.GetRoute(req->src_site(), req->dst_site()), resp);
    });
  }

  grpc::ServerUnaryReactor* ListRoutes(grpc::CallbackServerContext* c, const v1::Empty*,
                                       v1::RouteList* resp) override {
    return Run(c, "ListRoutes", [resp](Catalog& cat) {
      return FillList<Route, v1::Route>(cat.ListRoutes(), [resp] { return resp->add_routes(); });
    });
  }

  grpc::ServerUnaryReactor* CreateRequest(grpc::CallbackServerContext* c,
                                          const v1::RequestSpec* req,
                                          v1::Request* resp) override {
    return Run(c, "CreateRequest", [req, resp](Catalog& cat) {
      absl::StatusOr<RequestSpec> asked = FromProto(*req);
      if (!asked.ok()) return asked.status();
      RequestSpec spec = std::move(*asked);
      return Fill(cat.CreateRequest(spec), resp);
    });
  }

  grpc::ServerUnaryReactor* GetRequest(grpc::CallbackServerContext* c, const v1::IdRequest* req,
                                       v1::Request* resp) override {
    return RunInline(c, "GetRequest", [&](Catalog& cat) {
      absl::StatusOr<Request> r = cat.GetRequest(req->id());
      if (r.ok() && options_.request_in_flight)
        r->in_flight_bytes = options_.request_in_flight(r->id);
      return Fill(std::move(r), resp);
    });
  }

  grpc::ServerUnaryReactor* ListRequests(grpc::CallbackServerContext* c,
                                         const v1::ListRequestsRequest* req,
                                         v1::RequestList* resp) override {
    return Run(c, "ListRequests", [this, req, resp](Catalog& cat) {
      RequestState state = RequestState::kQueued;
      if (!req->any_state()) {
        absl::StatusOr<RequestState> s = FromProto(req->state());
        if (!s.ok()) return s.status();
        state = *s;
      }
      absl::StatusOr<std::vector<Request>> list =
          cat.ListRequests(req->any_state(), state, Limit(req->limit(), kMaxListEntries));
      if (list.ok() && options_.request_in_flight) {
        for (Request& r : *list) {
          if (r.state == RequestState::kRunning)
            r.in_flight_bytes = options_.request_in_flight(r.id);
        }
      }
      return FillList<Request, v1::Request>(std::move(list), [resp] { return resp->add_requests(); });
    });
  }

  grpc::ServerUnaryReactor* UpdateRequest(grpc::CallbackServerContext* c,
                                          const v1::UpdateRequestRequest* req,
                                          v1::Request* resp) override {
    return Run(c, "UpdateRequest", [req, resp](Catalog& cat) {
      RequestUpdate u;
      u.id = req->id();
      u.set_state = req->set_state();
      if (u.set_state) {
        absl::StatusOr<RequestState> s = FromProto(req->state());
        if (!s.ok()) return s.status();
        u.state = *s;
      }
      u.error = req->error();
      return Fill(cat.UpdateRequest(u), resp);
    });
  }

  grpc::ServerUnaryReactor* ListRequestFiles(grpc::CallbackServerContext* c,
                                             const v1::ListRequestFilesRequest* req,
                                             v1::RequestFileList* resp) override {
    return Run(c, "ListRequestFiles", [req, resp](Catalog& cat) {
      RequestFileFilter f;
      f.any_state = req->any_state();
      if (!f.any_state) {
        absl::StatusOr<RequestFileState> s = FromProto(req->state());
        if (!s.ok()) return s.status();
        f.state = *s;
      }
      f.after = req->after();
      f.limit = Limit(req->limit(), kMaxListEntries);
      return FillList<RequestFile, v1::RequestFile>(cat.ListRequestFiles(req->request_id(), f),
                                                    [resp] { return resp->add_files(); });
    });
  }

  grpc::ServerUnaryReactor* CancelRequest(grpc::CallbackServerContext* c,
                                          const v1::IdRequest* req, v1::Empty*) override {
    return Run(c, "CancelRequest", [req](Catalog& cat) { return cat.CancelRequest(req->id()); });
  }

  grpc::ServerUnaryReactor* CreateTasks(grpc::CallbackServerContext* c,
                                        const v1::CreateTasksRequest* req,
                                        v1::TaskList* resp) override {
    return Run(c, "CreateTasks", [req, resp](Catalog& cat) {
      std::vector<TaskSpec> specs;
      specs.reserve(static_cast<std::size_t>(req->specs_size()));
      for (const v1::TaskSpec& s : req->specs()) specs.push_back(FromProto(s));
      return FillList<Task, v1::Task>(cat.CreateTasks(specs), [resp] { return resp->add_tasks(); });
    });
  }

  grpc::ServerUnaryReactor* GetTask(grpc::CallbackServerContext* c, const v1::IdRequest* req,
                                    v1::Task* resp) override {
    return RunInline(c, "GetTask",
                     [&](Catalog& cat) { return Fill(cat.GetTask(req->id()), resp); });
  }

  grpc::ServerUnaryReactor* ListTasks(grpc::CallbackServerContext* c,
                                      const v1::ListTasksRequest* req,
                                      v1::TaskList* resp) override {
    return Run(c, "ListTasks", [req, resp](Catalog& cat) {
      TaskFilter f;
      f.request_id = req->request_id();
      f.dst_node = req->dst_node();
      f.any_state = req->any_state();
      if (!f.any_state) {
        absl::StatusOr<TaskState> s = FromProto(req->state());
        if (!s.ok()) return s.status();
        f.state = *s;
      }
      f.open_only = req->open_only();
      f.limit = Limit(req->limit(), kMaxListEntries);
      return FillList<Task, v1::Task>(cat.ListTasks(f), [resp] { return resp->add_tasks(); });
    });
  }

  grpc::ServerUnaryReactor* ClaimTask(grpc::CallbackServerContext* c,
                                      const v1::ClaimTaskRequest* req, v1::Task* resp) override {
    return Run(c, "ClaimTask", [req, resp](Catalog& cat) {
      return Fill(
          cat.ClaimTask(req->node(), req->owner(), std::chrono::milliseconds(req->lease_ms())),
          resp);
    });
  }

  grpc::ServerUnaryReactor* ClaimTasks(grpc::CallbackServerContext* c,
                                       const v1::ClaimTasksRequest* req, v1::TaskList* resp) override {
    const std::chrono::milliseconds wait(std::min<std::uint64_t>(
        req->wait_ms(), static_cast<std::uint64_t>(options_.max_event_wait.count())));
    if (wait.count() == 0) {
      return Run(c, "ClaimTasks", [req, resp](Catalog& cat) {
        std::vector<std::string> owners(req->owners().begin(), req->owners().end());
        return FillList<Task, v1::Task>(
            cat.ClaimTasks(req->node(), owners, std::chrono::milliseconds(req->lease_ms()), 0ms),
            [resp] { return resp->add_tasks(); });
      });
    }
    // A long poll: claim on the pool; with nothing claimable, wait without a thread
    // (EventWaiters) for the next events and claim again once one queued a task for the
    // node, until the deadline.
    auto poll = std::make_shared<ClaimPoll>();
    if (grpc::ServerUnaryReactor* refused = Admit(c, "ClaimTasks", &poll->caller)) return refused;
    poll->reactor = c->DefaultReactor();
    poll->req = req;
    poll->resp = resp;
    poll->owners.assign(req->owners().begin(), req->owners().end());
    poll->identity = PollerOf(c);
    poll->deadline = std::chrono::steady_clock::now() + wait;
    grpc::ServerUnaryReactor* reactor = poll->reactor;
    boost::asio::post(pool_, [this, poll] { ClaimOrWait(poll, /*woken=*/false); });
    return reactor;
  }

  grpc::ServerUnaryReactor* RenewLease(grpc::CallbackServerContext* c,
                                       const v1::RenewLeaseRequest* req, v1::Task* resp) override {
    return Run(c, "RenewLease", [req, resp](Catalog& cat) {
      return Fill(
          cat.RenewLease(req->id(), req->owner(), std::chrono::milliseconds(req->lease_ms())),
          resp);
    });
  }

  grpc::ServerUnaryReactor* RenewLeases(grpc::CallbackServerContext* c,
                                        const v1::RenewLeasesRequest* req,
                                        v1::RenewLeasesResponse* resp) override {
    return Run(c, "RenewLeases", [req, resp](Catalog& cat) -> absl::Status {
      std::vector<LeaseRenewal> items;
      items.reserve(static_cast<std::size_t>(req->items_size()));
      for (const v1::RenewLeasesRequest::Item& i : req->items())
        items.push_back({i.id(), i.owner()});
      absl::StatusOr<std::vector<absl::Status>> results =
          cat.RenewLeases(items, std::chrono::milliseconds(req->lease_ms()));
      if (!results.ok()) return results.status();
      for (const absl::Status& r : *results) {
        v1::LeaseResult* out = resp->add_results();
        out->set_code(static_cast<int>(r.code()));
        out->set_message(std::string(r.message()));
      }
      return absl::OkStatus();
    });
  }

  grpc::ServerUnaryReactor* CompleteTask(grpc::CallbackServerContext* c,
                                         const v1::CompleteTaskRequest* req,
                                         v1::Task* resp) override {
    return Run(c, "CompleteTask", [req, resp](Catalog& cat) {
      return Fill(cat.CompleteTask(req->id(), req->owner()), resp);
    });
  }

  grpc::ServerUnaryReactor* CompleteTasks(grpc::CallbackServerContext* c,
                                          const v1::CompleteTasksRequest* req,
                                          v1::CompleteTasksResponse* resp) override {
    return Run(c, "CompleteTasks", [req, resp](Catalog& cat) {
      std::vector<TaskCompletion> items;
      items.reserve(static_cast<std::size_t>(req->items_size()));
      for (const v1::CompleteTaskRequest& i : req->items()) {
        items.push_back({i.id(), i.owner(), i.mtime_ns()});
      }
      absl::StatusOr<std::vector<absl::StatusOr<Task>>> results = cat.CompleteTasks(items);
      if (!results.ok()) return results.status();
      return FillResults(*results, [resp] { return resp->add_results(); },
                         [](v1::TaskResult* out) { return out->mutable_task(); });
    });
  }

  grpc::ServerUnaryReactor* TransitionReplicas(grpc::CallbackServerContext* c,
                                               const v1::TransitionReplicasRequest* req,
                                               v1::TransitionReplicasResponse* resp) override {
    return Run(c, "TransitionReplicas", [req, resp](Catalog& cat) -> absl::Status {
      std::vector<ReplicaTransition> items;
      items.reserve(static_cast<std::size_t>(req->items_size()));
      for (const v1::ReplicaTransition& i : req->items()) {
        for (v1::ReplicaState s : {i.from(), i.to()}) {
          if (s < v1::PENDING || s > v1::UNVERIFIED) {
            return absl::InvalidArgumentError(fmt::format("bad replica state {}", static_cast<int>(s)));
          }
        }
        ReplicaTransition t;
        t.inode = i.inode();
        t.node = i.node();
        t.generation = i.generation();
        t.from = static_cast<ReplicaState>(i.from());
        t.to = static_cast<ReplicaState>(i.to());
        t.verified = i.verified();
        t.mtime_ns = i.mtime_ns();
        t.note = i.note();
        items.push_back(std::move(t));
      }
      absl::StatusOr<std::vector<absl::Status>> results = cat.TransitionReplicas(items);
      if (!results.ok()) return results.status();
      for (const absl::Status& r : *results) {
        v1::TransitionResult* out = resp->add_results();
        out->set_code(static_cast<int>(r.code()));
        out->set_message(std::string(r.message()));
      }
      return absl::OkStatus();
    });
  }

  static void PolicyToProto(const PolicyDocument& d, v1::PolicyDocument* out) {
    out->set_text(d.text);
    out->set_version(d.version);
    out->set_updated_ns(d.updated_ns);
    out->set_source(d.source);
  }

  grpc::ServerUnaryReactor* GetPolicies(grpc::CallbackServerContext* c, const v1::Empty*,
                                        v1::PolicyDocument* resp) override {
    return Run(c, "GetPolicies", [resp](Catalog& cat) -> absl::Status {
      absl::StatusOr<PolicyDocument> d = cat.GetPolicies();
      if (!d.ok()) return d.status();
      PolicyToProto(*d, resp);
      return absl::OkStatus();
    });
  }

  grpc::ServerUnaryReactor* PutPolicies(grpc::CallbackServerContext* c,
                                        const v1::PutPoliciesRequest* req,
                                        v1::PolicyDocument* resp) override {
    return Run(c, "PutPolicies", [req, resp](Catalog& cat) -> absl::Status {
      std::optional<std::uint64_t> expected;
      if (req->has_expected_version()) expected = req->expected_version();
      absl::StatusOr<PolicyDocument> d = cat.PutPolicies(req->text(), req->source(), expected);
      if (!d.ok()) return d.status();
      PolicyToProto(*d, resp);
      return absl::OkStatus();
    });
  }

  grpc::ServerUnaryReactor* FailTask(grpc::CallbackServerContext* c,
                                     const v1::FailTaskRequest* req, v1::Task* resp) override {
    return Run(c, "FailTask", [req, resp](Catalog& cat) {
      return Fill(cat.FailTask(req->id(), req->owner(), req->error(), req->retryable(),
                               std::chrono::milliseconds(req->retry_after_ms())),
                  resp);
    });
  }

  grpc::ServerUnaryReactor* YieldTask(grpc::CallbackServerContext* c,
                                      const v1::YieldTaskRequest* req, v1::Task* resp) override {
    return Run(c, "YieldTask", [req, resp](Catalog& cat) {
      return Fill(cat.YieldTask(req->id(), req->owner(), req->reason()), resp);
    });
  }

  grpc::ServerUnaryReactor* ExpireLeases(grpc::CallbackServerContext* c, const v1::Empty*,
                                         v1::ExpireLeasesResponse* resp) override {
    return Run(c, "ExpireLeases", [resp](Catalog& cat) {
      absl::StatusOr<std::size_t> n = cat.ExpireLeases();
      if (n.ok()) resp->set_expired(*n);
      return n.status();
    });
  }

  grpc::ServerUnaryReactor* AbandonTask(grpc::CallbackServerContext* c,
                                        const v1::AbandonTaskRequest* req,
                                        v1::Task* resp) override {
    return Run(c, "AbandonTask", [req, resp](Catalog& cat) {
      return Fill(cat.AbandonTask(req->id(), req->reason()), resp);
    });
  }

  grpc::ServerUnaryReactor* ReadEvents(grpc::CallbackServerContext* c,
                                       const v1::ReadEventsRequest* req,
                                       v1::EventList* resp) override {
    Caller caller;
    if (grpc::ServerUnaryReactor* refused = Admit(c, "ReadEvents", &caller)) return refused;
    if (absl::Status s = As(caller).Check("ReadEvents", Access::kRead); !s.ok()) {
      grpc::ServerUnaryReactor* reactor = c->DefaultReactor();
      reactor->Finish(ToGrpc(s));
      return reactor;
    }
    // The caller may read the event log: the reads below go to the catalog itself.
    const std::size_t max = Limit(req->max(), kMaxEventBatch);
    const std::uint64_t after = req->after_seq();
    const std::chrono::milliseconds wait(std::min<std::uint64_t>(
        req->wait_ms(), static_cast<std::uint64_t>(options_.max_event_wait.count())));
    if (wait.count() == 0) {
      return Offload(c, [this, after, max, resp] {
        return FillList<Event, v1::Event>(catalog_.ReadEvents(after, max, 0ms),
                                          [resp] { return resp->add_events(); });
      });
    }
    // A long poll: read once on the pool; with nothing new, wait without a thread
    // (EventWaiters) until an event or the deadline, then read again.
    grpc::ServerUnaryReactor* reactor = c->DefaultReactor();
    const auto deadline = std::chrono::steady_clock::now() + wait;
    std::string identity = PollerOf(c);
    boost::asio::post(pool_, [this, reactor, after, max, resp, deadline, identity] {
      auto answer = [this, reactor, after, max, resp] {
        reactor->Finish(ToGrpc(FillList<Event, v1::Event>(catalog_.ReadEvents(after, max, 0ms),
                                                          [resp] { return resp->add_events(); })));
      };
      absl::StatusOr<std::vector<Event>> now = catalog_.ReadEvents(after, max, 0ms);
      if (!now.ok() || !now->empty() || stopping_) {
        reactor->Finish(ToGrpc(FillList<Event, v1::Event>(std::move(now),
                                                          [resp] { return resp->add_events(); })));
        return;
      }
      absl::Status s = waiters_.Wait(after, deadline, identity, [answer](bool) { answer(); });
      if (!s.ok()) reactor->Finish(ToGrpc(s));
    });
    return reactor;
  }

  grpc::ServerUnaryReactor* LastEventSeq(grpc::CallbackServerContext* c, const v1::Empty*,
                                         v1::SeqResponse* resp) override {
    return RunInline(c, "LastEventSeq", [&](Catalog& cat) {
      absl::StatusOr<std::uint64_t> seq = cat.LastEventSeq();
      if (seq.ok()) resp->set_seq(*seq);
      return seq.status();
    });
  }

  grpc::ServerWriteReactor<v1::EventList>* Watch(grpc::CallbackServerContext* c,
                                                 const v1::WatchRequest* req) override {
    Caller caller;
    if (!options_.tls_client_ca_pem.empty()) {
      absl::StatusOr<std::optional<Identity>> who = IdentityOf(c);
      if (!who.ok()) {
        denied_ += 1;
        Audit("unidentified",
              fmt::format("Watch: {} [from {}]", std::string(who.status().message()), c->peer()));
        return new RefusedWatch(ToGrpc(who.status()));
      }
      caller.who = *who;
      caller.peer = c->peer();
      caller.checked = true;
    }
    if (absl::Status s = As(caller).Check("Watch", Access::kRead); !s.ok()) {
      return new RefusedWatch(ToGrpc(s));
    }
    return new WatchReactor(catalog_, pool_, waiters_, PollerOf(c), req->after_seq(), stopping_);
  }

  Catalog& catalog_;
  ServerOptions options_;
  Authorizer authorizer_;
  boost::asio::thread_pool pool_;
  // Long polls (ReadEvents with a wait, Watch streams) between events: no thread each.
  internal::EventWaiters waiters_;
  std::atomic<bool> stopping_{false};
  std::atomic<std::uint64_t> denied_{0};
  absl::Mutex revoked_mu_;
  absl::flat_hash_map<std::string, std::int64_t> revoked_ ABSL_GUARDED_BY(revoked_mu_);  // token id -> expiry
  std::chrono::steady_clock::time_point revoked_loaded_ ABSL_GUARDED_BY(revoked_mu_);
  std::unique_ptr<internal::RateLimiter> limiter_;  // null: no rate limit
  std::atomic<std::uint64_t> rate_limited_{0};
  absl::Mutex audit_mu_;
  std::chrono::steady_clock::time_point audit_window_ ABSL_GUARDED_BY(audit_mu_){};
  int audit_in_window_ ABSL_GUARDED_BY(audit_mu_) = 0;
  std::uint64_t audit_skipped_ ABSL_GUARDED_BY(audit_mu_) = 0;
};

// The Telemetry service: a site agent's batch, checked and handed to
// ServerOptions::telemetry_sink (the dashboard's hub) on the gRPC thread. Authorized like the
// Catalog service's calls (a node publishes only its own figures).
using CatalogRpcs = Service;  // inside TelemetryService, "Service" is gRPC's base class

class TelemetryService final : public v1::Telemetry::CallbackService {
 public:
  TelemetryService(CatalogRpcs& service, const ServerOptions& options)
      : service_(service), options_(options) {}

  grpc::ServerUnaryReactor* Publish(grpc::CallbackServerContext* c, const v1::TelemetryBatch* req,
                                    v1::Empty*) override {
    Caller caller;
    if (grpc::ServerUnaryReactor* refused = service_.Admit(c, "PublishTelemetry", &caller)) {
      return refused;
    }
    return service_.Inline(c, [&]() -> absl::Status {
      if (absl::Status s =
              service_.As(caller).Check("PublishTelemetry", Access::kOwnNode, {req->node()});
          !s.ok()) {
        return s;
      }
      if (!options_.telemetry_sink) {
        return absl::UnimplementedError("this catalog server takes no telemetry (no dashboard)");
      }
      TelemetryBatch b;
      b.node = req->node();
      b.site = req->site();
      b.sent_ns = req->sent_ns();
      b.copies.reserve(static_cast<std::size_t>(req->copies_size()));
      for (const v1::TelemetryCopy& c : req->copies()) {
        b.copies.push_back({c.task_id(), c.request_id(), c.src_node(), c.src_site(), c.size(),
                            c.streams(), c.received()});
      }
      b.points.reserve(static_cast<std::size_t>(req->points_size()));
      for (const v1::TelemetryPoint& p : req->points()) {
        b.points.push_back(
            {p.time_ns(), std::vector<std::uint64_t>(p.bytes().begin(), p.bytes().end()),
             std::vector<std::uint64_t>(p.stream_bytes().begin(), p.stream_bytes().end())});
      }
      if (absl::Status s = Validate(b); !s.ok()) return s;
      return options_.telemetry_sink(b);
    });
  }

 private:
  CatalogRpcs& service_;
  const ServerOptions& options_;
};

}  // namespace

// Per-method latency histograms (CatalogServer::RpcLatencies), kept by a server interceptor.
class RpcStats {
 public:
  void Observe(const std::string& method, double seconds, bool ok) {
    absl::MutexLock lock(&mu_);
    RpcLatency& h = by_method_[method];
    if (h.buckets.empty()) h.buckets.assign(std::size(kRpcLatencyBounds), 0);
    for (std::size_t i = 0; i < std::size(kRpcLatencyBounds); ++i) {
      if (seconds <= kRpcLatencyBounds[i]) h.buckets[i] += 1;
    }
    h.count += 1;
    h.sum_seconds += seconds;
    if (!ok) h.errors += 1;
  }
  std::map<std::string, RpcLatency> Snapshot() const {
    absl::MutexLock lock(&mu_);
    return by_method_;
  }

 private:
  mutable absl::Mutex mu_;
  std::map<std::string, RpcLatency> by_method_ ABSL_GUARDED_BY(mu_);
};

class TimingInterceptor final : public grpc::experimental::Interceptor {
 public:
  TimingInterceptor(RpcStats* stats, std::string method)
      : stats_(stats), method_(std::move(method)), start_(std::chrono::steady_clock::now()) {}
  void Intercept(grpc::experimental::InterceptorBatchMethods* methods) override {
    if (methods->QueryInterceptionHookPoint(grpc::experimental::InterceptionHookPoints::PRE_SEND_STATUS)) {
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
      stats_->Observe(method_, s, methods->GetSendStatus().ok());
    }
    methods->Proceed();
  }

 private:
  RpcStats* stats_;
  std::string method_;
  std::chrono::steady_clock::time_point start_;
};

class TimingInterceptorFactory final : public grpc::experimental::ServerInterceptorFactoryInterface {
 public:
  explicit TimingInterceptorFactory(RpcStats* stats) : stats_(stats) {}
  grpc::experimental::Interceptor* CreateServerInterceptor(grpc::experimental::ServerRpcInfo* info) override {
    // Methods of our service by name; anything else a client sends under one name (the
    // names are labels on /metrics: a client must not be able to add them without end).
    const std::string_view m = info->method() != nullptr ? info->method() : "";
    const bool ours = Ours(m, "Catalog") || Ours(m, "Telemetry");
    return new TimingInterceptor(stats_, ours ? std::string(m) : "/other");
  }

 private:
  // Whether `method` ("/gfrep.catalog.v1.SERVICE/NAME") is a method of our `service`.
  static bool Ours(std::string_view method, std::string_view service) {
    const std::string full = fmt::format("gfrep.catalog.v1.{}", service);
    const std::string prefix = fmt::format("/{}/", full);
    if (method.substr(0, prefix.size()) != prefix) return false;
    const google::protobuf::ServiceDescriptor* d =
        google::protobuf::DescriptorPool::generated_pool()->FindServiceByName(full);
    return d != nullptr &&
           d->FindMethodByName(std::string(method.substr(prefix.size()))) != nullptr;
  }

 private:
  RpcStats* stats_;
};

struct CatalogServer::Impl {
  RpcStats rpc_stats;  // outlives the server (declared first, destroyed last)
  std::unique_ptr<Service> service;
  std::unique_ptr<TelemetryService> telemetry;
  std::unique_ptr<grpc::Server> server;
  std::string address;
  int port = 0;
  absl::Mutex mu;
  bool shut_down ABSL_GUARDED_BY(mu) = false;
};

CatalogServer::CatalogServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

CatalogServer::~CatalogServer() { Shutdown(); }

std::map<std::string, RpcLatency> CatalogServer::RpcLatencies() const { return impl_->rpc_stats.Snapshot(); }

absl::StatusOr<std::unique_ptr<CatalogServer>> CatalogServer::Start(Catalog& catalog,
                                                                    const ServerOptions& options) {
  if (options.worker_threads < 1 || options.worker_threads > 1024 ||
      options.max_long_polls_per_identity < 1 || options.max_concurrent_streams < 1 ||
      options.memory_quota_bytes < 0) {
    return absl::InvalidArgumentError(
        "worker_threads must be 1..1024, max_long_polls_per_identity and max_concurrent_streams "
        "at least 1, memory_quota_bytes not negative");
  }
  if (options.tls_cert_pem.empty() != options.tls_key_pem.empty()) {
    return absl::InvalidArgumentError("TLS needs both a certificate and a key");
  }
  if (!options.tls_client_ca_pem.empty() && options.tls_cert_pem.empty()) {
    return absl::InvalidArgumentError("client certificates (mutual TLS) need the server's own certificate and key");
  }
  std::size_t colon = options.listen.rfind(':');
  if (colon == std::string::npos || colon == 0) {
    return absl::InvalidArgumentError(fmt::format("bad listen address '{}': want HOST:PORT", options.listen));
  }
  if (!options.token_key.empty() && options.tls_client_ca_pem.empty()) {
    return absl::InvalidArgumentError("user tokens need mutual TLS (a client CA): they are accepted only over TLS");
  }
  auto impl = std::make_unique<Impl>();
  impl->service = std::make_unique<Service>(catalog, options);
  impl->telemetry = std::make_unique<TelemetryService>(*impl->service, impl->service->options());
  if (absl::Status s = impl->service->LoadRevokedTokens(); !s.ok()) {
    impl->service->Join();
    return s;
  }
  // With tokens a client may come without a certificate; one it sends is still verified.
  const grpc_ssl_client_certificate_request_type request_client_cert =
      options.token_key.empty() ? GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY
                                : GRPC_SSL_REQUEST_CLIENT_CERTIFICATE_AND_VERIFY;
  std::shared_ptr<grpc::ServerCredentials> creds;
  const bool watch_files = options.tls_reload_interval.count() > 0 && !options.tls_cert_file.empty() &&
                           !options.tls_key_file.empty() &&
                           (options.tls_client_ca_pem.empty() || !options.tls_client_ca_file.empty());
  if (options.tls_cert_pem.empty()) {
    creds = grpc::InsecureServerCredentials();
  } else if (watch_files) {
    // The same handshake as below, from files gRPC reads again every interval.
    const auto interval = static_cast<unsigned int>(options.tls_reload_interval.count());
    auto provider = options.tls_client_ca_pem.empty()
                        ? std::make_shared<grpc::experimental::FileWatcherCertificateProvider>(
                              options.tls_key_file, options.tls_cert_file, interval)
                        : std::make_shared<grpc::experimental::FileWatcherCertificateProvider>(
                              options.tls_key_file, options.tls_cert_file, options.tls_client_ca_file, interval);
    grpc::experimental::TlsServerCredentialsOptions tls(provider);
    tls.watch_identity_key_cert_pairs();
    if (!options.tls_client_ca_pem.empty()) {
      tls.watch_root_certs();
      tls.set_cert_request_type(request_client_cert);
    } else {
      tls.set_cert_request_type(GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE);
    }
    creds = grpc::experimental::TlsServerCredentials(tls);
  } else {
    grpc::SslServerCredentialsOptions ssl;
    ssl.pem_key_cert_pairs.push_back({options.tls_key_pem, options.tls_cert_pem});
    if (!options.tls_client_ca_pem.empty()) {
      ssl.pem_root_certs = options.tls_client_ca_pem;
      ssl.client_certificate_request = request_client_cert;
    }
    creds = grpc::SslServerCredentials(ssl);
  }
  grpc::ServerBuilder builder;
  // One listening socket, ours alone: no other process may bind the port beside us
  // (SO_REUSEPORT), and gfcatalogd's listener watchdog has one accept queue to look at.
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  builder.AddListeningPort(options.listen, creds, &impl->port);
  builder.RegisterService(impl->service.get());
  builder.RegisterService(impl->telemetry.get());
  builder.AddChannelArgument(GRPC_ARG_SERVER_HANDSHAKE_TIMEOUT_MS,
                             static_cast<int>(std::clamp<std::int64_t>(options.handshake_timeout.count(), 1, INT32_MAX)));
  builder.AddChannelArgument(GRPC_ARG_MAX_CONNECTION_IDLE_MS,
                             static_cast<int>(std::clamp<std::int64_t>(options.max_connection_idle.count(), 1, INT32_MAX)));
  builder.AddChannelArgument(GRPC_ARG_MAX_CONCURRENT_STREAMS, options.max_concurrent_streams);
  if (options.memory_quota_bytes > 0) {
    grpc::ResourceQuota quota("gfrep-catalog");
    quota.Resize(static_cast<std::size_t>(options.memory_quota_bytes));
    builder.SetResourceQuota(quota);
  }
  builder.SetMaxReceiveMessageSize(options.max_message_bytes);
  builder.SetMaxSendMessageSize(options.max_message_bytes);
  std::vector<std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>> interceptors;
  interceptors.push_back(std::make_unique<TimingInterceptorFactory>(&impl->rpc_stats));
  builder.experimental().SetInterceptorCreators(std::move(interceptors));
  impl->server = builder.BuildAndStart();
  if (!impl->server || impl->port == 0) {
    impl->service->Join();
    return absl::UnavailableError(fmt::format("cannot listen on {}", options.listen));
  }
  impl->address = fmt::format("{}:{}", options.listen.substr(0, colon), impl->port);
  return std::unique_ptr<CatalogServer>(new CatalogServer(std::move(impl)));
}

const std::string& CatalogServer::address() const { return impl_->address; }

std::uint64_t CatalogServer::denied_calls() const { return impl_->service->denied(); }
std::uint64_t CatalogServer::rate_limited_calls() const { return impl_->service->rate_limited(); }
std::size_t CatalogServer::long_polls_waiting() const { return impl_->service->long_polls_waiting(); }
int CatalogServer::port() const { return impl_->port; }

void CatalogServer::Shutdown() {
  {
    absl::MutexLock l(&impl_->mu);
    if (impl_->shut_down) return;
    impl_->shut_down = true;
  }
  impl_->service->Stop();
  impl_->server->Shutdown(std::chrono::system_clock::now() + 5s);
  impl_->service->Join();
}

void CatalogServer::Wait() { impl_->server->Wait(); }

}  // namespace gfrep::catalog
