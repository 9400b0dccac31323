// Fuzzes what the transfer engine reads from a control message (the JSON payload of a
// control frame, parsed as Conn::ReadControl parses it): the typed field reads every
// handler uses (transfer/internal/json_fields.h) and the JSON forms the handshake and the
// put/get/finish/resend messages carry (transfer/internal/engine.h): route options,
// byte-range lists, TCP figures. The hello/put/get handlers themselves run inside the
// agent's socket coroutines and are not callable without a connection; every field they
// read goes through the functions fuzzed here.
//
// Asserts:
//  - each Get* succeeds exactly when the field exists with its type, and returns its value;
//    GetInt refuses unsigned values above INT64_MAX; nothing throws;
//  - RouteFromJson accepts only options that Validate() accepts and that are in the
//    documented ranges, and route options survive RouteToJson -> RouteFromJson;
//  - RangesFromJson returns sorted, disjoint, non-empty ranges within the size, and the
//    ranges survive RangesToJson -> RangesFromJson; one byte less of size refuses them;
//  - TcpFiguresFromJson keeps re-sent <= sent and RTTs within a minute, and its figures
//    survive TcpFiguresToJson -> TcpFiguresFromJson (RTTs to the microsecond).

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "tests/fuzz/fuzz_check.h"
#include "transfer/congestion.h"
#include "transfer/internal/engine.h"
#include "transfer/internal/json_fields.h"

namespace gfrep::transfer::internal {
namespace {

// Keys the agent and client read, so that the fuzzer's dictionary-free guesses still meet
// the interesting ones; plus every key the input has.
constexpr std::string_view kKnownKeys[] = {
    "op",   "version",   "role",       "nonce",   "tls",           "mac",     "token",  "path",
    "size", "source_id", "ranges",     "missing", "resumed_bytes", "whole",   "reuse",  "options",
    "tcp",  "checksum",  "congestion", "code",    "message",       "streams", "seconds"};

void CheckFieldReads(const Json& j, std::string_view key) {
  const Json* field = nullptr;
  if (j.is_object()) {
    auto it = j.find(key);
    if (it != j.end()) field = &*it;
  }
  auto refused = [](const absl::Status& s) { return absl::IsInvalidArgument(s); };

  absl::StatusOr<std::string> s = GetString(j, key);
  FUZZ_CHECK(s.ok() == (field != nullptr && field->is_string()), "GetString type check");
  if (s.ok()) FUZZ_CHECK(*s == field->get_ref<const std::string&>(), "GetString value");
  if (!s.ok()) FUZZ_CHECK(refused(s.status()), "GetString refusal code");

  absl::StatusOr<std::uint64_t> u = GetUint(j, key);
  FUZZ_CHECK(u.ok() == (field != nullptr && field->is_number_unsigned()), "GetUint type check");
  if (u.ok()) FUZZ_CHECK(*u == field->get<std::uint64_t>(), "GetUint value");

  absl::StatusOr<std::int64_t> i = GetInt(j, key);
  if (i.ok()) {
    FUZZ_CHECK(field != nullptr && field->is_number_integer(), "GetInt accepted a non-integer");
    if (field->is_number_unsigned()) {
      FUZZ_CHECK(static_cast<std::uint64_t>(*i) == field->get<std::uint64_t>(), "GetInt value");
    } else {
      FUZZ_CHECK(*i == field->get<std::int64_t>(), "GetInt value");
    }
  } else if (field != nullptr && field->is_number_integer()) {
    FUZZ_CHECK(field->is_number_unsigned() &&
                   field->get<std::uint64_t>() >
                       static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()),
               "GetInt refused an integer that fits int64");
  }

  absl::StatusOr<bool> b = GetBool(j, key);
  FUZZ_CHECK(b.ok() == (field != nullptr && field->is_boolean()), "GetBool type check");
  absl::StatusOr<double> d = GetDouble(j, key);
  FUZZ_CHECK(d.ok() == (field != nullptr && field->is_number()), "GetDouble type check");
  absl::StatusOr<const Json*> o = GetObject(j, key);
  FUZZ_CHECK(o.ok() == (field != nullptr && field->is_object()), "GetObject type check");
  if (o.ok()) FUZZ_CHECK(*o == field, "GetObject must point into the message");
  absl::StatusOr<const Json*> a = GetArray(j, key);
  FUZZ_CHECK(a.ok() == (field != nullptr && field->is_array()), "GetArray type check");

