// GRPO's phases before the training forward (TRL 1.16's GRPOTrainer,
// trl/trainer/grpo_trainer.py: _prepare_inputs -> _generate_and_score_completions),
// priced beside the step walk (docs/memory-model.md, "GRPO's generation";
// docs/stacks.md, "Recipes"). Both run at the start of a micro-step, after the
// Trainer's zero_grad (gradients None) unless a generation feeds fewer micro-steps
// than the accumulation, with the weights and optimizer states resident:
// - generation: transformers' generate (generation/utils.py _sample, 5.23.0) under
//   TRL's unwrap_model_for_generation and torch.no_grad() over micro-batch x
//   steps_per_generation completions. The prefill runs every decoder layer over the
//   prompts without autograd, the decode loop grows a DynamicCache
//   (cache_utils.py DynamicLayer.update: torch.cat per layer, K then V, so one layer's
//   old K or V lives beside its new one), and each step keeps the last token's logits
//   as an fp32 copy and their softmax (fp32) until the next step replaces them;
// - the log-prob pass (beta != 0: the reference, a frozen copy or the adapter-disabled
//   base): _get_per_token_logps_and_entropies under torch.no_grad() in micro-batches,
//   each block at its no-grad peak, the fused head over the completion; with vLLM, the
//   old policy's pass too (grpo_trainer.py: old_per_token_logps under
//   vllm_importance_sampling_correction, its default).
// With vLLM (mechanisms/vllm_engine.h) generate does not run on the trainer: colocated,
// vLLM's share is held all step (vllm_resident) or, in sleep mode, taken for generation
// only (vllm_generation); a server holds nothing here.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "graph/layer_graph.h"
#include "graph/status.h"
#include "planner/mechanisms/kv_cache.h"
#include "planner/memory/state_bytes.h"
#include "planner/predict/model_context.h"
#include "planner/time/block_profile.h"

namespace headroom::planner {

struct GrpoPhases {
  int64_t generation = 0;    // above the resident base, at the generation's peak
  int64_t logprob_pass = 0;  // above the base, at the no-grad log-prob pass's peak (0: none)
  int64_t kv_cache = 0;      // the cache at its longest (prompt + completion - 1 tokens), in `generation`
  std::string generation_at;  // "prefill", "decode" or "vLLM"
  int64_t vllm_resident = 0;    // colocated vLLM's share, held all step
  int64_t vllm_generation = 0;  // sleep mode: vLLM's share while it generates, in `generation`
};

// The phases of a GRPO run: `training` is the step's profile at (micro-batch, seq).
GrpoPhases grpo_phases(const ModelContext& context, const RunSettings& settings, const StepProfile& training,
                       Accounting accounting);

}  // namespace headroom::planner
