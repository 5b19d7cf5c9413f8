#include "planner/mechanisms/trainability.h"

#include <algorithm>
#include <string>

#include "graph/op_traits.h"
#include "planner/mechanisms/dora.h"
#include "planner/mechanisms/peft_param_wrapper.h"
#include "planner/mechanisms/peft_targets.h"
#include "planner/mechanisms/gptq_linear.h"
#include "planner/settings/stack.h"

namespace headroom::planner {
namespace {

using graph::DType;
using graph::LayerGraph;
using graph::Node;
using graph::Param;
using graph::SaveWhen;
using graph::SizeExpr;
using graph::Tensor;

bool ends_with(std::string_view text, std::string_view suffix) {
  return text.size() >= suffix.size() && text.substr(text.size() - suffix.size()) == suffix;
}

// A LoRA target "q_proj" matches module "model.layers.3.self_attn.q_proj" as PEFT
// does: the whole name or a suffix after a dot. A target with a '*' is a glob over
// the whole name (the release aliases below).
bool is_lora_target(const std::vector<std::string>& targets, std::string_view module) {
  for (const std::string& target : targets) {
    if (module == target) return true;
    if (ends_with(module, "." + target)) return true;
    if (target.find('*') != std::string::npos && name_matches(target, module)) return true;
  }
  return false;
}

// Module names a later transformers release gave a family whose graph carries the
// earlier ones. transformers 5.x's ViTAttention holds q_proj, k_proj, v_proj, o_proj
// and ViTMLP fc1, fc2 (models/vit/modeling_vit.py, 5.23.0), where 4.x had
// attention.attention.query/key/value, attention.output.dense, intermediate.dense and
// output.dense (4.44.2); the same weights, so a 5.x target names the 4.x node.
struct ModuleAlias {
  const char* family;
  const char* target;  // the later release's module name
  const char* glob;    // the node it names in the graph
};
constexpr ModuleAlias kModuleAliases[] = {
    {"vit", "q_proj", "*.attention.attention.query"},
    {"vit", "k_proj", "*.attention.attention.key"},
    {"vit", "v_proj", "*.attention.attention.value"},
    {"vit", "o_proj", "*.attention.output.dense"},
    {"vit", "fc1", "*.intermediate.dense"},
    {"vit", "fc2", "*[0-9].output.dense"},
};

// `targets` with each later release's name of a `family` module replaced by its node's glob.
std::vector<std::string> with_release_aliases(const std::string& family, const std::vector<std::string>& targets) {
  std::vector<std::string> out;
  for (const std::string& target : targets) {
    const auto alias = std::find_if(std::begin(kModuleAliases), std::end(kModuleAliases),
                                    [&](const ModuleAlias& a) { return family == a.family && target == a.target; });
    out.push_back(alias == std::end(kModuleAliases) ? target : alias->glob);
  }
  return out;
}

bool any_trainable_base(const Node& node) {
  for (const Param& param : node.params) {
    if (param.trainable) return true;
  }
  return false;
}

// Adds PEFT-style adapters to a linear node: y = W x + B(A(dropout(x))).
// lora_A [r, in] and lora_B [out, r] train, in `dtype`: fp32 as PEFT keeps them
// (get_peft_model autocast_adapter_dtype=True), or the model's 16-bit dtype as
// torchtune and litgpt build them (model_states prices fp32 adapters at 4 bytes
// under pure bf16). Saved for backward: A's input (x, or the dropout output
// and its bool mask when lora dropout > 0) and B's input x·A [rows, r].
// With lora.dora, DoRA's magnitude, setup graph and saves (dora.h); `settings` says
// whether its second base matmul keeps a weight copy.
void add_lora(LayerGraph& graph, Node& node, const LoraSettings& lora, DType dtype, const RunSettings& settings) {
  const graph::LinearInfo& linear = *node.linear;
  const int64_t r = lora.rank;
  // Asked before the adapters join node.params: they are trainable themselves.
  const bool frozen_base = !any_trainable_base(node);
  node.params.push_back(Param{node.name + ".lora_A.weight", {r, linear.in_features}, dtype, true, ""});
  node.params.push_back(Param{node.name + ".lora_B.weight", {linear.out_features, r}, dtype, true, ""});
  const std::string mid = node.name + ".lora_mid";
  graph.tensors.push_back(Tensor{mid, linear.rows.scaled(r), std::nullopt, false});
  node.outputs.push_back(mid);
  node.saves.push_back({mid, SaveWhen::kParamGrad});
  if (lora.dropout > 0) {
    // A frozen base linear keeps nothing of x; lora_A keeps the dropout output instead.
    if (frozen_base) {
      std::erase_if(node.saves, [&](const graph::SavedRef& saved) {
        return saved.when == SaveWhen::kParamGrad &&
               std::find(node.inputs.begin(), node.inputs.end(), saved.tensor) != node.inputs.end();
      });
    }
    const std::string dropped = node.name + ".lora_dropout_out";
    const std::string mask = node.name + ".lora_dropout_mask";
    graph.tensors.push_back(Tensor{dropped, linear.rows.scaled(linear.in_features), std::nullopt, false});
    graph.tensors.push_back(Tensor{mask, linear.rows.scaled(linear.in_features), DType::kBool, false});
    node.outputs.push_back(dropped);
    node.outputs.push_back(mask);
    node.saves.push_back({dropped, SaveWhen::kParamGrad});
    // native_dropout keeps its mask for dx only: when x requires grad.
    node.saves.push_back({mask, SaveWhen::kInputGrad});
  }
  const SizeExpr adapter_flops = linear.rows.scaled(2 * r * (linear.in_features + linear.out_features));
  node.fwd_flops += adapter_flops;
  node.bwd_input_flops += adapter_flops;
  // The node now trains (its adapters), but a frozen base weight still gets no
  // dW = dY^T X: only the adapters' weight gradients are computed.
  node.bwd_param_flops = frozen_base ? adapter_flops : node.bwd_param_flops + adapter_flops;
  if (lora.dora) add_dora(graph, node, r, dora_options(settings, lora, dtype));
}

}  // namespace

// QLoRA: the frozen base weight becomes NF4 with double-quantized constants
// (first level: one 8-bit absmax per 64 weights; second level: one fp32 per 256
// of those). bitsandbytes dequantizes the whole weight to the compute dtype for
// each matmul, forward and backward: a transient of in*out elements.
// Beside the packed weight, bitsandbytes' QuantState keeps on the device
// (bitsandbytes/functional.py quantize_4bit): absmax; its own copy of the NF4
// code book (get_4bit_type, 16 fp32); and with compress_statistics the fp32
// absmax of the absmax, their mean (`offset`, a 0-dim tensor) and a copy of the
// 256-entry dynamic map (quantize_blockwise, code.to(A.device, copy=True)).
// Named as its state dict names them (offset is a JSON field there).
void quantize_linear(Node& node, bool double_quant) {
  for (Param& param : node.params) {
    if (param.name != node.name + ".weight" || param.trainable) continue;
    const int64_t elements = param.elements();
    const std::string name = param.name;
    param.dtype = DType::kNF4;
    const int64_t absmax = (elements + kNf4BlockSize - 1) / kNf4BlockSize;
    const int64_t nested = (absmax + kNf4SecondLevelBlockSize - 1) / kNf4SecondLevelBlockSize;
    // push_back may reallocate node.params: `param` is not used past this point.
    node.params.push_back(Param{name + ".absmax", {absmax}, double_quant ? DType::kUInt8 : DType::kF32, false, ""});
    node.params.push_back(Param{name + ".quant_map", {kNf4Values}, DType::kF32, false, ""});
    if (double_quant) {
      node.params.push_back(Param{name + ".nested_absmax", {nested}, DType::kF32, false, ""});
      node.params.push_back(Param{name + ".nested_quant_map", {kDynamicMapValues}, DType::kF32, false, ""});
      node.params.push_back(Param{name + ".nested_offset", {1}, DType::kF32, false, ""});
    }
    node.workspace_elements += SizeExpr::constant(node.linear->in_features * node.linear->out_features);
    return;
  }
}

namespace {

// Which parameters train: the --train patterns' modules beside adapters, every
// parameter not frozen by pattern otherwise.
void mark_trainable(LayerGraph& graph, const RunSettings& settings, bool adapters) {
  for (Node& node : graph.nodes) {
    for (Param& param : node.params) {
      if (param.buffer) continue;  // BatchNorm statistics: never trained
      if (adapters) {
        param.trainable = any_name_matches(settings.train_patterns, node.name);
      } else {
        param.trainable = !any_name_matches(settings.freeze_patterns, node.name) &&
                          !any_name_matches(settings.freeze_patterns, param.name);
      }
    }
  }
}

void quantize_base_weight(LayerGraph& graph, Node& node, const RunSettings& settings) {
  if (settings.quant == QuantFormat::kGptq) {
    quantize_linear_gptq(graph, node, settings.gptq_group_size);
  } else {
    quantize_linear(node, settings.nf4_double_quant);
  }
}

// How many linears took the main adapter and each scoped one.
struct AdapterCounts {
  int adapted = 0;
  std::vector<int> scoped;
};

// Linears transformers' 4-bit quantizer leaves as they are because the model keeps
// them in fp32 (get_modules_to_not_convert adds _keep_in_fp32_modules; quantizers/base.py
// 5.23.0): T5PreTrainedModel._keep_in_fp32_modules = ["wo"] (modeling_t5.py), the
// feed-forward's output projection, which stays in the load dtype (bf16; fp32 under fp16).
bool kept_out_of_4_bit(const LayerGraph& graph, const Node& node) {
  return graph.family == "t5" && node.name.ends_with(".DenseReluDense.wo");
}

// Quantizes (QLoRA) and adapts every linear the settings name; `targets` are the main adapter's.
AdapterCounts adapt_linears(LayerGraph& graph, const RunSettings& settings, const std::vector<std::string>& targets,
                            DType adapter_dtype) {
  AdapterCounts counts;
  counts.scoped.assign(settings.scoped_lora.size(), 0);
  for (Node& node : graph.nodes) {
    if (node.op != graph::op::kLinear || !node.linear) continue;
    if (settings.mode == TrainMode::kQlora && !any_name_matches(settings.quantize_skip, node.name) &&
        !any_name_matches(settings.train_patterns, node.name) && !kept_out_of_4_bit(graph, node)) {
      quantize_base_weight(graph, node, settings);
    }
    if (any_name_matches(settings.train_patterns, node.name)) continue;
    // A scoped adapter (its own rank in one part of the model) wins over the main one.
    const auto scope = std::find_if(settings.scoped_lora.begin(), settings.scoped_lora.end(),
                                    [&](const ScopedLora& l) { return name_matches(l.scope, node.name); });
    if (scope != settings.scoped_lora.end()) {
      if (scope->lora.targets.empty() || is_lora_target(scope->lora.targets, node.name)) {
        add_lora(graph, node, scope->lora, adapter_dtype, settings);
        ++counts.scoped[scope - settings.scoped_lora.begin()];
      }
      continue;
    }
    if (is_lora_target(targets, node.name) && !any_name_matches(settings.lora_skip, node.name)) {
      add_lora(graph, node, settings.lora, adapter_dtype, settings);
      ++counts.adapted;
    }
  }
  return counts;
}

// An adapter, main or scoped, that matched no linear is a mistake in the settings.
Status check_every_adapter_placed(const RunSettings& settings, const std::vector<std::string>& targets,
                                  const AdapterCounts& counts) {
  for (size_t i = 0; i < settings.scoped_lora.size(); ++i) {
    if (counts.scoped[i] == 0) {
      return Status::invalid_input(
          settings.model + ": scoped_lora[" + std::to_string(i) +
          "]: no linear module matches scope " + settings.scoped_lora[i].scope +
          (settings.scoped_lora[i].lora.targets.empty() ? "" : " and its targets") +
          " (expected a glob over the model's module names, such as *vision_tower*)");
    }
  }
  if (counts.adapted == 0) {
    std::string listed;
    for (const std::string& target : targets) listed += (listed.empty() ? "" : ", ") + target;
    return Status::invalid_input(settings.model + ": lora.targets: no linear module matches [" +
                                 listed + "] (expected module-name suffixes such as q_proj, or all-linear)");
  }
  return Status::ok();
}

}  // namespace

Result<LayerGraph> apply_training_mode(const LayerGraph& input, const RunSettings& settings) {
  LayerGraph graph = input;
  const bool adapters = settings.mode != TrainMode::kFull;
  mark_trainable(graph, settings, adapters);
  if (!adapters) {
    if (graph.trainable_parameter_count() == 0) {
      return Status::invalid_input(
          settings.model + ": freeze_patterns: every parameter is frozen; nothing would train");
    }
    return graph;
  }
  const std::vector<std::string>& named = settings.lora.targets.empty() ? graph.lora_targets : settings.lora.targets;
  Result<ConvertedTargets> moe = convert_moe_targets(graph, named, settings.model);
  if (!moe.is_ok()) return moe.status();
  const std::vector<std::string> targets = moe.value().converted ? moe.value().modules
                                           : is_all_linear(named) ? all_linear_modules(graph)
                                                                  : with_release_aliases(graph.family, named);
  // The top of the band: fp32 adapters unless the stack or the user says otherwise.
  const DType adapter_dtype =
      resolve_stack(settings).top.adapter_dtype == AdapterDtype::kFp32 ? DType::kF32 : DType::kBF16;
  AdapterCounts counts = adapt_linears(graph, settings, targets, adapter_dtype);
  Result<int> wrapped = wrap_moe_parameters(graph, moe.value(), settings, adapter_dtype);
  if (!wrapped.is_ok()) return wrapped.status();
  counts.adapted += wrapped.value();
  if (Status placed = check_every_adapter_placed(settings, named, counts); !placed.is_ok()) return placed;
  return graph;
}

bool is_quantization_constant(const Param& param) {
  for (const char* suffix : {".absmax", ".quant_map", ".nested_absmax", ".nested_quant_map", ".nested_offset"}) {
    if (param.name.ends_with(suffix)) return true;
  }
  return !param.trainable && param.buffer && is_gptq_constant(param);
}

bool is_lora_adapter(const Param& param) {
  return param.name.ends_with(".lora_A.weight") || param.name.ends_with(".lora_B.weight");
}

}  // namespace headroom::planner
