// What PEFT makes of a LoRA target list on a model graph.
//
// PEFT's "all-linear" target shorthand (peft/tuners/tuners_utils.py,
// _maybe_include_all_linear_layers, 0.21.2): every torch.nn.Linear and Conv1D of
// the model by its full name, less the output embedding of a transformers
// PreTrainedModel (a causal LM's lm_head) or, under task_type SEQ_CLS, the
// classification head (`score`). Modules that only call F.linear on a parameter
// (transformers 5.x's MoE routers, the experts' 3-D weights) are not nn.Linear and
// are not included. TRL, axolotl (lora_target_linear), XTuner and LLaMA-Factory
// ("all") hand the same set to PEFT. docs/stacks.md, "LoRA targets".
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

// PEFT 0.21 on transformers 5.x MoE models (peft/utils/transformers_weight_conversion.py,
// _MOE_TARGET_MODULE_MAPPING and _convert_peft_config_moe, 0.21.2; transformers
// conversion_mapping.py _MODEL_TO_CONVERSION_PATTERN, 5.23.0): a target naming the
// experts' projections or the router by their transformers 4.x names (Mixtral: gate, w1,
// w2, w3; DeepSeek-V2/V3, Qwen3-MoE, OLMoE: gate, gate_proj, up_proj, down_proj), and
// "all-linear", which adds those names, becomes LoRA on the fused 3-D expert weights and
// the router's weight through lora.ParamWrapper (target_parameters; for Mixtral 8x7B at r16,
// 360 M adapter parameters against 13.6 M on the attention). Not priced: refused by name.
Status refuse_moe_parameter_targets(const graph::LayerGraph& graph, const std::vector<std::string>& targets,
                                    const std::string& model);

}  // namespace headroom::planner
