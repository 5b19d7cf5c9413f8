// GPU memory that optimizer.step() allocates beyond parameters, gradients and
// states, by optimizer implementation (planner/settings/stack.h), and what optimizer-in-
// backward changes about gradients. Sources in docs/stacks.md ("The optimizer step").
#pragma once

#include <cstdint>
#include <vector>

#include "planner/settings/run_settings.h"

namespace headroom::planner {

struct OptimizerStepInputs {
  OptimizerKind optimizer = OptimizerKind::kAdamW;
  OptimizerImpl impl = OptimizerImpl::kForeach;
  bool optimizer_on_gpu = true;
  int64_t gpu_state_bytes = 0;      // all optimizer states on this rank's GPU
  // The states as tensors of their own, in creation order (AdamW: exp_avg, exp_avg_sq
  // per parameter; ModelStates::state_tensors); empty where ZeRO keeps flat partitions.
  std::vector<int64_t> state_tensors;
  int64_t largest_state_bytes = 0;  // one state tensor of the largest trainable parameter
  int64_t largest_grad_bytes = 0;   // the gradient of the largest trainable parameter
  // transformers' Adafactor: the fp32 temporaries of the parameter whose step makes the
  // most (adafactor_step_bytes), each allocation rounded as the run accounts it.
  int64_t largest_adafactor_step_bytes = 0;
  // DeepSpeed ZeRO-3 on the GPU: fp32 bytes of its largest optimizer sub-group's
  // gradient partition (0 when not DeepSpeed ZeRO-3).
  int64_t zero3_fp32_subgroup_grad_bytes = 0;
};

struct OptimizerStepMemory {
  int64_t step_transient = 0;  // live during optimizer.step(), on top of grads and states
  // foreach AdamW's share of step_transient as the separate tensors _foreach_sqrt
  // returns, one per exp_avg_sq; empty when the states are one flat buffer.
  std::vector<int64_t> step_transient_tensors;
  // Optimizer in backward: gradients never accumulate; while backward produces
  // one, that gradient and its step's temporaries are what the gradients cost.
  bool in_backward = false;
  int64_t in_backward_bytes = 0;
};

OptimizerStepMemory optimizer_step_memory(const OptimizerStepInputs& inputs);

// How many fp32 tensors of one parameter's size transformers' Adafactor.step holds at
// once while it updates that parameter: 4 for a 16-bit parameter (the fp32 copies of
// its gradient and of itself, and two update tensors), 2 for an fp32 one (two update
// tensors). Sources in optimizer_step.cc.
int adafactor_fp32_temporaries(bool param_16bit);

}  // namespace headroom::planner
