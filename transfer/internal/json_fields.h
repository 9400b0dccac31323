#pragma once

// Typed reads of the fields of JSON messages received from the network (control frames,
// see frame.h). A peer chooses every type, so no accessor throws: a missing field or one of
// another type is kInvalidArgument naming the field, e.g. "field 'version' must be an
// unsigned integer". Every field read from network JSON goes through these.
//
// Thread safety: pure functions.

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace gfrep::transfer::internal {

using Json = nlohmann::json;

// `object[key]` as the type named by the function. REQUIRES nothing of `object` (a
// non-object has no fields).
absl::StatusOr<std::string> GetString(const Json& object, std::string_view key);
// A non-negative integer (JSON numbers with a fraction or a sign are refused).
absl::StatusOr<std::uint64_t> GetUint(const Json& object, std::string_view key);
// An integer (signed or not) that fits int64.
absl::StatusOr<std::int64_t> GetInt(const Json& object, std::string_view key);
absl::StatusOr<bool> GetBool(const Json& object, std::string_view key);
// Any JSON number.
absl::StatusOr<double> GetDouble(const Json& object, std::string_view key);
// Nested object / array: a pointer into `object` (valid while it is).
absl::StatusOr<const Json*> GetObject(const Json& object, std::string_view key);
absl::StatusOr<const Json*> GetArray(const Json& object, std::string_view key);

// Optional fields: absent gives `fallback`; present with another type is still an error.
absl::StatusOr<std::string> GetOptionalString(const Json& object, std::string_view key,
                                              std::string fallback);
absl::StatusOr<bool> GetOptionalBool(const Json& object, std::string_view key, bool fallback);

}  // namespace gfrep::transfer::internal
