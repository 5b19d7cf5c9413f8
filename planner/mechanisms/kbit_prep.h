// QLoRA preparation: what a training script does to the parameters bitsandbytes
// left unquantized (embeddings, norms, the output layer, biases) before training
// (docs/stacks.md, "QLoRA preparation").
// - PEFT's prepare_model_for_kbit_training freezes every parameter and casts each
//   fp16/bf16 one to fp32 (peft/utils/other.py: `param.data = param.data.to(torch.float32)`,
//   unchanged from peft 0.4 to 0.21); the packed NF4 weights are uint8 and stay.
// - TRL's peft_module_casting_to_bf16 (0.7.5-0.24, with bf16) puts the embeddings
//   and lm_head back to bf16 and keeps modules named "norm" in fp32; TRL 0.25's own
//   preparation upcasts only the norms; artidoro/qlora (qlora.py) does the same.
// An fp32 norm weight makes a LlamaRMSNorm's output fp32 (it returns
// weight * x.to(input_dtype)), so either way the residual stream of a Llama-style
// model turns fp32 and the 4-bit linears see fp32 inputs (planner/mechanisms/autocast.h);
// GemmaRMSNorm returns output.type_as(x) and keeps the input's dtype.
#pragma once

#include "graph/layer_graph.h"
#include "planner/settings/stack.h"

namespace headroom::planner {

// Marks the parameters `prep` upcasts (Param::upcast_fp32): under kPeft every
// unquantized parameter but the adapters (a module trained in full beside them,
// PEFT's modules_to_save, copies the upcast module: its gradient and optimizer
// states are fp32 too), under kNormsFp32 those of the norms.
void apply_kbit_prep(graph::LayerGraph& graph, KbitPrep prep);

// Whether any parameter of `graph` is upcast.
bool has_upcast_params(const graph::LayerGraph& graph);

}  // namespace headroom::planner
