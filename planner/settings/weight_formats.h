// The settings' names for how linears store and compute their weights: the
// frozen base's 4-bit format under QLoRA (mechanisms/gptq_linear.h prices GPTQ)
// and torchao's fp8 training recipe (mechanisms/float8_linear.h). Kept apart
// from the rewrites so that RunSettings can hold them without depending on the
// mechanisms that apply them.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace headroom::planner {

enum class Float8Recipe {
  kNone,
  // torchao 0.9 and later (matmul_with_hp_or_float8_args, ao PR #1480): the
  // GEMM saves its 16-bit input and the fp8 weight; backward casts the input again.
  kTensorwise,
  // torchao 0.7-0.8 (manual_float8_matmul_with_args_in_float8, eab345c): the
  // GEMM saves the fp8 input and the fp8 weight.
  kTensorwiseFp8Input,
};

std::string_view float8_recipe_name(Float8Recipe value);
std::optional<Float8Recipe> parse_float8_recipe(std::string_view text);
std::string float8_recipe_names();  // "a, b, c", for messages and --help

// How QLoRA stores the frozen base: bitsandbytes NF4 (the default) or GPTQ int4.
enum class QuantFormat { kNf4, kGptq };
std::string_view quant_format_name(QuantFormat value);
std::optional<QuantFormat> parse_quant_format(std::string_view text);
std::string quant_format_names();

// GPTQ's usual group size (quantize_config.json group_size of most published
// 4-bit models, Qwen-7B-Chat-Int4 among them).
inline constexpr int64_t kGptqDefaultGroupSize = 128;

}  // namespace headroom::planner
