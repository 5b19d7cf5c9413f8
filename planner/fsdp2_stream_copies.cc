#include "planner/fsdp2_stream_copies.h"

#include <vector>

#include "planner/stack.h"

namespace headroom::planner {

int64_t fsdp2_copy_out_bytes(const graph::LayerGraph& graph, const RunSettings& settings,
                             const GlobalConfig& config) {
  if (config.zero_stage < 3 || !shards_with_fsdp2(settings)) return 0;
  const std::vector<int64_t> gathered = block_gathered_bytes(graph, settings);
  // torchtitan keeps its last layer unsharded after forward (fsdp2_keeps_last_layer):
  // the layer its backward starts with is not gathered again.
  int kept_layer = -1;
  if (fsdp2_keeps_last_layer(settings.stack)) {
    for (size_t b = 0; b < graph.blocks.size(); ++b) {
      if (graph.blocks[b].checkpointable) kept_layer = static_cast<int>(b);
    }
  }
  int64_t copied = 0;
  for (size_t b = 0; b < gathered.size(); ++b) {
    const bool regathered = !in_fsdp2_root(graph.blocks[b], settings) && static_cast<int>(b) != kept_layer;
    copied += gathered[b] * (regathered ? 2 : 1);
  }
  return 2 * copied;  // read from the all-gather output, written to the parameters
}

int64_t fsdp2_reduce_copy_in_bytes(const graph::LayerGraph& graph, const RunSettings& settings,
                                   const GlobalConfig& config) {
  if (config.zero_stage < 3 || !shards_with_fsdp2(settings)) return 0;
  const int64_t reduce_width = fsdp_reduce_bytes_per_element(settings);
  int64_t bytes = 0;
  for (const graph::Node& node : graph.nodes) {
    for (const graph::Param& param : node.params) {
      if (!param.trainable || !param.tied_to.empty()) continue;
      bytes += grad_bytes(param, settings.precision) + param.elements() * reduce_width;
    }
  }
  return bytes;
}

}  // namespace headroom::planner
