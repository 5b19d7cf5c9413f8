#include "planner/memory/model_states.h"

#include <algorithm>
#include <vector>

#include "graph/op_traits.h"
#include "planner/mechanisms/trainer_bnb_states.h"
#include "planner/mechanisms/trainability.h"
#include "planner/memory/allocator_rounding.h"
#include "planner/memory/optimizer_step.h"
#include "planner/memory/sharded_states.h"
#include "planner/memory/state_walk.h"
#include "planner/memory/step_and_host_states.h"
#include "planner/settings/stack.h"

namespace headroom::planner {
namespace {

using graph::Param;

// bitsandbytes optim/optimizer.py, Optimizer8bit.get_state_buffer: a paged
// optimizer takes unified memory (F.get_paged) for tensors of at least 1e5
// elements; smaller ones get ordinary device tensors.
constexpr int64_t kBnbPagedMinElements = 100'000;
// torchao CPUOffloadOptimizer (torchao/optim/cpu_offload.py): parameters under
// minimal_size = 4096 elements keep an ordinary optimizer on the GPU.
constexpr int64_t kTorchaoOffloadMinSize = 4096;

bool paged(const RunSettings& settings, int64_t elements) {
  return pages_states(settings) && elements >= kBnbPagedMinElements;
}

// A trainable parameter's bytes, whole and as this rank's share.
struct TrainableBytes {
  int64_t elements = 0;
  int64_t grad = 0;
  int64_t grad_rank = 0;
  int64_t states = 0;
  int64_t states_rank = 0;
  int64_t master = 0;
  int64_t master_rank = 0;
  int states_per_param = 1;
  bool fp32_states = false;
  // The layout of its states: the run's optimizer, or the Trainer's 32-bit override
  // of an embedding under an 8-bit bitsandbytes optimizer (trainer_bnb_states.h).
  OptimizerKind optimizer = OptimizerKind::kAdamW;
  // The states as tensors, each its own allocation (optimizer_state_tensors).
  std::vector<int64_t> state_tensors;
};

// Whether FSDP keeps this parameter's shard in fp32: FSDP2 keeps the sharded
// parameter in its original dtype and casts only the all-gather input
// (MixedPrecisionPolicy.param_dtype, _fsdp_param.py all_gather_inputs): under
// mixed precision the fp32 shard is the master copy. FSDP1 likewise
// (MixedPrecision.param_dtype casts a copy of the shard, _flat_param.py
// _use_low_precision_shard).
// Accelerate's upcast does the same for the trainable parameters of a 16-bit
// model (fsdp_upcasts_trainable).
bool fp32_shard(const StateWalk& w, const Param& param) {
  return w.fsdp && fsdp_fp32_shard(param, w.precision, w.upcast_trainable);
}

// The resident weights of every parameter (trainable or not), their host copy
// under parameter offload, and their share of a checkpoint.
void add_weights(StateWalk& w, const graph::Node& node, const Param& param) {
  ModelStates& out = w.out;
  if (param.buffer) {
    // ZeRO-3 and FSDP shard, gather and offload parameters only: a buffer stays whole
    // on every rank's GPU (fully_shard moves buffers to the device, _fsdp_init.py
    // _move_states_to_device; DeepSpeed partitions module.parameters()).
    const int64_t storage = param_storage_bytes(param, w.precision);
    out.params += w.account_bytes(storage);
    out.buffers += w.account_bytes(storage);
    if (param.persistent && w.settings.mode == TrainMode::kFull) w.checkpoint_weights += storage;
    return;
  }
  const int64_t elements = param.elements();
  out.total_params += elements;
  if (w.shard_params && gathered_in_fp8(node, param, w.settings)) out.float8_gathered_params += elements;
  const int64_t storage = param_storage_bytes(param, w.precision);
  const bool fp32 = fp32_shard(w, param);
  const int64_t resident = w.shard_params ? ceil_div(fp32 ? elements * 4 : storage, w.world) : storage;
  if (w.fsdp && w.in_root(node)) out.fsdp2_root_params += storage;
  if (w.params_on_gpu) out.params += w.account_bytes(resident);
  // bitsandbytes' QuantState (absmax, code books) is no nn.Parameter either.
  if (w.params_on_gpu && is_quantization_constant(param)) out.buffers += w.account_bytes(resident);
  w.host_params += w.params_on_gpu ? 0 : resident;
  if (w.fsdp && !w.params_on_gpu) out.host_shard_bytes += resident;
  if (w.fsdp && !w.params_on_gpu && w.in_root(node)) out.host_root_shard_bytes += resident;
  // FSDP2's state dict holds the sharded parameters in their own (fp32) dtype.
  if (w.settings.mode == TrainMode::kFull || param.trainable) w.checkpoint_weights += fp32 ? elements * 4 : storage;
}

TrainableBytes trainable_bytes(const StateWalk& w, const graph::Node& node, const Param& param) {
  TrainableBytes b;
  b.elements = param.elements();
  b.optimizer = state_layout(w.settings, node, w.shard_optimizer);
  const bool fp32 = fp32_shard(w, param);
  // FSDP2's sharded gradient takes the sharded parameter's dtype (fp32 under
  // mixed precision: foreach_reduce reduces in reduce_dtype, then casts to it).
  b.grad = fp32 ? b.elements * 4 : grad_bytes(param, w.precision);
  // bitsandbytes' 32-bit PagedAdamW keeps fp32 states whatever the parameter's dtype.
  // An fp32 shard has fp32 states (torch.optim's zeros_like of the sharded parameter).
  // So does an 8-bit optimizer's 32-bit override (bitsandbytes' states follow optim_bits).
  b.fp32_states = fp32_adapter(param, w.precision) || fp32 ||
                  (pages_states(w.settings) && w.settings.optimizer == OptimizerKind::kAdamW) ||
                  b.optimizer != w.settings.optimizer;
  b.state_tensors = optimizer_state_tensors(b.optimizer, b.fp32_states ? Precision::kFp32 : w.precision, param.shape);
  for (int64_t tensor : b.state_tensors) b.states += tensor;
  b.master = fp32 ? 0 : b.elements * master_bytes_per_element(w.precision);
  b.states_rank = w.shard_optimizer ? ceil_div(b.states, w.world) : b.states;
  b.master_rank = w.shard_optimizer ? ceil_div(b.master, w.world) : b.master;
  b.grad_rank = w.shard_grads ? ceil_div(b.grad, w.world) : b.grad;
  b.states_per_param = b.optimizer == OptimizerKind::kAdamW ? 2 : 1;
  return b;
}

// Rank 0's elements of an FSDP2 sharded parameter (and of its gradient): dim 0
// padded to a multiple of the world size, then one 1/world slice of it
// (torch/distributed/fsdp/_fully_shard/_fsdp_collectives.py _get_dim0_padded_size,
// reduce_scatter_output_numel = reduce_scatter_input_numel // world_size).
int64_t fsdp2_shard_elements(const Param& param, int world) {
  if (param.shape.empty() || param.shape[0] == 0) return ceil_div(param.elements(), world);
  return ceil_div(param.shape[0], world) * (param.elements() / param.shape[0]);
}

// A trainable parameter's gradient on the GPU: in ZeRO's flat partition, in its
// FSDP group's sharded gradient, or a tensor of its own, there from its (first)
// use in backward on.
void add_gpu_grad(StateWalk& w, const graph::Node& node, const Param& param, const TrainableBytes& b) {
  if (w.flat_partitions && w.shard_grads) {
    w.flat_grads += b.grad_rank;
  } else if (w.fsdp) {
    // The group's sharded gradients are strided views of one reduce-scatter output
    // (foreach_reduce: torch.as_strided(reduce_output, ...), cast to the sharded
    // parameter's dtype as one tensor when it differs): one allocation per group,
    // rounded in close_fsdp_grads.
    const int64_t shard = fsdp2_shard_elements(param, w.world) * (b.grad / std::max<int64_t>(b.elements, 1));
    (w.in_root(node) ? w.fsdp_root_shard_grads : w.fsdp_shard_grads[node.block]) += shard;
  } else {
    w.out.grads_full += w.account_bytes(b.grad_rank);
  }
  // A shared weight's gradient exists from its first use in backward on.
  const auto first = w.shared.find(param.name);
  w.out.block_grads[first == w.shared.end() ? node.block : first->second] += w.account_bytes(b.grad);
}

// A paged optimizer's states of a parameter of 1e5 elements or more: state1 and
// state2 (the first two of optimizer_state_tensors) are what get_state_buffer pages
// (F.get_paged, unified memory outside the caching allocator); an 8-bit state's
// absmax1 and absmax2 are torch.zeros on the device (bitsandbytes 0.50.2
// optim/optimizer.py Optimizer2State.init_state). Sharded, all of the rank's share.
void add_paged_states(StateWalk& w, const TrainableBytes& b) {
  if (w.shard_optimizer) {
    w.out.paged_optimizer += b.states_rank;
    return;
  }
  for (size_t i = 0; i < b.state_tensors.size(); ++i) {
    if (i < 2) {
      w.out.paged_optimizer += b.state_tensors[i];
    } else {
      w.out.optimizer += w.account_bytes(b.state_tensors[i]);
      w.out.state_tensors.push_back(b.state_tensors[i]);
    }
  }
}

// Optimizer states and master weights on the GPU (also torchao's offload for
// parameters it leaves on the GPU).
void add_gpu_states(StateWalk& w, const TrainableBytes& b) {
  ModelStates& out = w.out;
  // bitsandbytes moves its two quantization maps to the device for any 8-bit state.
  if (b.optimizer == OptimizerKind::kAdamW8bit && b.elements >= kBnbMin8bitSize) w.bnb_maps = true;
  if (paged(w.settings, b.elements)) {
    add_paged_states(w, b);
  } else if (w.flat_partitions) {
    // ZeRO's partitions are flat buffers.
    w.flat_states += b.states_rank;
  } else if (w.shard_optimizer) {
    // FSDP: torch.optim's states of each sharded parameter, one tensor per state.
    const int64_t tensor = ceil_div(b.states_rank, b.states_per_param);
    out.optimizer += b.states_per_param * w.account_bytes(tensor);
    out.state_tensors.insert(out.state_tensors.end(), b.states_per_param, tensor);
  } else {
    // Each state is a tensor of its own (torch.optim's zeros_like per state,
    // bitsandbytes' codes and absmax), each rounded by the allocator.
    for (int64_t tensor : b.state_tensors) {
      out.optimizer += w.account_bytes(tensor);
      out.state_tensors.push_back(tensor);
    }
  }
  if (w.flat_partitions) {
    w.flat_master += b.master_rank;
  } else {
    out.master += w.account_bytes(b.master_rank);
  }
}

// A trainable parameter's gradient, optimizer states and master weights, where
// the run keeps them.
void add_trainable(StateWalk& w, const graph::Node& node, const Param& param) {
  ModelStates& out = w.out;
  out.trainable_params += param.elements();
  // A parameter whose output nothing reads (LLaVA's vision layers past the
  // feature layer, one "unused" node) never gets a gradient, and torch.optim
  // creates no state for it (its step skips parameters whose grad is None).
  if (node.op == graph::op::kUnused) return;
  const TrainableBytes b = trainable_bytes(w, node, param);
  if (w.fsdp && w.in_root(node)) {
    out.fsdp2_root_grads[node.block] += w.account_bytes(grad_bytes(param, w.precision));
    out.fsdp2_root_trainable += b.elements;
  }
  w.checkpoint_optimizer += b.states + b.master;
  w.largest_state = std::max(w.largest_state, w.account_bytes(b.states_rank / b.states_per_param));
  w.largest_grad = std::max(w.largest_grad, w.account_bytes(b.grad));
  if (w.settings.optimizer == OptimizerKind::kAdafactor) {
    const bool param_16bit = param_storage_bytes(param, w.precision) < 4 * param.elements();
    const int64_t elements = w.shard_params ? ceil_div(param.elements(), w.world) : param.elements();
    w.largest_adafactor_step = std::max(w.largest_adafactor_step,
                                        adafactor_fp32_temporaries(param_16bit) * w.account_bytes(elements * 4));
  }
  if (w.torchao_offload && b.elements >= kTorchaoOffloadMinSize) {
    // A pinned host copy of the parameter and of its gradient, and the wrapped
    // optimizer's states on the host in the parameter's dtype. The GPU gradient
    // is copied out by a post-accumulate-grad hook; with offload_gradients it
    // is then freed, otherwise it stays until zero_grad.
    w.host_optimizer += param_storage_bytes(param, w.precision) + b.grad + b.states;
    if (w.keep_gpu_grads) add_gpu_grad(w, node, param, b);
  } else if (w.optimizer_on_gpu || w.torchao_offload) {
    add_gpu_states(w, b);
    add_gpu_grad(w, node, param, b);
  } else if (w.fsdp) {
    // FSDP2's CPUOffloadPolicy: the sharded gradient copied to the host in the
    // sharded parameter's dtype (foreach_reduce: reduce_output cast to orig_dtype,
    // then .to("cpu")), and torch.optim's states beside the host parameters, in
    // their dtype (_init_group: zeros_like(p)); no master copy. FSDP1's CPUOffload
    // likewise: the pinned _cpu_grad beside the pinned shard, both in the
    // FlatParameter's dtype (_flat_param.py init_flat_param_attributes).
    w.host_optimizer += b.states_rank + b.grad_rank + b.master_rank;
    out.host_grad_bytes += b.grad_rank;
  } else {
    // ZeRO-Offload keeps fp32 master weights, optimizer states and fp32
    // gradients on the host (Ren et al. 2021, Sec. 4.1): 4 + states + 4 bytes.
    const int64_t fp32_rank = b.elements * 4 / (w.shard_optimizer ? w.world : 1);
    w.host_optimizer += b.states_rank + fp32_rank + (b.master > 0 ? b.master_rank : fp32_rank);
  }
}

}  // namespace

ModelStates model_states(const graph::LayerGraph& graph, const RunSettings& settings,
                         const GlobalConfig& config, Accounting accounting) {
  StateWalk walk(graph, settings, config, accounting);
  for (const graph::Node& node : graph.nodes) {
    for (const Param& param : node.params) {
      if (!param.tied_to.empty()) continue;
      add_weights(walk, node, param);
      if (param.trainable) add_trainable(walk, node, param);
    }
  }
  close_partitions(walk);
  close_fsdp_grads(walk);
  add_deepspeed_buffers(walk);
  add_fsdp_buffers(walk);
  add_unsynced_grads(walk);
  add_optimizer_step(walk);
  add_host_and_disk(walk);
  return walk.out;
}

}  // namespace headroom::planner
