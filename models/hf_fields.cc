#include "models/hf_fields.h"

#include <algorithm>
#include <sstream>

namespace headroom::models {

Status field_error(std::string_view origin, const std::string& field, const std::string& expected) {
  return Status::invalid_input(std::string(origin) + ": " + field + ": expected " + expected);
}

Status unsupported_field(std::string_view origin, const std::string& field,
                         const std::string& expected) {
  return Status::unsupported(std::string(origin) + ": " + field + ": expected " + expected);
}

Result<int64_t> positive(const HfFields& c, const char* key) {
  if (!c.has(key))
    return field_error(c.origin, c.name(key), "a positive integer (the field is missing)");
  const nlohmann::json& value = c.json.at(key);
  if (!value.is_number_integer() || value.get<int64_t>() <= 0 ||
      value.get<int64_t>() > kMaxHfSize) {
    return field_error(
        c.origin, c.name(key),
        "a positive integer up to " + std::to_string(kMaxHfSize) + ", got " + value.dump());
  }
  return value.get<int64_t>();
}

Result<int64_t> positive_or(const HfFields& c, const char* key, int64_t fallback) {
  if (!c.has(key)) return fallback;
  return positive(c, key);
}

Result<bool> boolean_or(const HfFields& c, const char* key, bool fallback) {
  if (!c.has(key)) return fallback;
  if (!c.json.at(key).is_boolean()) {
    return field_error(c.origin, c.name(key), "true or false, got " + c.json.at(key).dump());
  }
  return c.json.at(key).get<bool>();
}

Result<double> probability_or(const HfFields& c, const char* key, double fallback) {
  if (!c.has(key)) return fallback;
  const nlohmann::json& value = c.json.at(key);
  if (!value.is_number() || !(value.get<double>() >= 0) || value.get<double>() >= 1) {
    return field_error(c.origin, c.name(key), "a probability in [0, 1), got " + value.dump());
  }
  return value.get<double>();
}

Result<double> fraction_or(const HfFields& c, const char* key, double fallback) {
  return positive_number_or(c, key, fallback, 1.0);
}

Result<double> positive_number_or(const HfFields& c, const char* key, double fallback, double max) {
  if (!c.has(key)) return fallback;
  const nlohmann::json& value = c.json.at(key);
  if (!value.is_number() || !(value.get<double>() > 0) || value.get<double>() > max) {
    std::ostringstream bound;
    bound << max;
    return field_error(c.origin, c.name(key), "a number in (0, " + bound.str() + "], got " + value.dump());
  }
  return value.get<double>();
}

Result<std::string> string_or(const HfFields& c, const char* key, const std::string& fallback) {
  if (!c.has(key)) return fallback;
  if (!c.json.at(key).is_string()) {
    return field_error(c.origin, c.name(key), "a string, got " + c.json.at(key).dump());
  }
  return c.json.at(key).get<std::string>();
}

Result<HfFields> sub_config(const HfFields& c, const char* key, bool optional) {
  static const nlohmann::json kEmpty = nlohmann::json::object();
  if (!c.has(key)) {
    if (optional) return HfFields{kEmpty, c.origin, c.name(key)};
    return field_error(c.origin, c.name(key), "an object (the field is missing)");
  }
  if (!c.json.at(key).is_object()) {
    return field_error(c.origin, c.name(key),
                       "an object, got " + c.json.at(key).dump().substr(0, 60));
  }
  return HfFields{c.json.at(key), c.origin, c.name(key)};
}

Status divides(const HfFields& c, const char* field, int64_t a, int64_t b, const char* what) {
  if (a % b == 0) return Status::ok();
  return field_error(c.origin, c.name(field),
                     std::string("a divisor of ") + what + " (" + std::to_string(a) + "), got " +
                         std::to_string(b));
}

void set_token_sequence(graph::LayerGraph& graph, int64_t max_position) {
  graph.sequence.unit = "tokens";
  graph.sequence.max_seq = max_position;
  graph.sequence.default_seq = std::min<int64_t>(2048, max_position);
}

void set_image_sequence(graph::LayerGraph& graph, int64_t patch, int64_t image, int64_t extra_tokens) {
  graph.sequence.unit = "image";
  graph.sequence.patch_px = patch;
  graph.sequence.images = 1;
  graph.sequence.extra_tokens = extra_tokens;
  graph.sequence.default_resolution = image;
  graph.sequence.default_seq = (image / patch) * (image / patch) + extra_tokens;
  graph.sequence.max_seq = graph.sequence.default_seq;
}

}  // namespace headroom::models
