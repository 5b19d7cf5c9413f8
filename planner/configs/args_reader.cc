#include "planner/configs/args_reader.h"

#include <algorithm>
#include <cctype>
#include <charconv>

namespace headroom::planner {

using nlohmann::json;

// A boolean argument: true/false, or the strings true/false, yes/no, 1/0 in any
// case; nullopt for anything else.
std::optional<bool> boolean_of(const json& v) {
  if (v.is_boolean()) return v.get<bool>();
  if (!v.is_string()) return std::nullopt;
  std::string s = v.get<std::string>();
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
  if (s == "true" || s == "1" || s == "yes") return true;
  if (s == "false" || s == "0" || s == "no") return false;
  return std::nullopt;
}

// A probability in [0, 1) written as a JSON number or a string ("0.05"); NaN
// and trailing characters are refused.
std::optional<double> probability(const json& v) {
  double value = -1;
  if (v.is_number()) {
    value = v.get<double>();
  } else if (v.is_string()) {
    const std::string text = v.get<std::string>();
    const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
    if (error != std::errc{} || end != text.data() + text.size()) return std::nullopt;
  }
  if (!(value >= 0 && value < 1)) return std::nullopt;
  return value;
}

}  // namespace headroom::planner
