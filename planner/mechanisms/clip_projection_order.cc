#include "planner/mechanisms/clip_projection_order.h"

#include <string>

#include "planner/mechanisms/graph_edits.h"

namespace headroom::planner {

bool apply_clip_projection_in_tower(graph::LayerGraph& graph) {
  graph::Node* projection = node_named(graph, "visual_projection");
  if (projection == nullptr || projection->inputs.empty()) return false;
  const std::string& pooled = projection->inputs.front();
  for (const graph::Node& node : graph.nodes) {
    for (const std::string& out : node.outputs) {
      if (out != pooled) continue;
      if (node.block == projection->block) return false;
      // The analysis orders nodes by block, keeping their order inside one
      // (graph/graph_analysis.cc execution_order): the projection follows its input.
      projection->block = node.block;
      return true;
    }
  }
  return false;
}

}  // namespace headroom::planner
