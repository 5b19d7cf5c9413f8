#include "planner/mechanisms/strided_slices.h"

#include <algorithm>
#include <string>
#include <vector>

#include "graph/op_traits.h"
#include "planner/mechanisms/autocast.h"

namespace headroom::planner {
namespace {

bool reads(const graph::Node& node, const std::string& tensor) {
  return std::find(node.inputs.begin(), node.inputs.end(), tensor) != node.inputs.end();
}

// The base of the slice `node` reads first, when the node also reads that base
// (a linear over a view, models/flux.cc linear_on_view); empty otherwise.
std::string sliced_base(const graph::LayerGraph& graph, const graph::Node& node) {
  if (node.op != graph::op::kLinear || node.inputs.size() < 2) return "";
  const int producer = graph.producer_of(node.inputs.front());
  if (producer < 0) return "";
  const graph::Node& split = graph.nodes[static_cast<size_t>(producer)];
  if (split.op != graph::op::kSplit || split.inputs.size() != 1 || !reads(node, split.inputs.front())) return "";
  return split.inputs.front();
}

}  // namespace

int apply_strided_slice_copies(graph::LayerGraph& graph, int64_t micro_batch) {
  if (micro_batch < 2) return 0;
  std::vector<graph::Node> copies;
  int rewritten = 0;
  for (graph::Node& node : graph.nodes) {
    const std::string base = sliced_base(graph, node);
    if (base.empty()) continue;
    const std::string view = node.inputs.front();
    const graph::Tensor sliced = *graph.find_tensor(view);
    const std::string copy = node.name + ".contiguous";
    // Reads and writes each element once.
    add_cast_node(copies, graph.tensors, copy, node.block, {view}, sliced.elements, sliced.dtype,
                  sliced.elements.scaled(2));
    std::erase(node.inputs, base);
    std::replace(node.inputs.begin(), node.inputs.end(), view, copy);
    for (graph::SavedRef& saved : node.saves) {
      if (saved.tensor == base) saved.tensor = copy;
    }
    ++rewritten;
  }
  for (graph::Node& copy : copies) graph.nodes.push_back(std::move(copy));
  return rewritten;
}

}  // namespace headroom::planner
