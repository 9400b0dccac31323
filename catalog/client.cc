#include "catalog/client.h"

#include <arpa/inet.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <grpcpp/grpcpp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>

#include <algorithm>
#include <optional>
#include <string_view>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "catalog/internal/convert.h"
#include "catalog/proto/catalog.grpc.pb.h"

namespace gfrep::catalog {
namespace {

using internal::FromGrpc;
using internal::FromProto;
using internal::ToProto;
namespace v1 = ::gfrep::catalog::v1;

constexpr int kMaxMessageBytes = 64 << 20;

// Validates a path before it goes into a protobuf string field: a name that is not UTF-8
// cannot be sent at all (the server would fail to parse the request with an opaque
// error), so it gets the same kInvalidArgument the catalog would give.
absl::Status CheckPath(std::string_view path) { return SplitPath(path).status(); }

}  // namespace

void WatchHandle::Cancel() {
  cancelled_ = true;
  while (busy_.test_and_set()) {
  }
  if (cancel_) cancel_();
  busy_.clear();
}

void WatchHandle::Attach(std::function<void()> cancel) {
  while (busy_.test_and_set()) {
  }
  cancel_ = std::move(cancel);
  busy_.clear();
}

struct CatalogClient::Impl {
  ClientOptions options;
  // Replaced by ReloadCredentials; a call holds the one it started with.
  mutable absl::Mutex stub_mu;
  std::shared_ptr<v1::Catalog::Stub> stub ABSL_GUARDED_BY(stub_mu);
  // The Telemetry service's, on the same channel.
  std::shared_ptr<v1::Telemetry::Stub> telemetry_stub ABSL_GUARDED_BY(stub_mu);

  std::shared_ptr<v1::Catalog::Stub> Stub() const {
    absl::MutexLock lock(&stub_mu);
    return stub;
  }
  // The stub a method belongs to.
  template <typename M>
  std::shared_ptr<v1::Catalog::Stub> StubFor(M v1::Catalog::Stub::*) const {
    return Stub();
  }
  template <typename M>
  std::shared_ptr<v1::Telemetry::Stub> StubFor(M v1::Telemetry::Stub::*) const {
    absl::MutexLock lock(&stub_mu);
    return telemetry_stub;
  }

  // Calls one unary method; converts the status and, on success, the response. A call the
  // catalog refused for our identity's rate (RESOURCE_EXHAUSTED with "gfrep-retry-after-ms";
  // nothing was done) is sent again after the wait it names, while the call's time lasts.
  template <typename Req, typename Resp, typename Method>
  absl::Status Call(Method method, const Req& req, Resp* resp,
                    std::chrono::milliseconds extra = {}) const {
    // One deadline for all attempts: a retried call takes no longer than one would.
    const auto deadline = std::chrono::system_clock::now() + options.timeout + extra;
    for (;;) {
      grpc::ClientContext ctx;
      ctx.set_deadline(deadline);
      ctx.set_wait_for_ready(options.wait_for_ready);
      const auto current = StubFor(method);
      grpc::Status s = (current.get()->*method)(&ctx, req, resp);
      const std::optional<std::chrono::milliseconds> wait = RetryAfter(s, ctx);
      if (!wait || std::chrono::system_clock::now() + *wait >= deadline) return FromGrpc(s);
      std::this_thread::sleep_for(*wait);  // the server said when; nothing to wait on
    }
  }

