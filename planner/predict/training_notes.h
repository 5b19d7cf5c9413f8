// What a plan's choices change in training itself, beside its memory and time:
// notes for the user, not errors (the run is still priced as asked).
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "graph/layer_graph.h"
#include "planner/memory/model_states.h"

namespace headroom::planner {

// The notes for running `graph` with `config`, each naming `what` ("the run",
// "the plan"). Today one: gradient accumulation over a model with BatchNorm
// layers (nodes of op "batch_norm*"), which normalize and update their running
// statistics per micro-batch, so accumulating k micro-batches of b is not one
// batch of k*b. Empty without accumulation or without BatchNorm.
std::vector<std::string> training_notes(const graph::LayerGraph& graph, const GlobalConfig& config,
                                        std::string_view what);

}  // namespace headroom::planner
