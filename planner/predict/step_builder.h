// Assembles the step model (memory terms and block times) for one global
// configuration, micro-batch and sequence length. Shared by predict() and the
// plan search.
#pragma once

#include <cstdint>
#include <string>

#include "planner/time/block_profile.h"
#include "planner/memory/model_states.h"
#include "planner/predict/model_context.h"
#include "planner/predict/step_model.h"

namespace headroom::planner {

struct BuiltStep {
  StepModel model;
  ModelStates states;
  int64_t persistent = 0;
  double model_flops = 0;  // forward + backward FLOPs of one micro-step
  int64_t reference_weights = 0;  // DPO's and GRPO's frozen reference copy, in StepModel::base
  int64_t kv_cache = 0;           // GRPO: the generation's KV cache at its longest (predict/grpo_phases.h)
  std::string generation_at;      // GRPO: where the generation peaks, "prefill" or "decode"
};

BuiltStep build_step(const ModelContext& context, const RunSettings& settings,
                     const GlobalConfig& config, const StepProfile& profile,
                     Accounting accounting);

// GPU bytes left for the caching allocator: capacity minus the safety margin and
// the CUDA context (outside the allocator).
int64_t gpu_budget_bytes(const ModelContext& context, const RunSettings& settings);
int64_t context_bytes(const ModelContext& context, const RunSettings& settings);
int64_t allocator_budget(const ModelContext& context, const RunSettings& settings);

}  // namespace headroom::planner