  absl::StatusOr<std::string> opt = GetOptionalString(j, key, "fallback");
  if (field == nullptr) {
    FUZZ_CHECK(opt.ok() && *opt == "fallback", "GetOptionalString fallback");
  } else {
    FUZZ_CHECK(opt.ok() == field->is_string(), "GetOptionalString type check");
  }
}

void CheckRoute(const Json& j) {
  TransferOptions o;
  if (!RouteFromJson(j, o).ok()) return;
  FUZZ_CHECK(Validate(o.route).ok(), "RouteFromJson accepted options Validate refuses");
  FUZZ_CHECK(o.route.streams >= 1 && o.route.streams <= kMaxStreams, "streams out of range");
  FUZZ_CHECK(o.max_resend_rounds >= 0 && o.max_resend_rounds <= 100, "resend rounds out of range");
  FUZZ_CHECK(o.route.route_name.size() <= 255, "route name too long");
  FUZZ_CHECK(
      o.io_timeout >= std::chrono::milliseconds(100) && o.io_timeout <= std::chrono::hours(1),
      "io timeout not clamped");
  const Json once = RouteToJson(o);
  TransferOptions again;
  FUZZ_CHECK(RouteFromJson(once, again).ok(), "RouteFromJson refused RouteToJson's output");
  FUZZ_CHECK(RouteToJson(again) == once, "route options changed in a JSON round trip");
}

void CheckRanges(const Json& list, std::uint64_t size) {
  absl::StatusOr<std::vector<ByteRange>> r = RangesFromJson(list, size);
  if (!r.ok()) {
    FUZZ_CHECK(absl::IsInvalidArgument(r.status()), "RangesFromJson refusal code");
    return;
  }
  std::uint64_t prev_end = 0;
  for (const ByteRange& range : *r) {
    FUZZ_CHECK(range.begin < range.end, "empty or inverted range accepted");
    FUZZ_CHECK(range.end <= size, "range beyond the file accepted");
    FUZZ_CHECK(range.begin >= prev_end, "overlapping or unsorted ranges accepted");
    prev_end = range.end;
  }
  absl::StatusOr<std::vector<ByteRange>> again = RangesFromJson(RangesToJson(*r), size);
  FUZZ_CHECK(again.ok() && *again == *r, "ranges changed in a JSON round trip");
  if (prev_end > 0) {
    FUZZ_CHECK(!RangesFromJson(list, prev_end - 1).ok(), "a range past the size was accepted");
  }
}

void CheckTcp(const Json& j) {
  absl::StatusOr<TcpFigures> f = TcpFiguresFromJson(j);
  if (!f.ok()) return;
  FUZZ_CHECK(f->bytes_retrans <= f->bytes_sent, "more bytes re-sent than sent");
  FUZZ_CHECK(
      f->srtt_ms >= 0 && f->srtt_ms <= 60'000 && f->min_rtt_ms >= 0 && f->min_rtt_ms <= 60'000,
      "RTT outside [0, 60 s] accepted");
  absl::StatusOr<TcpFigures> again = TcpFiguresFromJson(Json{{"tcp", TcpFiguresToJson(*f)}});
  FUZZ_CHECK(again.ok(), "TcpFiguresFromJson refused TcpFiguresToJson's output");
  FUZZ_CHECK(again->bytes_sent == f->bytes_sent && again->bytes_retrans == f->bytes_retrans,
             "TCP counters changed in a JSON round trip");
  // TcpFiguresToJson truncates ms * 1000, so 1001 us comes back as 1000 us: a microsecond
  // is the precision promised, with room for the double arithmetic.
  FUZZ_CHECK(std::abs(again->srtt_ms - f->srtt_ms) <= 0.0015 &&
                 std::abs(again->min_rtt_ms - f->min_rtt_ms) <= 0.0015,
             "TCP RTTs changed by more than a microsecond in a JSON round trip");
}

}  // namespace
}  // namespace gfrep::transfer::internal

namespace gfrep::transfer {

// TuneSocket's provider of congestion controls (congestion.cc, which loads BPF with libbpf):
// the fuzzer never tunes a socket; this definition only satisfies the linker.
absl::StatusOr<CongestionControl> EnsureCongestionControl(std::string_view, const EnsureOptions&) { std::abort(); }

}  // namespace gfrep::transfer

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace gfrep::transfer::internal;
  // As Conn::ReadControl parses a payload: no exceptions, a failure is "discarded".
  const Json j = Json::parse(data, data + size, nullptr, false);
  if (j.is_discarded()) return 0;

  for (std::string_view key : kKnownKeys) CheckFieldReads(j, key);
  if (j.is_object()) {
    for (const auto& [key, value] : j.items()) CheckFieldReads(j, key);
  }

  CheckRoute(j);
  CheckTcp(j);
  std::uint64_t file_size = std::uint64_t{1} << 40;
  if (absl::StatusOr<std::uint64_t> s = GetUint(j, "size"); s.ok()) file_size = *s;
  if (j.is_array()) CheckRanges(j, file_size);
  if (j.is_object()) {
    if (absl::StatusOr<const Json*> o = GetObject(j, "options"); o.ok()) CheckRoute(**o);
    for (std::string_view key : {"ranges", "missing"}) {
      if (absl::StatusOr<const Json*> a = GetArray(j, key); a.ok()) CheckRanges(**a, file_size);
    }
  }
  return 0;
}
