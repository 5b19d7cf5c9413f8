// PEFT's LoRA on the fused expert weights and the router of transformers 5.x MoE
// models (lora.ParamWrapper, target_parameters; peft 0.21.2).
//
// Which targets convert (peft/utils/transformers_weight_conversion.py,
// _MOE_TARGET_MODULE_MAPPING, _MOE_FUSED_TARGETS, _convert_peft_config_moe; the model
// types: transformers 5.23.0 conversion_mapping.py _MODEL_TO_CONVERSION_PATTERN, PEFT
// adding mixtral): a target naming an expert projection or the router by its
// transformers 4.x name (Mixtral: gate, w1, w3, w2; DeepSeek-V2/V3, Qwen3-MoE, OLMoE:
// gate, gate_proj, up_proj, down_proj) leaves target_modules and names the parameter
// instead: gate.weight (the router), gate_up_proj (both of its halves must be named;
// rank and alpha doubled), down_proj. So a dense or shared-expert MLP's gate_proj,
// up_proj and down_proj (DeepSeek's first layers and shared experts) get no adapter
// once those names are given. "all-linear" is every nn.Linear's leaf name plus the
// 4.x names, converted the same way.
//
// What a wrapped parameter costs (peft/tuners/lora/layer.py ParamWrapper,
// _LoraFactorsProxy, _LoraParameterProxy, 0.21.2; checked on the meta-device oracle,
// bench/oracle, Qwen3-MoE runs): lora_A [E*r, in] and lora_B [out, r*E] train; each
// forward recomposes the whole expert stack W' = baddbmm(W, B, A) in W's dtype (A and
// B cast to it first, both kept by baddbmm), and the grouped GEMM keeps W' for its
// input gradient: a full-size copy of the experts' weights saved per layer. Its
// backward makes dW' at full size before baddbmm's backward reduces it to the
// factors. The router (one "expert") adds B @ A to its weight: a router-sized W' kept
// by F.linear. docs/stacks.md, "LoRA on fused experts".
#pragma once

#include <string>
#include <vector>

#include "graph/layer_graph.h"
#include "graph/status.h"
#include "planner/settings/run_settings.h"

namespace headroom::planner {

// A target list after PEFT's MoE conversion.
struct ConvertedTargets {
  bool converted = false;            // the family is one PEFT converts
  std::vector<std::string> modules;  // left to ordinary LoRA on nn.Linear (leaf names)
  bool gate_up = false;              // the experts' fused gate_up_proj, at twice the rank
  bool down = false;                 // the experts' down_proj
  bool router = false;               // the router's weight
  bool any_parameter() const { return gate_up || down || router; }
};

// `targets` as PEFT converts them on `graph` (not converted: `converted` false and
// `modules` empty). Errors, as PEFT raises them: one half of gate_up_proj named alone.
Result<ConvertedTargets> convert_moe_targets(const graph::LayerGraph& graph, const std::vector<std::string>& targets,
                                             const std::string& model);

// Whether `node` is a grouped GEMM whose experts' weight _LoraFactorsProxy recomposes:
// the proxy views lora_A and lora_B as the experts module's forward starts, before its
// first grouped GEMM, so autograd, which runs the ready node of the highest sequence
// number first, reaches those views and the factors' AccumulateGrad (and the hooks on
// it) only once every such GEMM of the block has run backward (peft/tuners/lora/layer.py
// ParamWrapper._activate_lora, get_delta_factors, 0.21.2; seen on the meta-device oracle:
// Qwen3-MoE's first ZeRO-2 hook after layers.1's gate_up_proj).
bool lora_factors_viewed_early(const graph::Node& node);

// Wraps the named parameters of every MoE block of `graph` (skipping nodes matching
// settings.lora_skip); returns how many. Refused: lora dropout (ParamWrapper raises
// on it) and autocast over fp32 weights (not priced). The executor builds the same
// adapters from the graph (models/torch/moe_module.h, wrap_param_lora).
Result<int> wrap_moe_parameters(graph::LayerGraph& graph, const ConvertedTargets& targets, const RunSettings& settings,
                                graph::DType adapter_dtype);

}  // namespace headroom::planner
