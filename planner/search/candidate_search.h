// The search over global configurations: for each micro-batch, ZeRO stage and
// offload the run allows, the blocks' choices solved exactly within an allocator
// budget and the plan they make predicted; the fastest per sample wins. The
// building block of find_plan (plan_search.cc), which sweeps it over budgets,
// micro-batches and sequence lengths.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "planner/predict/planner.h"
#include "planner/settings/may_change.h"
#include "planner/search/plan_contexts.h"

namespace headroom::planner {

// The fastest plan a search found, and the fastest that fits only the GPU.
struct Candidate {
  bool found = false;
  Plan plan;
  double sample_ms = 0;
  // The fastest plan that fits the GPU but not host RAM or disk: when nothing
  // fits, it says which budget is short (issue 14: a GPU peak of 18 GiB was
  // reported as "no plan fits even with 64x the GPU memory" when host RAM was).
  bool gpu_only = false;
  Plan gpu_only_plan;
  double gpu_only_ms = 0;

  // Candidates come simplest first; a more complex one must be faster by more
  // than the model's resolution (0.1%) to win.
  void offer(Plan&& candidate, double ms) {
    if (!found || ms < sample_ms * (1 - 1e-3)) {
      found = true;
      plan = std::move(candidate);
      sample_ms = ms;
    }
  }
  // The same for a plan that fits the GPU but not host RAM or disk.
  void offer_gpu_only(const Plan& candidate, double ms) {
    if (!gpu_only || ms < gpu_only_ms * (1 - 1e-3)) {
      gpu_only = true;
      gpu_only_plan = candidate;
      gpu_only_ms = ms;
    }
  }
};

// What one search covers: its budgets and micro-batches.
struct SearchOptions {
  int64_t budget = 0;       // allocator bytes for the block solver
  std::vector<int64_t> micro_batches;
  int64_t gpu_budget = 0;   // what the whole prediction (context included) must stay within
  bool simulate_allocator = true;  // frontier sweeps use the block walk alone
  KnobSet knobs;                   // what the plans may change (planner/settings/may_change.h knobs_for)
};

// The run's own budgets over `micro_batches`, less those whose sizes leave int64.
SearchOptions search_options(const ModelContext& context, const RunSettings& settings,
                             std::vector<int64_t> micro_batches);

// The same search with `factor` times the room, to see what more memory buys.
SearchOptions widened(const SearchOptions& options, double factor);

// Divisors of the per-rank batch, ascending: the micro-batches that keep the
// global batch exact with whole accumulation steps (a spread of them when many).
std::vector<int64_t> micro_batch_candidates(const RunSettings& settings);

// The fastest plan over all global candidates at the options' micro-batches, for
// an allocator budget. Host RAM and disk are checked on the full prediction.
// `points` (optional) receives every plan that fits all budgets; `evaluated`
// (optional) counts the configurations tried; `progress` is told each one.
// Each candidate is priced in its own plan's context from `contexts`.
Candidate search_candidates(PlanContexts& contexts, const RunSettings& settings, const SearchOptions& options,
                            std::vector<FrontierPoint>* points, int* evaluated, const Progress& progress);

// The settings fits_at searches for micro-batch `mb` at length `seq`: one micro-step
// of `mb`, no global batch, the micro-batch fixed; another length is `fit --seq`'s run.
RunSettings fits_at_probe(const ModelContext& base, const RunSettings& settings, int64_t mb, int64_t seq);

// Whether any global configuration fits micro-batch `mb` at sequence length `seq`.
bool fits_at(const ModelContext& base, const RunSettings& settings, int64_t mb, int64_t seq);

// The largest value in [1, limit] that `fits`, for a `fits` monotone in it; 0 if 1 does not.
int64_t largest_fitting(int64_t limit, const std::function<bool(int64_t)>& fits);

}  // namespace headroom::planner
