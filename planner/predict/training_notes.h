// What a plan's choices change in training itself, beside its memory and time:
// notes for the user, not errors (the run is still priced as asked).
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "graph/layer_graph.h"
#include "planner/memory/model_states.h"
#include "planner/settings/run_settings.h"

namespace headroom::planner {

// The notes for running `graph` with `config`, each naming `what` ("the run",
// "the plan"). Today one: gradient accumulation over a model with BatchNorm
// layers (nodes of op "batch_norm*"), which normalize and update their running
// statistics per micro-batch, so accumulating k micro-batches of b is not one
// batch of k*b. Empty without accumulation or without BatchNorm.
std::vector<std::string> training_notes(const graph::LayerGraph& graph, const GlobalConfig& config,
                                        std::string_view what);

// LoRA under transformers' Trainer with checkpointing where no hook makes the input
// embeddings require grad (a model whose main input is not input_ids, ViT:
// pixel_values; any model before transformers 5.x), with adapters in checkpointed blocks:
// nothing makes a checkpointed layer's input require grad, so reentrant checkpointing
// would train none of those adapters (the note says so; the answer prices the
// non-reentrant default, under which they train). Empty otherwise.
std::vector<std::string> reentrant_checkpointing_notes(const graph::LayerGraph& graph, const RunSettings& settings);

}  // namespace headroom::planner
