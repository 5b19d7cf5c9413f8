#include "planner/mechanisms/float8_linear.h"

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "graph/op_traits.h"
#include "planner/mechanisms/autocast.h"

namespace headroom::planner {
namespace {

using graph::DType;

// torch._scaled_mm needs both GEMM dimensions of the weight to be multiples of
// 16; torchtitan's module_filter_fn (components/quantization/utils.py at
// e7c0cae) skips the linears whose weight is not.
constexpr int64_t kFp8GemmMultiple = 16;

const graph::Param* linear_weight(const graph::Node& node) {
  for (const graph::Param& param : node.params) {
    if (param.name == node.name + ".weight") return &param;
  }
  return nullptr;
}

bool converts(const graph::LayerGraph& graph, const graph::Node& node) {
  if (node.op != graph::op::kLinear || !node.linear || node.inputs.empty()) return false;
  if (!graph.blocks[node.block].checkpointable) return false;  // embeddings, the output head, the loss
  if (linear_weight(node) == nullptr) return false;
  return node.linear->in_features % kFp8GemmMultiple == 0 && node.linear->out_features % kFp8GemmMultiple == 0;
}

// A cast to fp8 reads its 16-bit source twice (the amax reduction, then the
// scaled cast: hp_tensor_to_float8_dynamic, float8_scaling_utils.py) and writes
// one byte per element: its traffic in elements of the compute dtype, rounded up.
graph::SizeExpr cast_io_elements(const graph::SizeExpr& elements, DType compute) {
  const int64_t width = graph::dtype_bits(compute) / 8;
  return elements.scaled(2 * width + 1).divided_up(width);
}

void add_fp8_cast(std::vector<graph::Node>& nodes, std::vector<graph::Tensor>& tensors, const std::string& name,
                  int block, std::vector<std::string> inputs, const graph::SizeExpr& elements, DType compute) {
  add_cast_node(nodes, tensors, name, block, std::move(inputs), elements, DType::kF8E4M3,
                cast_io_elements(elements, compute));
}

}  // namespace

bool is_float8_linear(const graph::Node& node) {
  return std::find(node.inputs.begin(), node.inputs.end(), node.name + ".input_fp8") != node.inputs.end();
}

void apply_float8_linears(graph::LayerGraph& graph, const Float8Options& options, DType compute) {
  if (options.recipe == Float8Recipe::kNone) return;
  const int64_t width = graph::dtype_bits(compute) / 8;
  std::vector<graph::Node> rewritten;
  std::vector<graph::Tensor> added;
  rewritten.reserve(graph.nodes.size() * 3);
  for (graph::Node node : graph.nodes) {
    if (!converts(graph, node)) {
      rewritten.push_back(std::move(node));
      continue;
    }
    const std::string x = node.inputs.front();
    const std::string input_fp8 = node.name + ".input_fp8";
    add_fp8_cast(rewritten, added, input_fp8, node.block, {x},
                 node.linear->rows.scaled(node.linear->in_features), compute);
    if (options.recipe == Float8Recipe::kTensorwiseFp8Input) {
      // torchao <= 0.8: the fp8 input is what the GEMM keeps for dW, and the
      // 16-bit input is not read again.
      node.inputs.front() = input_fp8;
      for (graph::SavedRef& saved : node.saves) {
        if (saved.tensor == x) saved.tensor = input_fp8;
      }
    } else {
      // torchao >= 0.9 keeps the 16-bit input (saved as before) and casts it
      // again in backward; the forward GEMM reads the fp8 copy.
      node.inputs.push_back(input_fp8);
    }
    if (!options.all_gather) {
      // _cast_weight_to_float8_t: the weight cast anew each forward, kept by the
      // GEMM's autograd function for dX = dY W (grad_input uses weight_fp8_t).
      const std::string weight_fp8 = node.name + ".weight_fp8";
      add_fp8_cast(rewritten, added, weight_fp8, node.block, {},
                   graph::SizeExpr::constant(linear_weight(node)->elements()), compute);
      node.inputs.push_back(weight_fp8);
      node.saves.push_back({weight_fp8, graph::SaveWhen::kInputGrad});
    }
    // Backward casts the output gradient to float8_e5m2 (one byte per element)
    // before both GEMMs; it lives while they run, beside their 16-bit results.
    const graph::SizeExpr grad_fp8 = node.linear->rows.scaled(node.linear->out_features).divided_up(width);
    node.bwd_workspace_elements = node.backward_workspace() + grad_fp8;
    rewritten.push_back(std::move(node));
  }
  graph.nodes = std::move(rewritten);
  graph.tensors.insert(graph.tensors.end(), added.begin(), added.end());
}

double float8_backward_cast_bytes(const graph::Node& node, DType compute, int64_t batch, int64_t seq) {
  if (!is_float8_linear(node)) return 0;
  const double per_element = 2.0 * graph::dtype_bits(compute) / 8.0 + 1.0;
  const double rows = static_cast<double>(node.linear->rows.at(batch, seq));
  double bytes = rows * static_cast<double>(node.linear->out_features) * per_element;
  const bool saved_fp8_input = std::any_of(node.saves.begin(), node.saves.end(), [&](const graph::SavedRef& saved) {
    return saved.tensor == node.name + ".input_fp8";
  });
  if (!saved_fp8_input) bytes += rows * static_cast<double>(node.linear->in_features) * per_element;
  return bytes;
}

}  // namespace headroom::planner
