#include "planner/mechanisms/peft_targets.h"

#include <algorithm>
#include <set>

#include "graph/op_traits.h"
#include "planner/mechanisms/reward_head.h"

namespace headroom::planner {
namespace {

// PEFT leaves out the output embedding (get_output_embeddings) and a SEQ_CLS head.
std::set<int> excluded_heads(const graph::LayerGraph& graph) {
  std::set<int> heads;
  for (size_t n = 0; n < graph.nodes.size(); ++n) {
    const graph::Node& node = graph.nodes[n];
    if (node.op != graph::op::kLoss) continue;
    const int head = loss_head_linear(graph, static_cast<int>(n));
    if (head < 0) continue;
    if (is_lm_loss(node) || graph.nodes[static_cast<size_t>(head)].name == kRewardHead) heads.insert(head);
  }
  return heads;
}

}  // namespace

std::vector<std::string> all_linear_modules(const graph::LayerGraph& graph) {
  const std::set<int> heads = excluded_heads(graph);
  std::vector<std::string> names;
  for (size_t n = 0; n < graph.nodes.size(); ++n) {
    const graph::Node& node = graph.nodes[n];
    if (node.op == graph::op::kLinear && node.linear && !heads.contains(static_cast<int>(n))) {
      names.push_back(node.name);
    }
  }
  return names;
}

}  // namespace headroom::planner
