#include "planner/mechanisms/compiled_blocks.h"

#include <algorithm>
#include <boost/graph/adjacency_list.hpp>
#include <boost/graph/push_relabel_max_flow.hpp>
#include <cmath>
#include <limits>
#include <queue>
#include <set>
#include <string>
#include <unordered_map>
#include <utility>

#include "planner/mechanisms/inductor_ops.h"

namespace headroom::planner {
namespace {

// Capacity standing for "never cut": above any byte count times the 1.1^100
// distance weight (2^60 * 13781 < 1e23), and exact enough in a double.
constexpr double kNeverCut = 1e30;
constexpr int kFarFromBackward = 1000000000;  // partitioners.py: dist_from_bw = int(1e9)

using Traits = boost::adjacency_list_traits<boost::vecS, boost::vecS, boost::directedS>;
using FlowGraph = boost::adjacency_list<
    boost::vecS, boost::vecS, boost::directedS, boost::no_property,
    boost::property<boost::edge_capacity_t, double,
                    boost::property<boost::edge_residual_capacity_t, double,
                                    boost::property<boost::edge_reverse_t, Traits::edge_descriptor>>>>;

class Network {
 public:
  explicit Network(int vertices) : graph_(vertices) {}

  void add(int from, int to, double capacity) {
    auto capacity_map = boost::get(boost::edge_capacity, graph_);
    auto reverse_map = boost::get(boost::edge_reverse, graph_);
    const Traits::edge_descriptor forward = boost::add_edge(from, to, graph_).first;
    const Traits::edge_descriptor backward = boost::add_edge(to, from, graph_).first;
    capacity_map[forward] = capacity;
    capacity_map[backward] = 0;
    reverse_map[forward] = backward;
    reverse_map[backward] = forward;
  }

  // Vertices on the source side of a minimum cut: reachable from `source` over
  // edges with residual capacity left after a maximum flow.
  std::vector<bool> source_side(int source, int sink) {
    boost::push_relabel_max_flow(graph_, source, sink);
    auto residual = boost::get(boost::edge_residual_capacity, graph_);
    std::vector<bool> reached(boost::num_vertices(graph_), false);
    std::queue<int> frontier;
    reached[source] = true;
    frontier.push(source);
    while (!frontier.empty()) {
      const int v = frontier.front();
      frontier.pop();
      for (auto [e, end] = boost::out_edges(v, graph_); e != end; ++e) {
        const int w = static_cast<int>(boost::target(*e, graph_));
        if (!reached[w] && residual[*e] > 0) {
          reached[w] = true;
          frontier.push(w);
        }
      }
    }
    return reached;
  }

 private:
  FlowGraph graph_;
};

// One block as the partitioner sees its joint graph: the block's nodes in
// execution order, the tensors they read and write, and which of those the
// backward reads (the eager saves).
class BlockJointGraph {
 public:
  BlockJointGraph(const graph::LayerGraph& graph, const graph::GraphAnalysis& analysis, int block,
                  graph::DType compute_dtype, int64_t batch, int64_t seq)
      : graph_(graph), an_(analysis), block_(block) {
    const std::vector<int>& nodes = analysis.blocks[block].nodes;
    for (size_t i = 0; i < nodes.size(); ++i) position_[nodes[i]] = static_cast<int>(i);
    for (int n : nodes) {
      for (int t : analysis.node_inputs[n]) {
        local(t);
        std::vector<int>& users = users_[t];  // in execution order, as `nodes` is
        if (users.empty() || users.back() != n) users.push_back(n);
      }
      for (int t : analysis.node_outputs[n]) local(t);
      for (int t : analysis.node_saves[n]) {
        local(t);
        backward_readers_[t].push_back(n);
      }
    }
    bytes_.resize(tensors_.size());
    for (size_t i = 0; i < tensors_.size(); ++i) {
      bytes_[i] = static_cast<double>(graph::tensor_bytes(graph.tensors[tensors_[i]], compute_dtype, batch, seq));
    }
  }

  bool needs_anything() const { return !backward_readers_.empty(); }

