// GRPO's defaults and its generation batch, as TRL 1.16's GRPOConfig sets them
// (trl/trainer/grpo_config.py; docs/stacks.md, "Recipes").
#pragma once

#include <cstdint>

#include "planner/settings/run_settings.h"

namespace headroom::planner {

// The reference GRPO takes by default: none (beta 0, GRPOConfig's default).
inline constexpr Reference kGrpoDefaultReference = Reference::kNone;
// GRPOConfig.max_completion_length's default.
inline constexpr int64_t kGrpoDefaultCompletion = 512;

// Completions one generation samples on a GPU: micro_batch x steps_per_generation
// (GRPOConfig.__post_init__: generation_batch_size; steps_per_generation defaults to
// the accumulation steps).
inline int64_t grpo_generation_rows(const RunSettings& settings) {
  return settings.micro_batch * settings.steps_per_generation.value_or(settings.grad_accum);
}

// Whether TRL computes the old policy's log-probs in a no-grad pass after generating:
// when generation is misaligned with the optimizer step (gradient_accumulation_steps
// not a multiple of steps_per_generation x num_iterations; num_iterations > 1 is
// refused) or with vLLM's importance-sampling correction on (its default)
// (trl/trainer/grpo_trainer.py 1.16.0, _generate_and_score_completions).
inline bool grpo_old_logprob_pass(const RunSettings& settings, bool vllm_generates) {
  const int64_t every = settings.steps_per_generation.value_or(settings.grad_accum);
  return vllm_generates || (every > 0 && settings.grad_accum % every != 0);
}

inline int64_t grpo_completion_tokens(const RunSettings& settings) {
  return settings.completion_tokens.value_or(kGrpoDefaultCompletion);
}

}  // namespace headroom::planner
