#include "planner/predict/deepspeed_walk.h"

#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include "planner/memory/deepspeed_buckets.h"
#include "planner/settings/stack.h"

namespace headroom::planner {

namespace {

// The first block backward reaches that makes a gradient: lm_head's, or under LoRA
// the last layer's adapters; the head when none is on the GPU (offload).
size_t first_gradient_block(const ModelStates& states, size_t n) {
  for (size_t k = std::min(n, states.block_grads.size()); k-- > 0;) {
    if (states.block_grads[k] > 0) return k;
  }
  return n == 0 ? 0 : n - 1;
}

// Per block, the elements of the trainable gradients that the reduce bucket takes (those
// no larger than it), each where autograd completes it: a tied weight's at its lowest use.
std::vector<int64_t> bucketed_elements_by_block(const ModelContext& context, const RunSettings& settings, size_t n) {
  const std::map<std::string, OwnerBlocks> blocks = blocks_by_owner(context.graph);
  std::map<std::string, int64_t> elements;
  for (const graph::Node& node : context.graph.nodes) {
    for (const graph::Param& param : node.params) {
      if (param.tied_to.empty() && param.trainable && param.elements() <= settings.reduce_bucket_elements) {
        elements[param.name] = param.elements();
      }
    }
  }
  std::vector<int64_t> out(n, 0);
  for (const auto& [owner, count] : elements) {
    const int k = blocks.at(owner).lowest;
    if (k >= 0 && static_cast<size_t>(k) < n) out[k] += count;
  }
  return out;
}

// ZeRO-1/2's reduce buckets exist from the first gradient hook (setup_buckets) to the
// end of backward (_release_ipg_buffers): from the first block that makes a gradient,
// after its nodes without one (the loss). The hook copies each gradient into the bucket
// in use and makes the parameter's `.grad` a view of it
// (reduce_independent_p_g_buckets_and_remove_grads): a gradient. overlap_comm's second
// bucket takes gradients only once the first has filled and been reduced (the index
// swaps); until then no `.grad` views it: a ZeRO buffer (`spare`).
void add_backward_buckets(const ModelContext& context, const RunSettings& settings, int64_t buckets,
                          int64_t spare, const ModelStates& states, StepModel& model) {
  if (buckets == 0) return;
  const size_t n = model.grads_bwd.size();
  const size_t first = first_gradient_block(states, n);
  const std::vector<int64_t> bucketed = bucketed_elements_by_block(context, settings, n);
  std::vector<int64_t> reached(n + 1, 0);  // bucketed elements made by blocks >= k
  for (size_t k = n; k-- > 0;) reached[k] = reached[k + 1] + bucketed[k];
  NotGradients& not_grads = model.not_grads;
  not_grads.zero_buffers_bwd.resize(n, 0);
  not_grads.zero_buffers_bwd_before.resize(n, 0);
  for (size_t k = 0; k < n && k <= first; ++k) {
    model.grads_bwd[k] += buckets;
    if (reached[k] <= settings.reduce_bucket_elements) not_grads.zero_buffers_bwd[k] += spare;
    if (k == first) continue;
    model.grads_bwd_before[k] += buckets;
    if (reached[k + 1] <= settings.reduce_bucket_elements) not_grads.zero_buffers_bwd_before[k] += spare;
  }
}

// ZeRO-2's 16-bit gradient partition: copy_grads_in_partition makes it (torch.empty when
// grads_in_partition is None) at the first reduction, when a gradient no longer fits
// the bucket (reduce_independent_p_g_buckets_and_remove_grads), else at the end of
// backward; step() frees it (averaged_gradients[i] = None). Not in forward then.
// A ZeRO buffer: DeepSpeed copies each reduced share into it after the hook has handed
// the `.grad` to the bucket, the epilogue clears every `.grad` (_clear_param_grad_only)
// and the step reads it through averaged_gradients.
void delay_gradient_partition(const RunSettings& settings, const ModelStates& states, StepModel& model) {
  const int64_t partition = states.grads_full;
  const int made_in = deepspeed_partition_block(settings, states);
  model.grads_fwd = std::max<int64_t>(0, model.grads_fwd - partition);
  NotGradients& not_grads = model.not_grads;
  not_grads.zero_buffers_optimizer += partition;
  const size_t n = model.grads_bwd.size();
  not_grads.zero_buffers_bwd.resize(n, 0);
  not_grads.zero_buffers_bwd_before.resize(n, 0);
  for (size_t k = 0; k < n; ++k) {
    not_grads.zero_buffers_bwd[k] += partition;
    not_grads.zero_buffers_bwd_before[k] += partition;
  }
  for (size_t k = n; k-- > 0;) {
    model.grads_bwd_before[k] -= partition;
    not_grads.zero_buffers_bwd_before[k] -= partition;
    if (static_cast<int>(k) == made_in) return;  // made during block k's backward
    model.grads_bwd[k] -= partition;
    not_grads.zero_buffers_bwd[k] -= partition;
  }
}

// A weight used by several blocks (tied embeddings): autograd sums its gradient at the
// last use backward reaches. The first use's partial is held from its block's backward
// to the last use's (mm, then embedding_dense_backward and their add: three at once);
// ZeRO's hook copies it into the bucket only then. No `.grad` until then: in flight.
void hold_tied_partials(const ModelContext& context, const RunSettings& settings, Accounting accounting,
                        StepModel& model) {
  std::map<std::string, int64_t> bytes;
  for (const graph::Node& node : context.graph.nodes) {
    for (const graph::Param& param : node.params) {
      if (param.tied_to.empty() && param.trainable) bytes[param.name] = account(grad_bytes(param, settings.precision), accounting);
    }
  }
  model.not_grads.in_flight_bwd.resize(model.grads_bwd.size(), 0);
  model.not_grads.in_flight_bwd_before.resize(model.grads_bwd.size(), 0);
  for (const auto& [owner, span] : blocks_by_owner(context.graph)) {
    const auto held = bytes.find(owner);
    if (held == bytes.end() || span.lowest == span.highest) continue;
    for (int k = span.lowest; k <= span.highest && k < static_cast<int>(model.grads_bwd.size()); ++k) {
      model.grads_bwd[k] += held->second;
      model.not_grads.in_flight_bwd[k] += held->second;
      if (k == span.highest) continue;
      model.grads_bwd_before[k] += held->second;
      model.not_grads.in_flight_bwd_before[k] += held->second;
    }
  }
}

// A gradient larger than the bucket skips it (stage_1_and_2.py
// reduce_independent_p_g_buckets_and_remove_grads: extra_large_param_to_reduce) and is
// reduced alone at the next hook or at the end of backward (reduce_ipg_grads). There
// average_tensor's allreduce_and_scatter flattens all its rank slices into one copy
// (allreduce_bucket: self.flatten), the gradient still live: two of its size once the
// backward that makes it is done.
void hold_oversized_gradients(const ModelContext& context, const RunSettings& settings, Accounting accounting,
                              StepModel& model) {
  const std::map<std::string, OwnerBlocks> blocks = blocks_by_owner(context.graph);
  std::map<std::string, int64_t> bytes;
  for (const graph::Node& node : context.graph.nodes) {
    for (const graph::Param& param : node.params) {
      if (param.tied_to.empty() && param.trainable && param.elements() > settings.reduce_bucket_elements) {
        bytes[param.name] = account(grad_bytes(param, settings.precision), accounting);
      }
    }
  }
  for (const auto& [owner, held] : bytes) {
    const int k = blocks.at(owner).lowest;  // its gradient is summed there
    if (k < 0 || k >= static_cast<int>(model.grads_bwd.size())) continue;
    // The reduction runs at the next hook, after the block's own backward peak: before the
    // next block's parameter gradients; the first block's, at the end of backward. The
    // gradient is the parameter's `.grad`, its flattened copy a ZeRO buffer.
    NotGradients& not_grads = model.not_grads;
    not_grads.zero_buffers_bwd.resize(model.grads_bwd.size(), 0);
    not_grads.zero_buffers_bwd_before.resize(model.grads_bwd.size(), 0);
    std::vector<int64_t>& grads = k > 0 ? model.grads_bwd_before : model.grads_bwd;
    std::vector<int64_t>& copies = k > 0 ? not_grads.zero_buffers_bwd_before : not_grads.zero_buffers_bwd;
    grads[k > 0 ? k - 1 : 0] += 2 * held;
    copies[k > 0 ? k - 1 : 0] += held;
  }
}

// ZeRO-3's hook (stage3.py reduce_independent_p_g_buckets_and_remove_grads) copies a
// gradient into the reduce bucket only when it fits (__add_grad_to_ipg_bucket:
// `bucket.elements + param.grad.numel() <= self.reduce_bucket_size`); one larger than the
// whole bucket stays in autograd's own tensor, and the next parameter's hook, finding
// the bucket over its size, reduce-scatters it (__reduce_and_partition_ipg_grads ->
// __avg_scatter_grads) and drops it. It lives from its block's parameter gradients
// (grads_bwd, not grads_bwd_before) to that hook; a block whose other parameters come
// after it in backward (the head's final norm after lm_head) reduces it there, one
// without them holds it into the next block's backward up to its first gradient.
void hold_zero3_oversized_gradients(const ModelContext& context, const RunSettings& settings,
                                    Accounting accounting, StepModel& model) {
  const std::map<std::string, OwnerBlocks> blocks = blocks_by_owner(context.graph);
  std::map<std::string, int64_t> made;  // owner -> bytes of its gradient
  std::map<int, int> trainable_in_block;
  for (const graph::Node& node : context.graph.nodes) {
    for (const graph::Param& param : node.params) {
      if (!param.tied_to.empty() || !param.trainable) continue;
      ++trainable_in_block[node.block];
      if (param.elements() <= settings.reduce_bucket_elements) continue;
      made[param.name] = account(grad_bytes(param, settings.precision), accounting);
    }
  }
  for (const auto& [owner, held] : made) {
    const int k = blocks.at(owner).lowest;  // a tied weight's is summed at its lowest use
    if (k < 0 || k >= static_cast<int>(model.grads_bwd.size())) continue;
    model.grads_bwd[k] += held;
    if (trainable_in_block[k] == 1 && k > 0) model.grads_bwd_before[k - 1] += held;
  }
}

// ZeRO-3's 16-bit gradient partitions live in one flat buffer all run
// (stage3.py __init__, grad_partitions_flat_buffer); partition_grads copies each
// reduce-scattered share into it and sets `param.grad = None`: no `.grad` views it, a
// ZeRO buffer wherever the walk holds it.
void label_zero3_partition(const ModelStates& states, StepModel& model) {
  NotGradients& not_grads = model.not_grads;
  const size_t n = model.grads_bwd.size();
  not_grads.zero_buffers_fwd += states.grads_full;
  not_grads.zero_buffers_optimizer += states.grads_full;
  not_grads.zero_buffers_bwd.resize(n, 0);
  not_grads.zero_buffers_bwd_before.resize(n, 0);
  for (size_t k = 0; k < n; ++k) {
    not_grads.zero_buffers_bwd[k] += states.grads_full;
    not_grads.zero_buffers_bwd_before[k] += states.grads_full;
  }
}

}  // namespace

std::map<std::string, OwnerBlocks> blocks_by_owner(const graph::LayerGraph& graph) {
  std::map<std::string, OwnerBlocks> out;
  for (const graph::Node& node : graph.nodes) {
    for (const graph::Param& param : node.params) {
      const std::string& owner = param.tied_to.empty() ? param.name : param.tied_to;
      const auto [it, fresh] = out.try_emplace(owner, OwnerBlocks{node.block, node.block});
      it->second.lowest = std::min(it->second.lowest, node.block);
      it->second.highest = std::max(it->second.highest, node.block);
    }
  }
  return out;
}

int deepspeed_partition_block(const RunSettings& settings, const ModelStates& states) {
  const int64_t bucket = settings.reduce_bucket_elements * grad_bytes_per_element(settings.precision);
  int64_t reached = 0;
  for (size_t k = states.block_grads.size(); k-- > 0;) {
    reached += states.block_grads[k];
    if (reached > bucket) return static_cast<int>(k);
  }
  return -1;
}

bool deepspeed_zero2_hooks(const RunSettings& settings, const GlobalConfig& config, const ModelStates& states) {
  return config.zero_stage == 2 && !shards_with_fsdp(settings) && config.offload_optimizer == Offload::kNone &&
         through_deepspeed_engine(settings) && config.grad_accum == 1 && !states.grads_in_backward;
}

bool deepspeed_zero3_hooks(const RunSettings& settings, const GlobalConfig& config, const ModelStates& states) {
  // The unspecified stack's ZeRO-3 is headroom's executor's (executor/zero3_parameters.cc).
  return config.zero_stage == 3 && !shards_with_fsdp(settings) && settings.stack != Stack::kUnspecified &&
         through_deepspeed_engine(settings) && !states.grads_in_backward;
}

void apply_deepspeed_gradients(const ModelContext& context, const RunSettings& settings,
                               const GlobalConfig& config, const ModelStates& states,
                               Accounting accounting, StepModel& model) {
  const int64_t buckets = deepspeed_backward_bucket_bytes(settings, config, accounting);
  const int64_t spare = buckets - (buckets > 0 ? deepspeed_reduce_bucket_bytes(settings, config, accounting) : 0);
  add_backward_buckets(context, settings, buckets, spare, states, model);
  if (deepspeed_zero3_hooks(settings, config, states)) {
    hold_zero3_oversized_gradients(context, settings, accounting, model);
    if (config.offload_optimizer == Offload::kNone) label_zero3_partition(states, model);
  }
  if (deepspeed_zero2_hooks(settings, config, states)) {
    // Each gradient the walk holds here is ZeRO's, made by its hook
    // (register_post_accumulate_grad_hook, deepspeed/utils/torch.py register_grad_hook)
    // once a node's backward is done: the buckets (setup_buckets), the partition
    // (copy_grads_in_partition), the copies of a reduction; a tied partial only joins
    // them at its last use.
    model.grads_made_by_hooks = true;
    delay_gradient_partition(settings, states, model);
    hold_tied_partials(context, settings, accounting, model);
    hold_oversized_gradients(context, settings, accounting, model);
  }
  // The unspecified stack's ZeRO-1/2 is headroom's executor's (executor/zero_layout.h),
  // priced with DeepSpeed's buffers but not its hooks: what its `.grad`s view and when
  // its buffers appear are the executor's, measured by `headroom run`.
  if (settings.stack == Stack::kUnspecified) {
    model.grads_made_by_hooks = false;
    model.not_grads = NotGradients{};
  }
}

}  // namespace headroom::planner
