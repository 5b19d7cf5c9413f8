// Whether autograd holds torchtune's RoPE cache at the step's peak. The cache is a
// buffer, resident all run (models/rope_caches.h); torchtune's
// RotaryPositionalEmbeddings.forward (modules/position_embeddings.py, 0.6.1)
// multiplies the fp32 input by views of it, and the mul saves that view, whose
// storage is the whole cache. A checkpointed layer saves nothing in its forward
// (torch/utils/checkpoint.py: the non-reentrant _checkpoint_hook packs a handle,
// not the tensor; the reentrant CheckpointFunction runs the forward under no_grad),
// so there the cache is only what it is, a buffer, until the layer's backward
// recomputes the forward. docs/memory-model.md, "Categories at the peak".
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "graph/layer_graph.h"
#include "planner/memory/state_bytes.h"
#include "planner/settings/run_settings.h"

namespace headroom::planner {

struct SavesAt {
  std::string phase;  // the peak's phase: "forward", "backward", ...
  int block = -1;     // the peak's block
};

// The bytes of the RoPE caches some saved tensor views at `peak` under `choices`:
// a layer's own cache while that layer keeps its saves, the layers' shared cache
// (models::rope_cache_shared) while any of them does.
int64_t saved_rope_cache_bytes(const graph::LayerGraph& graph, const std::vector<BlockChoice>& choices,
                               const SavesAt& peak, Precision precision, Accounting accounting);

}  // namespace headroom::planner
