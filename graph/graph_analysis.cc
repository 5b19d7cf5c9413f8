#include "graph/graph_analysis.h"

#include <algorithm>
#include <boost/graph/adjacency_list.hpp>
#include <boost/graph/topological_sort.hpp>
#include <cassert>
#include <iterator>
#include <queue>
#include <unordered_map>

namespace headroom::graph {
namespace {

using NodeGraph = boost::adjacency_list<boost::vecS, boost::vecS, boost::directedS>;

// Execution order: the producer -> consumer edges in topological order, taking
// among the nodes that are ready the one created first (Kahn's algorithm with a
// min-heap). Builders create nodes in the module's Python order, so this is the
// order PyTorch runs them in (torchtune's chunked head: every chunk's logits before
// any chunk's loss), which a depth-first order is not. Cycles throw not_a_dag, as
// boost::topological_sort does. Blocks stay in their chain order.
std::vector<int> execution_order(const LayerGraph& graph, const std::vector<int>& producer,
                                 const std::unordered_map<std::string, int>& tensor_ids) {
  const int node_count = static_cast<int>(graph.nodes.size());
  NodeGraph dag(node_count);
  std::vector<int> unmet(node_count, 0);
  for (int consumer = 0; consumer < node_count; ++consumer) {
    std::vector<std::string> before = graph.nodes[consumer].inputs;
    before.insert(before.end(), graph.nodes[consumer].holds.begin(), graph.nodes[consumer].holds.end());
    for (const std::string& input : before) {
      const int from = producer[tensor_ids.at(input)];
      if (from >= 0) {
        boost::add_edge(from, consumer, dag);
        ++unmet[consumer];
      }
    }
  }
  std::priority_queue<int, std::vector<int>, std::greater<>> ready;
  for (int n = 0; n < node_count; ++n) {
    if (unmet[n] == 0) ready.push(n);
  }
  std::vector<int> rank(node_count, -1);
  int next = 0;
  while (!ready.empty()) {
    const int n = ready.top();
    ready.pop();
    rank[n] = next++;
    for (auto [it, end] = boost::adjacent_vertices(n, dag); it != end; ++it) {
      if (--unmet[*it] == 0) ready.push(static_cast<int>(*it));
    }
  }
  if (next != node_count) throw boost::not_a_dag();
  std::vector<int> order(node_count);
  for (int i = 0; i < node_count; ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) {
    if (graph.nodes[a].block != graph.nodes[b].block) {
      return graph.nodes[a].block < graph.nodes[b].block;
    }
    return rank[a] < rank[b];
  });
  return order;
}

bool has_trainable_param(const Node& node,
                         const std::unordered_map<std::string, bool>& trainable_by_name) {
  for (const Param& param : node.params) {
    const bool trainable =
        param.tied_to.empty() ? param.trainable : trainable_by_name.at(param.tied_to);
    if (trainable) return true;
  }
  return false;
}

void push_unique(std::vector<int>& list, int value) {
  if (std::find(list.begin(), list.end(), value) == list.end()) list.push_back(value);
}

}  // namespace

bool GraphAnalysis::save_active(int node_index, SaveWhen when, int saved_tensor) const {
  switch (when) {
    case SaveWhen::kOtherInputGrad: {
      // The saved tensor's own input position is skipped once, so a square
      // x*x still keeps x when x requires grad.
      bool skipped = false;
      for (int input : node_inputs[node_index]) {
        if (input == saved_tensor && !skipped) {
          skipped = true;
          continue;
        }
        if (requires_grad[input]) return true;
      }
      return false;
    }
    case SaveWhen::kInputGrad:
      return needs_input_grad[node_index];
    case SaveWhen::kParamGrad:
      return needs_param_grad[node_index];
    case SaveWhen::kAnyGrad:
      return needs_input_grad[node_index] || needs_param_grad[node_index];
  }
  return false;
}

int tensor_index(const LayerGraph& graph, const std::string& name) {
  for (size_t i = 0; i < graph.tensors.size(); ++i) {
    if (graph.tensors[i].name == name) return static_cast<int>(i);
  }
  return -1;
}

