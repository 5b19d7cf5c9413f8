#include "planner/mechanisms/dora.h"

#include <optional>
#include <string>
#include <vector>

#include "planner/settings/stack_choices.h"

namespace headroom::planner {
namespace {

using graph::DType;
using graph::Node;
using graph::Param;
using graph::SaveWhen;
using graph::SizeExpr;
using graph::Tensor;

constexpr const char* kSetupSuffix = ".dora_setup.";

// A non-persistent buffer named "<node>.dora_setup.<what>", published in bf16 so that
// the run's precision gives it the load dtype (param_storage_bytes): update_layer
// takes the norm on the base weight in the dtype the model was loaded in, before
// the adapters are cast to fp32.
Param setup_tensor(const Node& node, const std::string& what, std::vector<int64_t> shape) {
  Param param{node.name + kSetupSuffix + what, std::move(shape), DType::kBF16, false, ""};
  param.buffer = true;
  param.persistent = false;
  return param;
}

// PEFT's update_layer: get_weight_norm(W, B @ A, scaling) with A and B requiring grad;
// the norm's graph keeps the sum W + s·BA and the norm, the matmul A and B.
void add_setup_graph(Node& node, int64_t rank) {
  const int64_t in = node.linear->in_features;
  const int64_t out = node.linear->out_features;
  node.params.push_back(setup_tensor(node, "weight_sum", {out, in}));
  node.params.push_back(setup_tensor(node, "norm", {out}));
  node.params.push_back(setup_tensor(node, "lora_A", {rank, in}));
  node.params.push_back(setup_tensor(node, "lora_B", {out, rank}));
}

// A tensor the DoRA forward makes and keeps for backward.
void keep(graph::LayerGraph& graph, Node& node, const std::string& what, SizeExpr elements,
          std::optional<DType> dtype) {
  const std::string name = node.name + ".dora_" + what;
  graph.tensors.push_back(Tensor{name, std::move(elements), dtype, false});
  node.outputs.push_back(name);
  node.saves.push_back({name, SaveWhen::kAnyGrad});
}

}  // namespace

void add_dora(graph::LayerGraph& graph, Node& node, int64_t rank, const DoraOptions& options) {
  const graph::LinearInfo& linear = *node.linear;
  const int64_t in = linear.in_features;
  const int64_t out = linear.out_features;
  // PEFT's lora_magnitude_vector (update_layer's nn.Parameter(weight_norm), cast with
  // the adapters: fp32 under get_peft_model's autocast_adapter_dtype), torchtune's magnitude.
  Param magnitude{node.name + ".lora_magnitude_vector.weight", {out}, options.adapter_dtype, true, ""};
  magnitude.upcast_fp32 = options.adapter_dtype == DType::kF32;  // fp32 under pure bf16 too
  node.params.push_back(magnitude);
  if (options.peft) add_setup_graph(node, rank);
  // forward: (m / ||W + s·BA||) - 1 times the base output, plus the scale times
  // B(A(x)); the muls keep both [rows, out] products' other operands and the scale;
  // the division keeps the detached norm; the subtraction's result is kept by its
  // mul. PEFT's are fp32 (the fp32 magnitude over the fp32 norm), torchtune's in
  // its adapters' dtype.
  const DType small = options.peft ? DType::kF32 : options.adapter_dtype;
  keep(graph, node, "base_result", linear.rows.scaled(out), std::nullopt);
  keep(graph, node, "lora_result", linear.rows.scaled(out), std::nullopt);
  keep(graph, node, "scale", SizeExpr::constant(out), small);
  keep(graph, node, "norm", SizeExpr::constant(out), small);
  keep(graph, node, "scale_minus_one", SizeExpr::constant(out), small);
  // get_lora_weight: B(A(I_in)), an [in, in] identity through both adapters, each step.
  SizeExpr flops = SizeExpr::constant(2 * rank * in * (in + out));
  if (options.peft && options.dropout > 0) {
    // With dropout active PEFT passes no base_result: F.linear(dropout(x), W) again,
    // forward and its input gradient; the matmul keeps the weight it read.
    if (options.weight_copy) keep(graph, node, "weight_copy", SizeExpr::constant(out * in), std::nullopt);
    flops += linear.rows.scaled(2 * in * out);
    node.bwd_input_flops += linear.rows.scaled(2 * in * out);
  }
  node.fwd_flops += flops;
}

bool dora_weight_copy(const RunSettings& settings, DType adapter_dtype) {
  if (settings.mode == TrainMode::kQlora) return true;  // dequantize_module_weight: a new 16-bit weight
  // AMP over fp32 weights: autocast's cast of the frozen weight is not cached (only
  // leaves that require grad are), so F.linear reads and keeps a fresh 16-bit copy.
  if (is_autocast(settings.precision)) return true;
  // fp32 adapters under a 16-bit model: x goes to fp32, W.to(fp32), and autocast
  // casts both back to 16 bits for the matmul: a fresh 16-bit W.
  return adapter_dtype == DType::kF32 && settings.precision != Precision::kFp32;
}

DoraOptions dora_options(const RunSettings& settings, const LoraSettings& lora, DType adapter_dtype) {
  DoraOptions options;
  options.adapter_dtype = adapter_dtype;
  options.dropout = lora.dropout;
  options.peft = settings.stack != Stack::kTorchtune;
  options.weight_copy = dora_weight_copy(settings, adapter_dtype);
  return options;
}

bool is_dora_setup_tensor(const Param& param) {
  return param.buffer && !param.persistent && param.name.find(kSetupSuffix) != std::string::npos;
}

}  // namespace headroom::planner
