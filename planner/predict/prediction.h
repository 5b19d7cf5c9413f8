// Prediction of one run with given decisions: memory at the peak by category
// (block walk, and the caching-allocator simulation on top), host RAM, disk and
// step time. Used by `fit` for the run as given, by the plan search for each
// candidate, and by every command that reads a plan file.
#pragma once

#include <vector>

#include "planner/predict/model_context.h"
#include "planner/predict/plan.h"

namespace headroom::planner {

// Host memory of one training process before any offload: the Python
// interpreter, torch and the CUDA libraries mapped in, the data loader. An
// assumption (docs/memory-model.md, "Host RAM") until the executor measures it.
inline constexpr int64_t kHostBytesPerRank = 3LL << 30;

// Bytes of bitsandbytes paged optimizer states (`paged`, unified memory) moved
// over the host link per step, both ways, when they do not fit in what the
// process leaves free of the GPU's `capacity` (`held`: reserved plus context):
// all of them twice, or none.
int64_t paged_migrated_bytes(int64_t paged, int64_t capacity, int64_t held);

// Memory and time of one run with these decisions. With `simulate_allocator`
// the caching-allocator simulation adds fragmentation and out-of-memory checks
// (about as costly again as the rest; frontier sweeps leave it out).
Prediction predict(const ModelContext& context, const RunSettings& settings,
                   const GlobalConfig& config, const std::vector<BlockChoice>& blocks,
                   bool simulate_allocator = true);

// The step profile predict() reads, at `micro_batch` in `context` (reserved or
// allocated accounting: profile_step). A search keeps them per context
// (search/plan_contexts.h), so its predictions at one micro-batch profile once.
StepProfile step_profile(const ModelContext& context, const RunSettings& settings, int64_t micro_batch,
                         Accounting accounting);

// predict() with both profiles already made by step_profile at (settings, config.micro_batch).
Prediction predict(const ModelContext& context, const StepProfile& reserved_profile,
                   const StepProfile& allocated_profile, const RunSettings& settings, const GlobalConfig& config,
                   const std::vector<BlockChoice>& blocks, bool simulate_allocator);

// `top` (predict() for `settings`) with the bottom of its band filled in: the
// same run with every mechanism its stack leaves open at its cheapest
// (planner/settings/stack.h). Costs a second prediction; only answers for the run as
// given (fit, simulate, report) need it, the search plans against the top.
Prediction with_band(const ModelContext& context, const RunSettings& settings, const GlobalConfig& config,
                     const std::vector<BlockChoice>& blocks, Prediction top);

}  // namespace headroom::planner
