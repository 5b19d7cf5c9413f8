#include "planner/predict/step_builder.h"

#include <algorithm>

#include "planner/memory/allocator_rounding.h"
#include "planner/memory/state_bytes.h"
#include "planner/predict/ctx_recomputed.h"
#include "planner/predict/deepspeed_gathered.h"
#include "planner/predict/deepspeed_walk.h"
#include "planner/predict/dpo_reference.h"
#include "planner/predict/grpo_phases.h"
#include "planner/predict/shared_grads_accumulating.h"
#include "planner/settings/stack.h"

namespace headroom::planner {

namespace {

// The gradients each block's backward makes in the first (only) micro-step, or
// empty when they all exist from the start: a progressive run's own gradients,
// or FSDP's sharded gradients, made as each unit's backward ends and the root's
// in the final callback, after the first block's (model_states.h, sharded_block_grads).
std::vector<int64_t> grads_made_by_block(const ModelStates& states, const GlobalConfig& config, size_t n) {
  if (config.grad_accum != 1) return {};
  if (states.grads_progressive) return states.block_grads;
  if (states.sharded_block_grads.empty()) return {};
  std::vector<int64_t> made = states.sharded_block_grads;
  made.resize(n, 0);
  if (n > 0) made[0] += states.root_sharded_grads;
  return made;
}

// FSDP2's foreach_reduce frees a layer's unsharded gradients (unsharded_grads.clear())
// right after copying them into the reduce-scatter input and before it allocates the
// reduce output that becomes the sharded gradient (reduce_scatter_comm.allocate), so the
// two never live together: the block's peak holds the input with the larger of them
// (torch 2.11 torch/distributed/fsdp/_fully_shard/_fsdp_collectives.py foreach_reduce).
// Per block: the bytes of the smaller, counted twice by unsharded + input + sharded.
std::vector<int64_t> fsdp2_unsharded_freed_before_output(const ModelStates& states,
                                                         const std::vector<int64_t>& made, size_t n) {
  std::vector<int64_t> freed(n, 0);
  const size_t layers = std::min({n, states.reduce_scatter_block.size(), states.reduce_scatter_input_block.size(),
                                  states.sharded_block_grads.size(), made.size()});
  for (size_t k = 0; k < layers; ++k) {
    int64_t input = states.reduce_scatter_input_block[k];
    if (k == 0) input -= states.fsdp2_root_reduce_scatter;  // the root's reduces in the final callback
    const int64_t unsharded = states.reduce_scatter_block[k] - input;
    if (states.reduce_scatter_block[k] <= 0 || unsharded <= 0) continue;
    freed[k] = std::min(unsharded, states.sharded_block_grads[k]);
  }
  return freed;
}

// FSDP2 keeps a group's reduce-scatter input alive (comm_ctx.reduce_scatter_state) until
// the next group's post_backward drops it before its own foreach_reduce, or the final
// callback does (torch 2.11 _fsdp_param_group.py post_backward, _fsdp_state.py
// _root_post_backward_final_callback). So block k's backward holds the input of the layer
// reduced before it in backward order, not its own: its own comes at its post_backward,
// beside what the next block's backward holds too. Per block: that held input (the last
// layer, first in backward, holds none), with the root's own reduce at block 0 after it.
std::vector<int64_t> fsdp2_reduce_input_held(const ModelStates& states, size_t n) {
  std::vector<int64_t> held(n, 0);
  if (states.reduce_scatter_input_block.empty()) return held;  // FSDP1, or no FSDP
  int64_t previous = 0;
  for (size_t k = n; k-- > 0;) {
    held[k] = previous;
    if (k >= states.reduce_scatter_block.size() || states.reduce_scatter_block[k] <= 0) continue;
    previous = states.reduce_scatter_input_block[k] - (k == 0 ? states.fsdp2_root_reduce_scatter : 0);
  }
  return held;
}

// FSDP's unsharded gradients and reduce-scatter input while each layer's backward
// ends (the root's blocks reduce in the final callback: fsdp2_root_reduce_scatter):
// FSDP2's own reduce output in place of its freed unsharded gradients, the input held
// that of the layer reduced before. Returns the bytes freed per block.
std::vector<int64_t> add_reduce_buffers(const ModelStates& states, const std::vector<int64_t>& made,
                                        StepModel& model) {
  const size_t n = model.grads_bwd.size();
  const std::vector<int64_t> freed = fsdp2_unsharded_freed_before_output(states, made, n);
  for (size_t k = 0; k < std::min(n, states.reduce_scatter_block.size()); ++k) {
    model.grads_bwd[k] += states.reduce_scatter_block[k] - freed[k];
  }
  model.reduce_input_bwd = states.reduce_scatter_input_block;
  model.reduce_input_bwd.resize(n, 0);
  if (states.reduce_scatter_input_block.empty()) return freed;  // FSDP1 reduces its flat gradient
  const std::vector<int64_t> held = fsdp2_reduce_input_held(states, n);
  for (size_t k = 0; k < n; ++k) {
    const int64_t root = k == 0 ? states.fsdp2_root_reduce_scatter : 0;
    const bool reduces = k < states.reduce_scatter_block.size() && states.reduce_scatter_block[k] > 0;
    const int64_t own = reduces ? model.reduce_input_bwd[k] - root : 0;
    model.grads_bwd[k] += std::max(held[k], root) - root - own;  // the held input in place of its own
    model.reduce_input_bwd[k] = std::max(held[k], root);
  }
  return freed;
}

// FSDP1's post-backward set per block (StepModel::post_backward_bwd): a layer unit's
// reduce buffers beyond the unsharded gradient and, in the first micro-step, its new
// sharded gradient; the root's at the first block, whose backward ends the root's
// gradients. _post_backward_hook reshards, casts and reduce-scatters only once autograd
// has joined the unit's gradients (torch 2.11 _runtime_utils.py).
std::vector<int64_t> fsdp1_post_backward(const ModelStates& states, const std::vector<int64_t>& made, size_t n) {
  std::vector<int64_t> post(n, 0);
  const size_t blocks = std::min(n, states.fsdp1_post_backward_block.size());
  for (size_t k = 0; k < blocks; ++k) {
    const bool layer = states.reduce_scatter_block[k] > 0;
    const bool root = k == 0 && states.root_sharded_grads > 0;
    if (!layer && !root) continue;
    post[k] = (k < made.size() ? made[k] : 0) + (layer ? states.fsdp1_post_backward_block[k] : 0) +
              (root ? states.fsdp2_root_reduce_scatter : 0);
  }
  return post;
}

// FSDP1's unsharded gradients before each unit's post-backward (StepModel::unit_grads_bwd):
// its parameters' gradients wait in autograd, for the split of the FlatParameter's views
// to join them into its `.grad` (torch 2.11 _flat_param.py _get_unflat_views_unaligned),
// so no `.grad` holds them: in flight at the peak, the root's too until the first block's.
void set_fsdp1_unit_grads(const ModelStates& states, StepModel& model) {
  const size_t n = model.grads_bwd.size();
  const size_t blocks = std::min(n, states.fsdp1_post_backward_block.size());
  if (blocks == 0) return;
  model.unit_grads_bwd.assign(n, 0);
  model.not_grads.in_flight_bwd.resize(n, 0);
  model.not_grads.in_flight_bwd_before.resize(n, 0);
  int64_t root = 0;
  for (size_t k = n; k-- > 0;) {
    const int64_t own_root = k < states.fsdp2_root_grads.size() ? states.fsdp2_root_grads[k] : 0;
    root += own_root;
    if (k < blocks && model.post_backward_bwd[k] > 0 && states.reduce_scatter_block[k] > 0) {
      model.unit_grads_bwd[k] = states.reduce_scatter_block[k] - states.fsdp1_post_backward_block[k];
    }
    model.not_grads.in_flight_bwd[k] += root;  // the unit's own: LocalPeak::backward_unit_grads
    model.not_grads.in_flight_bwd_before[k] += root - own_root;
  }
}

int64_t at_or_zero(const std::vector<int64_t>& bytes, size_t k) { return k < bytes.size() ? bytes[k] : 0; }

// FSDP2's unsharded gradients per layer (StepModel::unit_grads_bwd): AccumulateGrad sets
// each unsharded parameter's `.grad` as its node runs backward, and the group's
// post_backward, which RegisterPostBackwardFunction runs once the unit's input gradients
// exist, takes them all only after the block's nodes (torch 2.11 _fsdp_param_group.py
// _register_post_backward_hook, post_backward). So the nodes hold them node by node beside
// the input held from the layer reduced before; the post_backward holds them whole, and
// beyond them only the sharded gradient when it outgrows them (post_backward_bwd:
// foreach_reduce frees them before allocating it, fsdp2_unsharded_freed_before_output).
void set_fsdp2_unit_grads(const ModelStates& states, const std::vector<int64_t>& made, StepModel& model) {
  if (states.reduce_scatter_input_block.empty()) return;  // FSDP1, or no FSDP
  const size_t n = model.grads_bwd.size();
  const size_t layers = std::min({n, states.reduce_scatter_block.size(), states.reduce_scatter_input_block.size()});
  model.unit_grads_bwd.assign(n, 0);
  model.unit_grads_in_flight = false;
  for (size_t k = 0; k < layers; ++k) {
    if (states.reduce_scatter_block[k] <= 0) continue;
    const int64_t input = states.reduce_scatter_input_block[k] - (k == 0 ? states.fsdp2_root_reduce_scatter : 0);
    const int64_t unsharded = states.reduce_scatter_block[k] - input;
    const int64_t sharded = k < made.size() ? made[k] - (k == 0 ? states.root_sharded_grads : 0) : 0;
    model.unit_grads_bwd[k] = std::max<int64_t>(0, unsharded);
    model.post_backward_bwd[k] = std::max<int64_t>(0, sharded - model.unit_grads_bwd[k]);
  }
}

// The gradients live while each block runs forward and backward, by sharding,
// accumulation and offload (docs/memory-model.md, section 1, the step walk).
void set_gradients_by_block(const ModelStates& states, const GlobalConfig& config, StepModel& model) {
  const size_t n = model.blocks.size();
  model.grads_bwd.assign(n, 0);
  const std::vector<int64_t> made = grads_made_by_block(states, config, n);
  if (!made.empty()) {
    // Gradients appear as backward reaches each block.
    int64_t running = 0;
    for (size_t k = n; k-- > 0;) {
      running += k < made.size() ? made[k] : 0;
      model.grads_bwd[k] = running;
    }
    model.grads_fwd = 0;
  } else {
    model.grads_fwd = states.grads_full;
    std::fill(model.grads_bwd.begin(), model.grads_bwd.end(), states.grads_full);
  }
  // FSDP's unsharded gradients and reduce-scatter input while each layer's backward
  // ends (the root's blocks reduce in the final callback: fsdp2_root_reduce_scatter).
  const std::vector<int64_t> freed = add_reduce_buffers(states, made, model);
  model.post_backward_bwd = fsdp1_post_backward(states, made, n);
  set_fsdp1_unit_grads(states, model);
  set_fsdp2_unit_grads(states, made, model);
  // Accumulating under no_sync, every unit's unsharded gradient is held from the
  // first micro-step on (priced for the whole step: the last backward frees them unit by unit).
  model.grads_fwd += states.unsynced_grads;
  for (int64_t& grads : model.grads_bwd) grads += states.unsynced_grads;
  // FSDP2's root group keeps its unsharded gradients from its block's backward to
  // the end of backward (it reduces in the final callback).
  int64_t root_grads = 0;
  for (size_t k = std::min(n, states.fsdp2_root_grads.size()); k-- > 0;) {
    root_grads += states.fsdp2_root_grads[k];
    model.grads_bwd[k] += root_grads;
  }
  // FSDP1 CPU offload: each unit's sharded gradient stays from its reduce-scatter
  // (after its block's backward) to the final callback.
  int64_t shards = 0;
  for (size_t k = std::min(n, states.offload_grad_shards.size()); k-- > 0;) {
    model.grads_bwd[k] += shards;
    shards += states.offload_grad_shards[k];
  }
  // The root reduces in the final callback, right after the first block's backward:
  // its reduce-scatter buffers and, under FSDP1 offload, its new gradient shard
  // join every gradient still held then.
  if (n > 0) model.grads_bwd[0] += states.fsdp2_root_reduce_scatter + states.root_offload_grad_shard;
  // Before block k has made any of its own parameters' gradients (its first nodes in
  // backward have none: the loss before lm_head), those are not yet allocated.
  model.grads_bwd_before = model.grads_bwd;
  for (size_t k = 0; k < n; ++k) {
    if (k < made.size()) model.grads_bwd_before[k] -= made[k];
    if (k < states.fsdp2_root_grads.size()) model.grads_bwd_before[k] -= states.fsdp2_root_grads[k];
    model.grads_bwd_before[k] += freed[k];  // the stage before holds no sharded output to overlap
    // FSDP1 and FSDP2: before its first parameter gradient, none of the unit's gradient or reduce buffers.
    if (std::max(at_or_zero(model.post_backward_bwd, k), at_or_zero(model.unit_grads_bwd, k)) > 0) {
      const int64_t root = k < states.fsdp2_root_grads.size() ? states.fsdp2_root_grads[k] : 0;
      const int64_t unit_free = model.grads_bwd[k] - model.post_backward_bwd[k] - model.unit_grads_bwd[k] - root;
      model.grads_bwd_before[k] = std::min(model.grads_bwd_before[k], unit_free);
    }
  }
}

// DPO's reference (planner/predict/dpo_reference.h): a frozen copy adds its weights to
// what is resident all step; a copy or the adapter-disabled base runs a reference forward.
void add_reference(const ModelContext& context, const RunSettings& settings, Accounting accounting,
                   BuiltStep& out) {
  out.model.reference_forward = dpo_reference_forward(settings);
  out.reference_weights = reference_weight_bytes(context, settings, accounting);
  out.model.base += out.reference_weights;
}

// GRPO's generation and log-prob pass (predict/grpo_phases.h). A generation that feeds
// fewer micro-steps than the accumulation runs while gradients are held.
void add_grpo_phases(const ModelContext& context, const RunSettings& settings, const StepProfile& profile,
                     Accounting accounting, BuiltStep& out) {
  const GrpoPhases phases = grpo_phases(context, settings, profile, accounting);
  out.model.generation = phases.generation;
  out.model.logprob_pass = phases.logprob_pass;
  out.kv_cache = phases.kv_cache;
  out.generation_at = phases.generation_at;
  // Colocated vLLM without sleep mode holds its share all step: the trainer plans in the rest.
  out.model.vllm_resident = phases.vllm_resident;
  out.model.vllm_generation = phases.vllm_generation;
  out.model.base += phases.vllm_resident;
  const int64_t steps = settings.steps_per_generation.value_or(settings.grad_accum);
  const bool before_forward = phases.generation > 0 || phases.logprob_pass > 0;
  if (before_forward && steps % settings.grad_accum != 0) out.model.grads_generation = out.states.grads_full;
}

}  // namespace

// Per block, the bytes of ModelContext::ctx_held at the micro-batch.
static std::vector<int64_t> ctx_held_bytes(const ModelContext& context, int64_t batch, Accounting accounting) {
  std::vector<int64_t> bytes(context.ctx_held.size(), 0);
  for (size_t k = 0; k < context.ctx_held.size(); ++k) {
    for (int t : context.ctx_held[k]) {
      const graph::Tensor& tensor = context.graph.tensors[static_cast<size_t>(t)];
      bytes[k] += account(graph::tensor_bytes(tensor, context.compute_dtype, batch, context.seq_len), accounting);
    }
  }
  return bytes;
}

// Per block, the bytes of ctx_recomputed_tensors (StepModel::ctx_recomputed).
static std::vector<int64_t> ctx_recomputed_bytes(const ModelContext& context, int64_t batch, Accounting accounting) {
  std::vector<int64_t> bytes(context.ctx_held.size(), 0);
  for (size_t k = 0; k < context.ctx_held.size(); ++k) {
    for (int t : ctx_recomputed_tensors(context, k)) {
      const graph::Tensor& tensor = context.graph.tensors[static_cast<size_t>(t)];
      bytes[k] += account(graph::tensor_bytes(tensor, context.compute_dtype, batch, context.seq_len), accounting);
    }
  }
  return bytes;
}

namespace {

// Accumulating, a tied weight's first partial beside its `.grad` (shared_grads_accumulating.h).
void add_held_shared_grads(const ModelContext& context, const RunSettings& settings, const GlobalConfig& config,
                           Accounting accounting, BuiltStep& out) {
  StepModel& model = out.model;
  const size_t n = model.blocks.size();
  const std::vector<int64_t> in_flight =
      shared_grads_held_accumulating(context.graph, settings, config, out.states, accounting, n);
  for (size_t k = 0; k < n; ++k) {
    model.grads_bwd[k] += in_flight[k];
    model.grads_bwd_before[k] += in_flight[k];
  }
}

}  // namespace

BuiltStep build_step(const ModelContext& context, const RunSettings& settings,
                     const GlobalConfig& config, const StepProfile& profile,
                     Accounting accounting) {
  BuiltStep out;
  out.states = model_states(context.graph, settings, config, accounting);
  out.persistent = profile.persistent;
  StepModel& model = out.model;
  model.blocks = profile.blocks;
  model.base = out.states.params + out.states.optimizer + out.states.master +
               out.states.comm_buckets + account(context.gpu.cublas_workspace_bytes, accounting) +
               profile.persistent + (accounting == Accounting::kReserved ? kPoolSlackBytes : 0);
  model.gathered = out.states.gathered_params;
  add_reference(context, settings, accounting, out);
  add_grpo_phases(context, settings, profile, accounting, out);
  // Parameter streaming under ZeRO-3 offload already occupies the host link;
  // activation offload would compete for it, which this model does not price.
  model.allow_offload = settings.allow_activation_offload && config.offload_param == Offload::kNone;
  if (settings.offload_checkpoint_inputs) model.checkpoint_stash = kCheckpointOffloadStash;
  // Unsloth double-buffers the returning inputs once more than 512 MiB are free after
  // the first step (gradient_checkpointing.py DOUBLE_BUFFER_HEADROOM): two buffers, the top.
  if (unsloth_offloads_checkpoint_inputs(settings)) model.checkpoint_offload_buffers = 2;
  const StackSpec stack = resolve_stack(settings).top;
  model.reentrant_recompute = stack.recompute == Recompute::kBlockReentrant;
  if (made_tables_released(settings.stack, model.reentrant_recompute)) model.made_persistent = profile.made_persistent;
  const size_t n = model.blocks.size();
  set_gradients_by_block(out.states, config, model);
  add_held_shared_grads(context, settings, config, accounting, out);
  apply_deepspeed_gradients(context, settings, config, out.states, accounting, model);
  // zero_grad between the loss and backward(): the previous step's gradients live
  // through the first micro-step's forward (StackSpec::grads_through_forward).
  if (stack.grads_through_forward) model.grads_fwd = std::max(model.grads_fwd, out.states.grads_full);
  model.gathered_fwd = out.states.gathered_fwd_block;
  model.gathered_bwd = out.states.gathered_bwd_block;
  model.gathered_bwd_before = out.states.gathered_bwd_before_block;
  apply_zero3_gathered(context, settings, config, accounting, out.states, model);
  model.grads_optimizer = out.states.grads_full;
  model.optimizer_transient = out.states.step_transient;
  if (out.states.grads_in_backward) {
    // Optimizer in backward: no gradient outlives its parameter's update.
    // While block k runs backward, at most its largest gradient and that step's
    // temporaries are live, and never more than the gradients produced so far.
    model.grads_fwd = 0;
    for (int64_t& grads : model.grads_bwd) grads = std::min(grads, out.states.in_backward_bytes);
    for (int64_t& grads : model.grads_bwd_before) grads = std::min(grads, out.states.in_backward_bytes);
    model.grads_optimizer = 0;
  }
  // Autograd alone makes each gradient, as the node whose backward computes it is done
  // (StepModel::grads_by_node): not under ZeRO's or FSDP's hooks and partitions.
  model.grads_by_node = config.grad_accum == 1 && out.states.grads_progressive && !out.states.grads_in_backward &&
                        config.zero_stage == 0 && !model.grads_made_by_hooks &&
                        out.states.sharded_block_grads.empty() && out.states.reduce_scatter_block.empty() &&
                        out.states.unsynced_grads == 0;
  model.ctx_held = ctx_held_bytes(context, config.micro_batch, accounting);
  if (!model.reentrant_recompute) model.ctx_recomputed = ctx_recomputed_bytes(context, config.micro_batch, accounting);
  model.copy_ms.resize(n);
  for (size_t k = 0; k < n; ++k) {
    model.copy_ms[k] = static_cast<double>(model.blocks[k].keep) / (context.gpu.host_link_gbps * 1e9) * 1e3;
    out.model_flops += model.blocks[k].model_flops;
  }
  return out;
}

}  // namespace headroom::planner
