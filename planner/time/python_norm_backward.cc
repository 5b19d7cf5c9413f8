#include "planner/time/python_norm_backward.h"

#include <algorithm>

#include "graph/op_traits.h"

namespace headroom::planner {

int64_t python_norm_backward_bytes(const graph::LayerGraph& graph, const graph::GraphAnalysis& analysis, int n,
                                   int64_t batch, int64_t seq, Accounting accounting) {
  const graph::Node& node = graph.nodes[static_cast<size_t>(n)];
  if (node.op != graph::op::kNorm || !analysis.needs_input_grad[static_cast<size_t>(n)]) return 0;
  const int x32 = graph::tensor_index(graph, node.name + ":x32");
  if (x32 < 0) return 0;
  const std::vector<int>& saves = analysis.node_saves[static_cast<size_t>(n)];
  const auto saved = [&](int t) { return std::find(saves.begin(), saves.end(), t) != saves.end(); };
  // Over an fp32 input the upcast is x itself, which the norm keeps in its place
  // (mechanisms/autocast.cc drop_aliased_upcasts leaves ":x32" without elements).
  const graph::Tensor& upcast = graph.tensors[static_cast<size_t>(x32)];
  const int input = node.inputs.empty() ? -1 : graph::tensor_index(graph, node.inputs.front());
  const bool aliased = upcast.elements.is_zero() && input >= 0 && saved(input);
  if (!saved(x32) && !aliased) return 0;
  const graph::SizeExpr& elements = aliased ? graph.tensors[static_cast<size_t>(input)].elements : upcast.elements;
  const int64_t one = account(graph::dtype_bytes(graph::DType::kF32, elements.at(batch, seq)), accounting);
  return kPythonNormBackwardF32Tensors * one;
}

}  // namespace headroom::planner
