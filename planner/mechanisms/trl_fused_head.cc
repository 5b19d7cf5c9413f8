#include "planner/mechanisms/trl_fused_head.h"

#include <algorithm>
#include <string>

#include "graph/op_traits.h"
#include "planner/mechanisms/graph_edits.h"

namespace headroom::planner {
namespace {

graph::Tensor* tensor_named(graph::LayerGraph& graph, const std::string& name) {
  for (graph::Tensor& tensor : graph.tensors) {
    if (tensor.name == name) return &tensor;
  }
  return nullptr;
}

graph::Node* producer(graph::LayerGraph& graph, const std::string& tensor) {
  const int index = graph.producer_of(tensor);
  return index < 0 ? nullptr : &graph.nodes[index];
}

// A loss node reading `upcast(head(x))` with a linear head, or null.
graph::Node* causal_lm_loss(graph::LayerGraph& graph) {
  for (graph::Node& node : graph.nodes) {
    if (node.op != graph::op::kLoss || node.inputs.empty()) continue;
    const graph::Node* upcast = producer(graph, node.inputs.front());
    if (upcast == nullptr || upcast->op != graph::op::kToF32 || upcast->inputs.empty()) continue;
    const graph::Node* head = producer(graph, upcast->inputs.front());
    if (head != nullptr && head->linear && !head->params.empty()) return &node;
  }
  return nullptr;
}

// The loss reads the head's output directly: the upcast node and its fp32 logits go.
void drop_upcast(graph::LayerGraph& graph, graph::Node& loss) {
  const std::string upcast_out = loss.inputs.front();
  const graph::Node* upcast = producer(graph, upcast_out);
  const std::string upcast_name = upcast->name;
  loss.inputs.front() = upcast->inputs.front();
  std::erase_if(graph.nodes, [&](const graph::Node& n) { return n.name == upcast_name; });
  std::erase_if(graph.tensors, [&](const graph::Tensor& t) { return t.name == upcast_out; });
}

// Bytes a token as compute-dtype elements, rounded up.
int64_t elements_for(int64_t bytes, graph::DType compute) {
  const int64_t width = graph::dtype_bytes(compute, 1);
  return (bytes + width - 1) / width;
}

// The loss sums the per-token log-probabilities: nothing of the vocabulary's size
// is saved or made (compute_loss: -log_probs.sum() / num_items_in_batch).
void price_loss(graph::LayerGraph& graph, graph::Node& loss, const graph::SizeExpr& rows) {
  const std::string log_probs = loss.name + ":log_probs";
  loss.saves.clear();
  loss.workspace_elements = graph::SizeExpr{};
  loss.bwd_workspace_elements = graph::SizeExpr{};
  loss.fwd_flops = rows;
  loss.bwd_input_flops = rows;
  loss.fwd_io_elements = rows.scaled(2);
  std::erase(loss.outputs, log_probs);
  std::erase_if(graph.tensors, [&](const graph::Tensor& t) { return t.name == log_probs; });
}

}  // namespace

int64_t trl_tile_rows(int64_t tokens) { return std::min(tokens, kTrlTokenTile); }

bool apply_trl_fused_head(graph::LayerGraph& graph, int64_t micro_batch, int64_t seq, graph::DType compute,
                          std::optional<int64_t> scored_per_row) {
  graph::Node* loss_ptr = causal_lm_loss(graph);
  if (loss_ptr == nullptr) return false;
  const std::string loss_name = loss_ptr->name;
  drop_upcast(graph, *loss_ptr);  // erasing a node moves the others: look them up again
  graph::Node& loss = *node_named(graph, loss_name);
  graph::Node& head = *producer(graph, loss.inputs.front());
  graph::Tensor& out = *tensor_named(graph, loss.inputs.front());
  const graph::SizeExpr rows = scored_per_row ? graph::SizeExpr::per_sample(*scored_per_row) : head.linear->rows;
  const int64_t hidden = head.linear->in_features;
  const int64_t vocab = head.linear->out_features;
  const bool weight_trains = head.params.front().trainable;
  // One [tile rows x 32768] buffer in the compute dtype (forward and backward): rows
  // tokens below 4096, else 4096; 32768 columns whatever the vocabulary (mm_buf is
  // allocated at chunk_size, each tile a view of it).
  const int64_t tile_cols = kTrlVocabTile;
  const graph::SizeExpr tile = rows.at(micro_batch, seq) <= kTrlTokenTile
                                   ? rows.scaled(tile_cols)
                                   : graph::SizeExpr::constant(kTrlTokenTile * tile_cols);
  // Saved: the compact hidden copy and log_z, entropy (the head's output here).
  out.elements = rows.scaled(hidden) + rows.scaled(elements_for(kTrlSavedBytesPerToken, compute));
  out.dtype.reset();
  head.saves = {{out.name, graph::SaveWhen::kAnyGrad}};
  head.workspace_elements = tile + rows.scaled(elements_for(kTrlForwardBytesPerToken, compute));
  // Backward: fp32 grad_hidden, the tile, and fp32 grad_weight when the head trains
  // (their casts to the parameters' dtype are the input and weight gradients).
  graph::SizeExpr backward = tile + rows.scaled(elements_for(4 * hidden, compute));
  if (weight_trains) backward += graph::SizeExpr::constant(elements_for(4 * hidden * vocab, compute));
  head.bwd_workspace_elements = backward;
  const graph::SizeExpr gemm = rows.scaled(2 * hidden * vocab);
  head.fwd_flops = gemm;
  head.bwd_input_flops = gemm.scaled(2);  // the tile recomputed, then grad_hidden
  head.bwd_param_flops = weight_trains ? gemm : graph::SizeExpr{};
  head.fwd_io_elements = rows.scaled(hidden + 2 * tile_cols);
  head.linear.reset();  // one autograd Function now, not an nn.Linear to adapt or tile
  head.op = std::string(kTrlFusedLogprobOp);
  price_loss(graph, loss, rows);
  return true;
}

}  // namespace headroom::planner