  std::vector<int> saves() const {
    const int count = static_cast<int>(tensors_.size());
    const int source = 2 * count;
    const int sink = source + 1;
    Network network(2 * count + 2);
    const std::vector<int> dist = distances_from_backward();
    std::vector<bool> banned(count, false);
    for (int i = 0; i < count; ++i) banned[i] = banned_by_itself(i);
    ban_used_far_apart(banned);
    for (int i = 0; i < count; ++i) {
      const int t = tensors_[i];
      if (banned[i]) network.add(source, in(i), kNeverCut);
      if (backward_readers_.count(t)) network.add(out(i), sink, kNeverCut);
      network.add(in(i), out(i), weight(i, dist[i]));
    }
    for (int n : an_.blocks[block_].nodes) {
      for (int input : an_.node_inputs[n]) {
        for (int output : an_.node_outputs[n]) network.add(out(index_.at(input)), in(index_.at(output)), kNeverCut);
      }
    }
    const std::vector<bool> reached = network.source_side(source, sink);
    std::vector<int> out_tensors;
    for (int i = 0; i < count; ++i) {
      if (reached[in(i)] && !reached[out(i)]) out_tensors.push_back(tensors_[i]);
    }
    std::sort(out_tensors.begin(), out_tensors.end());
    return out_tensors;
  }

 private:
  static int in(int i) { return 2 * i; }
  static int out(int i) { return 2 * i + 1; }

  void local(int t) {
    if (index_.emplace(t, static_cast<int>(tensors_.size())).second) tensors_.push_back(t);
  }

  bool in_block(int node) const { return node >= 0 && graph_.nodes[node].block == block_; }
  OpClass op_class(int node) const { return classify_op(graph_.nodes[node].op); }
  // A placeholder (the block's inputs) is not fusible with anything.
  bool producer_fusible(int t) const { return in_block(an_.producer[t]) && fusible(op_class(an_.producer[t])); }

  // The block's nodes that read `t`, in execution order.
  const std::vector<int>& block_consumers(int t) const {
    static const std::vector<int> kNone;
    const auto found = users_.find(t);
    return found == users_.end() ? kNone : found->second;
  }

  // dist_from_bw: 1 for a tensor the backward reads, else one more than the
  // nearest of what is computed from it (min_cut_rematerialization_partition).
  std::vector<int> distances_from_backward() const {
    std::vector<int> dist(tensors_.size(), kFarFromBackward);
    for (const auto& [t, readers] : backward_readers_) dist[index_.at(t)] = 1;
    const std::vector<int>& nodes = an_.blocks[block_].nodes;
    for (auto n = nodes.rbegin(); n != nodes.rend(); ++n) {
      int nearest = kFarFromBackward;
      for (int o : an_.node_outputs[*n]) nearest = std::min(nearest, dist[index_.at(o)]);
      if (nearest == kFarFromBackward) continue;
      for (int input : an_.node_inputs[*n]) {
        int& d = dist[index_.at(input)];
        d = std::min(d, nearest + 1);
      }
    }
    return dist;
  }

  // is_materialized: a graph input, or some user (forward or backward) that a
  // kernel cannot fuse with the producer. Outputs of the block are materialized.
  bool materialized(int i) const {
    const int t = tensors_[i];
    if (!in_block(an_.producer[t])) return true;
    const bool producer_fuses = fusible(op_class(an_.producer[t]));
    for (int c : an_.consumers[t]) {
      if (!in_block(c) || !producer_fuses || !fusible(op_class(c))) return true;
    }
    const auto readers = backward_readers_.find(t);
    if (readers != backward_readers_.end()) {
      for (int n : readers->second) {
        if (!producer_fuses || !fusible(op_class(n))) return true;
      }
    }
    return false;
  }

  // should_ban_recomputation, and primals (ban_recomputation_if_allowed).
  bool banned_by_itself(int i) const {
    const int t = tensors_[i];
    const int producer = an_.producer[t];
    if (!in_block(producer)) return true;  // a primal: the block's input
    if (op_class(producer) != OpClass::kRecomputable) return true;
    // ban_if_materialized_backward: an mm or attention backward reads it.
    const auto readers = backward_readers_.find(t);
    if (readers != backward_readers_.end()) {
      for (int n : readers->second) {
        if (!fusible(op_class(n))) return true;
      }
    }
    // ban_if_reduction: an output 4x smaller than the op's inputs (norm statistics).
    double inputs = 0;
    for (int input : an_.node_inputs[producer]) inputs += bytes_[index_.at(input)];
    return bytes_[i] * 4 < inputs;
  }

