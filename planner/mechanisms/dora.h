// DoRA (Liu et al. 2024, "DoRA: Weight-Decomposed Low-Rank Adaptation"): what PEFT's
// use_dora adds to a LoRA-adapted linear, as PEFT 0.21.2 builds it
// (peft/tuners/lora/variants.py DoraLinearVariant, peft/tuners/lora/dora.py
// DoraLinearLayer). docs/stacks.md, "DoRA".
//
// - A trainable magnitude, one value per output row (lora_magnitude_vector), in the
//   adapters' dtype: its gradient and optimizer states follow as for any parameter.
// - At setup, update_layer takes the norm of W + scaling * (B @ A) with the adapters
//   still requiring grad; the autograd graph of that norm stays alive through the
//   run (held by the magnitude's storage), keeping W + scaling * B @ A [out, in], the
//   norm [out] and the adapters' setup copies [r, in] and [out, r] in the load dtype.
// - Each forward keeps for backward: the base output and B(A(x)) [rows, out] (the
//   products with the magnitude's scale), the scale, the detached norm and scale - 1
//   [out] in fp32; with lora dropout the base matmul is run again on the dropped x,
//   which keeps a 16-bit copy of the weight [out, in] unless the weight already is
//   a 16-bit tensor of the compute dtype read as it is.
// torchtune's DoRALinear (torchtune/modules/peft/dora.py, 0.6.1) computes the same
// output from the one base output it made (no second matmul), sets the magnitude
// under no_grad (no setup graph), and keeps the scale and norm in the adapters' dtype.
#pragma once

#include "graph/layer_graph.h"
#include "planner/settings/run_settings.h"

namespace headroom::planner {

struct DoraOptions {
  graph::DType adapter_dtype = graph::DType::kF32;  // lora_A/lora_B's dtype, the magnitude's too
  double dropout = 0;                                // lora dropout of this adapter
  bool peft = true;  // PEFT's DoraLinearLayer; false: torchtune's DoRALinear
  // Whether the second base matmul (dropout > 0) reads a 16-bit copy of the weight
  // made for it: fp32 adapters (x and W cast to fp32, then back by autocast), an
  // fp32 base under AMP, or a dequantized 4-bit base.
  bool weight_copy = true;
};

// Adds DoRA's magnitude, setup graph, saved tensors and FLOPs to `node`, a linear
// that add_lora has just adapted with rank `rank`.
void add_dora(graph::LayerGraph& graph, graph::Node& node, int64_t rank, const DoraOptions& options);

// Whether the second base matmul of a DoRA forward keeps a weight copy of its own
// under `settings` with adapters in `adapter_dtype` (DoraOptions::weight_copy).
bool dora_weight_copy(const RunSettings& settings, graph::DType adapter_dtype);

// The DoraOptions of `settings` (its stack says whose DoRA) for adapters in `adapter_dtype`.
DoraOptions dora_options(const RunSettings& settings, const LoraSettings& lora, graph::DType adapter_dtype);

// DoRA's setup graph: the parameters add_dora adds for it (non-persistent buffers
// that autograd keeps; saved_dora_setup_bytes in planner/memory/dora_setup.h).
bool is_dora_setup_tensor(const graph::Param& param);

}  // namespace headroom::planner
