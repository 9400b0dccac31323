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
#include "catalog/identity.h"
#include "catalog/internal/convert.h"
#include "catalog/internal/event_waiters.h"
#include "catalog/internal/rate_limiter.h"
#include "catalog/permissions.h"
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

// Who made a call, once it passed its role check: namespace calls of users then check the
// entries' permissions (catalog/permissions.h). `who` is empty without mutual TLS.
struct Caller {
  std::optional<Identity> who;
  std::string peer;
  bool user() const { return who.has_value() && who->role == Role::kUser; }
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
        pool_(static_cast<std::size_t>(options.worker_threads)),
        waiters_(catalog, [this](std::function<void()> fn) { boost::asio::post(pool_, std::move(fn)); },
                 internal::EventWaitersOptions{.max_per_identity = options.max_long_polls_per_identity}) {
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

  // A refusal by the namespace's permissions, counted and audited like a role refusal.
  absl::Status Refused(const Caller& caller, absl::Status s) {
    if (absl::IsPermissionDenied(s)) {
      denied_ += 1;
      if (options_.on_denied) options_.on_denied(s);
      Audit(caller.who ? caller.who->ToString() : "unidentified",
            fmt::format("{} [from {}]", std::string(s.message()), caller.peer));
    }
    return s;
  }
  // Users change and cancel only their own requests.
  absl::Status OwnRequest(const Caller& caller, std::string_view action, std::uint64_t id) {
    if (!caller.user()) return absl::OkStatus();
    absl::StatusOr<Request> r = catalog_.GetRequest(id);
    if (!r.ok()) return r.status();
    if (r->spec.origin == RequestOrigin::kUser && r->spec.owner == caller.who->name)
      return absl::OkStatus();
    return Refused(
        caller, absl::PermissionDeniedError(fmt::format(
                    "{} {}: {} may not (the request is {}'s)", action, id, caller.who->ToString(),
                    r->spec.owner.empty() ? "an admin" : DescribeOwner(r->spec))));
  }

  NamespaceGuard Guard(const Caller& caller) {
    return NamespaceGuard(catalog_, Principal{caller.who->name, caller.who->groups, caller.who->ToString()});
  }

  template <typename Items, typename NodeOf>
  static std::vector<std::string_view> NodesOf(const Items& items, NodeOf node_of) {
    std::vector<std::string_view> out;
    for (const auto& i : items) out.push_back(node_of(i));
    return out;
  }

  // nullptr when the caller may do `action`; otherwise the call, finished with
  // PERMISSION_DENIED. Without client certificates (no CA configured) everything is allowed.
  grpc::ServerUnaryReactor* Deny(grpc::CallbackServerContext* c, std::string_view action, Access access,
                                 const std::vector<std::string_view>& nodes = {}, Caller* caller = nullptr) {
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
    const std::optional<Identity>& who = *identified;
    absl::Status s = Authorize(who, action, access, nodes);
    if (s.ok()) {
      if (caller != nullptr) {
        caller->who = who;
        caller->peer = c->peer();
      }
      return OverRate(c, action, *who);
    }
    denied_ += 1;
    if (options_.on_denied) options_.on_denied(s);
    Audit(who ? who->ToString() : "unidentified", fmt::format("{} [from {}]", std::string(s.message()), c->peer()));
    grpc::ServerUnaryReactor* reactor = c->DefaultReactor();
    reactor->Finish(ToGrpc(s));
    return reactor;
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
    Caller caller;
    if (grpc::ServerUnaryReactor* denied = Deny(c, "Mkdir", Access::kNamespace, {}, &caller)) return denied;
    return Offload(c, [this, req, resp, caller] {
      MkdirOptions o;
      o.parents = req->parents();
      if (req->mode() != 0) o.mode = req->mode();
      o.owner = req->owner();
      if (caller.user()) {
        if (absl::Status s = Guard(caller).MayCreate("Mkdir", req->path(), false).status(); !s.ok()) {
          return Refused(caller, s);
        }
        o.owner = caller.who->name;
      }
      return Fill(catalog_.Mkdir(req->path(), o), resp);
    });
  }

  grpc::ServerUnaryReactor* CreateFile(grpc::CallbackServerContext* c,
                                       const v1::CreateFileRequest* req,
                                       v1::Attributes* resp) override {
    Caller caller;
    if (grpc::ServerUnaryReactor* denied = Deny(c, "CreateFile", Access::kNamespace, {}, &caller)) return denied;
    return Offload(c, [this, req, resp, caller] {
      FileContent content = FromProto(req->content());
      if (content.mode == 0) content.mode = 0644;
      if (caller.user()) {
        if (absl::Status s = Guard(caller).MayCreate("CreateFile", req->path(), false).status(); !s.ok()) {
          return Refused(caller, s);
        }
        content.owner = caller.who->name;
      }
      return Fill(catalog_.CreateFile(req->path(), content), resp);
    });
  }

  grpc::ServerUnaryReactor* BeginWrite(grpc::CallbackServerContext* c,
                                       const v1::CreateFileRequest* req,
                                       v1::WriteReservation* resp) override {
    Caller caller;
    if (grpc::ServerUnaryReactor* denied = Deny(c, "BeginWrite", Access::kNamespace, {}, &caller)) return denied;
    return Offload(c, [this, req, resp, caller] {
      FileContent content = FromProto(req->content());
      if (content.mode == 0) content.mode = 0644;
      if (caller.user()) {
        if (absl::Status s = Guard(caller).MayCreate("BeginWrite", req->path(), true).status(); !s.ok()) {
          return Refused(caller, s);
        }
        content.owner = caller.who->name;
      }
      absl::StatusOr<WriteReservation> r = catalog_.BeginWrite(req->path(), content);
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
    Caller caller;
    if (grpc::ServerUnaryReactor* denied = Deny(c, "CommitFile", Access::kNamespace, {}, &caller)) return denied;
    return Offload(c, [this, req, resp, caller] {
      FileContent content = FromProto(req->content());
      if (content.mode == 0) content.mode = 0644;
      if (caller.user()) {
        absl::StatusOr<std::optional<Attributes>> existing = Guard(caller).MayCreate("CommitFile", req->path(), true);
        if (!existing.ok()) return Refused(caller, existing.status());
        // A new file is the writer's; new content of someone else's file keeps its owner and mode.
        content.owner = existing->has_value() ? "" : caller.who->name;
        if (existing->has_value()) content.mode = (*existing)->mode;
      }
      std::optional<std::uint64_t> expected;
      if (req->has_expected_generation()) expected = req->expected_generation();
      return Fill(catalog_.CommitFile(req->path(), content, req->writer_node(), expected), resp);
    });
  }

  grpc::ServerUnaryReactor* CreateFiles(grpc::CallbackServerContext* c,
                                        const v1::CreateFilesRequest* req,
                                        v1::AttributesList* resp) override {
    Caller caller;
    if (grpc::ServerUnaryReactor* denied = Deny(c, "CreateFiles", Access::kNamespace, {}, &caller)) return denied;
    return Offload(c, [this, req, resp, caller] {
      std::vector<NewFile> files;
      files.reserve(static_cast<std::size_t>(req->files_size()));
      std::string checked_parent;  // a batch usually fills one directory: check it once
      for (const v1::CreateFileRequest& f : req->files()) {
        NewFile n{f.path(), FromProto(f.content())};
        if (n.content.mode == 0) n.content.mode = 0644;
        if (caller.user()) {
          const std::string parent = f.path().substr(0, f.path().rfind('/'));
          if (parent != checked_parent || parent.empty()) {
            absl::StatusOr<std::optional<Attributes>> existing = Guard(caller).MayCreate("CreateFiles", f.path(), false);
            if (!existing.ok()) return Refused(caller, existing.status());
            if (!existing->has_value()) checked_parent = parent;  // the parent's rights were checked
          }
          n.content.owner = caller.who->name;
        }
        files.push_back(std::move(n));
      }
      return FillList<Attributes, v1::Attributes>(catalog_.CreateFiles(files),
                                                  [resp] { return resp->add_attributes(); });
    });
  }

  grpc::ServerUnaryReactor* StatMany(grpc::CallbackServerContext* c,
                                     const v1::StatManyRequest* req,
                                     v1::StatManyResponse* resp) override {
    Caller caller;
    if (grpc::ServerUnaryReactor* denied = Deny(c, "StatMany", Access::kRead, {}, &caller)) return denied;
    return Offload(c, [this, req, resp, caller] {
      std::vector<std::string> paths(req->paths().begin(), req->paths().end());
      absl::StatusOr<std::vector<absl::StatusOr<Attributes>>> results = catalog_.StatMany(paths);
      if (!results.ok()) return results.status();
      if (caller.user()) {
        // Looking up a path needs search rights on the directories above it only: one walk
        // per parent directory (a batch usually stats the files of a few directories).
        NamespaceGuard guard = Guard(caller);
        absl::flat_hash_map<std::string, absl::Status> by_parent;
        for (std::size_t i = 0; i < paths.size() && i < results->size(); ++i) {
          const std::size_t slash = paths[i].rfind('/');
          const std::string parent = slash == std::string::npos ? std::string() : paths[i].substr(0, slash);
          auto [it, fresh] = by_parent.try_emplace(parent);
          if (fresh) it->second = guard.MayLookup("StatMany", paths[i]);
          if (!it->second.ok()) {
            // The refusal names the first path of its directory; audited once per directory.
            (*results)[i] = fresh ? Refused(caller, it->second) : it->second;
          }
        }
      }
      return FillResults(*results, [resp] { return resp->add_results(); },
                         [](v1::StatResult* out) { return out->mutable_attributes(); });
    });
  }

  grpc::ServerUnaryReactor* Stat(grpc::CallbackServerContext* c, const v1::PathRequest* req,
                                 v1::Attributes* resp) override {
    Caller caller;
    if (grpc::ServerUnaryReactor* denied = Deny(c, "Stat", Access::kRead, {}, &caller)) return denied;
    return Inline(c, [&] {
      if (caller.user()) {
        if (absl::Status s = Guard(caller).MayLookup("Stat", req->path()); !s.ok()) return Refused(caller, s);
      }
      return Fill(catalog_.Stat(req->path()), resp);
    });
  }

  grpc::ServerUnaryReactor* StatInode(grpc::CallbackServerContext* c, const v1::InodeRequest* req,
                                      v1::Attributes* resp) override {
    if (grpc::ServerUnaryReactor* denied = Deny(c, "StatInode", Access::kRead)) return denied;
    return Inline(c, [&] { return Fill(catalog_.StatInode(req->inode()), resp); });
  }

  grpc::ServerUnaryReactor* PathOf(grpc::CallbackServerContext* c, const v1::InodeRequest* req,
                                   v1::PathResponse* resp) override {
    if (grpc::ServerUnaryReactor* denied = Deny(c, "PathOf", Access::kRead)) return denied;
    return Inline(c, [&] {
      absl::StatusOr<std::string> p = catalog_.PathOf(req->inode());
      if (p.ok()) resp->set_path(*p);
      return p.status();
    });
  }

  grpc::ServerUnaryReactor* List(grpc::CallbackServerContext* c, const v1::ListRequest* req,
                                 v1::ListResponse* resp) override {
    Caller caller;
    if (grpc::ServerUnaryReactor* denied = Deny(c, "List", Access::kRead, {}, &caller)) return denied;
    return Offload(c, [this, req, resp, caller] {
      if (caller.user()) {
        if (absl::Status s = Guard(caller).MayList("List", req->path()); !s.ok()) return Refused(caller, s);
      }
      ListOptions o;
      o.start_after = req->start_after();
      o.limit = Limit(req->limit(), kMaxListEntries);
      absl::StatusOr<std::vector<DirEntry>> list = catalog_.List(req->path(), o);
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
    Caller caller;
    if (grpc::ServerUnaryReactor* denied = Deny(c, "Remove", Access::kNamespace, {}, &caller)) return denied;
    return Offload(c, [this, req, caller] {
      if (caller.user()) {
        if (absl::Status s = Guard(caller).MayRemove("Remove", req->path(), req->recursive()); !s.ok()) {
          return Refused(caller, s);
        }
      }
      return catalog_.Remove(req->path(), req->recursive());
    });
  }

  grpc::ServerUnaryReactor* Rename(grpc::CallbackServerContext* c, const v1::RenameRequest* req,
                                   v1::Empty*) override {
    Caller caller;
    if (grpc::ServerUnaryReactor* denied = Deny(c, "Rename", Access::kNamespace, {}, &caller)) return denied;
    return Offload(c, [this, req, caller] {
      if (caller.user()) {
        if (absl::Status s = Guard(caller).MayRename("Rename", req->from(), req->to()); !s.ok()) {
          return Refused(caller, s);
        }
      }
      return catalog_.Rename(req->from(), req->to());
    });
  }

  grpc::ServerUnaryReactor* SetAttributes(grpc::CallbackServerContext* c, const v1::SetAttributesRequest* req,
                                          v1::Attributes* resp) override {
    Caller caller;
    if (grpc::ServerUnaryReactor* denied = Deny(c, "SetAttributes", Access::kNamespace, {}, &caller)) return denied;
    return Offload(c, [this, req, resp, caller] {
      AttributeChange change;
      if (req->has_mode()) change.mode = req->mode();
      if (req->has_owner()) change.owner = req->owner();
      if (req->has_group()) change.group = req->group();
      if (caller.user()) {
        if (absl::Status s = Guard(caller).MaySetAttributes("SetAttributes", req->path(), change); !s.ok()) {
          return Refused(caller, s);
        }
      }
      return Fill(catalog_.SetAttributes(req->path(), change), resp);
    });
  }

  grpc::ServerUnaryReactor* RevokeToken(grpc::CallbackServerContext* c, const v1::RevokeTokenRequest* req,
                                        v1::Empty*) override {
    if (grpc::ServerUnaryReactor* denied = Deny(c, "RevokeToken", Access::kAdmin)) return denied;
    return Offload(c, [this, req] {
      if (absl::Status s = catalog_.RevokeToken(req->id(), req->expires_unix()); !s.ok()) return s;
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
    Caller caller;
    if (grpc::ServerUnaryReactor* denied = Deny(c, "Locate", Access::kRead, {}, &caller)) return denied;
    return Offload(c, [this, req, resp, caller] {
      if (caller.user()) {
        if (absl::Status s = Guard(caller).MayRead("Locate", req->path()); !s.ok()) return Refused(caller, s);
      }
      return Fill(catalog_.Locate(req->path()), resp);
    });
  }

  grpc::ServerUnaryReactor* GetReplicas(grpc::CallbackServerContext* c,
                                        const v1::InodeRequest* req,
                                        v1::ReplicaList* resp) override {
    if (grpc::ServerUnaryReactor* denied = Deny(c, "GetReplicas", Access::kRead)) return denied;
    return Offload(c, [this, req, resp] {
      return FillList<Replica, v1::Replica>(catalog_.GetReplicas(req->inode()),
                                            [resp] { return resp->add_replicas(); });
    });
  }

  grpc::ServerUnaryReactor* PutReplica(grpc::CallbackServerContext* c, const v1::Replica* req,
                                       v1::Empty*) override {
    if (grpc::ServerUnaryReactor* denied = Deny(c, "PutReplica", Access::kOwnNode, {req->node()})) return denied;
    return Offload(c, [this, req] {
      absl::StatusOr<Replica> r = FromProto(*req);
      if (!r.ok()) return r.status();
      return catalog_.PutReplica(*r);
    });
  }

  grpc::ServerUnaryReactor* RemoveReplica(grpc::CallbackServerContext* c,
                                          const v1::RemoveReplicaRequest* req,
                                          v1::Empty*) override {
    if (grpc::ServerUnaryReactor* denied = Deny(c, "RemoveReplica", Access::kOwnNode, {req->node()})) return denied;
    return Offload(c, [this, req] { return catalog_.RemoveReplica(req->inode(), req->node()); });
  }

  grpc::ServerUnaryReactor* ListNodeReplicas(grpc::CallbackServerContext* c,
                                             const v1::ListNodeReplicasRequest* req,
                                             v1::ReplicaList* resp) override {
    if (grpc::ServerUnaryReactor* denied = Deny(c, "ListNodeReplicas", Access::kRead)) return denied;
    return Offload(c, [this, req, resp] {
      return FillList<Replica, v1::Replica>(
          catalog_.ListNodeReplicas(req->node(), req->start_after(),
                                    Limit(req->limit(), kMaxListEntries)),
          [resp] { return resp->add_replicas(); });
    });
  }

  grpc::ServerUnaryReactor* PutSite(grpc::CallbackServerContext* c, const v1::Site* req,
                                    v1::Empty*) override {
    if (grpc::ServerUnaryReactor* denied = Deny(c, "PutSite", Access::kAdmin)) return denied;
    return Offload(c, [this, req] { return catalog_.PutSite(FromProto(*req)); });
  }

  grpc::ServerUnaryReactor* RemoveSite(grpc::CallbackServerContext* c, const v1::NameRequest* req,
                                       v1::Empty*) override {
    if (grpc::ServerUnaryReactor* denied = Deny(c, "RemoveSite", Access::kAdmin)) return denied;
    return Offload(c, [this, req] { return catalog_.RemoveSite(req->name()); });
  }

  grpc::ServerUnaryReactor* ListSites(grpc::CallbackServerContext* c, const v1::Empty*,
                                      v1::SiteList* resp) override {
    if (grpc::ServerUnaryReactor* denied = Deny(c, "ListSites", Access::kRead)) return denied;
    return Offload(c, [this, resp] {
      return FillList<Site, v1::Site>(catalog_.ListSites(), [resp] { return resp->add_sites(); });
    });
  }

  grpc::ServerUnaryReactor* RegisterNode(grpc::CallbackServerContext* c, const v1::Node* req,
                                         v1::Empty*) override {
    if (grpc::ServerUnaryReactor* denied = Deny(c, "RegisterNode", Access::kOwnNode, {req->name()})) return denied;
    return Offload(c, [this, req] { return catalog_.RegisterNode(FromProto(*req)); });
  }

  grpc::ServerUnaryReactor* PutNodeDisk(grpc::CallbackServerContext* c, const v1::PutNodeDiskRequest* req,
                                        v1::Empty*) override {
    if (grpc::ServerUnaryReactor* denied = Deny(c, "PutNodeDisk", Access::kOwnNode, {req->node()})) return denied;
    return Offload(c, [this, req] { return catalog_.PutNodeDisk(req->node(), FromProto(req->disk())); });
  }

  grpc::ServerUnaryReactor* RemoveNode(grpc::CallbackServerContext* c, const v1::NameRequest* req,
                                       v1::Empty*) override {
    if (grpc::ServerUnaryReactor* denied = Deny(c, "RemoveNode", Access::kAdmin)) return denied;
    return Offload(c, [this, req] { return catalog_.RemoveNode(req->name()); });
  }

  grpc::ServerUnaryReactor* GetNode(grpc::CallbackServerContext* c, const v1::NameRequest* req,
                                    v1::Node* resp) override {
    if (grpc::ServerUnaryReactor* denied = Deny(c, "GetNode", Access::kRead)) return denied;
    return Inline(c, [&] { return Fill(catalog_.GetNode(req->name()), resp); });
  }

  grpc::ServerUnaryReactor* ListNodes(grpc::CallbackServerContext* c,
                                      const v1::ListNodesRequest* req,
                                      v1::NodeList* resp) override {
    if (grpc::ServerUnaryReactor* denied = Deny(c, "ListNodes", Access::kRead)) return denied;
    return Offload(c, [this, req, resp] {
      return FillList<Node, v1::Node>(catalog_.ListNodes(req->site()),
                                      [resp] { return resp->add_nodes(); });
    });
  }

  grpc::ServerUnaryReactor* SendHeartbeat(grpc::CallbackServerContext* c,
                                          const v1::HeartbeatRequest* req, v1::Empty*) override {
    if (grpc::ServerUnaryReactor* denied = Deny(c, "SendHeartbeat", Access::kOwnNode, {req->node()})) return denied;
    return Offload(c, [this, req] { return catalog_.SendHeartbeat(FromProto(*req)); });
  }

  grpc::ServerUnaryReactor* PutRoute(grpc::CallbackServerContext* c, const v1::Route* req,
                                     v1::Empty*) override {
    if (grpc::ServerUnaryReactor* denied = Deny(c, "PutRoute", Access::kAdmin)) return denied;
    return Offload(c, [this, req] { return catalog_.PutRoute(FromProto(*req)); });
  }

  grpc::ServerUnaryReactor* RemoveRoute(grpc::CallbackServerContext* c, const v1::RouteKey* req,
                                        v1::Empty*) override {
    if (grpc::ServerUnaryReactor* denied = Deny(c, "RemoveRoute", Access::kAdmin)) return denied;
    return Offload(c, [this, req] { return catalog_.RemoveRoute(req->src_site(), req->dst_site()); });
  }

  grpc::ServerUnaryReactor* GetRoute(grpc::CallbackServerContext* c, const v1::RouteKey* req,
                                     v1::Route* resp) override {
    if (grpc::ServerUnaryReactor* denied = Deny(c, "GetRoute", Access::kRead)) return denied;
    return Inline(c, [&] { return Fill(catalog_.GetRoute(req->src_site(), req->dst_site()), resp); });
  }

  grpc::ServerUnaryReactor* ListRoutes(grpc::CallbackServerContext* c, const v1::Empty*,
                                       v1::RouteList* resp) override {
    if (grpc::ServerUnaryReactor* denied = Deny(c, "ListRoutes", Access::kRead)) return denied;
    return Offload(c, [this, resp] {
      return FillList<Route, v1::Route>(catalog_.ListRoutes(), [resp] { return resp->add_routes(); });
    });
  }

  grpc::ServerUnaryReactor* CreateRequest(grpc::CallbackServerContext* c,
                                          const v1::RequestSpec* req,
                                          v1::Request* resp) override {
    Caller caller;
    if (grpc::ServerUnaryReactor* denied = Deny(c, "CreateRequest", Access::kReplicate, {}, &caller)) return denied;
    return Offload(c, [this, req, resp, caller] {
      absl::StatusOr<RequestSpec> asked = FromProto(*req);
      if (!asked.ok()) return asked.status();
      RequestSpec spec = std::move(*asked);
      if (!caller.user()) return Fill(catalog_.CreateRequest(spec), resp);
      if (spec.priority > kMaxUserRequestPriority) {
        return Refused(caller, absl::PermissionDeniedError(fmt::format(
            "CreateRequest: priority {} is above {}, the most a user may ask (repairs run "
            "above it); an admin may ask more",
            spec.priority, kMaxUserRequestPriority)));
      }
      for (const std::string& path : spec.paths) {  // what you may not read you may not copy
        if (absl::Status s = Guard(caller).MayRead("CreateRequest", path); !s.ok()) return Refused(caller, s);
      }
      spec.owner = caller.who->name;
      spec.origin = RequestOrigin::kUser;  // a user never speaks for a policy or the repairer
      if (options_.max_open_requests_per_user == 0) return Fill(catalog_.CreateRequest(spec), resp);
      // Count and create under one lock, so concurrent calls cannot both take the last place.
      absl::MutexLock quota(&request_quota_mu_);
      std::size_t open = 0;
      for (RequestState state : {RequestState::kQueued, RequestState::kRunning}) {
        absl::StatusOr<std::vector<Request>> list = catalog_.ListRequests(false, state, kMaxListEntries);
        if (!list.ok()) return list.status();
        open += static_cast<std::size_t>(
            std::count_if(list->begin(), list->end(), [&](const Request& r) {
              return r.spec.origin == RequestOrigin::kUser && r.spec.owner == spec.owner;
            }));
      }
      if (open >= options_.max_open_requests_per_user) {
        return absl::ResourceExhaustedError(fmt::format(
            "CreateRequest: user {} has {} open replication requests, its quota (gfcatalogd "
            "--max-open-requests-per-user); wait for some to finish or cancel them",
            spec.owner, open));
      }
      return Fill(catalog_.CreateRequest(spec), resp);
    });
  }

  grpc::ServerUnaryReactor* GetRequest(grpc::CallbackServerContext* c, const v1::IdRequest* req,
                                       v1::Request* resp) override {
    if (grpc::ServerUnaryReactor* denied = Deny(c, "GetRequest", Access::kRead)) return denied;
    return Inline(c, [&] {
      absl::StatusOr<Request> r = catalog_.GetRequest(req->id());
      if (r.ok() && options_.request_in_flight) r->in_flight_bytes = options_.request_in_flight(r->id);
      return Fill(std::move(r), resp);
    });
  }

  grpc::ServerUnaryReactor* ListRequests(grpc::CallbackServerContext* c,
                                         const v1::ListRequestsRequest* req,
                                         v1::RequestList* resp) override {
    if (grpc::ServerUnaryReactor* denied = Deny(c, "ListRequests", Access::kRead)) return denied;
    return Offload(c, [this, req, resp] {
      RequestState state = RequestState::kQueued;
      if (!req->any_state()) {
        absl::StatusOr<RequestState> s = FromProto(req->state());
        if (!s.ok()) return s.status();
        state = *s;
      }
      absl::StatusOr<std::vector<Request>> list =
          catalog_.ListRequests(req->any_state(), state, Limit(req->limit(), kMaxListEntries));
      if (list.ok() && options_.request_in_flight) {
        for (Request& r : *list) {
          if (r.state == RequestState::kRunning) r.in_flight_bytes = options_.request_in_flight(r.id);
        }
      }
      return FillList<Request, v1::Request>(std::move(list), [resp] { return resp->add_requests(); });
    });
  }

  grpc::ServerUnaryReactor* UpdateRequest(grpc::CallbackServerContext* c,
                                          const v1::UpdateRequestRequest* req,
                                          v1::Request* resp) override {
    Caller caller;
    if (grpc::ServerUnaryReactor* denied = Deny(c, "UpdateRequest", Access::kReplicate, {}, &caller)) return denied;
    return Offload(c, [this, req, resp, caller] {
      if (absl::Status s = OwnRequest(caller, "UpdateRequest", req->id()); !s.ok()) return s;
      RequestUpdate u;
      u.id = req->id();
      u.set_state = req->set_state();
      if (u.set_state) {
        absl::StatusOr<RequestState> s = FromProto(req->state());
        if (!s.ok()) return s.status();
        u.state = *s;
      }
      u.error = req->error();
      u.set_counters = req->set_counters();
      u.files_total = req->files_total();
      u.files_done = req->files_done();
      u.files_failed = req->files_failed();
      u.bytes_total = req->bytes_total();
      u.bytes_done = req->bytes_done();
      return Fill(catalog_.UpdateRequest(u), resp);
    });
  }

  grpc::ServerUnaryReactor* CancelRequest(grpc::CallbackServerContext* c,
                                          const v1::IdRequest* req, v1::Empty*) override {
    Caller caller;
    if (grpc::ServerUnaryReactor* denied = Deny(c, "CancelRequest", Access::kReplicate, {}, &caller)) return denied;
    return Offload(c, [this, req, caller] {
      if (absl::Status s = OwnRequest(caller, "CancelRequest", req->id()); !s.ok()) return s;
      return catalog_.CancelRequest(req->id());
    });
  }

  grpc::ServerUnaryReactor* CreateTasks(grpc::CallbackServerContext* c,
                                        const v1::CreateTasksRequest* req,
                                        v1::TaskList* resp) override {
    if (grpc::ServerUnaryReactor* denied = Deny(c, "CreateTasks", Access::kAdmin)) return denied;
    return Offload(c, [this, req, resp] {
      std::vector<TaskSpec> specs;
      specs.reserve(static_cast<std::size_t>(req->specs_size()));
      for (const v1::TaskSpec& s : req->specs()) specs.push_back(FromProto(s));
      return FillList<Task, v1::Task>(catalog_.CreateTasks(specs),
                                      [resp] { return resp->add_tasks(); });
    });
  }

  grpc::ServerUnaryReactor* GetTask(grpc::CallbackServerContext* c, const v1::IdRequest* req,
                                    v1::Task* resp) override {
    if (grpc::ServerUnaryReactor* denied = Deny(c, "GetTask", Access::kRead)) return denied;
    return Inline(c, [&] { return Fill(catalog_.GetTask(req->id()), resp); });
  }

  grpc::ServerUnaryReactor* ListTasks(grpc::CallbackServerContext* c,
                                      const v1::ListTasksRequest* req,
                                      v1::TaskList* resp) override {
    if (grpc::ServerUnaryReactor* denied = Deny(c, "ListTasks", Access::kRead)) return denied;
    return Offload(c, [this, req, resp] {
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
      return FillList<Task, v1::Task>(catalog_.ListTasks(f), [resp] { return resp->add_tasks(); });
    });
  }

  grpc::ServerUnaryReactor* ClaimTask(grpc::CallbackServerContext* c,
                                      const v1::ClaimTaskRequest* req, v1::Task* resp) override {
    if (grpc::ServerUnaryReactor* denied = Deny(c, "ClaimTask", Access::kOwnNode, {req->node()})) return denied;
    return Offload(c, [this, req, resp] {
      return Fill(catalog_.ClaimTask(req->node(), req->owner(),
                                     std::chrono::milliseconds(req->lease_ms())),
                  resp);
    });
  }

  grpc::ServerUnaryReactor* ClaimTasks(grpc::CallbackServerContext* c,
                                       const v1::ClaimTasksRequest* req, v1::TaskList* resp) override {
    if (grpc::ServerUnaryReactor* denied = Deny(c, "ClaimTasks", Access::kOwnNode, {req->node()})) return denied;
    return Offload(c, [this, req, resp] {
      std::vector<std::string> owners(req->owners().begin(), req->owners().end());
      return FillList<Task, v1::Task>(
          catalog_.ClaimTasks(req->node(), owners, std::chrono::milliseconds(req->lease_ms())),
          [resp] { return resp->add_tasks(); });
    });
  }

  grpc::ServerUnaryReactor* RenewLease(grpc::CallbackServerContext* c,
                                       const v1::RenewLeaseRequest* req, v1::Task* resp) override {
    if (grpc::ServerUnaryReactor* denied = Deny(c, "RenewLease", Access::kOwnNode, {NodeOfOwner(req->owner())})) return denied;
    return Offload(c, [this, req, resp] {
      return Fill(catalog_.RenewLease(req->id(), req->owner(),
                                      std::chrono::milliseconds(req->lease_ms())),
                  resp);
    });
  }

  grpc::ServerUnaryReactor* CompleteTask(grpc::CallbackServerContext* c,
                                         const v1::CompleteTaskRequest* req,
                                         v1::Task* resp) override {
    if (grpc::ServerUnaryReactor* denied = Deny(c, "CompleteTask", Access::kOwnNode, {NodeOfOwner(req->owner())})) return denied;
    return Offload(c, [this, req, resp] {
      return Fill(catalog_.CompleteTask(req->id(), req->owner()), resp);
    });
  }

  grpc::ServerUnaryReactor* CompleteTasks(grpc::CallbackServerContext* c,
                                          const v1::CompleteTasksRequest* req,
                                          v1::CompleteTasksResponse* resp) override {
    if (grpc::ServerUnaryReactor* denied = Deny(c, "CompleteTasks", Access::kOwnNode, NodesOf(req->items(), [](const auto& i) { return NodeOfOwner(i.owner()); }))) return denied;
    return Offload(c, [this, req, resp] {
      std::vector<TaskCompletion> items;
      items.reserve(static_cast<std::size_t>(req->items_size()));
      for (const v1::CompleteTaskRequest& i : req->items()) {
        items.push_back({i.id(), i.owner(), i.mtime_ns()});
      }
      absl::StatusOr<std::vector<absl::StatusOr<Task>>> results = catalog_.CompleteTasks(items);
      if (!results.ok()) return results.status();
      return FillResults(*results, [resp] { return resp->add_results(); },
                         [](v1::TaskResult* out) { return out->mutable_task(); });
    });
  }

  grpc::ServerUnaryReactor* TransitionReplicas(grpc::CallbackServerContext* c,
                                               const v1::TransitionReplicasRequest* req,
                                               v1::TransitionReplicasResponse* resp) override {
    if (grpc::ServerUnaryReactor* denied = Deny(c, "TransitionReplicas", Access::kOwnNode, NodesOf(req->items(), [](const auto& i) { return std::string_view(i.node()); }))) return denied;
    return Offload(c, [this, req, resp]() -> absl::Status {
      std::vector<ReplicaTransition> items;
      items.reserve(static_cast<std::size_t>(req->items_size()));
      for (const v1::ReplicaTransition& i : req->items()) {
        for (v1::ReplicaState s : {i.from(), i.to()}) {
          if (s < v1::PENDING || s > v1::LOST) {
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
      absl::StatusOr<std::vector<absl::Status>> results = catalog_.TransitionReplicas(items);
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
    if (grpc::ServerUnaryReactor* denied = Deny(c, "GetPolicies", Access::kRead)) return denied;
    return Offload(c, [this, resp]() -> absl::Status {
      absl::StatusOr<PolicyDocument> d = catalog_.GetPolicies();
      if (!d.ok()) return d.status();
      PolicyToProto(*d, resp);
      return absl::OkStatus();
    });
  }

  grpc::ServerUnaryReactor* PutPolicies(grpc::CallbackServerContext* c,
                                        const v1::PutPoliciesRequest* req,
                                        v1::PolicyDocument* resp) override {
    if (grpc::ServerUnaryReactor* denied = Deny(c, "PutPolicies", Access::kAdmin)) return denied;
    return Offload(c, [this, req, resp]() -> absl::Status {
      std::optional<std::uint64_t> expected;
      if (req->has_expected_version()) expected = req->expected_version();
      absl::StatusOr<PolicyDocument> d = catalog_.PutPolicies(req->text(), req->source(), expected);
      if (!d.ok()) return d.status();
      PolicyToProto(*d, resp);
      return absl::OkStatus();
    });
  }

  grpc::ServerUnaryReactor* FailTask(grpc::CallbackServerContext* c,
                                     const v1::FailTaskRequest* req, v1::Task* resp) override {
    if (grpc::ServerUnaryReactor* denied = Deny(c, "FailTask", Access::kOwnNode, {NodeOfOwner(req->owner())})) return denied;
    return Offload(c, [this, req, resp] {
      return Fill(catalog_.FailTask(req->id(), req->owner(), req->error(), req->retryable(),
                                    std::chrono::milliseconds(req->retry_after_ms())),
                  resp);
    });
  }

  grpc::ServerUnaryReactor* ExpireLeases(grpc::CallbackServerContext* c, const v1::Empty*,
                                         v1::ExpireLeasesResponse* resp) override {
    if (grpc::ServerUnaryReactor* denied = Deny(c, "ExpireLeases", Access::kAdmin)) return denied;
    return Offload(c, [this, resp] {
      absl::StatusOr<std::size_t> n = catalog_.ExpireLeases();
      if (n.ok()) resp->set_expired(*n);
      return n.status();
    });
  }

  grpc::ServerUnaryReactor* AbandonTask(grpc::CallbackServerContext* c,
                                        const v1::AbandonTaskRequest* req,
                                        v1::Task* resp) override {
    if (grpc::ServerUnaryReactor* denied = Deny(c, "AbandonTask", Access::kAdmin)) return denied;
    return Offload(c, [this, req, resp] {
      return Fill(catalog_.AbandonTask(req->id(), req->reason()), resp);
    });
  }

  grpc::ServerUnaryReactor* ReadEvents(grpc::CallbackServerContext* c,
                                       const v1::ReadEventsRequest* req,
                                       v1::EventList* resp) override {
    if (grpc::ServerUnaryReactor* denied = Deny(c, "ReadEvents", Access::kRead)) return denied;
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
    if (grpc::ServerUnaryReactor* denied = Deny(c, "LastEventSeq", Access::kRead)) return denied;
    return Inline(c, [&] {
      absl::StatusOr<std::uint64_t> seq = catalog_.LastEventSeq();
      if (seq.ok()) resp->set_seq(*seq);
      return seq.status();
    });
  }

  grpc::ServerWriteReactor<v1::EventList>* Watch(grpc::CallbackServerContext* c,
                                                 const v1::WatchRequest* req) override {
    if (!options_.tls_client_ca_pem.empty()) {
      absl::StatusOr<std::optional<Identity>> who = IdentityOf(c);
      absl::Status s = who.ok() ? Authorize(*who, "Watch", Access::kRead) : who.status();
      if (!s.ok()) {
        denied_ += 1;
        Audit(who.ok() && who->has_value() ? (*who)->ToString() : "unidentified",
              fmt::format("{} [from {}]", std::string(s.message()), c->peer()));
        return new RefusedWatch(ToGrpc(s));
      }
    }
    return new WatchReactor(catalog_, pool_, waiters_, PollerOf(c), req->after_seq(), stopping_);
  }

  Catalog& catalog_;
  ServerOptions options_;
  boost::asio::thread_pool pool_;
  // Long polls (ReadEvents with a wait, Watch streams) between events: no thread each.
  internal::EventWaiters waiters_;
  std::atomic<bool> stopping_{false};
  std::atomic<std::uint64_t> denied_{0};
  absl::Mutex request_quota_mu_;  // users' CreateRequest with a quota
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
    if (grpc::ServerUnaryReactor* denied =
            service_.Deny(c, "PublishTelemetry", Access::kOwnNode, {req->node()})) {
      return denied;
    }
    return service_.Inline(c, [&]() -> absl::Status {
      if (!options_.telemetry_sink) {
        return absl::UnimplementedError("this catalog server takes no telemetry (no dashboard)");
      }
      TelemetryBatch b;
      b.node = req->node();
      b.site = req->site();
      b.sent_ns = req->sent_ns();
      b.copies.reserve(static_cast<std::size_t>(req->copies_size()));
      for (const v1::TelemetryCopy& c : req->copies()) {
        b.copies.push_back({c.task_id(), c.request_id(), c.src_node(), c.src_site(), c.size(), c.streams(), c.received()});
      }
      b.points.reserve(static_cast<std::size_t>(req->points_size()));
      for (const v1::TelemetryPoint& p : req->points()) {
        b.points.push_back({p.time_ns(), std::vector<std::uint64_t>(p.bytes().begin(), p.bytes().end()),
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
    return d != nullptr && d->FindMethodByName(std::string(method.substr(prefix.size()))) != nullptr;
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
