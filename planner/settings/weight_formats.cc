#include "planner/settings/weight_formats.h"

#include <array>
#include <utility>

namespace headroom::planner {
namespace {

constexpr std::array<std::pair<Float8Recipe, std::string_view>, 3> kRecipes = {{
    {Float8Recipe::kNone, "none"},
    {Float8Recipe::kTensorwise, "tensorwise"},
    {Float8Recipe::kTensorwiseFp8Input, "tensorwise-fp8-input"},
}};

}  // namespace

std::string_view float8_recipe_name(Float8Recipe value) {
  for (const auto& [key, name] : kRecipes) {
    if (key == value) return name;
  }
  return "?";
}

std::optional<Float8Recipe> parse_float8_recipe(std::string_view text) {
  for (const auto& [key, name] : kRecipes) {
    if (name == text) return key;
  }
  return std::nullopt;
}

std::string_view quant_format_name(QuantFormat value) { return value == QuantFormat::kGptq ? "gptq" : "nf4"; }

std::optional<QuantFormat> parse_quant_format(std::string_view text) {
  if (text == "nf4") return QuantFormat::kNf4;
  if (text == "gptq") return QuantFormat::kGptq;
  return std::nullopt;
}

}  // namespace headroom::planner
