// A shared weight's gradient in flight while micro-steps accumulate: the bytes autograd's
// input buffer holds beside the `.grad` an earlier micro-step made, per block of backward.
// Sources in shared_grads_accumulating.cc.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "graph/layer_graph.h"
#include "planner/memory/model_states.h"
#include "planner/settings/run_settings.h"

namespace headroom::planner {

// Per block (n of them): the bytes of every trainable shared weight's first partial held
// while that block runs backward, under gradient accumulation with plain autograd
// gradients (no ZeRO, FSDP, optimizer in backward); all zero otherwise.
std::vector<int64_t> shared_grads_held_accumulating(const graph::LayerGraph& graph, const RunSettings& settings,
                                                    const GlobalConfig& config, const ModelStates& states,
                                                    Accounting accounting, size_t n);

}  // namespace headroom::planner
