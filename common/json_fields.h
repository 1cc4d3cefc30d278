// common/json_fields.h — reading JSON fields with errors that name the field.
//
// Owns the small helpers every parser uses so that a wrong or missing field is
// reported the same way everywhere: "<path>: missing required field" or
// "<path>: expected a number, got string". Include only from .cpp files
// (it pulls in nlohmann/json.hpp).
// Thread safety: stateless functions.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "common/status.h"

namespace tapp::json_fields {

inline std::string type_name(const nlohmann::json& j) { return j.type_name(); }

inline std::string join(const std::string& path, const std::string& key) {
  return path.empty() ? key : path + "." + key;
}

inline Status expect_object(const nlohmann::json& j, const std::string& path) {
  if (!j.is_object())
    return Status::error((path.empty() ? "document" : path) + ": expected an object, got " + type_name(j));
  return Status::ok();
}

// Reads j[key] into out. Missing and optional: out keeps its default.
template <typename T>
Status read(const nlohmann::json& j, const std::string& key, T& out, const std::string& path,
            bool required = false) {
  const std::string where = join(path, key);
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) {
    if (required) return Status::error(where + ": missing required field");
    return Status::ok();
  }
  if constexpr (std::is_same_v<T, bool>) {
    if (!it->is_boolean()) return Status::error(where + ": expected a boolean, got " + type_name(*it));
  } else if constexpr (std::is_integral_v<T>) {
    if (!it->is_number_integer())
      return Status::error(where + ": expected an integer, got " + type_name(*it));
  } else if constexpr (std::is_floating_point_v<T>) {
    if (!it->is_number()) return Status::error(where + ": expected a number, got " + type_name(*it));
  } else if constexpr (std::is_same_v<T, std::string>) {
    if (!it->is_string()) return Status::error(where + ": expected a string, got " + type_name(*it));
  }
  try {
    out = it->template get<T>();
  } catch (const std::exception& e) {
    return Status::error(where + ": " + e.what());
  }
  return Status::ok();
}

}  // namespace tapp::json_fields
