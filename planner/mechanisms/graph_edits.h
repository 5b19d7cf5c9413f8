// Small edits the mechanisms make to a graph they rewrite: a node found by name for
// changing it (LayerGraph::find_node gives a const one), a saved tensor taken off a node.
#pragma once

#include <string>

#include "graph/layer_graph.h"

namespace headroom::planner {

// The node called `name` in `graph`, or null.
inline graph::Node* node_named(graph::LayerGraph& graph, const std::string& name) {
  for (graph::Node& node : graph.nodes) {
    if (node.name == name) return &node;
  }
  return nullptr;
}

// `node` no longer keeps `tensor` for backward.
inline void drop_save(graph::Node& node, const std::string& tensor) {
  std::erase_if(node.saves, [&](const graph::SavedRef& saved) { return saved.tensor == tensor; });
}

}  // namespace headroom::planner
