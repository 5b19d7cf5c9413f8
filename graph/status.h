// Errors as values. A Status either is ok or carries one message that names the
// input (file), the field and what was expected, e.g.
//   "model.json: nodes[3].inputs[0]: unknown tensor 'h7' (expected a tensor name)".
// Library code never prints or exits; the front end shows the message.
#pragma once

#include <cassert>
#include <optional>
#include <string>
#include <utility>

namespace headroom {

class Status {
 public:
  Status() = default;
  static Status ok() { return Status(); }
  static Status error(std::string message) {
    Status s;
    s.message_ = std::move(message);
    s.failed_ = true;
    return s;
  }
  bool is_ok() const { return !failed_; }
  const std::string& message() const { return message_; }

 private:
  bool failed_ = false;
  std::string message_;
};

// Result<T>: a value or an error Status.
template <typename T>
class Result {
 public:
  Result(T value) : value_(std::move(value)) {}  // NOLINT(google-explicit-constructor)
  Result(Status status) : status_(std::move(status)) {  // NOLINT(google-explicit-constructor)
    assert(!status_.is_ok() && "Result built from an ok Status has no value");
  }
  bool is_ok() const { return value_.has_value(); }
  const Status& status() const { return status_; }
  const std::string& message() const { return status_.message(); }
  T& value() {
    assert(value_.has_value());
    return *value_;
  }
  const T& value() const {
    assert(value_.has_value());
    return *value_;
  }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }

 private:
  std::optional<T> value_;
  Status status_;
};

}  // namespace headroom
