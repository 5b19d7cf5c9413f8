// What PEFT makes of a LoRA target list on a model graph.
//
// PEFT's "all-linear" target shorthand (peft/tuners/tuners_utils.py,
// _maybe_include_all_linear_layers, 0.21.2): every torch.nn.Linear and Conv1D of
// the model by its full name, less the output embedding of a transformers
// PreTrainedModel (a causal LM's lm_head) or, under task_type SEQ_CLS, the
// classification head (`score`). Modules that only call F.linear on a parameter
// (transformers 5.x's MoE routers, the experts' 3-D weights) are not nn.Linear and
// are not included (peft_param_wrapper.h says what PEFT makes of them). TRL, axolotl
// (lora_target_linear), XTuner and LLaMA-Factory ("all") hand the same set to PEFT.
// docs/stacks.md, "LoRA targets".
#pragma once

#include <string>
#include <vector>

#include "graph/layer_graph.h"
#include "graph/status.h"
#include "planner/settings/lora_targets.h"

namespace headroom::planner {

// The graph's linear modules that "all-linear" selects, by full name: every linear
// node but the head that computes what a causal-LM loss or the reward loss reads.
std::vector<std::string> all_linear_modules(const graph::LayerGraph& graph);

}  // namespace headroom::planner
