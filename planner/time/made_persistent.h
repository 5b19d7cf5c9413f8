// Persistent tensors the model makes in its forward (RoPE's cos/sin tables, which
// transformers' model forward computes once and hands to every layer): unlike the
// graph's inputs, which the caller holds all step, each lives from its producer's
// forward only until the backward of the earliest block that reads it. Then the last
// save of it (a rotary mul's, or a checkpoint's inputs) is released, and the forward's
// frame that made it returned long before (docs/memory-model.md, "Made persistent
// tensors"). The step walk prices them live only there.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "graph/graph_analysis.h"
#include "graph/layer_graph.h"
#include "planner/settings/run_settings.h"
#include "planner/settings/stack_choices.h"
#include "planner/settings/versions.h"

namespace headroom::planner {

struct MadePersistent {
  int64_t bytes = 0;      // accounted bytes, as StepProfile::persistent counts them
  int producer_block = 0;
  int first_reader = 0;   // the earliest block with a node reading it
  int last_reader = 0;    // the latest such block
};

// The persistent tensors of `graph` that a node makes, with their accounted bytes
// (`bytes`, per tensor), made under no_grad (as transformers' rotary modules make cos
// and sin) or with a gradient through their producer (T5's encoder output); graph
// inputs, what the caller holds without autograd (mechanisms/loss_variants.h
// held_by_caller) and leaves that require grad (Tensor::requires_grad) are not among them.
std::vector<MadePersistent> made_persistent(const graph::LayerGraph& graph, const graph::GraphAnalysis& analysis,
                                            const std::vector<int64_t>& bytes);

// Whether the tables a graph makes once per forward are made per forward at all, and
// let go after their readers' backward, under `stack`. Not where the model holds them
// as buffers all step: litgpt's GPT keeps cos and sin (litgpt 0.5.13 litgpt/model.py,
// GPT.set_max_seq_length registers them, persistent=False, and forward slices views
// of them), torchtitan's Llama its freqs_cis (models/llama3/model/model.py,
// register_buffer). Nor under a reentrant checkpoint (`reentrant_recompute`): each
// layer's CheckpointFunction node keeps the partial holding them (transformers 5.23.0
// modeling_layers.py GradientCheckpointingLayer.__call__ passes them as keyword
// arguments bound by functools.partial; torch 2.11 utils/checkpoint.py
// CheckpointFunction.forward stores it as ctx.run_function), and a ctx attribute lives
// as long as the node, to the end of the whole backward (docs/memory-model.md,
// "Categories at the peak").
bool made_tables_released(Stack stack, bool reentrant_recompute);

// Bytes of `made` not live while block `block` runs forward (made by a later block)
// or backward (the earliest reader's backward already done); at the optimizer step
// (`block` -1) none of them is live.
int64_t made_persistent_dead_forward(const std::vector<MadePersistent>& made, int block);
int64_t made_persistent_dead_backward(const std::vector<MadePersistent>& made, int block);

// Whether the checkpoint frames, not saved tensors, keep the made tables that
// checkpointed layers read (their bytes unchanged, their label transient) under
// non-reentrant checkpointing with the transformers release in `versions`. From 4.52
// the decoder layers are GradientCheckpointingLayers, which bind their keyword
// arguments (position_embeddings, attention_mask, position_ids) into the
// functools.partial they checkpoint; torch's non-reentrant frame keeps that partial
// and saves only the positional tensors (utils/checkpoint.py _NoopSaveInputs), and
// the recompute's saves go to the frame too (docs/memory-model.md, "Made persistent
// tensors"). Before 4.52 the model passes them positionally to
// _gradient_checkpointing_func, so _NoopSaveInputs saves them: activations, as
// without checkpointing, where the layers' rotary muls save them. No release given:
// the current one. Only for stacks that run transformers' models.
bool made_tables_in_frames(Stack stack, const PackageVersions& versions);

// Bytes of `made` the walk holds live at its peak (`phase` "forward" or "backward" of
// `block`; at the optimizer step none) whose readers, every block from the first to
// the last, are checkpointed in `choices`: a kept or offloaded reader saves them.
int64_t made_persistent_framed(const std::vector<MadePersistent>& made, const std::vector<BlockChoice>& choices,
                               std::string_view phase, int block);

}  // namespace headroom::planner
