#include "planner/settings/weight_formats.h"

#include "planner/settings/choice_table.h"

namespace headroom::planner {
namespace {

constexpr ChoiceTable<Float8Recipe, 3> kRecipes = {{{
    {Float8Recipe::kNone, "none"},
    {Float8Recipe::kTensorwise, "tensorwise"},
    {Float8Recipe::kTensorwiseFp8Input, "tensorwise-fp8-input"},
}}};
constexpr ChoiceTable<QuantFormat, 2> kQuantFormats = {{{
    {QuantFormat::kNf4, "nf4"},
    {QuantFormat::kGptq, "gptq"},
}}};

}  // namespace

std::string_view float8_recipe_name(Float8Recipe value) { return kRecipes.name(value); }
std::optional<Float8Recipe> parse_float8_recipe(std::string_view text) { return kRecipes.parse(text); }
std::string float8_recipe_names() { return kRecipes.names(); }

std::string_view quant_format_name(QuantFormat value) { return kQuantFormats.name(value); }
std::optional<QuantFormat> parse_quant_format(std::string_view text) { return kQuantFormats.parse(text); }
std::string quant_format_names() { return kQuantFormats.names(); }

}  // namespace headroom::planner
