// convert_outputs_to_fp32 at the forward's end (planner/mechanisms/output_fp32_copies.h).
#include "planner/mechanisms/output_fp32_copies.h"

#include <string>
#include <vector>

#include "graph/op_traits.h"

namespace headroom::planner {
namespace {

bool sixteen_bit(graph::DType dtype) { return dtype == graph::DType::kBF16 || dtype == graph::DType::kF16; }

}  // namespace

bool accelerate_copies_outputs(const RunSettings& settings, const StackSpec& top) {
  const bool through_accelerate = settings.stack == Stack::kHfTrainer || settings.stack == Stack::kUnspecified;
  return through_accelerate && top.autocast && settings.precision != Precision::kFp32;
}

int apply_output_fp32_copies(graph::LayerGraph& graph, graph::DType compute) {
  int added = 0;
  std::vector<graph::Tensor> copies;
  for (graph::Node& node : graph.nodes) {
    if (node.op != graph::op::kModelOutput) continue;
    for (const std::string& held : node.holds) {
      const graph::Tensor* tensor = graph.find_tensor(held);
      if (tensor == nullptr || !sixteen_bit(tensor->dtype.value_or(compute))) continue;
      // recursively_apply(_convert_to_fp32, ...): `tensor.float()`, a new fp32 tensor
      // the caller drops with the output (nothing reads it in the step).
      graph::Tensor copy;
      copy.name = held + ".float";
      copy.elements = tensor->elements;
      copy.dtype = graph::DType::kF32;
      copy.min_seq = tensor->min_seq;
      node.outputs.push_back(copy.name);
      copies.push_back(copy);
      ++added;
    }
  }
  graph.tensors.insert(graph.tensors.end(), copies.begin(), copies.end());
  return added;
}

}  // namespace headroom::planner
