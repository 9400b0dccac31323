// Fuzzes the conversions of the catalog's gRPC messages to domain structs
// (catalog/internal/convert.h, every FromProto): what gfcatalogd makes of a request's
// message, and what a client makes of a response, after protobuf's generated parser
// (catalog/proto/catalog.proto, compiled into this fuzzer) accepted the bytes.
//
// The first input byte picks the message ('0'..'?': Attributes, Replica, Site, Node,
// DiskProfile, Route, HeartbeatRequest, RequestSpec, Request, TaskSpec, Task, Event,
// FileContent, Location; then the RequestState and TaskState enums, from 4 bytes); the rest
// is its wire bytes. Asserts, for every message the parser accepts:
//  - FromProto does not crash, and refuses only with kInvalidArgument (a bad enum);
//  - an accepted struct has its enums within their types (ToString names them);
//  - nothing is lost or changed: ToProto of the struct is the message itself (compared as
//    deterministic wire bytes, unknown fields dropped, absent sub-messages as empty ones), so
//    every field FromProto reads, ToProto writes back;
//  - the struct converts back (ToProto) and again (FromProto) to an equal struct (compared
//    through ToProto's deterministic wire bytes, which the previous check ties to every
//    field);
//  - the enums: FromProto accepts exactly the values with a domain state, and the state
//    converts back to the same number.

#include <google/protobuf/descriptor.h>
#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/io/zero_copy_stream_impl_lite.h>
#include <google/protobuf/message.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <type_traits>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "catalog/internal/convert.h"
#include "catalog/types.h"
#include "tests/fuzz/fuzz_check.h"

