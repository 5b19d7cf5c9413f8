// What an op of a LayerGraph is, by its name: one table (graph/op_traits.cc)
// that the planner's mechanisms and time model ask, instead of comparing op
// names as strings where they need a kind of op. Ops not in the table (the
// exporter's aten names, a graph's own) have no trait.
#pragma once

#include <string_view>

namespace headroom::graph {

// The op names the graph builders (models/graph_builder.h) give the nodes the
// planner treats specially.
namespace op {
inline constexpr std::string_view kLinear = "linear";
inline constexpr std::string_view kMatmul = "matmul";
inline constexpr std::string_view kConv2d = "conv2d";
inline constexpr std::string_view kConv3d = "conv3d";  // Qwen2.5-VL's patch embedding
inline constexpr std::string_view kEmbedding = "embedding";  // nn.Embedding (GraphBuilder::embedding)
inline constexpr std::string_view kAttention = "attention";                    // SDPA (flash or efficient)
inline constexpr std::string_view kFlexAttention = "flex_attention";           // torch FlexAttention
inline constexpr std::string_view kTritonFlashAttention = "triton_flash_attention";  // flash-attn's Triton kernel
inline constexpr std::string_view kNorm = "norm";
inline constexpr std::string_view kLowPrecisionNorm = "low_precision_norm";  // llm-foundry's LPLayerNorm
inline constexpr std::string_view kSoftmax = "softmax";
inline constexpr std::string_view kPow = "pow";
inline constexpr std::string_view kCast = "cast";
inline constexpr std::string_view kToF32 = "to_f32";
inline constexpr std::string_view kToCopy = "to_copy";  // Tensor.to(dtype): a fresh tensor in the new dtype
inline constexpr std::string_view kSplit = "split";
inline constexpr std::string_view kAdd = "add";  // a residual or bias add: its backward passes the gradient on as is
inline constexpr std::string_view kMul = "mul";  // elementwise product (GraphBuilder::mul)
inline constexpr std::string_view kDropout = "dropout";
inline constexpr std::string_view kRepeatKv = "repeat_kv";  // K or V copied to every query head (HF repeat_kv)
inline constexpr std::string_view kLoss = "loss";
inline constexpr std::string_view kFusedLinearCe = "fused_linear_ce";
inline constexpr std::string_view kUnused = "unused";  // parameters whose output nothing reads
inline constexpr std::string_view kOneHot = "one_hot";   // the transformers 4.x MoE loop's expert mask (models/moe_loop.h)
inline constexpr std::string_view kNonzero = "nonzero";  // its per-expert torch.where
inline constexpr std::string_view kGroupedMm = "grouped_mm";  // fused 3-D experts (transformers 5.x, models/moe.h)
inline constexpr std::string_view kRouterLinear = "router_linear";  // an MoE router's logits (models/moe.h)
// The tensors a model's forward returns, held to its end by a node that reads nothing
// (models/t5.cc hold_model_output); Accelerate's prepared forward copies the 16-bit
// ones to fp32 there (planner/mechanisms/output_fp32_copies.h).
inline constexpr std::string_view kModelOutput = "model_output";
}  // namespace op

struct OpTraits {
  // A fused attention kernel: keeps q, k, v, the output and its statistics, and
  // runs at an attention kernel's efficiency rather than a GEMM's.
  bool attention_kernel = false;
  // On torch.autocast's lower-precision list (torch/amp autocast_mode, the
  // "lower_precision_fp" ops: linear, matmul, conv, SDPA), or casting to the
  // autocast dtype itself (LPLayerNorm).
  bool autocast_to_16_bit = false;
};

// The traits of `op`; all false for an op the table does not list.
OpTraits op_traits(std::string_view op);

}  // namespace headroom::graph
