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
#include "planner/predict/simulator_options.h"

namespace headroom::planner {

Simulation simulate(const ModelContext& context, const RunSettings& settings,
                    const GlobalConfig& config, const std::vector<BlockChoice>& blocks,
                    const SimulatorOptions& options = {});

}  // namespace headroom::planner