int64_t tensor_bytes(const Tensor& tensor, DType compute_dtype, int64_t batch, int64_t seq) {
  if (seq < tensor.min_seq) return 0;  // not made at this length (Tensor::min_seq)
  return dtype_bytes(tensor.dtype.value_or(compute_dtype), tensor.elements.at(batch, seq));
}

namespace {

// Tensors live for the whole step (GraphAnalysis::persistent) or held to the
// forward's end (GraphAnalysis::held_in_forward).
void mark_lifetimes(const LayerGraph& graph, GraphAnalysis& a) {
  const int count = static_cast<int>(graph.tensors.size());
  std::vector<bool> saved(count, false);
  for (const std::vector<int>& saves : a.node_saves) {
    for (int t : saves) saved[t] = true;
  }
  a.persistent.assign(count, false);
  a.held_in_forward.assign(count, false);
  for (int t = 0; t < count; ++t) {
    if (a.producer[t] < 0) {
      a.persistent[t] = true;
      continue;
    }
    const int producer_block = graph.nodes[a.producer[t]].block;
    // A tensor read beyond the next block lives for the whole step where backward needs it
    // again: a checkpointed block's recompute reads it (rotary tables, timestep embeddings) or
    // the far reader saves it. Read only by the forward of plain blocks (a UNet's skips, read by
    // the cat of their up block; a Transformer2DModel's input, read by its residual add), it
    // lives from its block to its last reader and is gone in backward (held_in_forward, a span).
    bool far_read = false;
    for (int consumer : a.consumers[t]) {
      const int block = graph.nodes[consumer].block;
      if (block <= producer_block + 1) continue;
      const std::vector<int>& saves = a.node_saves[consumer];
      const bool saves_it = std::find(saves.begin(), saves.end(), t) != saves.end();
      if (graph.blocks[block].checkpointable || saves_it) a.persistent[t] = true;
      far_read = true;
    }
    if (far_read && !a.persistent[t] && !saved[t]) a.held_in_forward[t] = true;
    // A tensor a frame holds across blocks: one some node saves is kept by that save
    // through the saving block's backward, past the frame's end (the forward's), so the
    // hold changes nothing (ViTModel's or BertModel's embedding_output without autocast,
    // saved by layer 0's norm or LoRA linear; headroom's executor, which holds no frame,
    // measured BERT's so on tiny-bert at ZeRO-3). One nothing saves (their
    // embedding_output under autocast, an fp32 tensor of which layer 0 keeps only casts)
    // lives to the end of the forward (held_in_forward).
    for (int holder : a.holders[t]) {
      if (graph.nodes[holder].block <= producer_block + 1 || saved[t]) continue;
      a.held_in_forward[t] = true;
    }
    if (a.persistent[t]) a.held_in_forward[t] = false;
  }
}

}  // namespace

