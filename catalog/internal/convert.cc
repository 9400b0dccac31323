#include "catalog/internal/convert.h"

#include <string>

#include <fmt/format.h>

#include "catalog/catalog.h"

namespace gfrep::catalog::internal {

grpc::Status ToGrpc(const absl::Status& s) {
  if (s.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(s.code()), std::string(s.message()));
}

absl::Status FromGrpc(const grpc::Status& s) {
  if (s.ok()) return absl::OkStatus();
  return absl::Status(static_cast<absl::StatusCode>(s.error_code()), s.error_message());
}

void ToProto(const Attributes& in, v1::Attributes* out) {
  out->set_inode(in.inode);
  out->set_parent(in.parent);
  out->set_name(in.name);
  out->set_type(in.type == FileType::kDirectory ? v1::Attributes::DIRECTORY
                                                : v1::Attributes::FILE);
  out->set_size(in.size);
  out->set_mode(in.mode);
  out->set_owner(in.owner);
  out->set_mtime_ns(in.mtime_ns);
  out->set_checksum_algo(in.checksum_algo);
  out->set_checksum(in.checksum);
  out->set_generation(in.generation);
  out->set_group(in.group);
}

absl::StatusOr<Attributes> FromProto(const v1::Attributes& in) {
  Attributes a;
  a.inode = in.inode();
  a.parent = in.parent();
  a.name = in.name();
  if (in.type() == v1::Attributes::DIRECTORY) {
    a.type = FileType::kDirectory;
  } else if (in.type() == v1::Attributes::FILE) {
    a.type = FileType::kFile;
  } else {
    return absl::InvalidArgumentError("attributes without a valid type");
  }
  a.size = in.size();
  a.mode = in.mode();
  a.owner = in.owner();
  a.mtime_ns = in.mtime_ns();
  a.checksum_algo = in.checksum_algo();
  a.checksum = in.checksum();
  a.generation = in.generation();
  a.group = in.group();
  return a;
}

void ToProto(const Replica& in, v1::Replica* out) {
  out->set_inode(in.inode);
  out->set_node(in.node);
  out->set_state(static_cast<v1::ReplicaState>(in.state));
  out->set_generation(in.generation);
  out->set_size(in.size);
  out->set_verified_ns(in.verified_ns);
  out->set_updated_ns(in.updated_ns);
  out->set_mtime_ns(in.mtime_ns);
  out->set_note(in.note);
}

absl::StatusOr<Replica> FromProto(const v1::Replica& in) {
  if (in.state() < v1::PENDING || in.state() > v1::UNVERIFIED) {
    return absl::InvalidArgumentError(fmt::format("bad replica state {}", static_cast<int>(in.state())));
  }
  Replica r;
  r.inode = in.inode();
  r.node = in.node();
  r.state = static_cast<ReplicaState>(in.state());
  r.generation = in.generation();
  r.size = in.size();
  r.verified_ns = in.verified_ns();
  r.updated_ns = in.updated_ns();
  r.mtime_ns = in.mtime_ns();
  r.note = in.note();
  return r;
}

void ToProto(const Site& in, v1::Site* out) {
  out->set_name(in.name);
  for (const auto& [k, v] : in.labels) (*out->mutable_labels())[k] = v;
}

Site FromProto(const v1::Site& in) {
  Site s;
  s.name = in.name();
  for (const auto& [k, v] : in.labels()) s.labels[k] = v;
  return s;
}

void ToProto(const Node& in, v1::Node* out) {
  out->set_name(in.name);
  out->set_site(in.site);
  out->set_address(in.address);
  out->set_spool(in.spool);
  out->set_capacity_bytes(in.capacity_bytes);
  out->set_free_bytes(in.free_bytes);
  out->set_load(in.load);
  out->set_active_transfers(in.active_transfers);
  out->set_last_heartbeat_ns(in.last_heartbeat_ns);
  out->set_workers(in.workers);
  ToProto(in.disk, out->mutable_disk());
  out->set_requires_data_tls(in.requires_data_tls);
  out->set_liveness(in.liveness);
  out->set_mode(static_cast<v1::NodeMode>(in.mode));
}

void ToProto(const DiskProfile& in, v1::DiskProfile* out) {
  out->set_dir(in.dir);
  out->set_write_io_size_bytes(in.write_io_size_bytes);
  out->set_direct(in.direct);
  out->set_flush_interval_bytes(in.flush_interval_bytes);
  out->set_write_mbps(in.write_mbps);
  out->set_read_mbps(in.read_mbps);
  out->set_measured_ns(in.measured_ns);
}

DiskProfile FromProto(const v1::DiskProfile& in) {
  DiskProfile d;
  d.dir = in.dir();
  d.write_io_size_bytes = in.write_io_size_bytes();
  d.direct = in.direct();
  d.flush_interval_bytes = in.flush_interval_bytes();
  d.write_mbps = in.write_mbps();
  d.read_mbps = in.read_mbps();
  d.measured_ns = in.measured_ns();
  return d;
}

absl::StatusOr<Node> FromProto(const v1::Node& in) {
  Node n;
  n.name = in.name();
  n.site = in.site();
  n.address = in.address();
  n.spool = in.spool();
  n.capacity_bytes = in.capacity_bytes();
  n.free_bytes = in.free_bytes();
  n.load = in.load();
  n.active_transfers = in.active_transfers();
  n.last_heartbeat_ns = in.last_heartbeat_ns();
  n.workers = in.workers();
  n.disk = FromProto(in.disk());
  n.requires_data_tls = in.requires_data_tls();
  n.liveness = in.liveness();
  if (in.mode() < v1::NODE_NORMAL || in.mode() > v1::NODE_DRAINING) {
    return absl::InvalidArgumentError(fmt::format("bad node mode {}", static_cast<int>(in.mode())));
  }
  n.mode = static_cast<NodeMode>(in.mode());
  return n;
}

void ToProto(const Route& in, v1::Route* out) {
  out->set_src_site(in.src_site);
  out->set_dst_site(in.dst_site);
  out->set_streams(in.streams);
  out->set_socket_buffer_bytes(in.socket_buffer_bytes);
  out->set_stripe_unit_bytes(in.stripe_unit_bytes);
  out->set_stream_rate_bps(in.stream_rate_bps);
  out->set_route_rate_bps(in.route_rate_bps);
  out->set_congestion_control(in.congestion_control);
  out->set_max_concurrent_tasks(in.max_concurrent_tasks);
  out->set_total_streams(in.total_streams);
  out->set_rtt_ms(in.rtt_ms);
  out->set_bandwidth_bps(in.bandwidth_bps);
  out->set_measured_ns(in.measured_ns);
  out->set_observed_rtt_ms(in.observed.rtt_ms);
  out->set_observed_srtt_ms(in.observed.srtt_ms);
  out->set_observed_loss(in.observed.loss);
  out->set_observed_peak_bps(in.observed.peak_bps);
  out->set_observed_peak_ns(in.observed.peak_ns);
  out->set_observed_bytes(in.observed.bytes);
  out->set_observed_ns(in.observed.at_ns);
  out->set_observed_congestion(in.observed.congestion);
  out->set_data_tls(in.data_tls);
}

Route FromProto(const v1::Route& in) {
  Route r;
  r.src_site = in.src_site();
  r.dst_site = in.dst_site();
  r.streams = in.streams();
  r.socket_buffer_bytes = in.socket_buffer_bytes();
  r.stripe_unit_bytes = in.stripe_unit_bytes();
  r.stream_rate_bps = in.stream_rate_bps();
  r.route_rate_bps = in.route_rate_bps();
  r.congestion_control = in.congestion_control();
  r.max_concurrent_tasks = in.max_concurrent_tasks();
  r.total_streams = in.total_streams();
  r.rtt_ms = in.rtt_ms();
  r.bandwidth_bps = in.bandwidth_bps();
  r.measured_ns = in.measured_ns();
  r.observed.rtt_ms = in.observed_rtt_ms();
  r.observed.srtt_ms = in.observed_srtt_ms();
  r.observed.loss = in.observed_loss();
  r.observed.peak_bps = in.observed_peak_bps();
  r.observed.peak_ns = in.observed_peak_ns();
  r.observed.bytes = in.observed_bytes();
  r.observed.at_ns = in.observed_ns();
  r.observed.congestion = in.observed_congestion();
  r.data_tls = in.data_tls();
  return r;
}

void ToProto(const Heartbeat& in, v1::HeartbeatRequest* out) {
  out->set_node(in.node);
  out->set_free_bytes(in.free_bytes);
  out->set_load(in.load);
  out->set_active_transfers(in.active_transfers);
  for (const RouteObservation& o : in.routes) {
    v1::RouteObservation* p = out->add_routes();
    p->set_src_site(o.src_site);
    p->set_bytes(o.bytes);
    p->set_min_rtt_ms(o.min_rtt_ms);
    p->set_srtt_ms(o.srtt_ms);
    p->set_loss(o.loss);
    p->set_peak_bps(o.peak_bps);
    p->set_congestion(o.congestion);
  }
}

Heartbeat FromProto(const v1::HeartbeatRequest& in) {
  Heartbeat h;
  h.node = in.node();
  h.free_bytes = in.free_bytes();
  h.load = in.load();
  h.active_transfers = in.active_transfers();
  h.routes.reserve(static_cast<std::size_t>(in.routes_size()));
  for (const v1::RouteObservation& p : in.routes()) {
    RouteObservation o;
    o.src_site = p.src_site();
    o.bytes = p.bytes();
    o.min_rtt_ms = p.min_rtt_ms();
    o.srtt_ms = p.srtt_ms();
    o.loss = p.loss();
    o.peak_bps = p.peak_bps();
    o.congestion = p.congestion();
    h.routes.push_back(std::move(o));
  }
  return h;
}

void ToProto(const RequestSpec& in, v1::RequestSpec* out) {
  for (const auto& p : in.paths) out->add_paths(p);
  out->set_copies(in.copies);
  out->set_src_site(in.src_site);
  for (const auto& d : in.dst_sites) out->add_dst_sites(d);
  out->set_recursive(in.recursive);
  out->set_priority(in.priority);
  out->set_owner(in.owner);
  out->set_parallel(in.parallel);
  switch (in.origin) {
    case RequestOrigin::kUser: out->set_origin(v1::ORIGIN_USER); break;
    case RequestOrigin::kPolicy: out->set_origin(v1::ORIGIN_POLICY); break;
    case RequestOrigin::kRepair: out->set_origin(v1::ORIGIN_REPAIR); break;
  }
}

absl::StatusOr<RequestSpec> FromProto(const v1::RequestSpec& in) {
  RequestSpec s;
  s.paths.assign(in.paths().begin(), in.paths().end());
  s.copies = in.copies();
  s.src_site = in.src_site();
  s.dst_sites.assign(in.dst_sites().begin(), in.dst_sites().end());
  s.recursive = in.recursive();
  s.priority = in.priority();
  s.owner = in.owner();
  s.parallel = in.parallel();
  switch (in.origin()) {
    case v1::ORIGIN_USER: s.origin = RequestOrigin::kUser; break;
    case v1::ORIGIN_POLICY: s.origin = RequestOrigin::kPolicy; break;
    case v1::ORIGIN_REPAIR: s.origin = RequestOrigin::kRepair; break;
    default:
      return absl::InvalidArgumentError(
          fmt::format("bad request origin {}", static_cast<int>(in.origin())));
  }
  return s;
}

absl::StatusOr<RequestState> FromProto(v1::RequestState s) {
  if (s < v1::QUEUED || s > v1::CANCELLED) {
    return absl::InvalidArgumentError(fmt::format("bad request state {}", static_cast<int>(s)));
  }
  return static_cast<RequestState>(s);
}

absl::StatusOr<TaskState> FromProto(v1::TaskState s) {
  if (s < v1::TASK_QUEUED || s > v1::TASK_CANCELLED) {
    return absl::InvalidArgumentError(fmt::format("bad task state {}", static_cast<int>(s)));
  }
  return static_cast<TaskState>(s);
}

void ToProto(const Request& in, v1::Request* out) {
  out->set_id(in.id);
  ToProto(in.spec, out->mutable_spec());
  out->set_state(static_cast<v1::RequestState>(in.state));
  out->set_error(in.error);
  out->set_files_total(in.files_total);
  out->set_files_done(in.files_done);
  out->set_files_failed(in.files_failed);
  out->set_bytes_total(in.bytes_total);
  out->set_bytes_done(in.bytes_done);
  out->set_created_ns(in.created_ns);
  out->set_updated_ns(in.updated_ns);
  out->set_in_flight_bytes(in.in_flight_bytes);
  out->set_expanded(in.expanded);
}

void ToProto(const RequestFile& in, v1::RequestFile* out) {
  out->set_request_id(in.request_id);
  out->set_id(in.id);
  out->set_path(in.path);
  out->set_size(in.size);
  out->set_state(static_cast<v1::RequestFileState>(in.state));
  out->set_reason(in.reason);
  out->set_attempts(in.attempts);
  out->set_open_tasks(in.open_tasks);
  out->set_failed_copies(in.failed_copies);
  out->set_updated_ns(in.updated_ns);
  for (const std::string& s : in.slow_sources) out->add_slow_sources(s);
}

absl::StatusOr<RequestFileState> FromProto(v1::RequestFileState s) {
  if (s < v1::FILE_WANTED || s > v1::FILE_FAILED) {
    return absl::InvalidArgumentError(
        fmt::format("bad request file state {}", static_cast<int>(s)));
  }
  return static_cast<RequestFileState>(s);
}

absl::StatusOr<RequestFile> FromProto(const v1::RequestFile& in) {
  absl::StatusOr<RequestFileState> st = FromProto(in.state());
  if (!st.ok()) return st.status();
  RequestFile f;
  f.request_id = in.request_id();
  f.id = in.id();
  f.path = in.path();
  f.size = in.size();
  f.state = *st;
  f.reason = in.reason();
  f.attempts = in.attempts();
  f.open_tasks = in.open_tasks();
  f.failed_copies = in.failed_copies();
  f.updated_ns = in.updated_ns();
  f.slow_sources.assign(in.slow_sources().begin(), in.slow_sources().end());
  return f;
}

absl::StatusOr<Request> FromProto(const v1::Request& in) {
  absl::StatusOr<RequestState> st = FromProto(in.state());
  if (!st.ok()) return st.status();
  absl::StatusOr<RequestSpec> spec = FromProto(in.spec());
  if (!spec.ok()) return spec.status();
  Request r;
  r.id = in.id();
  r.spec = std::move(*spec);
  r.state = *st;
  r.error = in.error();
  r.files_total = in.files_total();
  r.files_done = in.files_done();
  r.files_failed = in.files_failed();
  r.bytes_total = in.bytes_total();
  r.bytes_done = in.bytes_done();
  r.created_ns = in.created_ns();
  r.updated_ns = in.updated_ns();
  r.in_flight_bytes = in.in_flight_bytes();
  r.expanded = in.expanded();
  return r;
}

void ToProto(const TaskSpec& in, v1::TaskSpec* out) {
  out->set_request_id(in.request_id);
  out->set_path(in.path);
  out->set_src_node(in.src_node);
  out->set_dst_node(in.dst_node);
  out->set_priority(in.priority);
  out->set_max_attempts(in.max_attempts);
  out->set_not_before_ns(in.not_before_ns);
  out->set_streams(in.streams);
  out->set_route_rate_bps(in.route_rate_bps);
  out->set_dst_share_ppm(in.dst_share_ppm);
}

TaskSpec FromProto(const v1::TaskSpec& in) {
  TaskSpec s;
  s.request_id = in.request_id();
  s.path = in.path();
  s.src_node = in.src_node();
  s.dst_node = in.dst_node();
  s.priority = in.priority();
  s.max_attempts = in.max_attempts();
  s.not_before_ns = in.not_before_ns();
  s.streams = in.streams();
  s.route_rate_bps = in.route_rate_bps();
  s.dst_share_ppm = in.dst_share_ppm();  // as sent; a part over the whole is read as the whole
  return s;
}

void ToProto(const Task& in, v1::Task* out) {
  out->set_id(in.id);
  ToProto(in.spec, out->mutable_spec());
  out->set_inode(in.inode);
  out->set_generation(in.generation);
  out->set_size(in.size);
  out->set_state(static_cast<v1::TaskState>(in.state));
  out->set_attempts(in.attempts);
  out->set_lease_owner(in.lease_owner);
  out->set_lease_expiry_ns(in.lease_expiry_ns);
  out->set_next_attempt_ns(in.next_attempt_ns);
  out->set_last_error(in.last_error);
  out->set_created_ns(in.created_ns);
  out->set_updated_ns(in.updated_ns);
  out->set_checksum_algo(in.checksum_algo);
  out->set_checksum(in.checksum);
}

absl::StatusOr<Task> FromProto(const v1::Task& in) {
  absl::StatusOr<TaskState> st = FromProto(in.state());
  if (!st.ok()) return st.status();
  Task t;
  t.id = in.id();
  t.spec = FromProto(in.spec());
  t.inode = in.inode();
  t.generation = in.generation();
  t.size = in.size();
  t.state = *st;
  t.attempts = in.attempts();
  t.lease_owner = in.lease_owner();
  t.lease_expiry_ns = in.lease_expiry_ns();
  t.next_attempt_ns = in.next_attempt_ns();
  t.last_error = in.last_error();
  t.created_ns = in.created_ns();
  t.updated_ns = in.updated_ns();
  t.checksum_algo = in.checksum_algo();
  t.checksum = in.checksum();
  return t;
}

void ToProto(const Event& in, v1::Event* out) {
  out->set_seq(in.seq);
  out->set_kind(static_cast<v1::Event::Kind>(in.kind));
  out->set_time_ns(in.time_ns);
  out->set_id(in.id);
  out->set_node(in.node);
  out->set_state(in.state);
  out->set_detail(in.detail);
}

absl::StatusOr<Event> FromProto(const v1::Event& in) {
  if (in.kind() < v1::Event::REPLICA || in.kind() > v1::Event::ROUTE) {
    return absl::InvalidArgumentError("bad event kind");
  }
  Event e;
  e.seq = in.seq();
  e.kind = static_cast<EventKind>(in.kind());
  e.time_ns = in.time_ns();
  e.id = in.id();
  e.node = in.node();
  e.state = in.state();
  e.detail = in.detail();
  return e;
}

void ToProto(const FileContent& in, v1::FileContent* out) {
  out->set_size(in.size);
  out->set_checksum_algo(in.checksum_algo);
  out->set_checksum(in.checksum);
  out->set_mode(in.mode);
  out->set_owner(in.owner);
  out->set_generation(in.generation);
  out->set_inode(in.inode);
}

FileContent FromProto(const v1::FileContent& in) {
  FileContent c;
  c.size = in.size();
  c.checksum_algo = in.checksum_algo();
  c.checksum = in.checksum();
  c.mode = in.mode();
  c.owner = in.owner();
  c.generation = in.generation();
  c.inode = in.inode();
  return c;
}

void ToProto(const Location& in, v1::Location* out) {
  out->set_path(in.path);
  ToProto(in.attributes, out->mutable_attributes());
  for (const Replica& r : in.replicas) ToProto(r, out->add_replicas());
}

absl::StatusOr<Location> FromProto(const v1::Location& in) {
  Location loc;
  loc.path = in.path();
  absl::StatusOr<Attributes> a = FromProto(in.attributes());
  if (!a.ok()) return a.status();
  loc.attributes = std::move(*a);
  for (const v1::Replica& r : in.replicas()) {
    absl::StatusOr<Replica> x = FromProto(r);
    if (!x.ok()) return x.status();
    loc.replicas.push_back(std::move(*x));
  }
  return loc;
}

}  // namespace gfrep::catalog::internal
