// The step simulator: replays one optimizer step of a plan (every micro-step of
// the accumulation loop, then the optimizer step) tensor by tensor on a model
// of the PyTorch CUDA caching allocator (caching_allocator.h), with roofline
// kernel times, offload copies on their own streams and ZeRO collectives. It
// sees what the planner's block-level walk abstracts: the order of every
// allocation and free, segment rounding and block splitting, so reserved
// memory and fragmentation are predicted rather than assumed.
#pragma once

#include <vector>

#include "graph/status.h"
#include "planner/predict/model_context.h"
#include "planner/predict/simulation.h"

namespace headroom::planner {

struct SimulatorOptions {
  bool record_events = true;      // keep the timeline (large for big graphs)
  int max_memory_samples = 20000; // the curve is thinned to at most this many points
  // Replay all grad_accum micro-steps instead of the first three and the last
  // (the identical ones between are accounted, not replayed): for tests.
  bool replay_every_micro_step = false;
  // false: the optimizer's states are resident from the start even where it makes
  // them at its first step (ModelStates::states_created_lazily), one step: for tests.
  bool lazy_optimizer_states = true;
};

Simulation simulate(const ModelContext& context, const RunSettings& settings,
                    const GlobalConfig& config, const std::vector<BlockChoice>& blocks,
                    const SimulatorOptions& options = {});

}  // namespace headroom::planner
