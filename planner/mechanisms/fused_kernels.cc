#include "planner/mechanisms/fused_kernels.h"

#include <algorithm>
#include <numeric>
#include <unordered_map>

#include "planner/mechanisms/inductor_ops.h"

namespace headroom::planner {
namespace {

class DisjointSets {
 public:
  explicit DisjointSets(size_t count) : parent_(count) { std::iota(parent_.begin(), parent_.end(), 0); }
  int find(int x) {
    while (parent_[x] != x) x = parent_[x] = parent_[parent_[x]];
    return x;
  }
  void join(int a, int b) { parent_[find(a)] = find(b); }

 private:
  std::vector<int> parent_;
};

void add_unique(std::vector<int>& list, int value) {
  if (std::find(list.begin(), list.end(), value) == list.end()) list.push_back(value);
}

// Whether node b can be reached from node a along producer -> consumer edges,
// within one block (local indices in execution order).
class BlockReach {
 public:
  BlockReach(const graph::GraphAnalysis& analysis, const std::vector<int>& nodes) : nodes_(nodes) {
    for (size_t i = 0; i < nodes.size(); ++i) local_[nodes[i]] = static_cast<int>(i);
    reach_.assign(nodes.size(), std::vector<bool>(nodes.size(), false));
    for (size_t i = nodes.size(); i-- > 0;) {
      for (int t : analysis.node_outputs[nodes[i]]) {
        for (int consumer : analysis.consumers[t]) {
          const auto found = local_.find(consumer);
          if (found == local_.end()) continue;
          reach_[i][found->second] = true;
          for (size_t k = 0; k < nodes.size(); ++k) {
            if (reach_[found->second][k]) reach_[i][k] = true;
          }
        }
      }
    }
  }
  size_t size() const { return nodes_.size(); }
  bool reaches(int a, int b) const { return reach_[a][b]; }

 private:
  const std::vector<int>& nodes_;
  std::unordered_map<int, int> local_;
  std::vector<std::vector<bool>> reach_;
};

// Which nodes Inductor may fuse: the fusible ops of the blocks the stacks compile.
std::vector<bool> fusing_nodes(const graph::LayerGraph& graph) {
  std::vector<bool> fuses(graph.nodes.size(), false);
  for (size_t n = 0; n < graph.nodes.size(); ++n) {
    const graph::Node& node = graph.nodes[n];
    fuses[n] = graph.blocks[node.block].checkpointable && fusible(classify_op(node.op));
  }
  return fuses;
}

// Grows the kernels of one block in `sets`.
// A fusible producer and a fusible consumer in the same block share a kernel,
// unless a path between their kernels runs through an op outside both (the
// residual add before the MLP and the one after it): one kernel cannot wait
// for a matmul that waits for it (scheduler.py, will_fusion_create_cycle).
class BlockFusion {
 public:
  BlockFusion(const graph::GraphAnalysis& analysis, const graph::BlockStructure& block,
              const std::vector<bool>& fuses, DisjointSets& sets)
      : analysis_(analysis), block_(block), fuses_(fuses), sets_(sets), reach_(analysis, block.nodes) {}

  void join_producers_and_consumers(const graph::LayerGraph& graph) {
    for (int n : block_.nodes) {
      if (!fuses_[n]) continue;
      for (int t : analysis_.node_outputs[n]) {
        for (int consumer : analysis_.consumers[t]) {
          if (!fuses_[consumer] || graph.nodes[consumer].block != graph.nodes[n].block) continue;
          const int a = sets_.find(n);
          const int b = sets_.find(consumer);
          if (a != b && !creates_cycle(a, b)) sets_.join(a, b);
        }
      }
    }
  }

 private:
  // Local indices of the kernel whose root is `root`.
  std::vector<int> members(int root) {
    std::vector<int> out;
    for (size_t i = 0; i < reach_.size(); ++i) {
      if (fuses_[block_.nodes[i]] && sets_.find(block_.nodes[i]) == root) out.push_back(static_cast<int>(i));
    }
    return out;
  }

