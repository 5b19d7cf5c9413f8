#include "planner/mechanisms/preference_pairs.h"

namespace headroom::planner {
namespace {

// The terms in B (B, B*S, B*S^2) grow with the rows; the others do not.
void pair_rows(graph::SizeExpr& size) {
  size.b *= kDpoRowsPerPair;
  size.bs *= kDpoRowsPerPair;
  size.bss *= kDpoRowsPerPair;
}

}  // namespace

void apply_preference_pairs(graph::LayerGraph& graph) {
  for (graph::Tensor& tensor : graph.tensors) pair_rows(tensor.elements);
  for (graph::Node& node : graph.nodes) {
    if (node.linear) pair_rows(node.linear->rows);
    for (graph::SizeExpr* size : {&node.fwd_flops, &node.bwd_input_flops, &node.bwd_param_flops,
                                  &node.fwd_io_elements, &node.fwd_io_f32_elements, &node.workspace_elements}) {
      pair_rows(*size);
    }
    if (node.bwd_workspace_elements) pair_rows(*node.bwd_workspace_elements);
  }
}

}  // namespace headroom::planner
