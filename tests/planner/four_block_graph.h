// Test support for the DeepSpeed suites: embeddings, two layers and a head, each one
// bf16 linear "<block>.w".
#pragma once

#include <cstdint>
#include <functional>

#include "graph/layer_graph.h"

namespace headroom::planner {

// Block b's weight has weight(b) elements and trains when `trains`; `extra` adds what
// a suite needs beside it (an adapter on the layers, the head's norm).
inline graph::LayerGraph four_blocks(const std::function<int64_t(int)>& weight, bool trains,
                                     const std::function<void(graph::Node&, int)>& extra = {}) {
  graph::LayerGraph graph;
  graph.blocks = {{"embeddings", "embedding", false},
                  {"layers.0", "dense", true},
                  {"layers.1", "dense", true},
                  {"head", "lm_head", false}};
  for (int b = 0; b < 4; ++b) {
    graph::Node node;
    node.name = graph.blocks[b].name + ".w";
    node.op = "linear";
    node.block = b;
    node.params.push_back({node.name + ".weight", {weight(b)}, graph::DType::kBF16, trains, ""});
    if (extra) extra(node, b);
    graph.nodes.push_back(node);
  }
  return graph;
}

}  // namespace headroom::planner