  static std::optional<std::chrono::milliseconds> RetryAfter(const grpc::Status& s, const grpc::ClientContext& ctx) {
    if (s.error_code() != grpc::StatusCode::RESOURCE_EXHAUSTED) return std::nullopt;
    const auto& trailers = ctx.GetServerTrailingMetadata();
    auto it = trailers.find("gfrep-retry-after-ms");
    if (it == trailers.end()) return std::nullopt;
    std::int64_t ms = 0;
    for (char c : std::string_view(it->second.data(), it->second.size())) {
      if (c < '0' || c > '9' || ms > 60000) return std::nullopt;
      ms = ms * 10 + (c - '0');
    }
    return std::chrono::milliseconds(std::clamp<std::int64_t>(ms, 1, 5000));
  }
};

// A certificate and the private key that goes with it (or neither): a rotation that would
// leave every call failing its handshake is refused before it is made.
static absl::Status CheckKeyPair(const std::string& cert_pem, const std::string& key_pem) {
  if (cert_pem.empty()) return absl::OkStatus();
  BIO* cb = BIO_new_mem_buf(cert_pem.data(), static_cast<int>(cert_pem.size()));
  X509* cert = PEM_read_bio_X509(cb, nullptr, nullptr, nullptr);
  BIO_free(cb);
  BIO* kb = BIO_new_mem_buf(key_pem.data(), static_cast<int>(key_pem.size()));
  EVP_PKEY* key = PEM_read_bio_PrivateKey(kb, nullptr, nullptr, nullptr);
  BIO_free(kb);
  absl::Status s = absl::OkStatus();
  if (cert == nullptr) {
    s = absl::InvalidArgumentError("the certificate is not PEM");
  } else if (key == nullptr) {
    s = absl::InvalidArgumentError("the key is not PEM");
  } else if (X509_check_private_key(cert, key) != 1) {
    s = absl::InvalidArgumentError("the key does not belong to the certificate");
  }
  X509_free(cert);
  EVP_PKEY_free(key);
  return s;
}

// The gRPC target for ClientOptions::address, and whether it names several front ends:
// "HOST:PORT" as it is; "IP:PORT,IP:PORT,..." as "ipv4:..." or "ipv6:..." (gRPC resolves no
// list of DNS names; one name with several addresses does that).
static absl::StatusOr<std::pair<std::string, bool>> GrpcTarget(std::string_view address) {
  if (address.find(',') == std::string_view::npos) return std::pair{std::string(address), false};
  std::vector<std::string> v4, v6;
  std::size_t start = 0;
  while (start <= address.size()) {
    std::size_t end = std::min(address.find(',', start), address.size());
    std::string one(address.substr(start, end - start));
    start = end + 1;
    in6_addr a6{};
    in_addr a4{};
    const std::size_t colon = one.rfind(':');
    std::string host = colon == std::string::npos ? one : one.substr(0, colon);
    std::string port = colon == std::string::npos ? "" : one.substr(colon + 1);
    const bool port_ok = !port.empty() && port.size() <= 5 &&
                         std::all_of(port.begin(), port.end(), [](char c) { return c >= '0' && c <= '9'; }) &&
                         std::stoi(port) > 0 && std::stoi(port) < 65536;
    if (port_ok && inet_pton(AF_INET, host.c_str(), &a4) == 1) {
      v4.push_back(one);
    } else if (port_ok && host.size() > 2 && host.front() == '[' && host.back() == ']' &&
               inet_pton(AF_INET6, host.substr(1, host.size() - 2).c_str(), &a6) == 1) {
      v6.push_back(one);
    } else {
      return absl::InvalidArgumentError(fmt::format(
          "bad catalog address '{}' in the list '{}': several front ends are given as IP:PORT "
          "(IPv6 as [IP]:PORT), separated by commas",
          one, address));
    }
  }
  if (!v4.empty() && !v6.empty()) {
    return absl::InvalidArgumentError(fmt::format(
        "catalog address list '{}' mixes IPv4 and IPv6 front ends: use one kind", address));
  }
  return std::pair{fmt::format("{}:{}", v4.empty() ? "ipv6" : "ipv4",
                               fmt::join(v4.empty() ? v6 : v4, ",")),
                   true};
}

// A channel for `options` (validated by Create).
static std::shared_ptr<grpc::Channel> MakeChannel(const ClientOptions& options) {
  std::shared_ptr<grpc::ChannelCredentials> creds;
  if (options.tls_root_pem.empty()) {
    creds = grpc::InsecureChannelCredentials();
  } else {
    grpc::SslCredentialsOptions ssl;
    ssl.pem_root_certs = options.tls_root_pem;
    ssl.pem_cert_chain = options.tls_cert_pem;
    ssl.pem_private_key = options.tls_key_pem;
    creds = grpc::SslCredentials(ssl);
    if (!options.token.empty()) {
      creds = grpc::CompositeChannelCredentials(creds, grpc::AccessTokenCredentials(options.token));
    }
  }
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(kMaxMessageBytes);
  args.SetMaxSendMessageSize(kMaxMessageBytes);
  absl::StatusOr<std::pair<std::string, bool>> target = GrpcTarget(options.address);  // checked by Create
  if (target->second) {
    args.SetLoadBalancingPolicyName("round_robin");
    // Certificates are checked against the first front end's address (each front end's
    // certificate names its own; on one host they are the same).
    const std::string first = options.address.substr(0, options.address.find(','));
    args.SetString(GRPC_ARG_DEFAULT_AUTHORITY, first);
    if (!options.tls_root_pem.empty()) {
      std::string host = first.substr(0, first.rfind(':'));
      if (host.size() > 2 && host.front() == '[') host = host.substr(1, host.size() - 2);
      args.SetSslTargetNameOverride(host);
    }
  }
  return grpc::CreateCustomChannel(target->first, creds, args);
}

CatalogClient::CatalogClient(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
CatalogClient::~CatalogClient() = default;

absl::StatusOr<std::unique_ptr<CatalogClient>> CatalogClient::Create(
    const ClientOptions& options) {
  if (options.address.empty() || options.address.find(':') == std::string::npos) {
    return absl::InvalidArgumentError(
        fmt::format("bad catalog address '{}': want HOST:PORT", options.address));
  }
  if (absl::StatusOr<std::pair<std::string, bool>> t = GrpcTarget(options.address); !t.ok()) {
    return t.status();
  }
  if (options.timeout.count() <= 0) return absl::InvalidArgumentError("timeout must be positive");
  if (options.tls_cert_pem.empty() != options.tls_key_pem.empty()) {
    return absl::InvalidArgumentError("a client certificate needs its key, and the key its certificate");
  }
  if (!options.tls_cert_pem.empty() && options.tls_root_pem.empty()) {
    return absl::InvalidArgumentError("a client certificate needs TLS: give the catalog's CA too");
  }
  if (!options.token.empty() && options.tls_root_pem.empty()) {
    return absl::InvalidArgumentError("a token is sent only over TLS: give the catalog's CA too");
  }
  auto impl = std::make_unique<Impl>();
  impl->options = options;
  {
    const std::shared_ptr<grpc::Channel> channel = MakeChannel(options);
    absl::MutexLock lock(&impl->stub_mu);  // not shared yet; the lock is for the analysis
    impl->stub = v1::Catalog::NewStub(channel);
    impl->telemetry_stub = v1::Telemetry::NewStub(channel);
  }
  return std::unique_ptr<CatalogClient>(new CatalogClient(std::move(impl)));
}

absl::Status CatalogClient::ReloadCredentials(const std::string& root_pem, const std::string& cert_pem,
                                              const std::string& key_pem) {
  if (impl_->options.tls_root_pem.empty()) {
    return absl::FailedPreconditionError("this catalog client does not use TLS");
  }
  if (root_pem.empty() || cert_pem.empty() != key_pem.empty()) {
    return absl::InvalidArgumentError("a CA, and a certificate with its key or neither");
  }
  if (absl::Status s = CheckKeyPair(cert_pem, key_pem); !s.ok()) return s;
  ClientOptions next = impl_->options;
  next.tls_root_pem = root_pem;
  next.tls_cert_pem = cert_pem;
  next.tls_key_pem = key_pem;
  const std::shared_ptr<grpc::Channel> channel = MakeChannel(next);
  std::shared_ptr<v1::Catalog::Stub> stub = v1::Catalog::NewStub(channel);
  std::shared_ptr<v1::Telemetry::Stub> telemetry = v1::Telemetry::NewStub(channel);
  absl::MutexLock lock(&impl_->stub_mu);
  impl_->stub = std::move(stub);
  impl_->telemetry_stub = std::move(telemetry);
  return absl::OkStatus();
}

absl::Status CatalogClient::Watch(std::uint64_t after_seq,
                                  const std::function<bool(const Event&)>& on_event,
                                  WatchHandle* handle) {
  grpc::ClientContext ctx;
  ctx.set_wait_for_ready(impl_->options.wait_for_ready);
  if (handle != nullptr) {
    handle->Attach([&ctx] { ctx.TryCancel(); });
    if (handle->cancelled()) {
      handle->Attach(nullptr);
      return absl::CancelledError("watch cancelled");
    }
  }
  v1::WatchRequest req;
  req.set_after_seq(after_seq);
  const std::shared_ptr<v1::Catalog::Stub> stub = impl_->Stub();
  std::unique_ptr<grpc::ClientReader<v1::EventList>> reader = stub->Watch(&ctx, req);
  v1::EventList batch;
  bool stopped = false;
  absl::Status bad;
  while (!stopped && reader->Read(&batch)) {
    for (const v1::Event& pe : batch.events()) {
      absl::StatusOr<Event> e = FromProto(pe);
      if (!e.ok()) {
        bad = e.status();
        stopped = true;
        break;
      }
      if (!on_event(*e)) {
        stopped = true;
        break;
      }
    }
  }
  if (stopped) ctx.TryCancel();
  grpc::Status s = reader->Finish();
  if (handle != nullptr) handle->Attach(nullptr);
  if (!bad.ok()) return bad;
  if (stopped) return absl::OkStatus();
  if (handle != nullptr && handle->cancelled()) return absl::CancelledError("watch cancelled");
  if (s.ok()) return absl::UnavailableError("watch stream ended");
  return FromGrpc(s);
}

absl::StatusOr<Attributes> CatalogClient::Mkdir(std::string_view path,
                                                const MkdirOptions& options) {
  v1::MkdirRequest req;
  if (absl::Status s = CheckPath(path); !s.ok()) return s;
  req.set_path(std::string(path));
  req.set_parents(options.parents);
  req.set_mode(options.mode);
  req.set_owner(options.owner);
  v1::Attributes resp;
  if (absl::Status s = impl_->Call(&v1::Catalog::Stub::Mkdir, req, &resp); !s.ok()) return s;
  return FromProto(resp);
}

absl::StatusOr<Attributes> CatalogClient::CreateFile(std::string_view path,
                                                     const FileContent& content) {
  v1::CreateFileRequest req;
  if (absl::Status s = CheckPath(path); !s.ok()) return s;
  req.set_path(std::string(path));
  ToProto(content, req.mutable_content());
  v1::Attributes resp;
  if (absl::Status s = impl_->Call(&v1::Catalog::Stub::CreateFile, req, &resp); !s.ok()) return s;
  return FromProto(resp);
}

absl::StatusOr<WriteReservation> CatalogClient::BeginWrite(std::string_view path,
                                                           const FileContent& content) {
  v1::CreateFileRequest req;
  if (absl::Status s = CheckPath(path); !s.ok()) return s;
  req.set_path(std::string(path));
  ToProto(content, req.mutable_content());
  v1::WriteReservation resp;
  if (absl::Status s = impl_->Call(&v1::Catalog::Stub::BeginWrite, req, &resp); !s.ok()) return s;
  absl::StatusOr<Attributes> a = FromProto(resp.attributes());
  if (!a.ok()) return a.status();
  WriteReservation out;
  out.attributes = std::move(*a);
  out.generation = resp.generation();
  return out;
}

absl::StatusOr<Attributes> CatalogClient::CommitFile(
    std::string_view path, const FileContent& content, std::string_view writer_node,
    std::optional<std::uint64_t> expected_generation) {
  v1::CommitFileRequest req;
  if (absl::Status s = CheckPath(path); !s.ok()) return s;
  req.set_path(std::string(path));
  ToProto(content, req.mutable_content());
  req.set_writer_node(std::string(writer_node));
  if (expected_generation.has_value()) req.set_expected_generation(*expected_generation);
  v1::Attributes resp;
  if (absl::Status s = impl_->Call(&v1::Catalog::Stub::CommitFile, req, &resp); !s.ok()) return s;
  return FromProto(resp);
}

absl::StatusOr<std::vector<Attributes>> CatalogClient::CreateFiles(
    const std::vector<NewFile>& files) {
  v1::CreateFilesRequest req;
  for (const NewFile& f : files) {
    if (absl::Status s = CheckPath(f.path); !s.ok()) return s;
    v1::CreateFileRequest* out = req.add_files();
    out->set_path(f.path);
    ToProto(f.content, out->mutable_content());
  }
  v1::AttributesList resp;
  if (absl::Status s = impl_->Call(&v1::Catalog::Stub::CreateFiles, req, &resp); !s.ok()) {
    return s;
  }
  std::vector<Attributes> out;
  out.reserve(static_cast<std::size_t>(resp.attributes_size()));
  for (const v1::Attributes& a : resp.attributes()) {
    absl::StatusOr<Attributes> x = FromProto(a);
    if (!x.ok()) return x.status();
    out.push_back(std::move(*x));
  }
  return out;
}

namespace {
// One item's error of a batch answer (code != 0: a google.rpc.Code).
absl::Status ItemStatus(int code, const std::string& message, std::string_view call) {
  if (code <= 0 || code > 16) return absl::InternalError(fmt::format("{}: bad status code", call));
  return absl::Status(static_cast<absl::StatusCode>(code), message);
}
}  // namespace

absl::StatusOr<std::vector<absl::StatusOr<Attributes>>> CatalogClient::StatMany(
    const std::vector<std::string>& paths) {
  v1::StatManyRequest req;
  // A path the wire cannot carry is sent as "" and its result replaced below, so that it
  // does not fail the other paths.
  std::vector<absl::Status> local(paths.size());
  for (std::size_t i = 0; i < paths.size(); ++i) {
    local[i] = CheckPath(paths[i]);
    req.add_paths(local[i].ok() ? paths[i] : std::string());
  }
  v1::StatManyResponse resp;
  if (absl::Status s = impl_->Call(&v1::Catalog::Stub::StatMany, req, &resp); !s.ok()) return s;
  if (resp.results_size() != static_cast<int>(paths.size())) {
    return absl::InternalError("StatMany: result count does not match the paths");
  }
  std::vector<absl::StatusOr<Attributes>> out;
  out.reserve(paths.size());
  for (const v1::StatResult& r : resp.results()) {
    if (!local[out.size()].ok()) {
      out.push_back(local[out.size()]);
    } else if (r.code() == 0) {
      out.push_back(FromProto(r.attributes()));
    } else {
      out.push_back(ItemStatus(r.code(), r.message(), "StatMany"));
    }
  }
  return out;
}

absl::StatusOr<Attributes> CatalogClient::Stat(std::string_view path) {
  v1::PathRequest req;
  if (absl::Status s = CheckPath(path); !s.ok()) return s;
  req.set_path(std::string(path));
  v1::Attributes resp;
  if (absl::Status s = impl_->Call(&v1::Catalog::Stub::Stat, req, &resp); !s.ok()) return s;
  return FromProto(resp);
}

absl::StatusOr<Attributes> CatalogClient::StatInode(InodeId inode) {
  v1::InodeRequest req;
  req.set_inode(inode);
  v1::Attributes resp;
  if (absl::Status s = impl_->Call(&v1::Catalog::Stub::StatInode, req, &resp); !s.ok()) return s;
  return FromProto(resp);
}

absl::StatusOr<std::string> CatalogClient::PathOf(InodeId inode) {
  v1::InodeRequest req;
  req.set_inode(inode);
  v1::PathResponse resp;
  if (absl::Status s = impl_->Call(&v1::Catalog::Stub::PathOf, req, &resp); !s.ok()) return s;
  return resp.path();
}

absl::StatusOr<std::vector<DirEntry>> CatalogClient::List(std::string_view path,
                                                          const ListOptions& options) {
  v1::ListRequest req;
  if (absl::Status s = CheckPath(path); !s.ok()) return s;
  req.set_path(std::string(path));
  req.set_start_after(options.start_after);
  req.set_limit(options.limit);
  v1::ListResponse resp;
  if (absl::Status s = impl_->Call(&v1::Catalog::Stub::List, req, &resp); !s.ok()) return s;
  std::vector<DirEntry> out;
  out.reserve(static_cast<std::size_t>(resp.entries_size()));
  for (const v1::DirEntry& e : resp.entries()) {
    absl::StatusOr<Attributes> a = FromProto(e.attributes());
    if (!a.ok()) return a.status();
    out.push_back(DirEntry{e.name(), std::move(*a)});
  }
  return out;
}

absl::Status CatalogClient::Remove(std::string_view path, bool recursive) {
  v1::RemoveRequest req;
  if (absl::Status s = CheckPath(path); !s.ok()) return s;
  req.set_path(std::string(path));
  req.set_recursive(recursive);
  v1::Empty resp;
  return impl_->Call(&v1::Catalog::Stub::Remove, req, &resp);
}

absl::Status CatalogClient::Rename(std::string_view from, std::string_view to) {
  v1::RenameRequest req;
  if (absl::Status s = CheckPath(from); !s.ok()) return s;
  if (absl::Status s = CheckPath(to); !s.ok()) return s;
  req.set_from(std::string(from));
  req.set_to(std::string(to));
  v1::Empty resp;
  return impl_->Call(&v1::Catalog::Stub::Rename, req, &resp);
}

absl::StatusOr<Attributes> CatalogClient::SetAttributes(std::string_view path, const AttributeChange& change) {
  v1::SetAttributesRequest req;
  if (absl::Status s = CheckPath(path); !s.ok()) return s;
  req.set_path(std::string(path));
  if (change.mode) req.set_mode(*change.mode);
  if (change.owner) req.set_owner(*change.owner);
  if (change.group) req.set_group(*change.group);
  v1::Attributes resp;
  if (absl::Status s = impl_->Call(&v1::Catalog::Stub::SetAttributes, req, &resp); !s.ok()) return s;
  return FromProto(resp);
}

absl::Status CatalogClient::RevokeToken(std::string_view id, std::int64_t expires_unix) {
  v1::RevokeTokenRequest req;
  req.set_id(std::string(id));
  req.set_expires_unix(expires_unix);
  v1::Empty resp;
  return impl_->Call(&v1::Catalog::Stub::RevokeToken, req, &resp);
}

absl::StatusOr<Location> CatalogClient::Locate(std::string_view path) {
  v1::PathRequest req;
  if (absl::Status s = CheckPath(path); !s.ok()) return s;
  req.set_path(std::string(path));
  v1::Location resp;
  if (absl::Status s = impl_->Call(&v1::Catalog::Stub::Locate, req, &resp); !s.ok()) return s;
  return FromProto(resp);
}

namespace {
absl::StatusOr<std::vector<Replica>> Replicas(const v1::ReplicaList& list) {
  std::vector<Replica> out;
  for (const v1::Replica& r : list.replicas()) {
    absl::StatusOr<Replica> x = FromProto(r);
    if (!x.ok()) return x.status();
    out.push_back(std::move(*x));
  }
  return out;
}
}  // namespace

absl::StatusOr<std::vector<Replica>> CatalogClient::GetReplicas(InodeId inode) {
  v1::InodeRequest req;
  req.set_inode(inode);
  v1::ReplicaList resp;
  if (absl::Status s = impl_->Call(&v1::Catalog::Stub::GetReplicas, req, &resp); !s.ok()) return s;
  return Replicas(resp);
}

absl::Status CatalogClient::PutReplica(const Replica& replica) {
  v1::Replica req;
  ToProto(replica, &req);
  v1::Empty resp;
  return impl_->Call(&v1::Catalog::Stub::PutReplica, req, &resp);
}

absl::Status CatalogClient::RemoveReplica(InodeId inode, std::string_view node) {
  v1::RemoveReplicaRequest req;
  req.set_inode(inode);
  req.set_node(std::string(node));
  v1::Empty resp;
  return impl_->Call(&v1::Catalog::Stub::RemoveReplica, req, &resp);
}

absl::StatusOr<std::vector<Replica>> CatalogClient::ListNodeReplicas(std::string_view node,
                                                                     InodeId start_after,
                                                                     std::size_t limit) {
  v1::ListNodeReplicasRequest req;
  req.set_node(std::string(node));
  req.set_start_after(start_after);
  req.set_limit(limit);
  v1::ReplicaList resp;
  if (absl::Status s = impl_->Call(&v1::Catalog::Stub::ListNodeReplicas, req, &resp); !s.ok()) {
    return s;
  }
  return Replicas(resp);
}

absl::Status CatalogClient::PutSite(const Site& site) {
  v1::Site req;
  ToProto(site, &req);
  v1::Empty resp;
  return impl_->Call(&v1::Catalog::Stub::PutSite, req, &resp);
}

absl::Status CatalogClient::RemoveSite(std::string_view name) {
  v1::NameRequest req;
  req.set_name(std::string(name));
  v1::Empty resp;
  return impl_->Call(&v1::Catalog::Stub::RemoveSite, req, &resp);
}

absl::StatusOr<std::vector<Site>> CatalogClient::ListSites() {
  v1::Empty req;
  v1::SiteList resp;
  if (absl::Status s = impl_->Call(&v1::Catalog::Stub::ListSites, req, &resp); !s.ok()) return s;
  std::vector<Site> out;
  for (const v1::Site& x : resp.sites()) out.push_back(FromProto(x));
  return out;
}

absl::Status CatalogClient::RegisterNode(const Node& node) {
  v1::Node req;
  ToProto(node, &req);
  v1::Empty resp;
  return impl_->Call(&v1::Catalog::Stub::RegisterNode, req, &resp);
}

absl::Status CatalogClient::PutNodeDisk(std::string_view node, const DiskProfile& disk) {
  v1::PutNodeDiskRequest req;
  req.set_node(std::string(node));
  ToProto(disk, req.mutable_disk());
  v1::Empty resp;
  return impl_->Call(&v1::Catalog::Stub::PutNodeDisk, req, &resp);
}

absl::Status CatalogClient::SetNodeMode(std::string_view node, NodeMode mode) {
  v1::SetNodeModeRequest req;
  req.set_node(std::string(node));
  req.set_mode(static_cast<v1::NodeMode>(mode));
  v1::Empty resp;
  return impl_->Call(&v1::Catalog::Stub::SetNodeMode, req, &resp);
}

absl::Status CatalogClient::RemoveNode(std::string_view name) {
  v1::NameRequest req;
  req.set_name(std::string(name));
  v1::Empty resp;
  return impl_->Call(&v1::Catalog::Stub::RemoveNode, req, &resp);
}

absl::StatusOr<Node> CatalogClient::GetNode(std::string_view name) {
  v1::NameRequest req;
  req.set_name(std::string(name));
  v1::Node resp;
  if (absl::Status s = impl_->Call(&v1::Catalog::Stub::GetNode, req, &resp); !s.ok()) return s;
  return FromProto(resp);
}

absl::StatusOr<std::vector<Node>> CatalogClient::ListNodes(std::string_view site) {
  v1::ListNodesRequest req;
  req.set_site(std::string(site));
  v1::NodeList resp;
  if (absl::Status s = impl_->Call(&v1::Catalog::Stub::ListNodes, req, &resp); !s.ok()) return s;
  std::vector<Node> out;
  for (const v1::Node& x : resp.nodes()) {
    absl::StatusOr<Node> n = FromProto(x);
    if (!n.ok()) return n.status();
    out.push_back(std::move(*n));
  }
  return out;
}

absl::Status CatalogClient::SendHeartbeat(const Heartbeat& heartbeat) {
  v1::HeartbeatRequest req;
  ToProto(heartbeat, &req);
  v1::Empty resp;
  return impl_->Call(&v1::Catalog::Stub::SendHeartbeat, req, &resp);
}

absl::Status CatalogClient::PutRoute(const Route& route) {
  v1::Route req;
  ToProto(route, &req);
  v1::Empty resp;
  return impl_->Call(&v1::Catalog::Stub::PutRoute, req, &resp);
}

absl::Status CatalogClient::RemoveRoute(std::string_view src_site, std::string_view dst_site) {
  v1::RouteKey req;
  req.set_src_site(std::string(src_site));
  req.set_dst_site(std::string(dst_site));
  v1::Empty resp;
  return impl_->Call(&v1::Catalog::Stub::RemoveRoute, req, &resp);
}

absl::StatusOr<Route> CatalogClient::GetRoute(std::string_view src_site,
                                              std::string_view dst_site) {
  v1::RouteKey req;
  req.set_src_site(std::string(src_site));
  req.set_dst_site(std::string(dst_site));
  v1::Route resp;
  if (absl::Status s = impl_->Call(&v1::Catalog::Stub::GetRoute, req, &resp); !s.ok()) return s;
  return FromProto(resp);
}

absl::StatusOr<std::vector<Route>> CatalogClient::ListRoutes() {
  v1::Empty req;
  v1::RouteList resp;
  if (absl::Status s = impl_->Call(&v1::Catalog::Stub::ListRoutes, req, &resp); !s.ok()) return s;
  std::vector<Route> out;
  for (const v1::Route& x : resp.routes()) out.push_back(FromProto(x));
  return out;
}

absl::StatusOr<Request> CatalogClient::CreateRequest(const RequestSpec& spec) {
  v1::RequestSpec req;
  ToProto(spec, &req);
  v1::Request resp;
  if (absl::Status s = impl_->Call(&v1::Catalog::Stub::CreateRequest, req, &resp); !s.ok()) {
    return s;
  }
  return FromProto(resp);
}

absl::StatusOr<Request> CatalogClient::GetRequest(std::uint64_t id) {
  v1::IdRequest req;
  req.set_id(id);
  v1::Request resp;
  if (absl::Status s = impl_->Call(&v1::Catalog::Stub::GetRequest, req, &resp); !s.ok()) return s;
  return FromProto(resp);
}

absl::StatusOr<std::vector<Request>> CatalogClient::ListRequests(bool any_state,
                                                                 RequestState state,
                                                                 std::size_t limit) {
  v1::ListRequestsRequest req;
  req.set_any_state(any_state);
  req.set_state(static_cast<v1::RequestState>(state));
  req.set_limit(limit);
  v1::RequestList resp;
  if (absl::Status s = impl_->Call(&v1::Catalog::Stub::ListRequests, req, &resp); !s.ok()) {
    return s;
  }
  std::vector<Request> out;
  for (const v1::Request& x : resp.requests()) {
    absl::StatusOr<Request> r = FromProto(x);
    if (!r.ok()) return r.status();
    out.push_back(std::move(*r));
  }
  return out;
}

absl::StatusOr<Request> CatalogClient::UpdateRequest(const RequestUpdate& u) {
  v1::UpdateRequestRequest req;
  req.set_id(u.id);
  req.set_set_state(u.set_state);
  req.set_state(static_cast<v1::RequestState>(u.state));
  req.set_error(u.error);
  v1::Request resp;
  if (absl::Status s = impl_->Call(&v1::Catalog::Stub::UpdateRequest, req, &resp); !s.ok()) {
    return s;
  }
  return FromProto(resp);
}

namespace {
absl::StatusOr<std::vector<Task>> Tasks(const v1::TaskList& list) {
  std::vector<Task> out;
  for (const v1::Task& x : list.tasks()) {
    absl::StatusOr<Task> t = FromProto(x);
    if (!t.ok()) return t.status();
    out.push_back(std::move(*t));
  }
  return out;
}
}  // namespace

absl::StatusOr<std::vector<Task>> CatalogClient::CreateTasks(const std::vector<TaskSpec>& specs) {
  v1::CreateTasksRequest req;
  for (const TaskSpec& s : specs) ToProto(s, req.add_specs());
  v1::TaskList resp;
  if (absl::Status s = impl_->Call(&v1::Catalog::Stub::CreateTasks, req, &resp); !s.ok()) return s;
  return Tasks(resp);
}

absl::StatusOr<Task> CatalogClient::GetTask(std::uint64_t id) {
  v1::IdRequest req;
  req.set_id(id);
  v1::Task resp;
  if (absl::Status s = impl_->Call(&v1::Catalog::Stub::GetTask, req, &resp); !s.ok()) return s;
  return FromProto(resp);
}

absl::StatusOr<std::vector<Task>> CatalogClient::ListTasks(const TaskFilter& f) {
  v1::ListTasksRequest req;
  req.set_request_id(f.request_id);
  req.set_dst_node(f.dst_node);
  req.set_any_state(f.any_state);
  req.set_state(static_cast<v1::TaskState>(f.state));
  req.set_limit(f.limit);
  req.set_open_only(f.open_only);
  v1::TaskList resp;
  if (absl::Status s = impl_->Call(&v1::Catalog::Stub::ListTasks, req, &resp); !s.ok()) return s;
  return Tasks(resp);
}

absl::StatusOr<std::vector<RequestFile>> CatalogClient::ListRequestFiles(
    std::uint64_t request_id, const RequestFileFilter& f) {
  v1::ListRequestFilesRequest req;
  req.set_request_id(request_id);
  req.set_any_state(f.any_state);
  req.set_state(static_cast<v1::RequestFileState>(f.state));
  req.set_after(f.after);
  req.set_limit(f.limit);
  v1::RequestFileList resp;
  if (absl::Status s = impl_->Call(&v1::Catalog::Stub::ListRequestFiles, req, &resp); !s.ok()) {
    return s;
  }
  std::vector<RequestFile> out;
  for (const v1::RequestFile& x : resp.files()) {
    absl::StatusOr<RequestFile> f = FromProto(x);
    if (!f.ok()) return f.status();
    out.push_back(std::move(*f));
  }
  return out;
}

absl::StatusOr<Request> CatalogClient::AddRequestFiles(std::uint64_t,
                                                       const std::vector<RequestFileInput>&, bool) {
  return absl::UnimplementedError("AddRequestFiles: not served over gRPC (gfcatalogd's planner)");
}

absl::StatusOr<RequestFile> CatalogClient::SettleRequestFile(std::uint64_t, std::uint64_t,
                                                             RequestFileState, std::string_view) {
  return absl::UnimplementedError("SettleRequestFile: not served over gRPC (gfcatalogd's planner)");
}

absl::StatusOr<Task> CatalogClient::ClaimTask(std::string_view node, std::string_view owner,
                                              std::chrono::milliseconds lease) {
  v1::ClaimTaskRequest req;
  req.set_node(std::string(node));
  req.set_owner(std::string(owner));
  req.set_lease_ms(static_cast<std::uint64_t>(std::max<std::int64_t>(lease.count(), 0)));
  v1::Task resp;
  if (absl::Status s = impl_->Call(&v1::Catalog::Stub::ClaimTask, req, &resp); !s.ok()) return s;
  return FromProto(resp);
}

// ClaimTasks of a server that has only ClaimTask (older than the batch): one call per owner,
// not atomic.
absl::StatusOr<std::vector<Task>> CatalogClient::ClaimOneByOne(
    std::string_view node, const std::vector<std::string>& owners,
    std::chrono::milliseconds lease) {
  if (owners.size() > kMaxBatchPaths) {
    return absl::InvalidArgumentError(fmt::format("more than {} owners", kMaxBatchPaths));
  }
  std::vector<Task> out;
  for (const std::string& owner : owners) {
    absl::StatusOr<Task> t = ClaimTask(node, owner, lease);
    if (absl::IsNotFound(t.status())) break;
    if (!t.ok()) {
      if (out.empty()) return t.status();
      break;  // what was claimed stays claimed: hand it out
    }
    out.push_back(std::move(*t));
  }
  return out;
}

// CompleteTasks of a server that has only CompleteTask: one call per task.
absl::StatusOr<std::vector<absl::StatusOr<Task>>> CatalogClient::CompleteOneByOne(
    const std::vector<TaskCompletion>& items) {
  if (items.size() > kMaxBatchPaths) {
    return absl::InvalidArgumentError(fmt::format("more than {} tasks", kMaxBatchPaths));
  }
  std::vector<absl::StatusOr<Task>> out;
  out.reserve(items.size());
  for (const TaskCompletion& c : items) out.push_back(CompleteTask(c.id, c.owner));
  return out;
}

absl::StatusOr<std::vector<Task>> CatalogClient::ClaimTasks(std::string_view node,
                                                            const std::vector<std::string>& owners,
                                                            std::chrono::milliseconds lease,
                                                            std::chrono::milliseconds wait) {
  v1::ClaimTasksRequest req;
  req.set_node(std::string(node));
  for (const std::string& owner : owners) req.add_owners(owner);
  req.set_lease_ms(static_cast<std::uint64_t>(std::max<std::int64_t>(lease.count(), 0)));
  req.set_wait_ms(static_cast<std::uint64_t>(std::max<std::int64_t>(wait.count(), 0)));
  v1::TaskList resp;
  // A server older than the long poll ignores wait_ms and answers at once (empty or not).
  absl::Status s = impl_->Call(&v1::Catalog::Stub::ClaimTasks, req, &resp, wait);
  if (absl::IsUnimplemented(s)) return ClaimOneByOne(node, owners, lease);
  if (!s.ok()) return s;
  if (resp.tasks_size() > static_cast<int>(owners.size())) {
    return absl::InternalError("ClaimTasks: more tasks than owners");
  }
  return Tasks(resp);
}

absl::StatusOr<Task> CatalogClient::RenewLease(std::uint64_t id, std::string_view owner,
                                               std::chrono::milliseconds lease) {
  v1::RenewLeaseRequest req;
  req.set_id(id);
  req.set_owner(std::string(owner));
  req.set_lease_ms(static_cast<std::uint64_t>(std::max<std::int64_t>(lease.count(), 0)));
  v1::Task resp;
  if (absl::Status s = impl_->Call(&v1::Catalog::Stub::RenewLease, req, &resp); !s.ok()) return s;
  return FromProto(resp);
}

absl::StatusOr<std::vector<absl::Status>> CatalogClient::RenewLeases(
    const std::vector<LeaseRenewal>& items, std::chrono::milliseconds lease) {
  v1::RenewLeasesRequest req;
  for (const LeaseRenewal& r : items) {
    v1::RenewLeasesRequest::Item* item = req.add_items();
    item->set_id(r.id);
    item->set_owner(r.owner);
  }
  req.set_lease_ms(static_cast<std::uint64_t>(std::max<std::int64_t>(lease.count(), 0)));
  v1::RenewLeasesResponse resp;
  absl::Status s = impl_->Call(&v1::Catalog::Stub::RenewLeases, req, &resp);
  std::vector<absl::Status> out;
  out.reserve(items.size());
  if (absl::IsUnimplemented(s)) {
    for (const LeaseRenewal& r : items) out.push_back(RenewLease(r.id, r.owner, lease).status());
    return out;
  }
  if (!s.ok()) return s;
  if (resp.results_size() != static_cast<int>(items.size())) {
    return absl::InternalError("RenewLeases: result count does not match the items");
  }
  for (const v1::LeaseResult& r : resp.results()) {
    out.push_back(r.code() == 0 ? absl::OkStatus()
                                : ItemStatus(r.code(), r.message(), "RenewLeases"));
  }
  return out;
}

absl::StatusOr<Task> CatalogClient::CompleteTask(std::uint64_t id, std::string_view owner) {
  v1::CompleteTaskRequest req;
  req.set_id(id);
  req.set_owner(std::string(owner));
  v1::Task resp;
  if (absl::Status s = impl_->Call(&v1::Catalog::Stub::CompleteTask, req, &resp); !s.ok()) {
    return s;
  }
  return FromProto(resp);
}

absl::StatusOr<std::vector<absl::StatusOr<Task>>> CatalogClient::CompleteTasks(
    const std::vector<TaskCompletion>& items) {
  v1::CompleteTasksRequest req;
  for (const TaskCompletion& c : items) {
    v1::CompleteTaskRequest* item = req.add_items();
    item->set_id(c.id);
    item->set_owner(c.owner);
    item->set_mtime_ns(c.mtime_ns);
  }
  v1::CompleteTasksResponse resp;
  absl::Status s = impl_->Call(&v1::Catalog::Stub::CompleteTasks, req, &resp);
  if (absl::IsUnimplemented(s)) return CompleteOneByOne(items);
  if (!s.ok()) return s;
  if (resp.results_size() != static_cast<int>(items.size())) {
    return absl::InternalError("CompleteTasks: result count does not match the tasks");
  }
  std::vector<absl::StatusOr<Task>> out;
  out.reserve(items.size());
  for (const v1::TaskResult& r : resp.results()) {
    if (r.code() == 0) {
      out.push_back(FromProto(r.task()));
    } else {
      out.push_back(ItemStatus(r.code(), r.message(), "CompleteTasks"));
    }
  }
  return out;
}

absl::StatusOr<std::vector<absl::Status>> CatalogClient::TransitionReplicas(
    const std::vector<ReplicaTransition>& items) {
  v1::TransitionReplicasRequest req;
  for (const ReplicaTransition& t : items) {
    v1::ReplicaTransition* item = req.add_items();
    item->set_inode(t.inode);
    item->set_node(t.node);
    item->set_generation(t.generation);
    item->set_from(static_cast<v1::ReplicaState>(t.from));
    item->set_to(static_cast<v1::ReplicaState>(t.to));
    item->set_verified(t.verified);
    item->set_mtime_ns(t.mtime_ns);
    item->set_note(t.note);
  }
  v1::TransitionReplicasResponse resp;
  if (absl::Status s = impl_->Call(&v1::Catalog::Stub::TransitionReplicas, req, &resp); !s.ok()) {
    return s;
  }
  if (resp.results_size() != static_cast<int>(items.size())) {
    return absl::InternalError("TransitionReplicas: result count does not match the items");
  }
  std::vector<absl::Status> out;
  out.reserve(items.size());
  for (const v1::TransitionResult& r : resp.results()) {
    out.push_back(r.code() == 0 ? absl::OkStatus()
                                : ItemStatus(r.code(), r.message(), "TransitionReplicas"));
  }
  return out;
}

namespace {
PolicyDocument FromProto(const v1::PolicyDocument& p) {
  PolicyDocument d;
  d.text = p.text();
  d.version = p.version();
  d.updated_ns = p.updated_ns();
  d.source = p.source();
  return d;
}
}  // namespace

absl::StatusOr<PolicyDocument> CatalogClient::GetPolicies() {
  v1::PolicyDocument resp;
  if (absl::Status s = impl_->Call(&v1::Catalog::Stub::GetPolicies, v1::Empty(), &resp); !s.ok()) {
    return s;
  }
  return FromProto(resp);
}

absl::Status CatalogClient::Publish(const TelemetryBatch& b) {
  if (absl::Status s = Validate(b); !s.ok()) return s;
  v1::TelemetryBatch req;
  req.set_node(b.node);
  req.set_site(b.site);
  req.set_sent_ns(b.sent_ns);
  for (const TelemetryCopy& c : b.copies) {
    v1::TelemetryCopy* out = req.add_copies();
    out->set_task_id(c.task_id);
    out->set_request_id(c.request_id);
    out->set_src_node(c.src_node);
    out->set_src_site(c.src_site);
    out->set_size(c.size);
    out->set_streams(c.streams);
    out->set_received(c.received);
  }
  for (const TelemetryPoint& p : b.points) {
    v1::TelemetryPoint* out = req.add_points();
    out->set_time_ns(p.time_ns);
    out->mutable_bytes()->Add(p.bytes.begin(), p.bytes.end());
    out->mutable_stream_bytes()->Add(p.stream_bytes.begin(), p.stream_bytes.end());
  }
  v1::Empty resp;
  return impl_->Call(&v1::Telemetry::Stub::Publish, req, &resp);
}

absl::StatusOr<PolicyDocument> CatalogClient::PutPolicies(std::string_view text,
                                                          std::string_view source,
                                                          std::optional<std::uint64_t> expected) {
  // Protobuf string fields must be UTF-8: refuse here what the server could not even parse.
  if (!IsValidUtf8(text) || !IsValidUtf8(source)) {
    return absl::InvalidArgumentError("policy document and source must be UTF-8");
  }
  v1::PutPoliciesRequest req;
  req.set_text(std::string(text));
  req.set_source(std::string(source));
  req.set_has_expected_version(expected.has_value());
  req.set_expected_version(expected.value_or(0));
  v1::PolicyDocument resp;
  if (absl::Status s = impl_->Call(&v1::Catalog::Stub::PutPolicies, req, &resp); !s.ok()) return s;
  return FromProto(resp);
}

absl::StatusOr<Task> CatalogClient::FailTask(std::uint64_t id, std::string_view owner,
                                             std::string_view error, bool retryable,
                                             std::chrono::milliseconds retry_after) {
  v1::FailTaskRequest req;
  req.set_id(id);
  req.set_owner(std::string(owner));
  req.set_error(std::string(error));
  req.set_retryable(retryable);
  req.set_retry_after_ms(static_cast<std::uint64_t>(std::max<std::int64_t>(retry_after.count(), 0)));
  v1::Task resp;
  if (absl::Status s = impl_->Call(&v1::Catalog::Stub::FailTask, req, &resp); !s.ok()) return s;
  return FromProto(resp);
}

absl::StatusOr<Task> CatalogClient::YieldTask(std::uint64_t id, std::string_view owner,
                                              std::string_view reason) {
  v1::YieldTaskRequest req;
  req.set_id(id);
  req.set_owner(std::string(owner));
  req.set_reason(std::string(reason));
  v1::Task resp;
  absl::Status s = impl_->Call(&v1::Catalog::Stub::YieldTask, req, &resp);
  if (absl::IsUnimplemented(s)) return FailTask(id, owner, reason, true, std::chrono::milliseconds(0));
  if (!s.ok()) return s;
  return FromProto(resp);
}

absl::StatusOr<std::size_t> CatalogClient::ExpireLeases() {
  v1::Empty req;
  v1::ExpireLeasesResponse resp;
  if (absl::Status s = impl_->Call(&v1::Catalog::Stub::ExpireLeases, req, &resp); !s.ok()) {
    return s;
  }
  return static_cast<std::size_t>(resp.expired());
}

absl::StatusOr<Task> CatalogClient::AbandonTask(std::uint64_t id, std::string_view reason) {
  v1::AbandonTaskRequest req;
  req.set_id(id);
  req.set_reason(std::string(reason));
  v1::Task resp;
  if (absl::Status s = impl_->Call(&v1::Catalog::Stub::AbandonTask, req, &resp); !s.ok()) {
    return s;
  }
  return FromProto(resp);
}

absl::Status CatalogClient::CancelRequest(std::uint64_t id) {
  v1::IdRequest req;
  req.set_id(id);
  v1::Empty resp;
  return impl_->Call(&v1::Catalog::Stub::CancelRequest, req, &resp);
}

absl::StatusOr<std::vector<Event>> CatalogClient::ReadEvents(std::uint64_t after_seq,
                                                             std::size_t max,
                                                             std::chrono::milliseconds wait) {
  v1::ReadEventsRequest req;
  req.set_after_seq(after_seq);
  req.set_max(max);
  req.set_wait_ms(static_cast<std::uint64_t>(std::max<std::int64_t>(wait.count(), 0)));
  v1::EventList resp;
  if (absl::Status s = impl_->Call(&v1::Catalog::Stub::ReadEvents, req, &resp, wait); !s.ok()) {
    return s;
  }
  std::vector<Event> out;
  for (const v1::Event& x : resp.events()) {
    absl::StatusOr<Event> e = FromProto(x);
    if (!e.ok()) return e.status();
    out.push_back(std::move(*e));
  }
  return out;
}

absl::StatusOr<std::uint64_t> CatalogClient::LastEventSeq() {
  v1::Empty req;
  v1::SeqResponse resp;
  if (absl::Status s = impl_->Call(&v1::Catalog::Stub::LastEventSeq, req, &resp); !s.ok()) {
    return s;
  }
  return resp.seq();
}

absl::StatusOr<std::vector<std::pair<std::string, std::int64_t>>> CatalogClient::RevokedTokens() {
  return absl::UnimplementedError("RevokedTokens: not served over gRPC");
}

absl::Status CatalogClient::RecordAudit(std::string_view, std::string_view, std::string_view) {
  return absl::UnimplementedError("RecordAudit: not served over gRPC");
}

absl::StatusOr<std::size_t> CatalogClient::PurgeFinishedRequests(std::int64_t, std::size_t) {
  return absl::UnimplementedError("PurgeFinishedRequests: not served over gRPC");
}

absl::StatusOr<std::map<std::string, std::uint64_t>> CatalogClient::StorageStats() {
  return absl::UnimplementedError("StorageStats: not served over gRPC");
}

}  // namespace gfrep::catalog
