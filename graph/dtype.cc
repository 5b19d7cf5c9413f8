#include "graph/dtype.h"

#include <array>
#include <cctype>
#include <string>
#include <utility>

namespace headroom::graph {
namespace {

struct DTypeInfo {
  DType dtype;
  std::string_view name;
  int bits;
};

constexpr std::array<DTypeInfo, 12> kDTypes = {{
    {DType::kF32, "f32", 32},
    {DType::kF16, "f16", 16},
    {DType::kBF16, "bf16", 16},
    {DType::kF8E4M3, "f8_e4m3", 8},
    {DType::kInt64, "i64", 64},
    {DType::kInt32, "i32", 32},
    {DType::kInt8, "i8", 8},
    {DType::kUInt8, "u8", 8},
    {DType::kBool, "bool", 8},  // torch.bool takes one byte per element
    {DType::kNF4, "nf4", 4},
    {DType::kFP4, "fp4", 4},
    {DType::kInt4, "i4", 4},
}};

constexpr std::array<std::pair<std::string_view, DType>, 14> kAliases = {{
    {"float32", DType::kF32},  {"fp32", DType::kF32},    {"float", DType::kF32},
    {"float16", DType::kF16},  {"fp16", DType::kF16},    {"half", DType::kF16},
    {"bfloat16", DType::kBF16}, {"int64", DType::kInt64}, {"int32", DType::kInt32},
    {"int8", DType::kInt8},    {"uint8", DType::kUInt8}, {"f8e4m3", DType::kF8E4M3},
    {"float8_e4m3fn", DType::kF8E4M3}, {"f8_e4m3fn", DType::kF8E4M3},
}};

const DTypeInfo& info(DType dtype) {
  for (const auto& entry : kDTypes) {
    if (entry.dtype == dtype) return entry;
  }
  return kDTypes[0];  // unreachable for valid enum values
}

}  // namespace

int dtype_bits(DType dtype) { return info(dtype).bits; }

int64_t dtype_bytes(DType dtype, int64_t elements) {
  const int64_t bits = dtype_bits(dtype);
  return (elements * bits + 7) / 8;
}

std::string_view dtype_name(DType dtype) { return info(dtype).name; }

std::optional<DType> parse_dtype(std::string_view text) {
  std::string lower(text);
  for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  for (const auto& entry : kDTypes) {
    if (entry.name == lower) return entry.dtype;
  }
  for (const auto& [alias, dtype] : kAliases) {
    if (alias == lower) return dtype;
  }
  // safetensors spells them F32, F16, BF16, I64, I32, I8, U8, BOOL, F8_E4M3.
  return std::nullopt;
}

std::string_view dtype_names_list() {
  return "f32, f16, bf16, f8_e4m3, i64, i32, i8, u8, bool, nf4, fp4, i4";
}

bool is_quantized_storage(DType dtype) {
  return dtype == DType::kNF4 || dtype == DType::kFP4 || dtype == DType::kInt4 || dtype == DType::kUInt8 ||
         dtype == DType::kInt8;
}

}  // namespace headroom::graph
