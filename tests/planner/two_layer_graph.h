// Test support for the FSDP1 suites: a graph whose FlatParameters are padded on
// 8 ranks, and memory_allocated's rounding.
#pragma once

#include <cstdint>
#include <string>

#include "graph/layer_graph.h"
#include "planner/settings/run_settings.h"

namespace headroom::planner {

inline int64_t rounded(int64_t bytes) { return (bytes + 511) / 512 * 512; }  // memory_allocated's 512 B

// An embedding block (the root unit) and two layers of an odd size, so that
// every FlatParameter is padded to a multiple of 8 ranks.
inline graph::LayerGraph two_layers() {
  graph::LayerGraph graph;
  graph.name = "two-layers";
  graph.blocks = {{"embeddings", "embedding", false}, {"a", "dense", true}, {"b", "dense", true}};
  const int64_t sizes[] = {1'001, 1'000'000'003, 1'000'000'003};
  for (int b = 0; b < 3; ++b) {
    graph::Node node;
    node.name = "w" + std::to_string(b);
    node.op = "linear";
    node.block = b;
    node.params.push_back({node.name + ".weight", {sizes[b]}, graph::DType::kBF16, true, ""});
    graph.nodes.push_back(node);
  }
  return graph;
}

// One 4096 x 4096 bf16 linear "w" in one layer: what QLoRA quantizes.
inline graph::LayerGraph one_linear() {
  graph::LayerGraph graph;
  graph.name = "one-linear";
  graph.blocks = {{"layer", "dense", true}};
  graph::Node node;
  node.name = "w";
  node.op = "linear";
  node.params.push_back({"w.weight", {4096, 4096}, graph::DType::kBF16, true, ""});
  node.linear = graph::LinearInfo{4096, 4096, graph::SizeExpr::per_token(1)};
  graph.nodes.push_back(node);
  return graph;
}

// QLoRA with an adapter on one_linear()'s "w".
inline RunSettings qlora_on_one_linear() {
  RunSettings settings;
  settings.model = "one-linear";
  settings.mode = TrainMode::kQlora;
  settings.lora.targets = {"w"};
  return settings;
}

}  // namespace headroom::planner
