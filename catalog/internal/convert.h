#pragma once

// Conversions between the domain types (catalog/types.h) and the wire messages
// (catalog/proto/catalog.proto), and between absl::Status and grpc::Status. Used only by
// catalog_service.cc and client.cc. FromProto functions validate enums (kInvalidArgument).
//
// Thread safety: pure functions.

#include <grpcpp/support/status.h>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "catalog/proto/catalog.pb.h"
#include "catalog/catalog.h"
#include "catalog/types.h"

namespace gfrep::catalog::internal {

namespace v1 = ::gfrep::catalog::v1;

grpc::Status ToGrpc(const absl::Status& s);
absl::Status FromGrpc(const grpc::Status& s);

void ToProto(const Attributes& in, v1::Attributes* out);
absl::StatusOr<Attributes> FromProto(const v1::Attributes& in);
void ToProto(const Replica& in, v1::Replica* out);
absl::StatusOr<Replica> FromProto(const v1::Replica& in);
void ToProto(const Site& in, v1::Site* out);
Site FromProto(const v1::Site& in);
void ToProto(const Node& in, v1::Node* out);
// kInvalidArgument for a mode outside catalog::NodeMode.
absl::StatusOr<Node> FromProto(const v1::Node& in);
void ToProto(const DiskProfile& in, v1::DiskProfile* out);
DiskProfile FromProto(const v1::DiskProfile& in);
void ToProto(const Route& in, v1::Route* out);
Route FromProto(const v1::Route& in);
void ToProto(const Heartbeat& in, v1::HeartbeatRequest* out);
Heartbeat FromProto(const v1::HeartbeatRequest& in);
void ToProto(const RequestSpec& in, v1::RequestSpec* out);
// kInvalidArgument for an origin this version does not know.
absl::StatusOr<RequestSpec> FromProto(const v1::RequestSpec& in);
void ToProto(const Request& in, v1::Request* out);
absl::StatusOr<Request> FromProto(const v1::Request& in);
void ToProto(const RequestFile& in, v1::RequestFile* out);
absl::StatusOr<RequestFile> FromProto(const v1::RequestFile& in);
absl::StatusOr<RequestFileState> FromProto(v1::RequestFileState s);
void ToProto(const TaskSpec& in, v1::TaskSpec* out);
TaskSpec FromProto(const v1::TaskSpec& in);
void ToProto(const Task& in, v1::Task* out);
absl::StatusOr<Task> FromProto(const v1::Task& in);
void ToProto(const Event& in, v1::Event* out);
absl::StatusOr<Event> FromProto(const v1::Event& in);
void ToProto(const FileContent& in, v1::FileContent* out);
FileContent FromProto(const v1::FileContent& in);
void ToProto(const Location& in, v1::Location* out);
absl::StatusOr<Location> FromProto(const v1::Location& in);

absl::StatusOr<RequestState> FromProto(v1::RequestState s);
absl::StatusOr<TaskState> FromProto(v1::TaskState s);

}  // namespace gfrep::catalog::internal
