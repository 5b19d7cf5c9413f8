#include "planner/mechanisms/selective_checkpoint.h"

#include <algorithm>

#include "graph/op_traits.h"

namespace headroom::planner {
namespace {

bool has_bias(const graph::Node& node) {
  return std::any_of(node.params.begin(), node.params.end(),
                     [](const graph::Param& p) { return p.name.ends_with(".bias"); });
}

}  // namespace

std::vector<std::vector<int>> selective_op_saves(const graph::LayerGraph& graph,
                                                 const graph::GraphAnalysis& analysis) {
  std::vector<std::vector<int>> out(analysis.blocks.size());
  for (size_t b = 0; b < analysis.blocks.size(); ++b) {
    // The mm count follows the module's Python order, which is the order the
    // graph builders create nodes in (q, k, v, o, gate, up, down), not the
    // topological order (q, k and v are independent of each other).
    std::vector<int> nodes = analysis.blocks[b].nodes;
    std::sort(nodes.begin(), nodes.end());
    int mm_count = 0;
    for (int n : nodes) {
      const graph::Node& node = graph.nodes[n];
      const std::vector<int>& outputs = analysis.node_outputs[n];
      if (node.op == graph::op::kLinear && !has_bias(node)) {
        ++mm_count;
        // The policy recomputes every second mm. Only the linear's own output:
        // a folded LoRA adapter's intermediate is not an mm output of the base.
        if (mm_count % 2 == 1 && !outputs.empty() && !analysis.persistent[outputs[0]]) {
          out[b].push_back(outputs[0]);
        }
      } else if (node.op == graph::op::kAttention || node.op == graph::op::kFlexAttention) {
        // (flash-attn's Triton kernel is an autograd.Function, not an op the policy names.)
        for (int t : outputs) {
          if (!analysis.persistent[t]) out[b].push_back(t);
        }
      }
    }
  }
  return out;
}

}  // namespace headroom::planner
