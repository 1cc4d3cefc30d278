// common/status.h — errors as values across module boundaries.
//
// Owns `Status` (ok, or an error: a code, a message and the path of the input
// field it is about) and `Result<T>` (a value or a Status). Every public
// function of a part that can fail on user input returns one of these;
// exceptions from LibTorch, SQLite and JSON are caught at the boundary and
// turned into a Status with a message that names what was wrong.
// The field path ("cluster.devices[1].speed") is carried beside the message so
// that a boundary (the HTTP API) reports it without parsing the message; the
// message still starts with it, so one-line CLI errors read the same.
// Thread safety: plain values, safe to copy between threads.
#pragma once

#include <optional>
#include <string>
#include <utility>

namespace tapp {

// What kind of error: the HTTP API maps it to a status code.
enum class ErrorCode {
  ok,
  unknown,           // Status::error(msg) without a code: a failure, kind not stated
  invalid_argument,  // malformed or out-of-range input (HTTP 400)
  too_large,         // input over a configured size limit (HTTP 413)
  forbidden,         // input the configuration does not allow (HTTP 403)
  not_found,         // a named thing does not exist (HTTP 404)
  internal,          // a bug or an environment failure (HTTP 500)
};

class Status {
 public:
  Status() = default;
  static Status ok() { return Status(); }
  // An error without a field path (kind: unknown).
  static Status error(std::string message) { return Status(ErrorCode::unknown, std::move(message), ""); }
  // An error about one input field: the message reads "<field>: <what>".
  static Status field_error(const std::string& field, const std::string& what,
                            ErrorCode code = ErrorCode::invalid_argument) {
    return Status(code, field.empty() ? what : field + ": " + what, field);
  }
  // An error with a code and no field.
  static Status coded(ErrorCode code, std::string message) { return Status(code, std::move(message), ""); }

  bool is_ok() const { return !message_.has_value(); }
  explicit operator bool() const { return is_ok(); }
  const std::string& message() const {
    static const std::string empty;
    return message_ ? *message_ : empty;
  }
  ErrorCode code() const { return code_; }
  // The path of the input field the error is about ("" = none known).
  const std::string& field() const { return field_; }

  // Prefixes the message with where it happened ("<where>: <message>") and the
  // field path with `where` ("where.field", or "where" when there was none).
  Status with_context(const std::string& where) const {
    if (is_ok()) return *this;
    return Status(code_, where + ": " + *message_, join_path(where, field_));
  }
  // Appends `what_to_do` to the message (the field and code kept): what the
  // caller's user can do about it, in the caller's own terms.
  Status with_hint(const std::string& what_to_do) const {
    if (is_ok()) return *this;
    return Status(code_, *message_ + "; " + what_to_do, field_);
  }
  // Nests the error inside `parent`: the field path becomes "parent.field" and a
  // message that started with the old path starts with the new one
  // ("devices[0].speed: ..." in "cluster" -> "cluster.devices[0].speed: ...").
  Status nested_in(const std::string& parent) const {
    if (is_ok() || parent.empty()) return *this;
    const std::string path = join_path(parent, field_);
    const std::string& m = *message_;
    if (!field_.empty() && m.compare(0, field_.size() + 2, field_ + ": ") == 0)
      return Status(code_, path + m.substr(field_.size()), path);
    return Status(code_, parent + ": " + m, path);
  }
  // The same error, about the field at `path` (the message is unchanged).
  Status at_field(std::string path) const { return is_ok() ? *this : Status(code_, *message_, std::move(path)); }
  Status with_code(ErrorCode code) const { return is_ok() ? *this : Status(code, *message_, field_); }

  static std::string join_path(const std::string& parent, const std::string& child) {
    if (parent.empty()) return child;
    if (child.empty()) return parent;
    return child[0] == '[' ? parent + child : parent + "." + child;
  }

 private:
  Status(ErrorCode code, std::string message, std::string field)
      : code_(code), message_(std::move(message)), field_(std::move(field)) {}
  ErrorCode code_ = ErrorCode::ok;
  std::optional<std::string> message_;
  std::string field_;
};

template <typename T>
class Result {
 public:
  Result(T value) : value_(std::move(value)) {}  // NOLINT: implicit by design
  Result(Status status) : status_(std::move(status)) {}  // NOLINT
  static Result error(std::string message) { return Result(Status::error(std::move(message))); }

  bool is_ok() const { return value_.has_value(); }
  explicit operator bool() const { return is_ok(); }
  const Status& status() const { return status_; }
  const std::string& error_message() const { return status_.message(); }

  T& value() & { return *value_; }
  const T& value() const& { return *value_; }
  T&& value() && { return std::move(*value_); }
  T* operator->() { return &*value_; }
  const T* operator->() const { return &*value_; }
  T& operator*() { return *value_; }
  const T& operator*() const { return *value_; }

 private:
  std::optional<T> value_;
  Status status_;
};

}  // namespace tapp
