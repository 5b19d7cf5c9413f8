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

}  // namespace

FusedKernels fuse_compiled_blocks(const graph::LayerGraph& graph, const graph::GraphAnalysis& analysis) {
  const size_t node_count = graph.nodes.size();
  std::vector<bool> fuses(node_count, false);
  for (size_t n = 0; n < node_count; ++n) {
    const graph::Node& node = graph.nodes[n];
    fuses[n] = graph.blocks[node.block].checkpointable && fusible(classify_op(node.op));
  }
  // A fusible producer and a fusible consumer in the same block share a kernel,
  // unless a path between their kernels runs through an op outside both (the
  // residual add before the MLP and the one after it): one kernel cannot wait
  // for a matmul that waits for it (scheduler.py, will_fusion_create_cycle).
  DisjointSets sets(node_count);
  for (const graph::BlockStructure& block : analysis.blocks) {
    const BlockReach reach(analysis, block.nodes);
    const auto members = [&](int root) {
      std::vector<int> out;
      for (size_t i = 0; i < reach.size(); ++i) {
        if (fuses[block.nodes[i]] && sets.find(block.nodes[i]) == root) out.push_back(static_cast<int>(i));
      }
      return out;
    };
    const auto creates_cycle = [&](int root_a, int root_b) {
      const std::vector<int> a = members(root_a);
      const std::vector<int> b = members(root_b);
      for (size_t x = 0; x < reach.size(); ++x) {
        const int node = block.nodes[x];
        if (fuses[node] && (sets.find(node) == root_a || sets.find(node) == root_b)) continue;
        const auto from = [&](const std::vector<int>& group) {
          return std::any_of(group.begin(), group.end(), [&](int g) { return reach.reaches(g, static_cast<int>(x)); });
        };
        const auto to = [&](const std::vector<int>& group) {
          return std::any_of(group.begin(), group.end(), [&](int g) { return reach.reaches(static_cast<int>(x), g); });
        };
        if ((from(a) && to(b)) || (from(b) && to(a))) return true;
      }
      return false;
    };
    for (int n : block.nodes) {
      if (!fuses[n]) continue;
      for (int t : analysis.node_outputs[n]) {
        for (int consumer : analysis.consumers[t]) {
          if (!fuses[consumer] || graph.nodes[consumer].block != graph.nodes[n].block) continue;
          const int a = sets.find(n);
          const int b = sets.find(consumer);
          if (a != b && !creates_cycle(a, b)) sets.join(a, b);
        }
      }
    }
  }
  FusedKernels out;
  out.kernel_of.assign(node_count, -1);
  std::vector<int> kernel_of_root(node_count, -1);
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
  std::vector<bool> saved_anywhere(graph.tensors.size(), false);
  for (size_t n = 0; n < node_count; ++n) {
    for (int t : analysis.node_saves[n]) saved_anywhere[t] = true;
  }
  for (size_t k = 0; k < out.kernels.size(); ++k) {
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
  return out;
}

}  // namespace headroom::planner
