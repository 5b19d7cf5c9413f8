#include "planner/mechanisms/t5_position_bias.h"

#include <algorithm>
#include <string_view>

namespace headroom::planner {
namespace {

// The name models/t5.cc gives the zeros the first cross-attention makes.
constexpr std::string_view kZeroBias = ".EncDecAttention.zero_bias";

void add_once(std::vector<int>& tensors, int t) {
  if (std::find(tensors.begin(), tensors.end(), t) == tensors.end()) tensors.push_back(t);
}

}  // namespace

int apply_t5_bias_leaves(graph::LayerGraph& graph) {
  int marked = 0;
  for (graph::Tensor& tensor : graph.tensors) {
    if (!tensor.name.ends_with(kZeroBias) || graph.producer_of(tensor.name) < 0) continue;
    tensor.requires_grad = true;
    ++marked;
  }
  return marked;
}

std::vector<int> t5_bias_leaves(const graph::LayerGraph& graph) {
  std::vector<int> leaves;
  for (size_t t = 0; t < graph.tensors.size(); ++t) {
    const graph::Tensor& tensor = graph.tensors[t];
    if (tensor.requires_grad && tensor.name.ends_with(kZeroBias)) leaves.push_back(static_cast<int>(t));
  }
  return leaves;
}

int t5_bias_gradient_block(const graph::LayerGraph& graph, const graph::GraphAnalysis& analysis, int t) {
  int last = -1;
  for (int consumer : analysis.consumers[static_cast<size_t>(t)]) {
    last = std::max(last, graph.nodes[static_cast<size_t>(consumer)].block);
  }
  return last;
}

void hold_t5_bias_leaves(const graph::LayerGraph& graph, const graph::GraphAnalysis& analysis,
                         std::vector<std::vector<int>>& checkpoint_saves,
                         std::vector<std::vector<int>>& through_backward) {
  const std::vector<int> leaves = t5_bias_leaves(graph);
  if (leaves.empty()) return;
  checkpoint_saves.resize(graph.blocks.size());
  through_backward.resize(graph.blocks.size());
  for (int t : leaves) {
    const int producer = analysis.producer[static_cast<size_t>(t)];
    const int block = graph.nodes[static_cast<size_t>(producer)].block;
    // One that many blocks read is persistent, in the walk's base all step already.
    if (!analysis.persistent[static_cast<size_t>(t)]) {
      add_once(checkpoint_saves[static_cast<size_t>(block)], t);
      add_once(through_backward[static_cast<size_t>(block)], t);
    }
    const int reader = t5_bias_gradient_block(graph, analysis, t);
    if (reader >= 0) through_backward[static_cast<size_t>(reader)].push_back(t);
  }
}

}  // namespace headroom::planner