namespace gfrep::catalog::internal {
namespace {

// Wire bytes with map entries in key order, so that equal messages give equal bytes.
std::string Bytes(const google::protobuf::Message& m) {
  std::string out;
  {
    google::protobuf::io::StringOutputStream stream(&out);
    google::protobuf::io::CodedOutputStream coded(&stream);
    coded.SetSerializationDeterministic(true);
    FUZZ_CHECK(m.SerializeToCodedStream(&coded), "a message does not serialize");
  }
  return out;
}

// Sets every singular message field, recursively: ToProto always writes its sub-messages
// (mutable_spec()), and an empty one means what an absent one does.
void SetMessageFields(google::protobuf::Message* m) {
  const google::protobuf::Descriptor* d = m->GetDescriptor();
  const google::protobuf::Reflection* r = m->GetReflection();
  for (int i = 0; i < d->field_count(); ++i) {
    const google::protobuf::FieldDescriptor* f = d->field(i);
    if (f->cpp_type() != google::protobuf::FieldDescriptor::CPPTYPE_MESSAGE) continue;
    if (f->is_repeated()) {
      for (int j = 0; j < r->FieldSize(*m, f); ++j)
        SetMessageFields(r->MutableRepeatedMessage(m, f, j));
    } else {
      SetMessageFields(r->MutableMessage(m, f));
    }
  }
}

template <typename T>
absl::StatusOr<T> AsStatusOr(T value) {
  return value;
}
template <typename T>
absl::StatusOr<T> AsStatusOr(absl::StatusOr<T> value) {
  return value;
}

template <typename E>
bool Named(E e) {
  return ToString(e) != "unknown";
}

bool EnumsNamed(const Attributes& a) {
  return a.type == FileType::kDirectory || a.type == FileType::kFile;
}
bool EnumsNamed(const Replica& r) { return Named(r.state); }
bool EnumsNamed(const Request& r) { return Named(r.state); }
bool EnumsNamed(const Task& t) { return Named(t.state); }
bool EnumsNamed(const Event& e) { return Named(e.kind); }
bool EnumsNamed(const Node& n) { return Named(n.mode); }
bool EnumsNamed(const Location& l) {
  for (const Replica& r : l.replicas) {
    if (!EnumsNamed(r)) return false;
  }
  return EnumsNamed(l.attributes);
}
template <typename T>
bool EnumsNamed(const T&) {
  return true;
}

// Proto is the message; Struct the domain type FromProto gives for it.
template <typename Proto>
void RoundTrip(std::string_view bytes) {
  Proto m;
  if (!m.ParseFromArray(bytes.data(), static_cast<int>(bytes.size()))) return;
  auto first = AsStatusOr(FromProto(m));
  if (!first.ok()) {
    FUZZ_CHECK(absl::IsInvalidArgument(first.status()),
               "FromProto refusal must be kInvalidArgument");
    return;
  }
  FUZZ_CHECK(EnumsNamed(*first), "FromProto let an enum outside its type through");
  Proto back;
  ToProto(*first, &back);
  m.DiscardUnknownFields();
  SetMessageFields(&m);
  const std::string once = Bytes(back);
  FUZZ_CHECK(once == Bytes(m), "ToProto(FromProto(m)) is not m: a field was lost or changed");
  auto second = AsStatusOr(FromProto(back));
  FUZZ_CHECK(second.ok(), "FromProto refused ToProto's output");
  Proto again;
  ToProto(*second, &again);
  FUZZ_CHECK(Bytes(again) == once, "the struct changed in a ToProto/FromProto round trip");
}

template <typename ProtoEnum, typename DomainEnum>
void EnumRoundTrip(std::string_view bytes, int first, int last) {
  if (bytes.size() < 4) return;
  std::int32_t raw;
  std::memcpy(&raw, bytes.data(), 4);
  // Proto enums have sentinels at INT32_MIN and INT32_MAX: every int32 is a value of the type.
  const auto value = static_cast<ProtoEnum>(raw);
  absl::StatusOr<DomainEnum> s = FromProto(value);
  FUZZ_CHECK(s.ok() == (raw >= first && raw <= last),
             "FromProto(state) must accept exactly the values with a domain state");
  if (!s.ok()) {
    FUZZ_CHECK(absl::IsInvalidArgument(s.status()),
               "FromProto(state) refusal must be kInvalidArgument");
    return;
  }
  FUZZ_CHECK(Named(*s), "FromProto(state) gave a state ToString does not know");
  FUZZ_CHECK(static_cast<std::int32_t>(*s) == raw, "a state converts back to another number");
}

}  // namespace
}  // namespace gfrep::catalog::internal

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace gfrep::catalog;
  using namespace gfrep::catalog::internal;
  if (size < 1) return 0;
  const std::string_view in(reinterpret_cast<const char*>(data + 1), size - 1);
  switch (data[0] % 16) {
    case 0:
      RoundTrip<v1::Attributes>(in);
      break;
    case 1:
      RoundTrip<v1::Replica>(in);
      break;
    case 2:
      RoundTrip<v1::Site>(in);
      break;
    case 3:
      RoundTrip<v1::Node>(in);
      break;
    case 4:
      RoundTrip<v1::DiskProfile>(in);
      break;
    case 5:
      RoundTrip<v1::Route>(in);
      break;
    case 6:
      RoundTrip<v1::HeartbeatRequest>(in);
      break;
    case 7:
      RoundTrip<v1::RequestSpec>(in);
      break;
    case 8:
      RoundTrip<v1::Request>(in);
      break;
    case 9:
      RoundTrip<v1::TaskSpec>(in);
      break;
    case 10:
      RoundTrip<v1::Task>(in);
      break;
    case 11:
      RoundTrip<v1::Event>(in);
      break;
    case 12:
      RoundTrip<v1::FileContent>(in);
      break;
    case 13:
      RoundTrip<v1::Location>(in);
      break;
    case 14:
      EnumRoundTrip<v1::RequestState, RequestState>(in, v1::QUEUED, v1::CANCELLED);
      break;
    default:
      EnumRoundTrip<v1::TaskState, TaskState>(in, v1::TASK_QUEUED, v1::TASK_CANCELLED);
      break;
  }
  return 0;
}
