#include "planner/mechanisms/bnb_matmul4bit.h"

#include <algorithm>
#include <string>

#include "graph/op_traits.h"
#include "planner/mechanisms/trainability.h"

namespace headroom::planner {
namespace {

using graph::DType;

bool is_four_bit_linear(const graph::Node& node) {
  if (node.op != graph::op::kLinear || !node.linear) return false;
  return std::any_of(node.params.begin(), node.params.end(), [&](const graph::Param& param) {
    return param.name == node.name + ".weight" && (param.dtype == DType::kNF4 || param.dtype == DType::kFP4);
  });
}

// The fp32 tensor autocast's cast "<node>.cast:<x>" in front of the node was made from, or
// empty when the node is fed 16 bits (mechanisms/autocast.cc cast_16_bit_op_inputs).
std::string fp32_input(const graph::Node& node) {
  const std::string prefix = node.name + ".cast:";
  const std::string& input = node.inputs.front();
  return input.starts_with(prefix) ? input.substr(prefix.size()) : std::string();
}

// The tensor MatMul4Bit is given: the node's input, or under fp32 compute the fp32 tensor
// itself (bitsandbytes 0.46.1 Linear4bit.forward: x.to(self.compute_dtype) is no copy once
// the compute dtype is x's; F.linear's autocast makes the 16-bit copy inside
// MatMul4Bit.forward, where nothing keeps it).
std::string matmul_input(const graph::Node& node, const BnbMatmul4bit& bnb) {
  const std::string fp32 = fp32_input(node);
  return bnb.fp32_compute && !fp32.empty() ? fp32 : node.inputs.front();
}

bool reads(const graph::Node& node, const std::string& tensor) {
  return std::find(node.inputs.begin(), node.inputs.end(), tensor) != node.inputs.end();
}

void save_once(graph::Node& node, const std::string& tensor) {
  const bool saved = std::any_of(node.saves.begin(), node.saves.end(), [&](const graph::SavedRef& ref) {
    return ref.tensor == tensor && ref.when == graph::SaveWhen::kInputGrad;
  });
  if (!saved) node.saves.push_back({tensor, graph::SaveWhen::kInputGrad});
}

// Whether the forward's gemm_4bit runs the fused kernel for `node` (bitsandbytes 0.50.2
// backends/cuda/ops.py: M = A.numel() // K, N = shapeB[0], the out_features; the NF4
// blocksize is 64). M is the node's rows at the run's micro-batch and sequence.
bool forward_fused(const graph::Node& node, const BnbMatmul4bit& bnb) {
  if (!bnb.gemm_dispatch) return false;
  const BnbMatmul4bit::GemmDispatch& dispatch = *bnb.gemm_dispatch;
  const std::optional<int64_t> m = node.linear->rows.eval(dispatch.micro_batch, dispatch.seq);
  if (!m) return false;
  const GemmShape shape{*m, node.linear->out_features, node.linear->in_features, kNf4BlockSize};
  return bnb_gemm_4bit_fused(dispatch.arch, bnb.compute_dtype, shape);
}

// The fused kernel allocates only its output: the forward holds no dequantized weight
// (quantize_linear's in x out). Backward still has it: MatMul4Bit.backward computes
// grad_A from F.dequantize_4bit(B, ctx.state) in every release, 0.50.2 included.
void drop_forward_dequantized_weight(graph::Node& node) {
  if (!node.bwd_workspace_elements) node.bwd_workspace_elements = node.workspace_elements;
  node.workspace_elements += graph::SizeExpr::constant(-node.linear->in_features * node.linear->out_features);
}

// The fp32 absmax values of a double-quantized weight (one per 64 weights), or 0 when its
// absmax is not nested (quantize_linear's ".nested_absmax" beside ".absmax").
int64_t nested_absmax_values(const graph::Node& node) {
  int64_t absmax = 0;
  bool nested = false;
  for (const graph::Param& param : node.params) {
    if (param.name == node.name + ".weight.absmax") absmax = param.elements();
    if (param.name == node.name + ".weight.nested_absmax") nested = true;
  }
  return nested ? absmax : 0;
}

// bitsandbytes 0.50.2 backends/cuda/ops.py _dequant_linear_fallback, for a nested quant
// state: absmax_dq = torch.empty_like(absmax_8bit, dtype=torch.float32), then
// absmax = absmax_dq + absmax_offset, two fp32 copies held (locals) through the dequantize
// and F.linear's output. Priced in the node's workspace elements of the compute dtype.
void add_fallback_absmax(graph::Node& node, graph::DType compute) {
  const int64_t bytes = 2 * 4 * nested_absmax_values(node);
  if (bytes == 0) return;
  if (!node.bwd_workspace_elements) node.bwd_workspace_elements = node.workspace_elements;
  node.workspace_elements += graph::SizeExpr::constant(bytes / graph::dtype_bytes(compute, 1));
}

}  // namespace

// bitsandbytes 0.43.1 autograd/_functions.py MatMul4Bit.forward keeps
// ctx.tensors = (A, B) when A or B needs grad (B never does: a frozen uint8
// Params4bit), so A lives until backward: saved when the node's input requires grad.
// Up to 0.46.1, fed fp32 with 16-bit weights, MatMul4Bit.forward runs
// F.linear(A, dequantize_4bit(B).to(A.dtype).t()): the 16-bit dequantized weight, its
// fp32 copy beside it, then autocast's 16-bit copy of that beside the fp32 one: three
// 16-bit weights of scratch where 0.47 has one (forward only: backward dequantizes to
// grad_output's 16 bits in every release).
void apply_bnb_matmul4bit(graph::LayerGraph& graph, const BnbMatmul4bit& bnb) {
  for (graph::Node& node : graph.nodes) {
    if (!is_four_bit_linear(node)) continue;
    const bool fed_fp32 = !fp32_input(node).empty();
    const std::string input = matmul_input(node, bnb);
    if (bnb.keeps_input) {
      if (!reads(node, input)) node.inputs.push_back(input);  // a node saves only what it reads
      save_once(node, input);
    }
    if (fed_fp32 && bnb.fp32_compute && bnb.sixteen_bit_weights) {
      if (!node.bwd_workspace_elements) node.bwd_workspace_elements = node.workspace_elements;
      node.workspace_elements += graph::SizeExpr::constant(2 * node.linear->in_features * node.linear->out_features);
    }
    if (forward_fused(node, bnb)) {
      drop_forward_dequantized_weight(node);
    } else if (bnb.gemm_4bit_op) {
      add_fallback_absmax(node, bnb.compute_dtype);
    }
  }
}

void hold_bnb_inputs(const graph::LayerGraph& graph, const graph::GraphAnalysis& analysis, const BnbMatmul4bit& bnb,
                     std::vector<std::vector<int>>& checkpoint_saves) {
  if (!bnb.keeps_input) return;
  checkpoint_saves.resize(graph.blocks.size());
  for (size_t n = 0; n < graph.nodes.size(); ++n) {
    const graph::Node& node = graph.nodes[n];
    if (!is_four_bit_linear(node)) continue;
    const int t = graph::tensor_index(graph, matmul_input(node, bnb));
    const std::vector<int>& saved = analysis.node_saves[n];
    std::vector<int>& held = checkpoint_saves[node.block];
    // MatMul4Bit sets ctx.tensors = (None, None) when A needs no grad; a LoRA adapter
    // beside it saves the same input for its own weight's gradient, which the node's
    // saves show, but that save is the checkpoint's (the first layer's q/k/v_proj,
    // fed a frozen norm of frozen embeddings).
    if (!analysis.requires_grad[static_cast<size_t>(t)]) continue;
    if (std::find(saved.begin(), saved.end(), t) == saved.end()) continue;  // its input needs no grad
    if (std::find(held.begin(), held.end(), t) == held.end()) held.push_back(t);
  }
}

}  // namespace headroom::planner