  // ban_recompute_used_far_apart: a fusible use of a tensor that comes after the
  // first unfusible op downstream of its earlier uses is not recomputed (the
  // residual add after attention, the second add after the MLP).
  void ban_used_far_apart(std::vector<bool>& banned) const {
    for (size_t i = 0; i < tensors_.size(); ++i) {
      const int t = tensors_[i];
      const std::vector<int>& users = block_consumers(t);
      if (users.empty()) continue;
      const int last = position_.at(users.back());
      const int first_unfusible = first_unfusible_position(users, last);
      for (int user : users) {
        if (position_.at(user) > first_unfusible && producer_fusible(t) && fusible(op_class(user))) {
          for (int o : an_.node_outputs[user]) banned[index_.at(o)] = true;
        }
      }
    }
  }

  // find_first_unfusible: walks forward from `starts` along uses, in execution
  // order, to the first op reached over an unfusible edge.
  int first_unfusible_position(const std::vector<int>& starts, int max_position) const {
    using Entry = std::tuple<int, int, bool>;  // position, node, reached over a fusible edge
    std::priority_queue<Entry, std::vector<Entry>, std::greater<>> heap;
    std::set<Entry> seen;
    for (int n : starts) {
      const Entry e{position_.at(n), n, true};
      if (seen.insert(e).second) heap.push(e);
    }
    while (!heap.empty()) {
      const auto [position, node, node_fusible] = heap.top();
      heap.pop();
      if (!node_fusible) return position;
      for (int o : an_.node_outputs[node]) {
        for (int user : block_consumers(o)) {
          if (position_.at(user) > max_position) continue;
          const Entry e{position_.at(user), user, fusible(op_class(node)) && fusible(op_class(user))};
          if (seen.insert(e).second) heap.push(e);
        }
      }
    }
    return max_position;
  }

  // get_node_weight: bytes, times 1.1 per step from the backward (at least one,
  // at most 100), doubled when saving forces a fused value to memory. Parameters
  // and buffers are free to save (treat_parameters_as_free_to_save): the graph's
  // inputs without a producer (rotary tables, constants) are such buffers.
  double weight(int i, int dist) const {
    const int t = tensors_[i];
    if (an_.producer[t] < 0) return 0;
    const double scaled = bytes_[i] * std::pow(1.1, std::max(std::min(dist, 100), 1));
    return materialized(i) ? scaled : 2 * scaled;
  }

