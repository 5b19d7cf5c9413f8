// The op-traits table (graph/op_traits.h) against the ops' sources.
#include "graph/op_traits.h"

#include <doctest/doctest.h>

namespace headroom::graph {

TEST_CASE("fused attention kernels are the three attention ops, nothing else") {
  CHECK(op_traits(op::kAttention).attention_kernel);
  CHECK(op_traits(op::kFlexAttention).attention_kernel);
  CHECK(op_traits(op::kTritonFlashAttention).attention_kernel);
  // Eager attention is matmul + softmax + matmul: GEMMs, not a fused kernel.
  CHECK_FALSE(op_traits(op::kMatmul).attention_kernel);
  CHECK_FALSE(op_traits(op::kSoftmax).attention_kernel);
  CHECK_FALSE(op_traits("aten::scaled_dot_product_attention_backward").attention_kernel);
}

TEST_CASE("autocast's lower-precision list: GEMMs, convolutions, attention and LPLayerNorm") {
  // torch/csrc/autocast_mode.cpp lower_precision_fp: linear, matmul, conv2d,
  // scaled_dot_product_attention; layer_norm and softmax are on the fp32 list.
  for (std::string_view op : {op::kLinear, op::kMatmul, op::kConv2d, op::kAttention, op::kFlexAttention,
                              op::kTritonFlashAttention, op::kLowPrecisionNorm}) {
    CHECK_MESSAGE(op_traits(op).autocast_to_16_bit, op);
  }
  for (std::string_view op : {op::kNorm, op::kSoftmax, op::kPow, op::kLoss, op::kCast}) {
    CHECK_FALSE_MESSAGE(op_traits(op).autocast_to_16_bit, op);
  }
}

TEST_CASE("an op the table does not list has no trait") {
  const OpTraits none = op_traits("my_custom_op");
  CHECK_FALSE(none.attention_kernel);
  CHECK_FALSE(none.autocast_to_16_bit);
}

}  // namespace headroom::graph
