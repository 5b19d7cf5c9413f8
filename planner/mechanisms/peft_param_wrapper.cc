#include "planner/mechanisms/peft_param_wrapper.h"

#include <algorithm>
#include <array>
#include <set>

#include "graph/op_traits.h"
#include "planner/mechanisms/fsdp_16_bit_gather.h"
#include "planner/mechanisms/name_globs.h"
#include "planner/mechanisms/peft_targets.h"
#include "planner/settings/stack_choices.h"
#include "planner/settings/stack_traits.h"

namespace headroom::planner {
namespace {

using graph::DType;
using graph::LayerGraph;
using graph::Node;
using graph::Param;
using graph::SaveWhen;
using graph::SizeExpr;

// _MOE_TARGET_MODULE_MAPPING and _MOE_FUSED_TARGETS by model type (the 4.x names).
struct MoeConversion {
  const char* family;
  const char* router;                   // -> gate.weight
  std::array<const char*, 2> gate_up;   // -> gate_up_proj, both required
  const char* down;                     // -> down_proj
};
constexpr MoeConversion kConversions[] = {
    {"mixtral", "gate", {"w1", "w3"}, "w2"},
    {"deepseek_v2", "gate", {"gate_proj", "up_proj"}, "down_proj"},
    {"deepseek_v3", "gate", {"gate_proj", "up_proj"}, "down_proj"},
    {"qwen3_moe", "gate", {"gate_proj", "up_proj"}, "down_proj"},
    {"olmoe", "gate", {"gate_proj", "up_proj"}, "down_proj"},
};

// PEFT's test: the whole target or its suffix after a dot.
bool names(const std::string& target, const char* old_name) {
  const std::string dotted = std::string(".") + old_name;
  return target == old_name || target.ends_with(dotted);
}

// "all-linear" as _resolve_string_target_modules gives it: the leaf names of the
// nn.Linear modules all-linear selects, and every 4.x name of the mapping.
std::vector<std::string> resolved_all_linear(const LayerGraph& graph, const MoeConversion& row) {
  std::set<std::string> leaves;
  for (const std::string& module : all_linear_modules(graph)) leaves.insert(module.substr(module.rfind('.') + 1));
  for (const char* name : {row.router, row.gate_up[0], row.gate_up[1], row.down}) leaves.insert(name);
  return {leaves.begin(), leaves.end()};
}

void add_output(LayerGraph& graph, Node& node, const std::string& name, int64_t elements, SaveWhen when) {
  graph.tensors.push_back(graph::Tensor{name, SizeExpr::constant(elements), std::nullopt, false});
  node.outputs.push_back(name);
  node.saves.push_back({name, when});
}

// A grouped GEMM's [E, out, in] weight under _LoraFactorsProxy: W' = baddbmm(W, B, A)
// at full size, kept for dX; B [E, out, r] and A [E, r, in] cast to W's dtype, kept by
// baddbmm for the factors' gradients; dW' at full size in backward.
void wrap_experts(LayerGraph& graph, Node& node, int64_t rank, DType adapter_dtype, bool cast) {
  const int64_t e = node.params.front().shape[0];
  const int64_t out = node.params.front().shape[1];
  const int64_t in = node.params.front().shape[2];
  const int64_t full = e * out * in;
  node.params.push_back(Param{node.name + ".lora_A.weight", {e * rank, in}, adapter_dtype, true, ""});
  node.params.push_back(Param{node.name + ".lora_B.weight", {out, rank * e}, adapter_dtype, true, ""});
  add_output(graph, node, node.name + ".lora_recomposed", full, SaveWhen::kInputGrad);
  if (cast) {
    add_output(graph, node, node.name + ".lora_B_cast", e * out * rank, SaveWhen::kParamGrad);
    add_output(graph, node, node.name + ".lora_A_cast", e * rank * in, SaveWhen::kParamGrad);
  }
  node.bwd_workspace_elements = node.backward_workspace() + SizeExpr::constant(full);
  const SizeExpr fold = SizeExpr::constant(2 * full * rank);
  node.fwd_flops += fold;
  node.bwd_param_flops += fold.scaled(2);
  node.fwd_io_elements += SizeExpr::constant(2 * full);  // W read, W' written
}

// The router's [E, hidden] weight under _LoraParameterProxy: W' = W + (B @ A).to(W's
// dtype), kept by F.linear for dx. The product (in the adapters' dtype) and its cast
// are scratch in forward, dW' and its cast back in backward.
void wrap_router(LayerGraph& graph, Node& node, int64_t rank, DType adapter_dtype, bool cast) {
  const int64_t e = node.params.front().shape[0];
  const int64_t hidden = node.params.front().shape[1];
  const int64_t full = e * hidden;
  node.params.push_back(Param{node.name + ".lora_A.weight", {rank, hidden}, adapter_dtype, true, ""});
  node.params.push_back(Param{node.name + ".lora_B.weight", {e, rank}, adapter_dtype, true, ""});
  add_output(graph, node, node.name + ".lora_recomposed", full, SaveWhen::kInputGrad);
  // In compute-dtype elements: an fp32 product beside its 16-bit cast is three.
  const SizeExpr scratch = SizeExpr::constant(cast ? 3 * full : full);
  node.bwd_workspace_elements = node.backward_workspace() + scratch;
  node.workspace_elements += scratch;
  const SizeExpr product = SizeExpr::constant(2 * full * rank);
  node.fwd_flops += product;
  node.bwd_param_flops += product.scaled(2);
}

}  // namespace

bool lora_factors_viewed_early(const graph::Node& node) {
  // wrap_experts names W' this way; the router's W' (wrap_router) is no grouped GEMM.
  return node.op == graph::op::kGroupedMm &&
         std::any_of(node.outputs.begin(), node.outputs.end(),
                     [](const std::string& t) { return t.ends_with(".lora_recomposed"); });
}

Result<ConvertedTargets> convert_moe_targets(const LayerGraph& graph, const std::vector<std::string>& targets,
                                             const std::string& model) {
  const auto row = std::find_if(std::begin(kConversions), std::end(kConversions),
                                [&](const MoeConversion& r) { return graph.family == r.family; });
  ConvertedTargets out;
  // transformers 4.x's experts are nn.Linear modules (models/moe_loop.h): PEFT wraps
  // them as ordinary LoRA and converts nothing (the conversion maps 4.x names onto
  // 5.x's fused parameters).
  const bool fused = std::any_of(graph.nodes.begin(), graph.nodes.end(),
                                 [](const graph::Node& n) { return n.op == graph::op::kGroupedMm; });
  if (row == std::end(kConversions) || !fused) return out;
  out.converted = true;
  std::array<bool, 2> halves{false, false};
  for (const std::string& target : is_all_linear(targets) ? resolved_all_linear(graph, *row) : targets) {
    if (names(target, row->router)) {
      out.router = true;
    } else if (names(target, row->gate_up[0]) || names(target, row->gate_up[1])) {
      halves[names(target, row->gate_up[0]) ? 0 : 1] = true;
    } else if (names(target, row->down)) {
      out.down = true;
    } else {
      out.modules.push_back(target);
    }
  }
  if (halves[0] != halves[1]) {
    const int given = halves[0] ? 0 : 1;
    return Status::invalid_input(model + ": lora.targets: on a " + graph.family + " model PEFT cannot convert '" +
                                 row->gate_up[given] + "' without also targeting '" + row->gate_up[1 - given] +
                                 "': they are fused into the experts' gate_up_proj "
                                 "(peft/utils/transformers_weight_conversion.py, 0.21.2); expected both or neither");
  }
  out.gate_up = halves[0];
  return out;
}

Result<int> wrap_moe_parameters(LayerGraph& graph, const ConvertedTargets& targets, const RunSettings& settings,
                                DType adapter_dtype) {
  if (!targets.any_parameter()) return 0;
  // torchtune's and litgpt's LoRA are their own modules, not PEFT's: what they do with
  // fused experts is not PEFT's conversion and is not priced.
  if (settings.stack == Stack::kTorchtune || settings.stack == Stack::kLitgpt) {
    return Status::unsupported(settings.model + ": lora.targets: these names are the experts' or the router's, "
                               "which PEFT wraps with lora.ParamWrapper; the " + std::string(stack_name(settings.stack)) +
                               " stack's own LoRA on fused experts is not priced; expected attention targets");
  }
  if (settings.lora.dora) {
    return Status::invalid_input(
        settings.model + ": lora.dora: these targets put LoRA on the fused experts' or the router's weights "
        "(PEFT's lora.ParamWrapper), which raises on use_dora (peft/tuners/lora/layer.py, 0.21.2); expected false");
  }
  if (settings.lora.dropout > 0) {
    return Status::invalid_input(
        settings.model + ": lora.dropout: these targets put LoRA on the fused experts' or the router's weights "
        "(PEFT's lora.ParamWrapper), which raises on lora_dropout != 0 (peft/tuners/lora/layer.py, 0.21.2); "
        "expected 0");
  }
  if (is_autocast(settings.precision)) {
    return Status::unsupported(
        settings.model + ": precision: LoRA on the fused experts (PEFT's lora.ParamWrapper) under autocast over "
        "fp32 weights is not priced; expected bf16 or fp32 weights, or attention-only targets");
  }
  // FSDP1 flattens the parameters: ParamWrapper's reshape of lora_B into [out, r, E]
  // fails on the flat shard (the oracle: RuntimeError in get_delta_factors).
  if (shards_with_fsdp(settings) && !shards_with_fsdp2(settings) && fsdp_shards_params(settings, settings.zero_stage)) {
    return Status::unsupported(
        settings.model + ": sharding: PEFT's lora.ParamWrapper (LoRA on the fused experts or the router, which these "
        "targets name) fails on FSDP1's flat parameters (its reshape of lora_B in get_delta_factors); expected "
        "fsdp2, DeepSpeed, or attention-only targets");
  }
  // .to(W's dtype) copies the factors only where their dtype differs from the weights':
  // FSDP's mixed precision gathers both in 16 bits (fsdp_16_bit_gather.h).
  const bool cast = (adapter_dtype == DType::kF32) != (settings.precision == Precision::kFp32) &&
                    !fsdp_gathers_in_16_bits(settings);
  int wrapped = 0;
  for (Node& node : graph.nodes) {
    if (node.params.empty() || any_name_matches(settings.lora_skip, node.name)) continue;
    const bool experts = node.op == graph::op::kGroupedMm && node.params.front().shape.size() == 3;
    if (experts && node.name.ends_with(".gate_up_proj") && targets.gate_up) {
      wrap_experts(graph, node, 2 * settings.lora.rank, adapter_dtype, cast);  // rank_pattern: r times 2
    } else if (experts && node.name.ends_with(".down_proj") && targets.down) {
      wrap_experts(graph, node, settings.lora.rank, adapter_dtype, cast);
    } else if (node.op == graph::op::kRouterLinear && targets.router) {
      wrap_router(graph, node, settings.lora.rank, adapter_dtype, cast);
    } else {
      continue;
    }
    ++wrapped;
  }
  return wrapped;
}

}  // namespace headroom::planner
