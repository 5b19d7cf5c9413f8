#include "planner/memory/optimizer_step.h"

namespace headroom::planner {

OptimizerStepMemory optimizer_step_memory(const OptimizerStepInputs& in) {
  OptimizerStepMemory out;
  if (!in.optimizer_on_gpu) return out;  // the step runs on the host (DeepSpeedCPUAdam)
  // Only torch's AdamW has the foreach / for-loop temporaries priced here:
  // _multi_tensor_adamw allocates exp_avg_sq_sqrt = _foreach_sqrt(exp_avg_sqs), one
  // state-sized list per (device, dtype) group, and updates everything else in place;
  // _single_tensor_adamw makes denom = exp_avg_sq.sqrt() / bias_correction2_sqrt then
  // adds eps in place: two temporaries of one parameter at a time; _fused_adamw_ none
  // (torch/optim/adamw.py, adam.py). bitsandbytes 8-bit updates in one blockwise
  // kernel in place (bitsandbytes/optim/optimizer.py); SGD with momentum updates its
  // buffer in place.
  const bool torch_adamw = in.optimizer == OptimizerKind::kAdamW;
  // DeepSpeed ZeRO-3 steps sub-group by sub-group; before each it copies the
  // sub-group's 16-bit gradient partition to fp32 (stage3.py
  // _prepare_fp32_grad_for_sub_group) and drops it after the step.
  out.step_transient += in.zero3_fp32_subgroup_grad_bytes;
  // transformers' Adafactor loops over the parameters whatever the impl says.
  if (in.optimizer == OptimizerKind::kAdafactor) out.step_transient += in.largest_adafactor_step_bytes;
  switch (in.impl) {
    case OptimizerImpl::kForeach:
      if (torch_adamw) {
        out.step_transient += in.gpu_state_bytes / 2;  // one of exp_avg, exp_avg_sq
        // A list, one tensor per exp_avg_sq (the second of each parameter's pair).
        for (size_t i = 1; i < in.state_tensors.size(); i += 2) out.step_transient_tensors.push_back(in.state_tensors[i]);
      }
      break;
    case OptimizerImpl::kForLoop:
      if (torch_adamw) out.step_transient += 2 * in.largest_state_bytes;
      break;
    case OptimizerImpl::kFused:
      break;
    case OptimizerImpl::kInBackward:
      // torchtune OptimizerInBackward (modules/optim.py): one optimizer per parameter,
      // stepped from a post-accumulate-grad hook that then frees the gradient. Each
      // per-parameter optimizer is torch's default (foreach over one tensor).
      out.in_backward = true;
      out.in_backward_bytes = in.largest_grad_bytes + (torch_adamw ? in.largest_state_bytes : 0);
      break;
  }
  return out;
}

// transformers 5.x optimization.py Adafactor.step, one parameter at a time:
// `grad = grad.float()` and `p_data_fp32 = p.float()` copy a 16-bit gradient and
// parameter to fp32 for the whole update (the same tensors when already fp32);
// `update = grad**2 + eps` makes a second tensor before the first is dropped, as do
// `update = _approx_sq_grad(...)` (torch.mul of the row and column factors, the old
// update still bound) and `p_data_fp32.add_(-update)`: two update-sized tensors at
// each of those points. The row/column states and norms are vectors and scalars.
int adafactor_fp32_temporaries(bool param_16bit) { return param_16bit ? 4 : 2; }

}  // namespace headroom::planner
