// Prediction of one run with given decisions: memory at the peak by category
// (block walk, and the caching-allocator simulation on top), host RAM, disk and
// step time. Used by `fit` for the run as given, by the plan search for each
// candidate, and by every command that reads a plan file.
#pragma once

#include <vector>

#include "planner/model_context.h"
#include "planner/plan.h"

namespace headroom::planner {

// Memory and time of one run with these decisions. With `simulate_allocator`
// the caching-allocator simulation adds fragmentation and out-of-memory checks
// (about as costly again as the rest; frontier sweeps leave it out).
Prediction predict(const ModelContext& context, const RunSettings& settings,
                   const GlobalConfig& config, const std::vector<BlockChoice>& blocks,
                   bool simulate_allocator = true);

}  // namespace headroom::planner
