#include "graph/op_traits.h"

#include <array>

namespace headroom::graph {
namespace {

struct OpRow {
  std::string_view op;
  OpTraits traits;
};

// One row per op with a trait. "low_precision_norm" is llm-foundry's LPLayerNorm
// (norm.py): it casts x, its weight and bias to the autocast dtype itself and
// runs layer_norm with autocast off, so it keeps a 16-bit x and weight where
// nn.LayerNorm keeps fp32 ones.
constexpr std::array<OpRow, 8> kOps = {{
    {op::kLinear, {.autocast_to_16_bit = true}},
    {op::kMatmul, {.autocast_to_16_bit = true}},
    {op::kConv2d, {.autocast_to_16_bit = true}},
    // Qwen2.5-VL's Conv3d patch embedding: CUDA autocast's lower-precision list has conv3d.
    {op::kConv3d, {.autocast_to_16_bit = true}},
    {op::kAttention, {.attention_kernel = true, .autocast_to_16_bit = true}},
    {op::kFlexAttention, {.attention_kernel = true, .autocast_to_16_bit = true}},
    {op::kTritonFlashAttention, {.attention_kernel = true, .autocast_to_16_bit = true}},
    {op::kLowPrecisionNorm, {.autocast_to_16_bit = true}},
}};

}  // namespace

OpTraits op_traits(std::string_view op) {
  for (const OpRow& row : kOps) {
    if (row.op == op) return row.traits;
  }
  return {};
}

}  // namespace headroom::graph
