#include "planner/time/fsdp2_stream_copies.h"

#include <vector>

#include "planner/settings/stack.h"
#include "planner/time/step_time.h"

namespace headroom::planner {

int fsdp2_kept_layer(const graph::LayerGraph& graph, const RunSettings& settings) {
  int kept = -1;
  if (!fsdp2_keeps_last_layer(settings.stack)) return kept;
  for (size_t b = 0; b < graph.blocks.size(); ++b) {
    if (graph.blocks[b].checkpointable) kept = static_cast<int>(b);
  }
  return kept;
}

int64_t reduce_copy_in_bytes(const graph::Param& param, const RunSettings& settings) {
  return grad_bytes(param, settings.precision) + param.elements() * fsdp_reduce_bytes_per_element(settings);
}

double stream_copy_ms(double bytes, const GpuSpec& gpu, const TimeModelOptions& options) {
  return transfer_ms(bytes, gpu.memory_bandwidth_gbps * options.bandwidth_efficiency);
}

int64_t fsdp2_copy_out_bytes(const graph::LayerGraph& graph, const RunSettings& settings,
                             const GlobalConfig& config) {
  if (!fsdp_shards_params(settings, config.zero_stage) || !shards_with_fsdp2(settings)) return 0;
  const std::vector<int64_t> gathered = block_gathered_bytes(graph, settings);
  // The kept layer's backward needs no second all-gather.
  const int kept_layer = fsdp2_kept_layer(graph, settings);
  const int kept_tail = fsdp2_kept_tail(graph, settings);
  int64_t copied = 0;
  for (size_t b = 0; b < gathered.size(); ++b) {
    const bool regathered = !in_fsdp2_root(graph, static_cast<int>(b), settings) && static_cast<int>(b) != kept_layer && static_cast<int>(b) != kept_tail &&
                            !fsdp_keeps_unsharded(settings, config.zero_stage);
    copied += gathered[b] * (regathered ? 2 : 1);
  }
  return 2 * copied;  // read from the all-gather output, written to the parameters
}

int64_t fsdp2_reduce_copy_in_bytes(const graph::LayerGraph& graph, const RunSettings& settings,
                                   const GlobalConfig& config) {
  if (!fsdp_shards_params(settings, config.zero_stage) || !shards_with_fsdp2(settings)) return 0;
  int64_t bytes = 0;
  for (const graph::Node& node : graph.nodes) {
    for (const graph::Param& param : node.params) {
      if (param.trainable && param.tied_to.empty()) bytes += reduce_copy_in_bytes(param, settings);
    }
  }
  return bytes;
}

}  // namespace headroom::planner
