// Strict reading of one JSON object's members for the settings and plan
// readers: no coercion (1.9, true, "4" and 2^63 are not integers; an integer
// is a number but a bool is nothing else), and every member must be asked for,
// so an unknown key (a typo such as "micro_bach") is named instead of ignored.
// Errors are "<origin>: <prefix><key>: expected <what>, got <value>".
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "graph/status.h"

namespace headroom::planner {

class JsonFields {
 public:
  // `object` must outlive the reader; the caller checked that it is an object.
  JsonFields(const nlohmann::json& object, std::string_view origin, std::string prefix);

  // Reads `key` into `out` when present (absent leaves `out` as it is). The
  // overloads set what the JSON value must be.
  Status read(const char* key, std::string& out);
  Status read(const char* key, bool& out);
  Status read(const char* key, int64_t& out);
  Status read(const char* key, int& out);
  Status read(const char* key, double& out);
  Status read(const char* key, std::vector<std::string>& out);
  template <typename T>
  Status read(const char* key, std::optional<T>& out) {
    if (!object_.contains(key)) return known(key);
    T value{};
    if (Status status = read(key, value); !status.is_ok()) return status;
    out = value;
    return Status::ok();
  }
  // A string `parse` accepts; `names` lists them for the message.
  template <typename E, typename Parse>
  Status read_enum(const char* key, E& out, Parse parse, std::string_view names) {
    const nlohmann::json* value = take(key);
    if (value == nullptr) return Status::ok();
    const auto parsed = value->is_string() ? parse(value->get<std::string>()) : decltype(parse(""))();
    if (!parsed) return expected(key, "one of " + std::string(names), *value);
    out = *parsed;
    return Status::ok();
  }
  template <typename E, typename Parse>
  Status read_enum(const char* key, std::optional<E>& out, Parse parse, std::string_view names) {
    if (!object_.contains(key)) return known(key);
    E value{};
    if (Status status = read_enum(key, value, parse, names); !status.is_ok()) return status;
    out = value;
    return Status::ok();
  }
  // An absent optional key is still one the reader knows (for the unknown-key message).
  Status known(const char* key) {
    read_.insert(key);
    return Status::ok();
  }
  // The member `key` for a nested reader (nullptr when absent), marked as read.
  const nlohmann::json* member(const char* key) { return take(key); }

  // An error for the first member no read asked for.
  Status unknown_keys() const;

  Status expected(std::string_view key, const std::string& what, const nlohmann::json& got) const;

 private:
  const nlohmann::json* take(const char* key);

  const nlohmann::json& object_;
  std::string origin_;
  std::string prefix_;
  std::set<std::string> read_;
};

}  // namespace headroom::planner
