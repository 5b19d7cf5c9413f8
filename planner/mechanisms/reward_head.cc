#include "planner/mechanisms/reward_head.h"

#include <algorithm>
#include <set>
#include <string>
#include <vector>

#include "graph/op_traits.h"

namespace headroom::planner {
namespace {

// The loss and the nodes passed on the way to its head (the upcast, a final soft-cap)
// are what reads the logits, dropped with the loss.
Result<int> lm_head_of(const graph::LayerGraph& graph, int loss, std::vector<int>& chain) {
  const int head = loss_head_linear(graph, loss, &chain);
  if (head >= 0) return head;
  return Status::unsupported("the reward recipe replaces the LM head's linear with `score`; no linear computes the "
                             "logits that \"" + graph.nodes[static_cast<size_t>(loss)].name + "\" reads");
}

// `score`: [1, hidden], no bias, one reward a token; the input it saves for its weight's
// gradient stays as the LM head's was.
void make_score(graph::LayerGraph& graph, graph::Node& head) {
  const int64_t in = head.linear->in_features;
  const graph::SizeExpr rows = head.linear->rows;
  head.name = kRewardHead;
  head.linear->out_features = 1;
  graph::Param score;
  score.name = std::string(kRewardHead) + ".weight";
  score.shape = {1, in};
  score.dtype = head.params.empty() ? graph::DType::kBF16 : head.params.front().dtype;
  head.params = {score};
  head.fwd_flops = head.bwd_input_flops = head.bwd_param_flops = rows.scaled(2 * in);
  head.fwd_io_elements = rows.scaled(in + 1);
  head.workspace_elements = graph::SizeExpr{};
  head.bwd_workspace_elements.reset();
  for (graph::Tensor& tensor : graph.tensors) {
    if (tensor.name == head.outputs.front()) tensor.elements = rows;
  }
}

// The pooled rewards and -logsigmoid over them: a value a row, nothing kept that grows
// with the sequence (the pooling's index backward keeps its row indices).
graph::Node reward_loss(const graph::Node& score, int block) {
  graph::Node loss;
  loss.name = "loss";
  loss.op = "loss";
  loss.block = block;
  loss.inputs = {score.outputs.front()};
  loss.outputs = {"loss"};
  loss.fwd_flops = score.linear->rows;
  return loss;
}

}  // namespace

bool is_lm_loss(const graph::Node& node) {
  if (node.op != graph::op::kLoss) return false;
  return std::any_of(node.outputs.begin(), node.outputs.end(),
                     [](const std::string& out) { return out.ends_with(":log_probs"); });
}

int loss_head_linear(const graph::LayerGraph& graph, int loss, std::vector<int>* passed) {
  int at = loss;
  for (size_t hops = 0; hops < graph.nodes.size(); ++hops) {
    if (passed != nullptr) passed->push_back(at);
    const graph::Node& node = graph.nodes[static_cast<size_t>(at)];
    if (node.inputs.empty()) return -1;
    const int producer = graph.producer_of(node.inputs.front());
    if (producer < 0) return -1;
    if (graph.nodes[static_cast<size_t>(producer)].linear) return producer;
    at = producer;
  }
  return -1;
}

Status apply_reward_head(graph::LayerGraph& graph) {
  std::vector<int> losses;
  for (size_t i = 0; i < graph.nodes.size(); ++i) {
    if (is_lm_loss(graph.nodes[i])) losses.push_back(static_cast<int>(i));
  }
  if (losses.size() != 1) {
    return Status::unsupported("the reward recipe needs a causal LM (one cross-entropy over an LM head) to put a "
                               "`score` head on; " + graph.name + " has " + std::to_string(losses.size()));
  }
  std::vector<int> chain;
  Result<int> head = lm_head_of(graph, losses.front(), chain);
  if (!head.is_ok()) return head.status();
  graph::Node& score = graph.nodes[static_cast<size_t>(head.value())];
  make_score(graph, score);
  graph::Node loss = reward_loss(score, graph.nodes[static_cast<size_t>(losses.front())].block);
  std::set<std::string> dropped_outputs;
  for (int index : chain) {
    for (const std::string& out : graph.nodes[static_cast<size_t>(index)].outputs) dropped_outputs.insert(out);
  }
  std::sort(chain.rbegin(), chain.rend());
  for (int index : chain) graph.nodes.erase(graph.nodes.begin() + index);
  std::erase_if(graph.tensors, [&](const graph::Tensor& t) { return dropped_outputs.contains(t.name); });
  graph::Tensor scalar;
  scalar.name = "loss";
  scalar.elements = graph::SizeExpr::constant(1);
  scalar.dtype = graph::DType::kF32;
  graph.tensors.push_back(scalar);
  graph.nodes.push_back(std::move(loss));
  return Status::ok();
}

}  // namespace headroom::planner
