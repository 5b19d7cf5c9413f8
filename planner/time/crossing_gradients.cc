#include "planner/time/crossing_gradients.h"

#include <algorithm>

namespace headroom::planner {

std::vector<int64_t> crossing_gradients(const graph::LayerGraph& graph, const graph::GraphAnalysis& analysis,
                                        const std::vector<int64_t>& tensor_bytes) {
  std::vector<int64_t> bytes(graph.blocks.size(), 0);
  for (size_t t = 0; t < graph.tensors.size(); ++t) {
    const int producer = analysis.producer[t];
    if (producer < 0 || !analysis.persistent[t] || !analysis.requires_grad[t]) continue;
    const int made_in = graph.nodes[static_cast<size_t>(producer)].block;
    int last = made_in;
    for (int consumer : analysis.consumers[t]) last = std::max(last, graph.nodes[static_cast<size_t>(consumer)].block);
    for (int b = made_in + 1; b < last; ++b) bytes[static_cast<size_t>(b)] += tensor_bytes[t];
  }
  return bytes;
}

}  // namespace headroom::planner
