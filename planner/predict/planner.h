// The planner's entry points: predict a given run (`headroom fit`) and find the
// fastest plan that fits (`headroom plan`), with the memory/time frontier, the
// largest micro-batch and sequence length that fit, and what would make a run
// fit when nothing does. Deterministic: same inputs, same plan.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "graph/status.h"
#include "planner/predict/model_context.h"
#include "planner/predict/plan.h"
#include "planner/predict/prediction.h"
#include "planner/settings/run_settings.h"

namespace headroom::planner {

struct FrontierPoint {
  int64_t gpu_total = 0;        // bytes, peak reserved + context
  double sample_ms = 0;         // time per sample
  GlobalConfig config;
  int checkpointed = 0;
  int offloaded = 0;
};

struct Suggestion {
  std::string change;     // e.g. "use 2 GPUs with ZeRO-3", "an H100 80 GB", "QLoRA (r=16)"
  std::string detail;     // what the prediction becomes, in words
  int64_t gpu_total = 0;  // predicted peak with the change
  int64_t gpu_budget = 0;
  double sample_ms = 0;
};

struct PlanResult {
  bool found = false;              // some plan fits all budgets
  Plan best;                       // the fastest that fits (or the least-memory one, when none fits)
  std::vector<FrontierPoint> frontier;  // Pareto: memory vs time per sample, ascending memory
  int64_t max_micro_batch = 0;     // largest micro-batch with some fitting plan (0: none)
  int64_t max_seq_len = 0;         // largest S with micro-batch 1 (0: none)
  std::vector<Suggestion> suggestions;  // when nothing fits
  // What the search could change, in words (planner/settings/may_change.h), and
  // whether that is the stack's own space (no may_change given).
  std::string space;
  bool space_is_stack = true;
  // When a plan fits: changes beyond that space that make it faster.
  std::vector<Suggestion> alternatives;
  // When nothing fits: the budgets that are short, "GPU memory", "host RAM" or
  // "disk". Host RAM or disk alone: `best` is the fastest plan that fits the
  // GPU, and the suggestions are for the budget that is short.
  std::vector<std::string> short_of;
  int configs_evaluated = 0;
  std::vector<std::string> warnings;  // assumptions and input problems the user should see
};

using Progress = std::function<void(int done, int total)>;

// Searches ZeRO stage, optimizer/param offload and micro-batch within what the
// settings allow, solving the per-block choice exactly for each.
PlanResult find_plan(const ModelContext& context, const RunSettings& settings,
                     const Progress& progress = {});

// The answer of `headroom fit`: the run as given, and the best plan when it does not fit.
struct FitAnswer {
  Plan as_given;
  bool fits = false;
  PlanResult alternative;  // filled when !fits
  std::vector<std::string> warnings;  // assumptions and input problems the user should see
};
Result<FitAnswer> fit(const RunSettings& settings);
Result<PlanResult> plan(const RunSettings& settings, const Progress& progress = {});

}  // namespace headroom::planner
