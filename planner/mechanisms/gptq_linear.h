// A frozen base linear stored as GPTQ int4, as AutoGPTQ's QuantLinear holds it
// (auto_gptq/nn_modules/qlinear/qlinear_cuda_old.py, the kernel transformers picks
// for a 4-bit GPTQ model with desc_act off and exllama disabled, as training needs):
// qweight int32 [in / 8, out] (eight 4-bit codes per word), qzeros int32
// [in / group, out / 8], scales fp16 [in / group, out], g_idx int32 [in], and the
// bias in 16 bits. docs/memory-model.md, "GPTQ".
//
// Unlike bitsandbytes' NF4 (dequantized again in backward, nothing kept), the
// QuantLinear's forward for more than kernel_switch_threshold (128) rows, and
// always when trainable, unpacks the weight with PyTorch ops and calls
// torch.matmul(x, weight): autograd keeps that 16-bit weight for dX while the
// input needs a gradient, and backward does not dequantize.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

#include "graph/layer_graph.h"
#include "planner/settings/weight_formats.h"

namespace headroom::planner {

// Bytes the forward's unpacking moves per weight, eager PyTorch ops of
// QuantLinear.forward (4-bit branch): bitwise_right_shift of the expanded qweight
// (reads 0.5, writes a 4-byte int32), .to(int8) (reads 4, writes 1),
// bitwise_and in place (1 + 1), weight - zeros (1 + 1), scales * that (1 + 2, fp16).
inline constexpr double kGptqDequantizeBytesPerWeight = 16.5;
inline constexpr int kGptqDequantizeKernels = 5;
// Under torch.compile the same ops are one generated kernel: it reads the packed
// codes (0.5 B a weight) and writes the 16-bit weight (2 B).
inline constexpr double kGptqCompiledUnpackBytesPerWeight = 2.5;
// Peak scratch of that unpacking beyond its 16-bit result, bytes per weight: the
// int32 shift output and its int8 cast live together (5 B) before the result
// exists; at the multiply the int8 codes, their difference and the 2-byte result
// (4 B) do. The larger, less the result's 2 B, which is the node's output.
inline constexpr int64_t kGptqScratchBytesPerWeight = 3;

// Rewrites a frozen linear's weight as GPTQ int4 with `group_size` input rows per
// scale (-1: one group over the whole input): "<node>.qweight" (graph dtype i4, [out, in] elements, 0.5 B each),
// "<node>.qzeros", "<node>.scales", "<node>.g_idx"; the node outputs
// "<node>.dequantized_weight" (in x out, compute dtype), kept for dX, and holds the
// unpacking's scratch as forward workspace (in 16-bit elements: GPTQ computes in
// fp16, validate_settings refuses fp32). No-op when the weight trains.
void quantize_linear_gptq(graph::LayerGraph& graph, graph::Node& node, int64_t group_size);

// Whether `param` is a GPTQ packed weight (quantize_linear_gptq's "<node>.qweight").
bool is_gptq_qweight(const graph::Param& param);
// Whether `param` is one of GPTQ's constants (qzeros, scales, g_idx).
bool is_gptq_constant(const graph::Param& param);

}  // namespace headroom::planner
