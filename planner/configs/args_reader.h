// The readers of Hugging Face argument files (TrainingArguments, TRL's
// ModelConfig, PEFT's adapter_config.json): values that may be native JSON or
// the strings of a command line, each key read once, the first error kept.
#pragma once

#include <charconv>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "graph/status.h"
#include "planner/configs/config_import.h"

namespace headroom::planner {

// A boolean argument: true/false, or the strings true/false, yes/no, 1/0 in any
// case; nullopt for anything else.
std::optional<bool> boolean_of(const nlohmann::json& v);

// A probability in [0, 1) written as a JSON number or a string ("0.05"); NaN
// and trailing characters are refused.
std::optional<double> probability(const nlohmann::json& v);

// Reads a JSON object whose values may be native (to_json_string) or strings
// (the command line); keeps the first error and every key it read.
class ArgsReader {
 public:
  ArgsReader(const nlohmann::json& args, std::string_view origin) : args_(args), origin_(origin) {}

  bool has(const std::string& key) {
    read_.insert(key);
    return args_.contains(key) && !args_.at(key).is_null() &&
           !(args_.at(key).is_string() && (args_.at(key) == "None" || args_.at(key) == ""));
  }
  // Whether the file names `key` at all, null included: a dataclass field whose
  // default is None still tells which config class wrote the file.
  bool names(const std::string& key) {
    read_.insert(key);
    return args_.contains(key);
  }
  const nlohmann::json& raw(const std::string& key) { return args_.at(key); }
  bool boolean_or(const std::string& key, bool fallback) {
    if (!has(key)) return fallback;
    const nlohmann::json& v = args_.at(key);
    if (const std::optional<bool> value = boolean_of(v)) return *value;
    fail(key, "true or false", v);
    return fallback;
  }
  int64_t count_or(const std::string& key, int64_t fallback, int64_t max) {
    // "None" or an empty value is no number: TrainingArguments would refuse it,
    // not fall back to its default (`--per_device_train_batch_size None`).
    if (args_.contains(key) && args_.at(key).is_string() && (args_.at(key) == "None" || args_.at(key) == "")) {
      read_.insert(key);
      fail(key, "a whole number from 1 to " + std::to_string(max), args_.at(key));
      return fallback;
    }
    if (!has(key)) return fallback;
    const nlohmann::json& v = args_.at(key);
    int64_t value = 0;
    bool ok = false;
    if (v.is_number_integer()) {
      value = v.get<int64_t>();
      ok = true;
    } else if (v.is_string()) {
      const std::string s = v.get<std::string>();
      const auto [end, error] = std::from_chars(s.data(), s.data() + s.size(), value);
      ok = error == std::errc{} && end == s.data() + s.size();
    }
    if (!ok || value < 1 || value > max) {
      fail(key, "a whole number from 1 to " + std::to_string(max), v);
      return fallback;
    }
    return value;
  }
  std::string string_or(const std::string& key, const std::string& fallback) {
    if (!has(key)) return fallback;
    const nlohmann::json& v = args_.at(key);
    if (v.is_string()) return v.get<std::string>();
    fail(key, "a string", v);
    return fallback;
  }
  void fail(const std::string& key, const std::string& expected, const nlohmann::json& got = nlohmann::json()) {
    if (!status_.is_ok()) return;
    status_ = config_field_error(origin_, key, expected, got);
  }
  void fail(Status status) {
    if (status_.is_ok()) status_ = std::move(status);
  }
  const Status& status() const { return status_; }
  // Keys given a value that was not read, in the file's order.
  std::vector<std::string> unread() const {
    std::vector<std::string> out;
    for (const auto& [key, value] : args_.items()) {
      if (!read_.count(key) && !value.is_null()) out.push_back(key);
    }
    return out;
  }

 private:
  const nlohmann::json& args_;
  std::string_view origin_;
  std::set<std::string> read_;
  Status status_ = Status::ok();
};

}  // namespace headroom::planner
