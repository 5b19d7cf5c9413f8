#include "planner/memory/zero2_partition.h"

#include <algorithm>
#include <cctype>
#include <set>
#include <string>
#include <vector>

namespace headroom::planner {

namespace {

// transformers 5.23 trainer.py get_decay_parameter_names: a name with "bias",
// "layernorm" or "rmsnorm" in it, or a "norm" / "*_norm" component, gets no weight
// decay; the Trainer's create_optimizer makes one group of each (decay first).
bool decays(std::string name) {
  std::transform(name.begin(), name.end(), name.begin(), [](unsigned char c) { return std::tolower(c); });
  if (name.find("bias") != std::string::npos || name.find("layernorm") != std::string::npos ||
      name.find("rmsnorm") != std::string::npos) {
    return false;
  }
  size_t start = 0;
  while (start <= name.size()) {
    const size_t end = std::min(name.find('.', start), name.size());
    const std::string part = name.substr(start, end - start);
    if (part == "norm" || (part.size() >= 5 && part.compare(part.size() - 5, 5, "_norm") == 0)) return false;
    start = end + 1;
  }
  return true;
}

// The trainable parameters' element counts in each group, in the model's order
// (a tied or reused weight once, where it first appears).
std::vector<std::vector<int64_t>> parameter_groups(const graph::LayerGraph& graph) {
  std::vector<std::vector<int64_t>> groups(2);
  std::set<std::string> seen;
  for (const graph::Node& node : graph.nodes) {
    for (const graph::Param& param : node.params) {
      if (!param.trainable || param.buffer || !param.tied_to.empty()) continue;
      if (!seen.insert(param.name).second) continue;
      groups[decays(param.name) ? 0 : 1].push_back(param.elements());
    }
  }
  return groups;
}

// One group flattened and cut into `world` equal slices: the group is padded to a
// multiple of 2 * world elements (nccl_start_alignment_factor; flatten_dense_tensors_aligned),
// each rank's params_in_partition are the parameters starting in its slice or
// crossing its start (get_partition_info), and copy_grads_in_partition's
// torch.empty is their whole numel.
void add_group(const std::vector<int64_t>& sizes, int world, std::vector<int64_t>& per_rank) {
  int64_t total = 0;
  for (int64_t size : sizes) total += size;
  const int64_t alignment = 2 * static_cast<int64_t>(world);
  const int64_t slice = (total + alignment - 1) / alignment * alignment / world;
  int64_t offset = 0;
  for (int64_t size : sizes) {
    for (int r = 0; r < world; ++r) {
      const int64_t start = r * slice;
      const int64_t end = start + slice;
      if ((start <= offset && offset < end) || (offset < start && start < offset + size)) per_rank[r] += size;
    }
    offset += size;
  }
}

}  // namespace

int64_t zero2_largest_grad_partition_elements(const graph::LayerGraph& graph, int world) {
  world = std::max(world, 1);
  std::vector<int64_t> per_rank(world, 0);
  for (const std::vector<int64_t>& group : parameter_groups(graph)) {
    if (!group.empty()) add_group(group, world, per_rank);
  }
  return *std::max_element(per_rank.begin(), per_rank.end());
}

}  // namespace headroom::planner
