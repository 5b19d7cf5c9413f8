// Which tensors made_persistent (planner/time/made_persistent.h) describes: the
// persistent tensors a node makes in the forward (RoPE's tables, T5's encoder output),
// which the walk prices live from their producer's forward to the backward of their
// earliest reader only. The step simulator allocates and frees the same tensors there.
#pragma once

#include <vector>

#include "graph/graph_analysis.h"
#include "graph/layer_graph.h"

namespace headroom::planner {

// Tensor indices, in the order made_persistent lists them (one MadePersistent each).
std::vector<int> made_persistent_tensors(const graph::LayerGraph& graph, const graph::GraphAnalysis& analysis);

}  // namespace headroom::planner
