// Element types of parameters and tensors, with their storage width.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace headroom::graph {

enum class DType {
  kF32,
  kF16,
  kBF16,
  kF8E4M3,
  kInt64,
  kInt32,
  kInt8,
  kUInt8,
  kBool,
  kNF4,  // 4-bit NormalFloat (QLoRA, Dettmers et al. 2023), two values per byte
  kFP4,  // 4-bit float as in bitsandbytes, two values per byte
  kInt4,  // 4-bit integer codes (GPTQ), eight per int32 word
};

// Storage width in bits: 32, 16, 8 or 4.
int dtype_bits(DType dtype);

// Bytes taken by `elements` values, rounded up to whole bytes.
int64_t dtype_bytes(DType dtype, int64_t elements);

// Canonical lower-case name ("f32", "bf16", "nf4", ...), as in the JSON formats.
std::string_view dtype_name(DType dtype);

// Accepts the canonical names and the common aliases ("float32", "fp32", "float16",
// "fp16", "bfloat16", "F32"/"BF16" as in safetensors). nullopt when unknown.
std::optional<DType> parse_dtype(std::string_view text);

// The list of canonical names, for error messages ("expected one of ...").
std::string_view dtype_names_list();

// Whether `dtype` is quantized storage (NF4, FP4, int4, 8-bit): a parameter held
// in it keeps it under any training precision (no cast with the model).
bool is_quantized_storage(DType dtype);

}  // namespace headroom::graph
