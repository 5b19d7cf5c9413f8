// What a block compiled with torch.compile keeps for backward. AOTAutograd traces
// the block's forward and backward as one joint graph and splits it with the
// min-cut rematerialization partitioner: the forward saves the cheapest set of
// tensors from which the backward can recompute, by fused pointwise kernels,
// everything it reads (torch/_functorch/partitioners.py, solve_min_cut, torch
// 2.11). Compute-intensive ops (mm, attention), random ops, reductions that
// shrink their input 4x, and tensors a non-fusible backward op reads are never
// recomputed. torchtune compiles each decoder layer (training/_compile.py,
// compile_model); torchtitan each transformer block (apply_compile).
// docs/stacks.md, "torch.compile".
#pragma once

#include <cstdint>
#include <vector>

#include "graph/dtype.h"
#include "graph/graph_analysis.h"
#include "graph/layer_graph.h"

namespace headroom::planner {

// The tensors the partitioner saves for block `block` (indices into
// graph.tensors, ascending), with sizes at (batch, seq). Empty when the block
// saves nothing in eager mode either.
std::vector<int> partitioner_saves(const graph::LayerGraph& graph, const graph::GraphAnalysis& analysis,
                                   int block, graph::DType compute_dtype, int64_t batch, int64_t seq);

// Rewrites `analysis` so that every checkpointable block (the decoder layers the
// stacks compile; embeddings, heads and losses are not) saves what the
// partitioner saves. Each saved tensor is held by the first node on the autograd
// graph that produces or reads it, so the simulator keeps it from that node's
// forward to its backward.
void apply_compiled_blocks(const graph::LayerGraph& graph, graph::GraphAnalysis& analysis,
                           graph::DType compute_dtype, int64_t batch, int64_t seq);

}  // namespace headroom::planner