GraphAnalysis analyze_graph(const LayerGraph& graph) {
  const int tensor_count = static_cast<int>(graph.tensors.size());
  const int node_count = static_cast<int>(graph.nodes.size());
  std::unordered_map<std::string, int> tensor_ids;
  for (int t = 0; t < tensor_count; ++t) tensor_ids[graph.tensors[t].name] = t;

  GraphAnalysis out;
  out.producer.assign(tensor_count, -1);
  out.consumers.assign(tensor_count, {});
  out.node_inputs.assign(node_count, {});
  out.node_outputs.assign(node_count, {});
  out.node_holds.assign(node_count, {});
  out.holders.assign(tensor_count, {});
  for (int n = 0; n < node_count; ++n) {
    for (const std::string& held : graph.nodes[n].holds) {
      push_unique(out.holders[tensor_ids.at(held)], n);
      out.node_holds[n].push_back(tensor_ids.at(held));
    }
    for (const std::string& output : graph.nodes[n].outputs) {
      out.producer[tensor_ids.at(output)] = n;
      out.node_outputs[n].push_back(tensor_ids.at(output));
    }
    for (const std::string& input : graph.nodes[n].inputs) {
      push_unique(out.consumers[tensor_ids.at(input)], n);
      out.node_inputs[n].push_back(tensor_ids.at(input));
    }
  }
  out.order = execution_order(graph, out.producer, tensor_ids);

  std::unordered_map<std::string, bool> trainable_by_name;
  for (const Node& node : graph.nodes) {
    for (const Param& param : node.params) {
      if (param.tied_to.empty()) trainable_by_name[param.name] = param.trainable;
    }
  }

  // Gradient flow, in execution order: a tensor requires grad when its producer
  // has a trainable parameter or an input that requires grad, or when it is
  // marked so (a hook made it a leaf that requires grad).
  out.requires_grad.assign(tensor_count, false);
  for (int t = 0; t < tensor_count; ++t) {
    if (out.producer[t] < 0) out.requires_grad[t] = graph.tensors[t].requires_grad;
  }
  out.needs_input_grad.assign(node_count, false);
  out.needs_param_grad.assign(node_count, false);
  for (int n : out.order) {
    const Node& node = graph.nodes[n];
    bool input_grad = false;
    for (const std::string& input : node.inputs) input_grad |= out.requires_grad[tensor_ids.at(input)];
    out.needs_input_grad[n] = input_grad;
    out.needs_param_grad[n] = has_trainable_param(node, trainable_by_name);
    for (const std::string& output : node.outputs) {
      const int t = tensor_ids.at(output);
      out.requires_grad[t] = input_grad || out.needs_param_grad[n] || graph.tensors[t].requires_grad;
    }
  }

  out.node_saves.assign(node_count, {});
  for (int n = 0; n < node_count; ++n) {
    for (const SavedRef& saved : graph.nodes[n].saves) {
      const int t = tensor_ids.at(saved.tensor);
      if (out.save_active(n, saved.when, t)) out.node_saves[n].push_back(t);
    }
  }

  // Persistent tensors: graph inputs, and tensors read beyond the producer's successor block.
  mark_lifetimes(graph, out);

  out.blocks.assign(graph.blocks.size(), {});
  for (int n : out.order) out.blocks[graph.nodes[n].block].nodes.push_back(n);
  for (size_t b = 0; b < graph.blocks.size(); ++b) {
    BlockStructure& block = out.blocks[b];
    for (int n : block.nodes) {
      const Node& node = graph.nodes[n];
      block.on_autograd |= out.needs_input_grad[n] || out.needs_param_grad[n];
      block.has_trainable |= out.needs_param_grad[n];
      for (const std::string& input : node.inputs) {
        const int t = tensor_ids.at(input);
        if (out.persistent[t] || out.producer[t] < 0) continue;
        if (graph.nodes[out.producer[t]].block != static_cast<int>(b)) push_unique(block.boundary_inputs, t);
      }
    }
  }
  attribute_block_saves(graph, out);
  return out;
}

void attribute_block_saves(const LayerGraph& graph, GraphAnalysis& analysis) {
  const size_t tensor_count = graph.tensors.size();
  // Which tensors each block saves itself (to attribute shared ones to the producer).
  std::vector<std::vector<bool>> saved_by_block(graph.blocks.size(), std::vector<bool>(tensor_count, false));
  for (size_t n = 0; n < graph.nodes.size(); ++n) {
    for (int t : analysis.node_saves[n]) saved_by_block[graph.nodes[n].block][t] = true;
  }
  std::vector<bool> listed(tensor_count, false);  // in the block's list already (a 4.x MoE block saves thousands)
  for (size_t b = 0; b < graph.blocks.size(); ++b) {
    BlockStructure& block = analysis.blocks[b];
    block.saved_tensors.clear();
    for (int n : block.nodes) {
      for (int t : analysis.node_saves[n]) {
        if (analysis.persistent[t]) continue;
        const int producer_block = analysis.producer[t] < 0 ? -1 : graph.nodes[analysis.producer[t]].block;
        if (producer_block != static_cast<int>(b) && producer_block >= 0 && saved_by_block[producer_block][t]) {
          continue;  // the producing block keeps it and counts it
        }
        if (listed[static_cast<size_t>(t)]) continue;
        listed[static_cast<size_t>(t)] = true;
        block.saved_tensors.push_back(t);
      }
    }
    for (int t : block.saved_tensors) listed[static_cast<size_t>(t)] = false;
  }
}

}  // namespace headroom::graph
