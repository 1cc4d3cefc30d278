// common/json_fields.h — reading JSON fields with errors that name the field.
//
// Owns the small helpers every parser uses so that a wrong or missing field is
// reported the same way everywhere: "<path>: missing required field" or
// "<path>: expected a number, got string", with the path also set as the
// Status's field. An explicit `null` is not "absent": a field that is present
// must have its type ("<path>: expected a number, got null"). Include only from .cpp files
// (it pulls in nlohmann/json.hpp).
// Thread safety: stateless functions.
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "common/status.h"

namespace tapp::json_fields {

inline std::string type_name(const nlohmann::json& j) { return j.type_name(); }

inline std::string join(const std::string& path, const std::string& key) {
  return path.empty() ? key : path + "." + key;
}

// An error about the field at `path` ("document" in the message when the path is empty).
inline Status field_error(const std::string& path, const std::string& what,
                          ErrorCode code = ErrorCode::invalid_argument) {
  if (path.empty()) return Status::field_error("", "document: " + what, code);
  return Status::field_error(path, what, code);
}

inline Status expect_object(const nlohmann::json& j, const std::string& path) {
  if (!j.is_object()) return field_error(path, "expected an object, got " + type_name(j));
  return Status::ok();
}

// The object j (at `path`) has no key outside `known`, as its schema's
// additionalProperties: false says: a misspelt "memry_mb" is an error, not a default.
inline Status known_fields(const nlohmann::json& j, const std::string& path, const std::vector<const char*>& known) {
  if (!j.is_object()) return Status::ok();
  for (auto kv = j.begin(); kv != j.end(); ++kv) {
    bool ok = false;
    for (const char* k : known) ok = ok || kv.key() == k;
    if (ok) continue;
    std::string expected;
    for (const char* k : known)
      if (k[0] != '$') expected += (expected.empty() ? "" : ", ") + std::string(k);
    return field_error(join(path, kv.key()), "unknown field (expected " + expected + ")");
  }
  return Status::ok();
}

// A JSON Schema "integer" (5, 5.0 and 1e1; not 2.5), as the schemas say: false
// for anything else, and for what int64 or a double's exact range cannot hold.
inline bool integer_value(const nlohmann::json& v, int64_t& out) {
  if (v.is_number_unsigned()) {
    if (v.get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) return false;
    out = static_cast<int64_t>(v.get<uint64_t>());
    return true;
  }
  if (v.is_number_integer()) {
    out = v.get<int64_t>();
    return true;
  }
  if (!v.is_number_float()) return false;
  const double d = v.get<double>();
  if (!(std::fabs(d) <= 9007199254740992.0 && d == std::floor(d))) return false;  // NaN fails too
  out = static_cast<int64_t>(d);
  return true;
}

// Reads j[key] into out. Missing and optional: out keeps its default.
template <typename T>
Status read(const nlohmann::json& j, const std::string& key, T& out, const std::string& path,
            bool required = false) {
  const std::string where = join(path, key);
  auto it = j.find(key);
  if (it == j.end() || (required && it->is_null())) {
    if (required) return field_error(where, "missing required field");
    return Status::ok();
  }
  if constexpr (std::is_same_v<T, bool>) {
    if (!it->is_boolean()) return field_error(where, "expected a boolean, got " + type_name(*it));
  } else if constexpr (std::is_integral_v<T>) {
    // JSON Schema's "integer", which the schemas use, includes 5.0 and 1e1; 2.5 is not one.
    if (it->is_number_float()) {
      int64_t v = 0;
      if (!integer_value(*it, v)) return field_error(where, "expected an integer, got " + type_name(*it));
      return read(nlohmann::json{{key, v}}, key, out, path, required);
    }
    if (!it->is_number_integer()) return field_error(where, "expected an integer, got " + type_name(*it));
    // nlohmann's get<T> truncates silently; refuse what T cannot hold.
    const bool fits = it->is_number_unsigned()
                          ? it->template get<uint64_t>() <= static_cast<uint64_t>(std::numeric_limits<T>::max())
                          : it->template get<int64_t>() >= static_cast<int64_t>(std::numeric_limits<T>::min()) &&
                                (std::is_unsigned_v<T> ||
                                 it->template get<int64_t>() <= static_cast<int64_t>(std::numeric_limits<T>::max()));
    if (!fits) return field_error(where, "integer out of range, got " + it->dump());
  } else if constexpr (std::is_floating_point_v<T>) {
    if (!it->is_number()) return field_error(where, "expected a number, got " + type_name(*it));
  } else if constexpr (std::is_same_v<T, std::string>) {
    if (!it->is_string()) return field_error(where, "expected a string, got " + type_name(*it));
  }
  try {
    out = it->template get<T>();
  } catch (const std::exception& e) {
    return field_error(where, e.what());
  }
  if constexpr (std::is_floating_point_v<T>) {
    if (!std::isfinite(static_cast<double>(out))) return field_error(where, "must be a finite number");
  }
  return Status::ok();
}

// A free-text field nothing reads (a "description"): when present, a string.
inline Status text_field(const nlohmann::json& j, const std::string& key, const std::string& path) {
  std::string ignored;
  return read(j, key, ignored, path);
}

}  // namespace tapp::json_fields
