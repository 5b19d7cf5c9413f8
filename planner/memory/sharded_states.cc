#include "planner/memory/sharded_states.h"

#include <algorithm>
#include <vector>

#include "graph/op_traits.h"
#include "planner/memory/deepspeed_buckets.h"
#include "planner/memory/fsdp_units.h"
#include "planner/memory/zero2_partition.h"
#include "planner/settings/stack.h"

namespace headroom::planner {
namespace {

using graph::Param;

int64_t largest_block_param_bytes(const graph::LayerGraph& graph, Precision precision) {
  const std::vector<int64_t> per_block = block_param_bytes(graph, precision);
  return per_block.empty() ? 0 : *std::max_element(per_block.begin(), per_block.end());
}

// Per block, the trainable elements of the layer FSDP2 reduces on its own (0 in the root).
std::vector<int64_t> layer_trainable_elements(const graph::LayerGraph& graph, const RunSettings& settings) {
  std::vector<int64_t> per_block(graph.blocks.size(), 0);
  for (const graph::Node& node : graph.nodes) {
    for (const Param& param : node.params) {
      if (param.tied_to.empty() && param.trainable && !in_fsdp2_root(graph, node.block, settings)) {
        per_block[node.block] += param.elements();
      }
    }
  }
  return per_block;
}

// DeepSpeed's own ZeRO-2 with the optimizer on the GPU keeps gradients in
// copy_grads_in_partition's buffer (stage_1_and_2.py, 0.19.8); offload copies them
// to the host instead. Priced where the oracle checks it, the Trainer's DeepSpeed
// (its two parameter groups); `headroom run` trains the unspecified and `deepspeed`
// stacks' ZeRO-2 with its own partition, 1/world of each bucket (executor/zero_layout.h),
// so those stay at the bucket price (docs/stacks.md says so).
bool deepspeed_zero2_partition(const StateWalk& w) {
  return w.flat_partitions && w.shard_grads && !w.shard_params && w.optimizer_on_gpu &&
         through_deepspeed_engine(w.settings) && w.settings.stack != Stack::kUnspecified &&
         w.settings.stack != Stack::kDeepspeed;
}

// That buffer holds the whole gradient of every parameter touching the rank's slice:
// the largest rank's (planner/memory/zero2_partition.h), in the 16-bit dtype.
int64_t zero2_partition_bytes(const StateWalk& w) {
  return zero2_largest_grad_partition_elements(w.graph, w.world) * grad_bytes_per_element(w.precision);
}

}  // namespace

// ZeRO's flat partitions, each rounded once; bitsandbytes' shared quantization maps.
void close_partitions(StateWalk& w) {
  ModelStates& out = w.out;
  if (w.flat_partitions) {
    const int64_t states_per_param = w.settings.optimizer == OptimizerKind::kAdamW ? 2 : 1;
    out.optimizer += states_per_param * w.account_bytes(ceil_div(w.flat_states, states_per_param));
    out.master += w.account_bytes(w.flat_master);
    out.grads_full += w.account_bytes(deepspeed_zero2_partition(w) ? zero2_partition_bytes(w) : w.flat_grads);
  }
  // bitsandbytes' 8-bit optimizers move their two 256-value fp32 maps (signed
  // and unsigned dynamic) to the device once and share them among all states
  // (optim/optimizer.py Optimizer2State.init_state, name2qmap).
  if (w.bnb_maps) out.optimizer += 2 * w.account_bytes(256 * 4);
  // Gradients appear block by block only in plain data parallelism: ZeRO-2/3
  // keep a preallocated partition, and offload sends them to the host per bucket.
  out.grads_progressive = (w.optimizer_on_gpu || w.torchao_offload) && !w.shard_grads;
}

// torch's FSDPs make each group's sharded gradient in its post-backward, not
// before backward: FSDP2's foreach_reduce sets `sharded_param.grad` to a view of
// the reduce-scatter output (torch/distributed/fsdp/_fully_shard/_fsdp_collectives.py),
// FSDP1's _accumulate_sharded_grad keeps it as `_saved_grad_shard`
// (torch/distributed/fsdp/_runtime_utils.py); the root group's in the final callback.
// zero_grad(set_to_none=True) frees them, so the next step's forward has none.
// FSDP1's units are priced by apply_flat_params.
void close_fsdp_grads(StateWalk& w) {
  if (!w.fsdp || w.fsdp_shard_grads.empty()) return;
  int64_t any = w.fsdp_root_shard_grads;
  for (int64_t bytes : w.fsdp_shard_grads) any += bytes;
  if (any == 0) return;
  ModelStates& out = w.out;
  out.sharded_block_grads.assign(w.graph.blocks.size(), 0);
  for (size_t b = 0; b < w.fsdp_shard_grads.size(); ++b) {
    if (w.fsdp_shard_grads[b] > 0) out.sharded_block_grads[b] = w.account_bytes(w.fsdp_shard_grads[b]);
    out.grads_full += out.sharded_block_grads[b];
  }
  if (w.fsdp_root_shard_grads > 0) out.root_sharded_grads = w.account_bytes(w.fsdp_root_shard_grads);
  out.grads_full += out.root_sharded_grads;
}

// DeepSpeed's communication buffers: the reduce bucket and ZeRO-3's gathered and
// prefetched parameters. Stages 1 and 2 have no all-gather bucket: the updated
// partitions are gathered into the model's own flat 16-bit groups
// (runtime/utils.py all_gather_dp_groups, all_gather_into_tensor_dp_groups), so
// allgather_bucket_size allocates nothing (DeepSpeed 0.19.8).
void add_deepspeed_buffers(StateWalk& w) {
  ModelStates& out = w.out;
  const RunSettings& settings = w.settings;
  // The reduce bucket (deepspeed_buckets.h): ZeRO-3's lives all run; ZeRO-1/2's
  // only in backward, which the step walk prices (predict/deepspeed_walk.cc add_backward_buckets).
  const int64_t bucket = deepspeed_reduce_bucket_bytes(settings, w.config, w.accounting);
  if (deepspeed_backward_bucket_bytes(settings, w.config, w.accounting) == 0) out.comm_buckets += bucket;
  if (w.shard_params && !w.fsdp) out.bucket_gradients = bucket;
  if (bucket > 0 && !w.optimizer_on_gpu) out.grads_full = 0;
  if (w.shard_params && !w.fsdp) {
    // ZeRO-3 gathers the parameters of the block being computed and prefetches the
    // next (stage3_prefetch_bucket_size), never beyond stage3_max_live_parameters.
    // The step walk holds them block by block instead (predict/deepspeed_gathered.h).
    const int64_t block_bytes = largest_block_param_bytes(w.graph, w.precision);
    const int64_t prefetch = settings.prefetch_bucket_elements * 2;
    const int64_t live_cap = settings.max_live_parameters * 2;
    out.gathered_params = w.account_bytes(std::min(block_bytes + std::min(prefetch, block_bytes), live_cap));
  }
}

// torch's FSDPs: the units in flight, the root group, the reduce-scatter inputs;
// FSDP1's flat parameters in place of FSDP2's per-parameter shards.
void add_fsdp_buffers(StateWalk& w) {
  if (!w.fsdp) return;
  ModelStates& out = w.out;
  const RunSettings& settings = w.settings;
  // The root group is all-gathered once at the root's pre-forward and stays
  // unsharded until the end of backward: torch does not reshard the root after
  // forward (_fsdp_state.py _lazy_init, post_forward_mesh_info = None; from torch
  // 2.8 only when fully_shard's reshard_after_forward is left None), and its
  // post-backward runs in the final callback (_root_post_backward_final_callback).
  out.fsdp2_root_params = w.account_bytes(out.fsdp2_root_params);
  // The layer units in flight, block by block (fsdp_in_flight).
  FsdpInFlight in_flight = fsdp_in_flight(w.graph, settings, w.config.zero_stage, w.accounting);
  out.gathered_fwd_block = std::move(in_flight.forward);
  out.gathered_bwd_block = std::move(in_flight.backward);
  out.gathered_bwd_before_block = std::move(in_flight.backward_before);
  out.gathered_params = out.fsdp2_root_params;
  // foreach_reduce (_fsdp_collectives.py) allocates the reduce-scatter input in
  // reduce_dtype and copies the block's unsharded gradients (param dtype) into it
  // before freeing them: both live at the end of the block's backward. torchtitan's
  // mixed precision reduces in fp32; a pure 16-bit model reduces in its dtype.
  const int64_t grad_width = grad_bytes_per_element(w.precision);
  const int64_t reduce_width = fsdp_reduce_bytes_per_element(settings);
  // Each layer's own, at the end of its backward; none while the root's blocks run.
  out.reduce_scatter_block = layer_trainable_elements(w.graph, settings);
  out.reduce_scatter_input_block = out.reduce_scatter_block;
  for (int64_t& bytes : out.reduce_scatter_input_block) bytes = w.account_bytes(bytes * reduce_width);
  for (int64_t& bytes : out.reduce_scatter_block) bytes = w.account_bytes(bytes * (grad_width + reduce_width));
  const auto largest = std::max_element(out.reduce_scatter_block.begin(), out.reduce_scatter_block.end());
  out.reduce_scatter_bytes = largest == out.reduce_scatter_block.end() ? 0 : *largest;
  // The root group reduces once, in the final callback: its reduce-scatter input
  // beside its unsharded gradients (fsdp2_root_grads), after the last block's backward.
  out.fsdp2_root_reduce_scatter = w.account_bytes(out.fsdp2_root_trainable * reduce_width);
  if (!out.reduce_scatter_input_block.empty()) out.reduce_scatter_input_block[0] += out.fsdp2_root_reduce_scatter;
  if (sharding_of(settings) == Sharding::kFsdp1) {
    apply_flat_params(w.graph, settings, w.config, w.accounting, out);
    out.reduce_scatter_input_block.clear();  // FSDP1 reduces the flat gradient itself
  }
}

// FSDP accumulating under no_sync: the unsharded gradients each unit keeps
// until the last micro-step (accumulates_unsharded).
void add_unsynced_grads(StateWalk& w) {
  if (!accumulates_unsharded(w.settings, w.config)) return;
  ModelStates& out = w.out;
  out.unsynced_block_grads.assign(w.graph.blocks.size(), 0);
  if (sharding_of(w.settings) == Sharding::kFsdp1) {
    const int64_t grad_width = grad_bytes_per_element(w.precision);
    for (const FlatParamUnit& unit : flat_param_units(w.graph, w.settings)) {
      if (unit.trainable_elements == 0) continue;
      const int64_t bytes = w.account_bytes(unit.elements * grad_width);
      (unit.root ? out.root_unsynced_grads : out.unsynced_block_grads[unit.block]) += bytes;
    }
  } else {
    const int64_t width = fsdp_reduce_bytes_per_element(w.settings);
    for (const graph::Node& node : w.graph.nodes) {
      if (node.op == graph::op::kUnused) continue;
      for (const Param& param : node.params) {
        if (!param.trainable || !param.tied_to.empty()) continue;
        const int64_t bytes = w.account_bytes(param.elements() * width);
        (w.in_root(node) ? out.root_unsynced_grads : out.unsynced_block_grads[node.block]) += bytes;
      }
    }
  }
  out.unsynced_grads = out.root_unsynced_grads;
  for (int64_t bytes : out.unsynced_block_grads) out.unsynced_grads += bytes;
}

// DeepSpeed ZeRO-2's step on the GPU (stage_1_and_2.py step, DeepSpeed 0.19.8):
// flatten(averaged_gradients) copies the 16-bit gradient partition and .to(fp32)
// converts that copy, while the partition copy_grads_in_partition made (grads_full)
// is still held: three partitions at once, two of them priced here.
int64_t zero2_step_grad_copies(const StateWalk& w) {
  if (!w.flat_partitions || !w.shard_grads || w.shard_params || !w.optimizer_on_gpu) return 0;
  const int64_t grad_width = grad_bytes_per_element(w.precision);
  const int64_t partition = ceil_div(w.out.trainable_params, w.world);
  // An fp32 partition's .to(fp32) is the same tensor: only the flattened copy.
  return w.account_bytes(partition * grad_width) + (grad_width < 4 ? w.account_bytes(partition * 4) : 0);
}

}  // namespace headroom::planner
