#include "planner/memory/step_and_host_states.h"

#include "planner/memory/optimizer_step.h"
#include "planner/memory/sharded_states.h"
#include "planner/settings/stack.h"

namespace headroom::planner {
namespace {

// DeepSpeed NVMe offload keeps pinned staging buffers in host RAM: the
// offload_optimizer default buffer_count 4 and offload_param buffer_count 5 with
// buffer_size 1e8 elements (DeepSpeed config docs, "offload_param"/"offload_optimizer").
constexpr int64_t kNvmeOptimizerBufferBytes = 4LL * 100'000'000 * 4;
constexpr int64_t kNvmeParamBufferBytes = 5LL * 100'000'000 * 2;

// Whether the run's optimizer makes its states at its first step(). torch.optim
// creates them there (torch/optim/adam.py _init_group: `if len(state) == 0`,
// zeros_like(p) per state), and so do bitsandbytes (optim/optimizer.py
// Optimizer8bit.step: init_state when the state is empty), torchao's low-bit
// AdamW and transformers' Adafactor. So at step 1 they go into the cached blocks the
// freed activations left, and the next step's activations may find theirs taken.
// DeepSpeed makes them at construction, "to allocate optimizer state at the
// beginning of training instead of after activations have been allocated"
// (runtime/bf16_optimizer.py initialize_optimizer_states; stage_1_and_2.py and
// zero/stage3.py step once with zero gradients likewise).
bool creates_states_at_first_step(const RunSettings& settings) { return !through_deepspeed_engine(settings); }

}  // namespace

void add_optimizer_step(StateWalk& w) {
  ModelStates& out = w.out;
  OptimizerStepInputs step;
  step.optimizer = w.settings.optimizer;
  step.impl = resolve_stack(w.settings).top.optimizer_impl;
  // bitsandbytes' paged AdamW (32-bit) is no torch.optim: Optimizer8bit.step updates
  // each parameter in one kernel, in place (optim/optimizer.py update_step), with none
  // of foreach's or the for-loop's temporaries, as its 8-bit AdamW (optimizer_step.cc).
  // Stepped in backward (torchtune's optimizer_in_bwd) it stays in backward.
  const bool torch_loop = step.impl == OptimizerImpl::kForeach || step.impl == OptimizerImpl::kForLoop;
  if (pages_states(w.settings) && torch_loop) step.impl = OptimizerImpl::kFused;
  step.optimizer_on_gpu = w.optimizer_on_gpu;
  step.gpu_state_bytes = out.optimizer;
  step.state_tensors = out.state_tensors;
  step.largest_state_bytes = w.largest_state;
  step.largest_grad_bytes = w.largest_grad;
  step.largest_adafactor_step_bytes = w.largest_adafactor_step;
  // ZeRO-3 means DeepSpeed's stage 3 unless the stack shards with FSDP2, whose
  // reduce-scatter writes fp32 sharded gradients directly (torchtitan, torchtune, litgpt).
  if (w.shard_params && w.optimizer_on_gpu && !w.fsdp) {
    // flatten() concatenates the 16-bit partition (a copy), .to(fp32) converts it:
    // both exist for a moment, then the fp32 copy lives through the sub-group's step.
    const int64_t grad_width = grad_bytes_per_element(w.precision);
    const int64_t partition = ceil_div(out.trainable_params, w.world);
    const int64_t per_element = 4 + (grad_width < 4 ? grad_width : 0);
    step.zero3_fp32_subgroup_grad_bytes =
        w.account_bytes(std::min(partition, w.settings.sub_group_elements) * per_element);
  }
  const OptimizerStepMemory step_memory = optimizer_step_memory(step);
  out.step_transient = step_memory.step_transient + zero2_step_grad_copies(w);
  out.grads_in_backward = step_memory.in_backward;
  out.in_backward_bytes = step_memory.in_backward_bytes;
  out.step_transient_tensors = step_memory.step_transient_tensors;
  // Optimizer-in-backward makes each state in its gradient hook: not replayed.
  out.states_created_lazily =
      creates_states_at_first_step(w.settings) && !step_memory.in_backward && !out.state_tensors.empty();
  if (w.torchao_offload && !w.keep_gpu_grads) {
    // offload_gradients: each gradient lives from its production to the end of
    // its copy out (record_stream), one at a time; the few kept for parameters
    // under 4096 elements are priced the same way.
    out.grads_in_backward = true;
    out.in_backward_bytes = w.largest_grad;
  }
}

void add_host_and_disk(StateWalk& w) {
  ModelStates& out = w.out;
  const int ranks_per_node = w.settings.gpus_per_node;
  if (w.config.offload_optimizer == Offload::kCpu) out.host_offload += w.host_optimizer * ranks_per_node;
  if (w.config.offload_optimizer == Offload::kNvme) {
    out.nvme += w.host_optimizer * ranks_per_node;
    out.host_offload += kNvmeOptimizerBufferBytes * ranks_per_node;
  }
  if (w.config.offload_param == Offload::kCpu) out.host_offload += w.host_params * ranks_per_node;
  if (w.config.offload_param == Offload::kNvme) {
    out.nvme += w.host_params * ranks_per_node;
    out.host_offload += kNvmeParamBufferBytes * ranks_per_node;
  }
  out.checkpoint = w.checkpoint_weights + (w.settings.save_optimizer_state ? w.checkpoint_optimizer : 0);
}

}  // namespace headroom::planner
