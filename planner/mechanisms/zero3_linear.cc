#include "planner/mechanisms/zero3_linear.h"

#include <algorithm>

#include "graph/op_traits.h"

namespace headroom::planner {

int apply_zero3_linear(graph::LayerGraph& graph) {
  int changed = 0;
  for (graph::Node& node : graph.nodes) {
    if (node.op != graph::op::kLinear || !node.linear || node.inputs.empty()) continue;
    const std::string& x = node.inputs.front();
    const auto saved = std::find_if(node.saves.begin(), node.saves.end(),
                                    [&](const graph::SavedRef& ref) { return ref.tensor == x; });
    const bool trains = std::any_of(node.params.begin(), node.params.end(),
                                    [](const graph::Param& p) { return p.trainable && p.tied_to.empty(); });
    if (saved == node.saves.end()) {
      // A frozen base under LoRA with dropout: torch's linear kept nothing of x.
      node.saves.push_back({x, graph::SaveWhen::kInputGrad});
      ++changed;
    } else if (saved->when == graph::SaveWhen::kParamGrad && !trains) {
      saved->when = graph::SaveWhen::kAnyGrad;  // the Function exists only when x requires grad
      ++changed;
    }
  }
  return changed;
}

}  // namespace headroom::planner
