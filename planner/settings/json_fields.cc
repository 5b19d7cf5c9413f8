#include "planner/settings/json_fields.h"

#include <algorithm>
#include <limits>

namespace headroom::planner {

using nlohmann::json;

JsonFields::JsonFields(const json& object, std::string_view origin, std::string prefix)
    : object_(object), origin_(origin), prefix_(std::move(prefix)) {}

const json* JsonFields::take(const char* key) {
  read_.insert(key);
  const auto it = object_.find(key);
  return it == object_.end() ? nullptr : &*it;
}

Status JsonFields::expected(std::string_view key, const std::string& what, const json& got) const {
  std::string shown = got.dump(-1, ' ', true, json::error_handler_t::replace);
  if (shown.size() > 60) shown = shown.substr(0, 57) + "...";
  return Status::invalid_input(origin_ + ": " + prefix_ + std::string(key) + ": expected " + what +
                               ", got " + shown);
}

Status JsonFields::read(const char* key, std::string& out) {
  const json* value = take(key);
  if (value == nullptr) return Status::ok();
  if (!value->is_string()) return expected(key, "a string", *value);
  out = value->get<std::string>();
  return Status::ok();
}

Status JsonFields::read(const char* key, bool& out) {
  const json* value = take(key);
  if (value == nullptr) return Status::ok();
  if (!value->is_boolean()) return expected(key, "true or false", *value);
  out = value->get<bool>();
  return Status::ok();
}

Status JsonFields::read(const char* key, int64_t& out) {
  const json* value = take(key);
  if (value == nullptr) return Status::ok();
  // is_number_integer() is false for 1.9 and true, so neither is coerced; a
  // number above 2^63 - 1 parses as unsigned and would wrap negative.
  if (!value->is_number_integer() ||
      (value->is_number_unsigned() && value->get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))) {
    return expected(key, "an integer (at most 2^63 - 1)", *value);
  }
  out = value->get<int64_t>();
  return Status::ok();
}

Status JsonFields::read(const char* key, int& out) {
  int64_t wide = out;
  if (Status status = read(key, wide); !status.is_ok()) return status;
  if (wide < std::numeric_limits<int>::min() || wide > std::numeric_limits<int>::max()) {
    return expected(key, "a 32-bit integer", object_.at(key));
  }
  out = static_cast<int>(wide);
  return Status::ok();
}

Status JsonFields::read(const char* key, double& out) {
  const json* value = take(key);
  if (value == nullptr) return Status::ok();
  if (!value->is_number()) return expected(key, "a number", *value);
  out = value->get<double>();
  return Status::ok();
}

Status JsonFields::read(const char* key, std::vector<std::string>& out) {
  const json* value = take(key);
  if (value == nullptr) return Status::ok();
  if (!value->is_array()) return expected(key, "a list of strings", *value);
  std::vector<std::string> items;
  for (const json& item : *value) {
    if (!item.is_string()) return expected(key, "a list of strings", *value);
    items.push_back(item.get<std::string>());
  }
  out = std::move(items);
  return Status::ok();
}

namespace {

// Levenshtein distance, for "did you mean" on a misspelt key.
size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t above = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = above;
    }
  }
  return row[b.size()];
}

}  // namespace

Status JsonFields::unknown_keys() const {
  for (const auto& item : object_.items()) {
    if (read_.count(item.key()) != 0) continue;
    std::string known;
    std::string nearest;
    size_t nearest_distance = 3;  // more edits than this is not a typo
    for (const std::string& key : read_) {
      known += (known.empty() ? "" : ", ") + key;
      const size_t distance = edit_distance(item.key(), key);
      if (distance < nearest_distance) {
        nearest_distance = distance;
        nearest = key;
      }
    }
    return Status::invalid_input(origin_ + ": " + prefix_ + item.key() + ": unknown key (" +
                                 (nearest.empty() ? "" : "did you mean \"" + nearest + "\"? ") +
                                 "expected one of " + known + ")");
  }
  return Status::ok();
}

}  // namespace headroom::planner
