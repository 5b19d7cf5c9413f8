// DPO's preference pairs (TRL's DPOTrainer, trl/trainer/dpo_trainer.py, 1.16.0):
// DataCollatorForPreference stacks the chosen rows, then the rejected rows, into one
// [2 x micro-batch, length] batch (prompt repeated for both), and _compute_loss runs
// the policy over it once. So every tensor, FLOP and scratch that grows with the
// batch grows twice as fast per sample (a pair). docs/stacks.md, "Recipes".
#pragma once

#include <cstdint>

#include "graph/layer_graph.h"

namespace headroom::planner {

// Rows of the policy's batch per sample: a chosen and a rejected completion.
inline constexpr int64_t kDpoRowsPerPair = 2;

// Rewrites every batch-dependent size of `graph` (tensors, linear rows, FLOPs,
// traffic, scratch) to twice its rows per sample. Sizes that do not grow with the
// batch (parameters, fixed buffers) are left.
void apply_preference_pairs(graph::LayerGraph& graph);

}  // namespace headroom::planner
