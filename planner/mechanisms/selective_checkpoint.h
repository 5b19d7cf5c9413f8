// What a checkpointed block keeps beyond its inputs under op-level selective
// activation checkpointing as torchtitan applies it: the policy marks the
// outputs of aten.mm (all but every second one, counted from each block's
// forward) and of the SDPA flash / memory-efficient kernels MUST_SAVE; every
// other op is recomputed in backward (torchtitan/parallelisms/parallelize_llama.py
// at 9dec370, _apply_ac_to_transformer_block; torch/utils/checkpoint.py,
// create_selective_checkpoint_contexts). docs/stacks.md, "Checkpointing".
#pragma once

#include <vector>

#include "graph/graph_analysis.h"
#include "graph/layer_graph.h"

namespace headroom::planner {

// Per block, the tensors the policy keeps (indices into graph.tensors), in the
// block's execution order. A linear without bias is one aten.mm (F.linear folds
// the batch dimensions into a 2-D mm); with a bias it is aten.addmm, which the
// policy neither saves nor counts. The SDPA node keeps its output and logsumexp.
// LoRA adapters folded into a linear node count as that node's one mm (their two
// small mms are not counted: docs/stacks.md says what this misses).
std::vector<std::vector<int>> selective_op_saves(const graph::LayerGraph& graph,
                                                 const graph::GraphAnalysis& analysis);

}  // namespace headroom::planner