  bool creates_cycle(int root_a, int root_b) {
    const std::vector<int> a = members(root_a);
    const std::vector<int> b = members(root_b);
    for (size_t x = 0; x < reach_.size(); ++x) {
      const int node = block_.nodes[x];
      if (fuses_[node] && (sets_.find(node) == root_a || sets_.find(node) == root_b)) continue;
      const auto from = [&](const std::vector<int>& group) {
        return std::any_of(group.begin(), group.end(), [&](int g) { return reach_.reaches(g, static_cast<int>(x)); });
      };
      const auto to = [&](const std::vector<int>& group) {
        return std::any_of(group.begin(), group.end(), [&](int g) { return reach_.reaches(static_cast<int>(x), g); });
      };
      if ((from(a) && to(b)) || (from(b) && to(a))) return true;
    }
    return false;
  }

  const graph::GraphAnalysis& analysis_;
  const graph::BlockStructure& block_;
  const std::vector<bool>& fuses_;
  DisjointSets& sets_;
  const BlockReach reach_;
};

// One kernel per set, numbered and led by its first node in execution order.
FusedKernels number_kernels(const graph::GraphAnalysis& analysis, const std::vector<bool>& fuses,
                            DisjointSets& sets) {
  FusedKernels out;
  out.kernel_of.assign(fuses.size(), -1);
  std::vector<int> kernel_of_root(fuses.size(), -1);
  for (int n : analysis.order) {
    if (!fuses[n]) continue;
    int& kernel = kernel_of_root[sets.find(n)];
    if (kernel < 0) {
      kernel = static_cast<int>(out.kernels.size());
      out.kernels.emplace_back();
      out.kernels.back().lead = n;
    }
    out.kernel_of[n] = kernel;
    out.kernels[kernel].nodes.push_back(n);
  }
  return out;
}

// What kernel `k` reads, writes and saves, and the gradients its backward passes.
void trace_kernel_edges(const graph::GraphAnalysis& analysis, const std::vector<bool>& saved_anywhere,
                        FusedKernels& out, size_t k) {
  FusedKernel& kernel = out.kernels[k];
  const auto inside = [&](int node) { return node >= 0 && out.kernel_of[node] == static_cast<int>(k); };
  for (int n : kernel.nodes) {
    if (kernel.backward_lead < 0 && (analysis.needs_input_grad[n] || analysis.needs_param_grad[n])) {
      kernel.backward_lead = n;
    }
    for (int t : analysis.node_inputs[n]) {
      if (inside(analysis.producer[t])) continue;
      add_unique(kernel.reads, t);
      if (analysis.requires_grad[t] && !analysis.persistent[t]) add_unique(kernel.grads_out, t);
    }
    for (int t : analysis.node_outputs[n]) {
      const std::vector<int>& consumers = analysis.consumers[t];
      const bool leaves = saved_anywhere[t] || analysis.persistent[t] ||
                          std::any_of(consumers.begin(), consumers.end(), [&](int c) { return !inside(c); });
      if (!leaves) continue;
      add_unique(kernel.writes, t);
      if (analysis.requires_grad[t] && !consumers.empty()) add_unique(kernel.grads_in, t);
    }
    for (int t : analysis.node_saves[n]) add_unique(kernel.saved, t);
  }
}

}  // namespace

FusedKernels fuse_compiled_blocks(const graph::LayerGraph& graph, const graph::GraphAnalysis& analysis) {
  const std::vector<bool> fuses = fusing_nodes(graph);
  DisjointSets sets(graph.nodes.size());
  for (const graph::BlockStructure& block : analysis.blocks) {
    BlockFusion(analysis, block, fuses, sets).join_producers_and_consumers(graph);
  }
  FusedKernels out = number_kernels(analysis, fuses, sets);
  std::vector<bool> saved_anywhere(graph.tensors.size(), false);
  for (size_t n = 0; n < graph.nodes.size(); ++n) {
    for (int t : analysis.node_saves[n]) saved_anywhere[t] = true;
  }
  for (size_t k = 0; k < out.kernels.size(); ++k) trace_kernel_edges(analysis, saved_anywhere, out, k);
  return out;
}

}  // namespace headroom::planner
