#include "planner/mechanisms/reentrant_checkpoint.h"

#include <algorithm>
#include <string>

#include "graph/graph_analysis.h"
#include "graph/op_traits.h"

namespace headroom::planner {
namespace {

// Whether any tensor block `b` reads from outside itself requires grad.
bool block_input_requires_grad(const graph::LayerGraph& graph, const graph::GraphAnalysis& analysis, int b) {
  for (int n : analysis.blocks[static_cast<size_t>(b)].nodes) {
    for (int t : analysis.node_inputs[static_cast<size_t>(n)]) {
      const int producer = analysis.producer[static_cast<size_t>(t)];
      const bool outside = producer < 0 || graph.nodes[static_cast<size_t>(producer)].block != b;
      if (outside && analysis.requires_grad[static_cast<size_t>(t)]) return true;
    }
  }
  return false;
}

int freeze_block(graph::LayerGraph& graph, int b) {
  int frozen = 0;
  for (graph::Node& node : graph.nodes) {
    if (node.block != b) continue;
    for (graph::Param& param : node.params) {
      if (param.trainable && param.tied_to.empty()) {
        param.trainable = false;
        ++frozen;
      }
    }
  }
  return frozen;
}

}  // namespace

int apply_reentrant_checkpointing(graph::LayerGraph& graph, const std::vector<bool>& checkpointed) {
  int frozen = 0;
  graph::GraphAnalysis analysis = graph::analyze_graph(graph);
  for (size_t b = 0; b < graph.blocks.size() && b < checkpointed.size(); ++b) {
    if (!checkpointed[b] || block_input_requires_grad(graph, analysis, static_cast<int>(b))) continue;
    const int now = freeze_block(graph, static_cast<int>(b));
    if (now == 0) continue;
    frozen += now;
    analysis = graph::analyze_graph(graph);  // what follows this block no longer gets a gradient from it
  }
  return frozen;
}

RecomputeCastCache reentrant_cast_cache(const graph::LayerGraph& graph, const graph::GraphAnalysis& analysis,
                                        int block) {
  RecomputeCastCache out;
  std::vector<int> cast_inputs;
  for (int n : analysis.blocks[static_cast<size_t>(block)].nodes) {
    const graph::Node& node = graph.nodes[static_cast<size_t>(n)];
    if (node.op != graph::op::kCast || node.inputs.size() != 1 || analysis.node_outputs[n].size() != 1 ||
        node.name.find(".cast:") == std::string::npos) {
      continue;
    }
    const int input = analysis.node_inputs[static_cast<size_t>(n)].front();
    const int output = analysis.node_outputs[static_cast<size_t>(n)].front();
    const int producer = analysis.producer[static_cast<size_t>(input)];
    const bool outside = producer < 0 || graph.nodes[static_cast<size_t>(producer)].block != block;
    const bool fp32_leaf = graph.tensors[static_cast<size_t>(input)].dtype == graph::DType::kF32 &&
                           analysis.requires_grad[static_cast<size_t>(input)];
    const bool to_16_bit = graph.tensors[static_cast<size_t>(output)].dtype != graph::DType::kF32;
    if (!outside || !fp32_leaf || !to_16_bit) continue;
    const bool again = std::find(cast_inputs.begin(), cast_inputs.end(), input) != cast_inputs.end();
    (again ? out.shared : out.held).push_back(output);
    cast_inputs.push_back(input);
  }
  return out;
}

}  // namespace headroom::planner
