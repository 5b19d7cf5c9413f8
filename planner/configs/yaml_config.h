// YAML config files (torchtune recipes, Accelerate configs) read safely: libyaml
// (the reference C parser behind PyYAML, which OmegaConf and Accelerate load
// with) turns the text into nlohmann::json, refusing what the readers must never
// see: text that is not UTF-8, control characters, aliases (*name), duplicate
// keys, nesting deeper than graph::kMaxJsonDepth, more than one document.
// yaml-cpp 0.7, tried first, hung on inputs a fuzzer found in minutes.
// Plain scalars resolve as PyYAML's YAML 1.1 core schema does (null, true/false
// and yes/no/on/off, integers with underscores, floats with or without a dot);
// quoted scalars stay strings. Internal to planner/.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "graph/status.h"

namespace headroom::planner {

inline constexpr int64_t kMaxYamlCount = int64_t{1} << 24;

// Dotted path of a key below `parent` ("" at the top).
inline std::string yaml_join(const std::string& parent, const std::string& key) {
  return parent.empty() ? key : parent + "." + key;
}

// Parses `text` from `origin` into a JSON object, then applies dot-list
// `overrides` (KEY=VALUE sets a nested key, the value read as YAML; ~KEY removes
// one). `what` names the expected file in messages ("a torchtune config").
Result<nlohmann::json> parse_yaml_config(std::string_view text, std::string_view origin, std::string_view what,
                                         const std::vector<std::string>& overrides = {});

// Reads typed values at dotted paths and keeps the first error; records every
// path it reads so that what is left over can be listed.
class YamlReader {
 public:
  YamlReader(const nlohmann::json& root, std::string_view origin) : root_(root), origin_(origin) {}

  // The value at a dotted path, or null when any part is missing.
  const nlohmann::json& at(const std::string& path);
  bool has(const std::string& path) { return !at(path).is_null(); }
  bool boolean_or(const std::string& path, bool fallback);
  int64_t count_or(const std::string& path, int64_t fallback);  // a positive whole number up to 2^24
  double number_or(const std::string& path, double fallback);
  std::string string_or(const std::string& path, const std::string& fallback);
  std::vector<std::string> strings(const std::string& path);  // a list of strings, empty when missing
  void fail(const std::string& path, const std::string& expected, const nlohmann::json& got = nullptr);
  const Status& status() const { return status_; }

  // Keys that were not read, as dotted paths; a mapping none of whose keys were
  // read is listed once by its own path.
  std::vector<std::string> unread() const;

 private:
  bool read_below(const std::string& path) const;
  void collect(const nlohmann::json& node, const std::string& path, std::vector<std::string>& out) const;

  const nlohmann::json& root_;
  std::string_view origin_;
  std::set<std::string> read_;
  Status status_ = Status::ok();
};

}  // namespace headroom::planner
