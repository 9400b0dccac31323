// Fuzzes the catalog's RocksDB record decoders and key helpers
// (catalog/internal/codec.h). Records come from disk: a damaged or foreign database must
// give kDataLoss, never a crash or a huge allocation.
//
// The first input byte picks the record type (or the key helpers); the rest is the stored
// value. Asserts:
//  - a refusal is kDataLoss;
//  - an accepted record has enum fields within their types (ToString knows them), and the
//    round trip decode -> encode -> decode -> encode is stable: the decoder accepts
//    everything the encoder writes and reads it back to the same record (compared through
//    its encoding, which is a function of every field);
//  - keys: GetBigEndian64 reads back U64Key, refuses exactly the short fields, and
//    PrefixSuccessor(p) sorts after every key starting with p (and before p's successors).

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "catalog/internal/codec.h"
#include "catalog/types.h"
#include "tests/fuzz/fuzz_check.h"

namespace gfrep::catalog::internal {
namespace {

// True if ToString names the value (a decoder must not let an out-of-range enum through).
template <typename E>
bool Named(E e) {
  return ToString(e) != "unknown";
}

template <typename Decode, typename Encode, typename Valid>
void RoundTrip(std::string_view in, Decode decode, Encode encode, Valid valid) {
  auto first = decode(in);
  if (!first.ok()) {
    FUZZ_CHECK(absl::IsDataLoss(first.status()), "a refused record must be kDataLoss");
    return;
  }
  FUZZ_CHECK(valid(*first), "decoded record has a field outside its type");
  const std::string once = encode(*first);
  auto second = decode(once);
  FUZZ_CHECK(second.ok(), "the decoder refused the encoder's output");
  FUZZ_CHECK(encode(*second) == once, "record changed in a decode/encode round trip");
}

auto Any() {
  return [](const auto&) { return true; };
}

void Keys(std::string_view in) {
  if (in.empty()) return;
  // "The last 8 bytes" and "8 bytes after a prefix" are how the catalog reads ids out of keys.
  const std::size_t pos = static_cast<std::uint8_t>(in[0]) % (in.size() + 1);
  const std::string_view key = in.substr(1);
  absl::StatusOr<std::uint64_t> v = GetBigEndian64(key, pos);
  FUZZ_CHECK(v.ok() == (pos <= key.size() && key.size() - pos >= 8),
             "GetBigEndian64 must refuse exactly the fields shorter than 8 bytes");
  if (v.ok()) {
    FUZZ_CHECK(U64Key(*v) == key.substr(pos, 8), "GetBigEndian64 is not the inverse of U64Key");
    absl::StatusOr<std::uint64_t> back = GetBigEndian64(U64Key(*v));
    FUZZ_CHECK(back.ok() && *back == *v, "U64Key does not read back");
  }

  // Split the rest into a prefix and a key that continues it.
  const std::size_t cut = pos <= key.size() ? pos : key.size();
  const std::string_view prefix = key.substr(0, cut);
  const std::string succ = PrefixSuccessor(prefix);
  if (succ.empty()) {
    FUZZ_CHECK(prefix.find_first_not_of('\xff') == std::string_view::npos,
               "no successor although the prefix is not all 0xff");
    return;
  }
  FUZZ_CHECK(std::string_view(succ) > prefix, "successor sorts before its prefix");
  FUZZ_CHECK(std::string_view(succ) > key, "a key with the prefix sorts after its successor");
  FUZZ_CHECK(std::string(prefix) + std::string(1000, '\xff') < succ,
             "a long key with the prefix sorts after its successor");
}

}  // namespace
}  // namespace gfrep::catalog::internal

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace gfrep::catalog;
  using namespace gfrep::catalog::internal;
  if (size < 1) return 0;
  const std::string_view in(reinterpret_cast<const char*>(data + 1), size - 1);
  switch (data[0] % 11) {
    case 0:
      RoundTrip(in, DecodeAttributes, EncodeAttributes, [](const Attributes& a) {
        return a.type == FileType::kDirectory || a.type == FileType::kFile;
      });
      break;
    case 1:
      RoundTrip(
          in, DecodeInodeRef,
          [](const std::pair<InodeId, std::string>& r) {
            return EncodeInodeRef(r.first, r.second);
          },
          Any());
      break;
    case 2:
      RoundTrip(in, DecodeReplica, EncodeReplica, [](const Replica& r) { return Named(r.state); });
      break;
    case 3:
      RoundTrip(in, DecodeSite, EncodeSite, Any());
      break;
    case 4:
      RoundTrip(in, DecodeNode, EncodeNode, Any());
      break;
    case 5:
      RoundTrip(in, DecodeRoute, EncodeRoute, Any());
      break;
    case 6:
      RoundTrip(in, DecodePolicyDocument, EncodePolicyDocument, Any());
      break;
    case 7:
      RoundTrip(in, DecodeRequest, EncodeRequest, [](const Request& r) { return Named(r.state); });
      break;
    case 8:
      RoundTrip(in, DecodeTask, EncodeTask, [](const Task& t) { return Named(t.state); });
      break;
    case 9:
      RoundTrip(in, DecodeEvent, EncodeEvent, [](const Event& e) { return Named(e.kind); });
      break;
    default:
      Keys(in);
      break;
  }
  return 0;
}
