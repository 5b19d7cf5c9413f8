// What would change the answer, each with the plan it gives (memory, time per
// sample, what to apply): for a run that fits nowhere, for one short of host RAM
// or disk only, and the changes beyond the plan's space (may_change.h) that
// would make a run that fits faster.
#pragma once

#include <vector>

#include "planner/predict/planner.h"

namespace headroom::planner {

// For a run no plan fits: more or larger GPUs, fewer trainable parameters,
// offload the user ruled out, every knob, a loss without logits, 8-bit AdamW
// states, a shorter sequence.
std::vector<Suggestion> suggestions_for(const ModelContext& context, const RunSettings& settings);

// For a run whose fastest GPU plan `gpu_only` needs more host RAM or disk than given.
std::vector<Suggestion> budget_suggestions(const RunSettings& settings, const Plan& gpu_only);

// For a run that fits at `best_ms` per sample: every knob where the stack's space
// has fewer, and a loss without logits, each where it is 2% faster or more.
std::vector<Suggestion> beyond_the_space(const RunSettings& settings, double best_ms);

}  // namespace headroom::planner
