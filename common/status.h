// common/status.h — errors as values across module boundaries.
//
// Owns `Status` (ok or a message) and `Result<T>` (a value or a Status). Every
// public function of a part that can fail on user input returns one of these;
// exceptions from LibTorch, SQLite and JSON are caught at the boundary and
// turned into a Status with a message that names what was wrong.
// Thread safety: plain values, safe to copy between threads.
#pragma once

#include <optional>
#include <string>
#include <utility>

namespace tapp {

class Status {
 public:
  Status() = default;
  static Status ok() { return Status(); }
  static Status error(std::string message) { return Status(std::move(message)); }

  bool is_ok() const { return !message_.has_value(); }
  explicit operator bool() const { return is_ok(); }
  const std::string& message() const {
    static const std::string empty;
    return message_ ? *message_ : empty;
  }
  // Prefixes the message with where it happened: "cluster.devices[1].speed: ...".
  Status with_context(const std::string& where) const {
    return is_ok() ? *this : Status(where + ": " + *message_);
  }

 private:
  explicit Status(std::string message) : message_(std::move(message)) {}
  std::optional<std::string> message_;
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
