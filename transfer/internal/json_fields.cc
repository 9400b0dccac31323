#include "transfer/internal/json_fields.h"

#include <fmt/format.h>

#include <limits>

#include "absl/status/status.h"

namespace gfrep::transfer::internal {
namespace {

// The field, or an error naming it. Never inserts (the object is const).
absl::StatusOr<const Json*> Field(const Json& object, std::string_view key, std::string_view type) {
  if (object.is_object()) {
    auto it = object.find(key);
    if (it != object.end()) return &*it;
  }
  return absl::InvalidArgumentError(fmt::format("missing field '{}' ({})", key, type));
}

absl::Status WrongType(std::string_view key, std::string_view type) {
  return absl::InvalidArgumentError(fmt::format("field '{}' must be {}", key, type));
}

}  // namespace

absl::StatusOr<std::string> GetString(const Json& object, std::string_view key) {
  absl::StatusOr<const Json*> f = Field(object, key, "a string");
  if (!f.ok()) return f.status();
  if (!(*f)->is_string()) return WrongType(key, "a string");
  return (*f)->get_ref<const std::string&>();
}

absl::StatusOr<std::uint64_t> GetUint(const Json& object, std::string_view key) {
  absl::StatusOr<const Json*> f = Field(object, key, "an unsigned integer");
  if (!f.ok()) return f.status();
  // nlohmann keeps non-negative integer literals as number_unsigned.
  if (!(*f)->is_number_unsigned()) return WrongType(key, "an unsigned integer");
  return (*f)->get<std::uint64_t>();
}

absl::StatusOr<std::int64_t> GetInt(const Json& object, std::string_view key) {
  absl::StatusOr<const Json*> f = Field(object, key, "an integer");
  if (!f.ok()) return f.status();
  if ((*f)->is_number_unsigned()) {
    auto v = (*f)->get<std::uint64_t>();
    if (v > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max())) {
      return WrongType(key, "an integer of at most 63 bits");
    }
    return static_cast<std::int64_t>(v);
  }
  if (!(*f)->is_number_integer()) return WrongType(key, "an integer");
  return (*f)->get<std::int64_t>();
}

absl::StatusOr<bool> GetBool(const Json& object, std::string_view key) {
  absl::StatusOr<const Json*> f = Field(object, key, "a boolean");
  if (!f.ok()) return f.status();
  if (!(*f)->is_boolean()) return WrongType(key, "a boolean");
  return (*f)->get<bool>();
}

absl::StatusOr<double> GetDouble(const Json& object, std::string_view key) {
  absl::StatusOr<const Json*> f = Field(object, key, "a number");
  if (!f.ok()) return f.status();
  if (!(*f)->is_number()) return WrongType(key, "a number");
  return (*f)->get<double>();
}

absl::StatusOr<const Json*> GetObject(const Json& object, std::string_view key) {
  absl::StatusOr<const Json*> f = Field(object, key, "an object");
  if (!f.ok()) return f.status();
  if (!(*f)->is_object()) return WrongType(key, "an object");
  return *f;
}

absl::StatusOr<const Json*> GetArray(const Json& object, std::string_view key) {
  absl::StatusOr<const Json*> f = Field(object, key, "an array");
  if (!f.ok()) return f.status();
  if (!(*f)->is_array()) return WrongType(key, "an array");
  return *f;
}

absl::StatusOr<std::string> GetOptionalString(const Json& object, std::string_view key,
                                              std::string fallback) {
  if (!object.is_object() || !object.contains(key)) return fallback;
  return GetString(object, key);
}

absl::StatusOr<bool> GetOptionalBool(const Json& object, std::string_view key, bool fallback) {
  if (!object.is_object() || !object.contains(key)) return fallback;
  return GetBool(object, key);
}

}  // namespace gfrep::transfer::internal
