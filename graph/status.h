// Errors as values. A Status either is ok or carries a code and one message
// that names the input (file), the field and what was expected, e.g.
//   "model.json: nodes[3].inputs[0]: unknown tensor 'h7' (expected a tensor name)".
// The code says what kind of error it is, decided where the error is made; the
// front end turns it into an exit status in one place (cli/exit_status.h).
// Library code never prints or exits; the front end shows the message.
#pragma once

#include <cassert>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

namespace headroom {

enum class StatusCode {
  kOk,
  kInvalidInput,  // the user's input is wrong: a flag, a file's contents, a field, an
                  // inconsistent setting, an input file named that is missing or unreadable
  kUnsupported,   // well-formed, but headroom cannot do it: an unknown model or GPU, a
                  // feature refused by name, a plan the executor cannot run
  kIo,            // reading or writing failed for a reason outside the input: a full
                  // disk, a file that cannot be created, a failed write or read
  kRuntime,       // a run that started failed for a reason of the moment: training
                  // diverged, LibTorch raised (out of memory), another rank failed,
                  // not enough host memory, a collective or rendezvous failed
  kInternal,      // a bug in headroom: a broken invariant between its own parts
};

// "invalid input", "unsupported", ...: for test messages and logs.
inline std::string_view status_code_name(StatusCode code) {
  switch (code) {
    case StatusCode::kOk:
      return "ok";
    case StatusCode::kInvalidInput:
      return "invalid input";
    case StatusCode::kUnsupported:
      return "unsupported";
    case StatusCode::kIo:
      return "i/o error";
    case StatusCode::kRuntime:
      return "runtime failure";
    case StatusCode::kInternal:
      return "internal error";
  }
  return "unknown";
}

class Status {
 public:
  Status() = default;
  static Status ok() { return Status(); }
  static Status invalid_input(std::string message) {
    return Status(StatusCode::kInvalidInput, std::move(message));
  }
  static Status unsupported(std::string message) {
    return Status(StatusCode::kUnsupported, std::move(message));
  }
  static Status io(std::string message) { return Status(StatusCode::kIo, std::move(message)); }
  static Status runtime(std::string message) {
    return Status(StatusCode::kRuntime, std::move(message));
  }
  static Status internal(std::string message) {
    return Status(StatusCode::kInternal, std::move(message));
  }
  // An error of `code` (not kOk), for code that carries a code from elsewhere.
  static Status with_code(StatusCode code, std::string message) {
    assert(code != StatusCode::kOk && "an error needs an error code");
    return Status(code, std::move(message));
  }

  bool is_ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }

  // The same error with context in front of its message ("PLAN: " + message),
  // keeping its code; an ok Status stays ok.
  Status with_prefix(std::string_view prefix) const {
    if (is_ok()) return *this;
    return Status(code_, std::string(prefix) + message_);
  }
  // The same error with `suffix` after its message, keeping its code.
  Status with_suffix(std::string_view suffix) const {
    if (is_ok()) return *this;
    return Status(code_, message_ + std::string(suffix));
  }

 private:
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

// Result<T>: a value or an error Status (its code kept).
template <typename T>
class Result {
 public:
  Result(T value) : value_(std::move(value)) {}  // NOLINT(google-explicit-constructor)
  Result(Status status) : status_(std::move(status)) {  // NOLINT(google-explicit-constructor)
    assert(!status_.is_ok() && "Result built from an ok Status has no value");
  }
  bool is_ok() const { return value_.has_value(); }
  const Status& status() const { return status_; }
  StatusCode code() const { return status_.code(); }
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