  const graph::LayerGraph& graph_;
  const graph::GraphAnalysis& an_;
  int block_;
  std::unordered_map<int, int> position_;  // node -> position in the block's order
  std::vector<int> tensors_;               // local index -> tensor
  std::unordered_map<int, int> index_;     // tensor -> local index
  std::vector<double> bytes_;
  std::unordered_map<int, std::vector<int>> backward_readers_;  // tensor -> nodes saving it
  std::unordered_map<int, std::vector<int>> users_;             // tensor -> block nodes reading it
};

bool on_autograd(const graph::GraphAnalysis& analysis, int n) {
  return analysis.needs_input_grad[n] || analysis.needs_param_grad[n];
}

bool in_cut(const std::vector<int>& cut, int t) { return std::binary_search(cut.begin(), cut.end(), t); }

// The holder of a saved tensor: the first node on the autograd graph that
// writes or reads it (the simulator releases a save at its holder's backward).
std::unordered_map<int, int> cut_holders(const graph::GraphAnalysis& analysis, const std::vector<int>& nodes,
                                         const std::vector<int>& cut) {
  std::unordered_map<int, int> holder;
  for (int n : nodes) {
    if (!on_autograd(analysis, n)) continue;
    for (const std::vector<int>* list : {&analysis.node_outputs[n], &analysis.node_inputs[n]}) {
      for (int t : *list) {
        if (in_cut(cut, t)) holder.emplace(t, n);
      }
    }
  }
  return holder;
}

// The saved tensors an eager save is recomputed from.
std::vector<int> recompute_sources(const graph::LayerGraph& graph, const graph::GraphAnalysis& analysis, int block,
                                   const std::vector<int>& cut, int saved) {
  std::vector<int> found;
  std::vector<int> stack = {saved};
  std::set<int> visited;
  while (!stack.empty()) {
    const int t = stack.back();
    stack.pop_back();
    if (!visited.insert(t).second) continue;
    if (in_cut(cut, t)) {
      found.push_back(t);
      continue;
    }
    const int producer = analysis.producer[t];
    if (producer < 0 || graph.nodes[producer].block != block) continue;  // not reached: inputs are cut
    for (int input : analysis.node_inputs[producer]) stack.push_back(input);
  }
  return found;
}

// Replaces the eager saves of `block` by the partitioner's `cut`, each held by its holder.
void save_cut(const graph::LayerGraph& graph, graph::GraphAnalysis& analysis, int block, const std::vector<int>& cut) {
  const std::vector<int>& nodes = analysis.blocks[block].nodes;
  const std::unordered_map<int, int> holder = cut_holders(analysis, nodes, cut);
  std::unordered_map<int, std::vector<int>> rewritten;
  for (int n : nodes) {
    for (int saved : analysis.node_saves[n]) {
      const std::vector<int> from = recompute_sources(graph, analysis, block, cut, saved);
      const bool held = std::all_of(from.begin(), from.end(), [&](int t) { return holder.count(t) > 0; });
      // No node on the autograd graph touches a source: keep the eager save.
      std::vector<std::pair<int, int>> assignments;
      if (held) {
        for (int t : from) assignments.emplace_back(holder.at(t), t);
      } else {
        assignments.emplace_back(n, saved);
      }
      for (const auto& [node, t] : assignments) {
        std::vector<int>& list = rewritten[node];
        if (std::find(list.begin(), list.end(), t) == list.end()) list.push_back(t);
      }
    }
  }
  for (int n : nodes) analysis.node_saves[n] = rewritten[n];
}

}  // namespace

std::vector<int> partitioner_saves(const graph::LayerGraph& graph, const graph::GraphAnalysis& analysis,
                                   int block, graph::DType compute_dtype, int64_t batch, int64_t seq) {
  const BlockJointGraph joint(graph, analysis, block, compute_dtype, batch, seq);
  if (!joint.needs_anything()) return {};
  return joint.saves();
}

// Inside a compiled block no Python frame holds a module's arguments: dynamo inlines the
// submodules' forwards into one graph and inductor's generated code frees each buffer
// after its last reader (`del buf`), so the holds of the block's own tensors (Node::holds:
// LlamaMLP's x until down_proj returns) are gone; a hold of a tensor made before the block
// is the caller's frame and stays.
static void drop_compiled_holds(const graph::LayerGraph& graph, graph::GraphAnalysis& analysis, int block) {
  for (int n : analysis.blocks[static_cast<size_t>(block)].nodes) {
    std::vector<int>& holds = analysis.node_holds[static_cast<size_t>(n)];
    std::erase_if(holds, [&](int t) {
      const int producer = analysis.producer[static_cast<size_t>(t)];
      if (producer < 0 || graph.nodes[static_cast<size_t>(producer)].block != block) return false;
      std::erase(analysis.holders[static_cast<size_t>(t)], n);
      return true;
    });
  }
}

void apply_compiled_blocks(const graph::LayerGraph& graph, graph::GraphAnalysis& analysis,
                           graph::DType compute_dtype, int64_t batch, int64_t seq) {
  for (size_t b = 0; b < graph.blocks.size(); ++b) {
    if (!graph.blocks[b].checkpointable) continue;
    const int block = static_cast<int>(b);
    const std::vector<int> cut = partitioner_saves(graph, analysis, block, compute_dtype, batch, seq);
    if (!cut.empty()) save_cut(graph, analysis, block, cut);
    drop_compiled_holds(graph, analysis, block);
  }
  graph::attribute_block_saves(graph, analysis);
}

}  // namespace headroom::planner
