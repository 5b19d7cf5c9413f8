// Liger's Triton kernels in place of the model's RMSNorm and gated MLP (liger-kernel
// 0.8.5, liger_kernel/transformers/monkey_patch.py apply_liger_kernel_to_llama and its
// siblings, which the Trainer's use_liger_kernel reaches through
// _apply_liger_kernel_to_instance): rewrites of the layer graph, each read from the
// autograd Function's save_for_backward. The fused loss is --loss fused-linear-ce
// (loss_variants.h). docs/stacks.md, "Liger's kernels".
#pragma once

#include <string_view>

#include "graph/layer_graph.h"

namespace headroom::planner {

// LigerSiLUMulFunction / LigerGELUMulFunction as one node: reads the gate and up
// projections, keeps both, writes the product; its backward writes the gradients into
// the two kept tensors (ops/swiglu.py swiglu_backward: _swiglu_backward_kernel(dc, a, b),
// returns a and b), so it makes no tensor of its own.
inline constexpr std::string_view kLigerGatedMulOp = "liger_gated_mul";

struct LigerRewrites {
  int norms = 0;  // RMSNorms made LigerRMSNormFunction
  int glus = 0;   // gated MLP products made LigerSiLUMulFunction / LigerGELUMulFunction
};

// - LigerRMSNorm (ops/rms_norm.py LigerRMSNormFunction.forward): one kernel writes Y and
//   RSTD, fp32 per row under the llama and gemma casting modes, and
//   save_for_backward(X, W, RSTD): no fp32 copy of x and no normalized tensor, as
//   Unsloth's fast_rms_layernorm (unsloth_model.h, unsloth_fused_norms).
// - LigerSwiGLUMLP / LigerGEGLUMLP (ops/swiglu.py LigerSiLUMulFunction, ops/geglu.py
//   LigerGELUMulFunction): save_for_backward(a, b), the gate and up projections; the
//   activation's output is never made (one kernel writes the product) and is recomputed
//   in backward. The activation and the product become one kLigerGatedMulOp node.
// RoPE (ops/rope.py LigerRopeFunction) rotates q and k in place and saves cos and sin,
// which the model's rotation keeps too: what it keeps is unchanged, and it is not rewritten.
LigerRewrites apply_liger_kernels(graph::LayerGraph& graph);

}  // namespace headroom::planner
