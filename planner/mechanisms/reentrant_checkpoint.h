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

#include "graph/layer_graph.h"

namespace headroom::planner {

// In execution order, freezes the parameters of each checkpointed block
// (`checkpointed[b]`) none of whose inputs from outside the block requires grad,
// so that what follows it sees that no gradient flows there. Returns how many
// trainable parameters it froze.
int apply_reentrant_checkpointing(graph::LayerGraph& graph, const std::vector<bool>& checkpointed);

}  // namespace headroom::planner
