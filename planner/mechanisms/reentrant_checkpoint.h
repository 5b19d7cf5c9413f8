// Reentrant activation checkpointing (torch.utils.checkpoint with
// use_reentrant=True, torch 2.11 utils/checkpoint.py CheckpointFunction): the
// block runs forward under no_grad inside an autograd Function, and a Function
// none of whose tensor inputs requires grad returns outputs that require none.
// The block's parameters then get no gradient, whatever their requires_grad:
// under LoRA with frozen embeddings and no input-gradient hook (transformers 5.x
// adds none for a model whose main input is pixel_values; 4.x none for a
// PeftModel), no adapter inside a checkpointed block trains, and no optimizer
// state is made for it (torch.optim skips a parameter whose .grad is None).
// The meta-device oracle's ViT-B/16 LoRA runs show it (bench/oracle README).
#pragma once

#include <vector>

#include "graph/graph_analysis.h"
#include "graph/layer_graph.h"

namespace headroom::planner {

// In execution order, freezes the parameters of each checkpointed block
// (`checkpointed[b]`) none of whose inputs from outside the block requires grad,
// so that what follows it sees that no gradient flows there. Returns how many
// trainable parameters it froze.
int apply_reentrant_checkpointing(graph::LayerGraph& graph, const std::vector<bool>& checkpointed);

// The recompute of a reentrant checkpoint (CheckpointFunction.backward, torch 2.11
// utils/checkpoint.py) runs the block on detach_variable's copies of its inputs:
// leaves that require grad where the inputs did, inside an autocast context of its
// own. Autocast caches the 16-bit cast of an fp32 leaf that requires grad
// (aten/src/ATen/autocast_mode.cpp cached_cast, can_try_cache) until that context
// exits, after the block's forward: one cast per such input, held through the
// recompute and handed to every op that casts the input again. (Non-reentrant
// recomputation reads the inputs themselves, non-leaves: every op casts its own.)
// BERT under autocast, whose layers take fp32 LayerNorm outputs straight into
// query, key and value, holds one bf16 [B, S, h] more at its recompute's peak
// (the oracle's reentrant BERT LoRA runs: 24 MiB at 32 x 512).
struct RecomputeCastCache {
  std::vector<int> held;    // tensor indices: the first such cast of each input
  std::vector<int> shared;  // later casts of the same inputs, the cached tensor again: no bytes of their own
};

// The cached casts of block `block`'s reentrant recompute: autocast's 16-bit casts
// ("<node>.cast:<input>", planner/mechanisms/autocast.h) of an fp32 tensor made
// outside the block that requires grad.
RecomputeCastCache reentrant_cast_cache(const graph::LayerGraph& graph, const graph::GraphAnalysis& analysis,
                                        int block);

}  // namespace headroom::planner
