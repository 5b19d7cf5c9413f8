#include "planner/memory/rope_cache_saves.h"

#include "models/rope_caches.h"

namespace headroom::planner {
namespace {

// Whether block `b`'s saved tensors hold what it read at `peak`: always unless it is
// checkpointed, then only inside its backward (the recomputed forward saves again).
bool block_keeps_saves(const std::vector<BlockChoice>& choices, int b, const SavesAt& peak) {
  if (static_cast<size_t>(b) >= choices.size() || choices[b] != BlockChoice::kCheckpoint) return true;
  return peak.phase == "backward" && peak.block == b;
}

// The shared cache is read by every block of the kind of the one holding it.
bool any_reader_keeps(const graph::LayerGraph& graph, const std::vector<BlockChoice>& choices,
                      const std::string& kind, const SavesAt& peak) {
  for (size_t b = 0; b < graph.blocks.size(); ++b) {
    if (graph.blocks[b].kind == kind && block_keeps_saves(choices, static_cast<int>(b), peak)) return true;
  }
  return false;
}

}  // namespace

int64_t saved_rope_cache_bytes(const graph::LayerGraph& graph, const std::vector<BlockChoice>& choices,
                               const SavesAt& peak, Precision precision, Accounting accounting) {
  int64_t bytes = 0;
  for (const graph::Node& node : graph.nodes) {
    for (const graph::Param& param : node.params) {
      if (!models::rope_cache_kept_for_backward(param)) continue;
      const graph::Block& block = graph.blocks[node.block];
      const bool kept = models::rope_cache_shared(param, block)
                            ? any_reader_keeps(graph, choices, block.kind, peak)
                            : block_keeps_saves(choices, node.block, peak);
      if (kept) bytes += account(param_storage_bytes(param, precision), accounting);
    }
  }
  return bytes;
}

}  // namespace headroom::planner
