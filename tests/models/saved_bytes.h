// Test helper: bytes a block keeps for backward, read directly off node.saves
// with every save condition active (everything trainable), each tensor once.
#pragma once

#include <cstdint>
#include <set>
#include <string>

#include "graph/dtype.h"
#include "graph/layer_graph.h"

namespace headroom::models::testing {

inline int block_index(const graph::LayerGraph& g, const std::string& name) {
  for (size_t i = 0; i < g.blocks.size(); ++i) {
    if (g.blocks[i].name == name) return static_cast<int>(i);
  }
  return -1;
}

// Saved bytes of the nodes `keeps` accepts at (batch, seq), unset dtypes as bf16.
template <typename NodeFilter>
int64_t saved_bytes_of(const graph::LayerGraph& g, NodeFilter keeps, int64_t batch, int64_t seq) {
  std::set<std::string> seen;
  int64_t total = 0;
  for (const graph::Node& node : g.nodes) {
    if (!keeps(node)) continue;
    for (const graph::SavedRef& saved : node.saves) {
      if (!seen.insert(saved.tensor).second) continue;
      const graph::Tensor* t = g.find_tensor(saved.tensor);
      total += graph::dtype_bytes(t->dtype.value_or(graph::DType::kBF16), t->elements.at(batch, seq));
    }
  }
  return total;
}

// Saved bytes of block `block` at (batch, seq), unset dtypes as bf16.
inline int64_t saved_bytes(const graph::LayerGraph& g, int block, int64_t batch, int64_t seq) {
  return saved_bytes_of(g, [block](const graph::Node& node) { return node.block == block; }, batch, seq);
}

// Saved bytes of the nodes whose names start with `prefix` (one layer's attention).
inline int64_t saved_bytes_under(const graph::LayerGraph& g, const std::string& prefix, int64_t batch, int64_t seq) {
  return saved_bytes_of(g, [&prefix](const graph::Node& node) { return node.name.starts_with(prefix); }, batch, seq);
}

// The symbolic sum of saved elements of one block (all dtypes counted alike).
inline graph::SizeExpr saved_elements(const graph::LayerGraph& g, int block) {
  std::set<std::string> seen;
  graph::SizeExpr total;
  for (const graph::Node& node : g.nodes) {
    if (node.block != block) continue;
    for (const graph::SavedRef& saved : node.saves) {
      if (seen.insert(saved.tensor).second) total += g.find_tensor(saved.tensor)->elements;
    }
  }
  return total;
}

}  // namespace headroom::models::testing
