#include "planner/memory/model_states.h"

#include <algorithm>
#include <vector>

#include "graph/op_traits.h"
#include "planner/mechanisms/float8_linear.h"
#include "planner/mechanisms/litgpt_model.h"
#include "planner/mechanisms/trainer_bnb_states.h"
#include "planner/mechanisms/trainability.h"
#include "planner/memory/allocator_rounding.h"
#include "planner/memory/deepspeed_buckets.h"
#include "planner/memory/fsdp_units.h"
#include "planner/memory/optimizer_step.h"
#include "planner/memory/zero2_partition.h"
#include "planner/settings/stack.h"

namespace headroom::planner {
namespace {

using graph::DType;
using graph::Param;

// bitsandbytes optim/optimizer.py, Optimizer8bit.get_state_buffer: a paged
// optimizer takes unified memory (F.get_paged) for tensors of at least 1e5
// elements; smaller ones get ordinary device tensors.
constexpr int64_t kBnbPagedMinElements = 100'000;
// torchao CPUOffloadOptimizer (torchao/optim/cpu_offload.py): parameters under
// minimal_size = 4096 elements keep an ordinary optimizer on the GPU.
constexpr int64_t kTorchaoOffloadMinSize = 4096;

// A paged optimizer: asked for (paged_optimizer), or the one litgpt's QLoRA makes.
bool pages_states(const RunSettings& settings) {
  return settings.paged_optimizer || litgpt_paged_adamw(settings);
}

bool paged(const RunSettings& settings, int64_t elements) {
  return pages_states(settings) && elements >= kBnbPagedMinElements;
}

// DeepSpeed NVMe offload keeps pinned staging buffers in host RAM: the
// offload_optimizer default buffer_count 4 and offload_param buffer_count 5 with
// buffer_size 1e8 elements (DeepSpeed config docs, "offload_param"/"offload_optimizer").
constexpr int64_t kNvmeOptimizerBufferBytes = 4LL * 100'000'000 * 4;
constexpr int64_t kNvmeParamBufferBytes = 5LL * 100'000'000 * 2;

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

}  // namespace

namespace {

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

// One pass over the parameters: the run's choices, decided once, and the sums
// the strategies below add to `out`.
struct StateWalk {
  const graph::LayerGraph& graph;
  const RunSettings& settings;
  const GlobalConfig& config;
  Accounting accounting;
  ModelStates out;
  int world = 1;  // what ZeRO divides by: the shard group (every GPU unless hybrid sharding)
  Precision precision = Precision::kFp32;
  bool shard_optimizer = false;
  bool shard_grads = false;
  bool shard_params = false;
  bool optimizer_on_gpu = true;
  bool params_on_gpu = true;
  bool torchao_offload = false;  // torchao's CPUOffloadOptimizer: host optimizer per large parameter, no ZeRO
  bool keep_gpu_grads = false;
  bool fsdp = false;  // torch's FSDPs (1 and 2) shard the same units: each layer, and the root (in_fsdp2_root)
  bool upcast_trainable = false;  // Accelerate's fp32 upcast of trainable parameters (fsdp_upcasts_trainable)
  // DeepSpeed's ZeRO keeps a rank's partition of the fp32 master weights, of
  // each optimizer state and of the gradients as one flat buffer each (stage
  // 1/2: single_partition_of_fp32_groups and its states, the averaged gradient
  // partition, runtime/zero/stage_1_and_2.py; stage 3: fp32_partitioned_groups_flat
  // per sub-group and grad_partitions_flat_buffer, runtime/zero/stage3.py), so
  // the allocator rounds each once, not once per parameter. FSDP's shards are
  // tensors of their own (FSDP2's DTensors, FSDP1's FlatParameter per unit).
  bool flat_partitions = false;
  std::map<std::string, int> shared;  // shared_gradient_first_block
  int64_t trainable_bytes_16 = 0;     // trainable elements, for buckets and host buffers
  int64_t host_optimizer = 0;
  int64_t host_params = 0;
  int64_t checkpoint_weights = 0;
  int64_t checkpoint_optimizer = 0;
  int64_t largest_state = 0;  // one state tensor of the largest trainable parameter (rank share)
  int64_t largest_grad = 0;
  int64_t largest_adafactor_step = 0;  // adafactor_fp32_temporaries of the worst parameter
  bool bnb_maps = false;  // an 8-bit state on the device: the optimizer's two quantization maps there
  int64_t flat_states = 0, flat_master = 0, flat_grads = 0;
  // FSDP2: each group's sharded gradient bytes before rounding (per block; the root's).
  std::vector<int64_t> fsdp_shard_grads;
  int64_t fsdp_root_shard_grads = 0;

  StateWalk(const graph::LayerGraph& g, const RunSettings& s, const GlobalConfig& c, Accounting a)
      : graph(g), settings(s), config(c), accounting(a) {
    world = s.shard_group_size();
    precision = s.precision;
    shard_optimizer = c.zero_stage >= 1;
    shard_grads = c.zero_stage >= 2;
    shard_params = c.zero_stage >= 3 || fsdp_shards_params(s, c.zero_stage);
    optimizer_on_gpu = c.offload_optimizer == Offload::kNone;
    params_on_gpu = c.offload_param == Offload::kNone;
    torchao_offload = !optimizer_on_gpu && s.cpu_offload != CpuOffloadImpl::kZeroOffload;
    keep_gpu_grads = s.cpu_offload == CpuOffloadImpl::kTorchao;
    fsdp = shard_params && shards_with_fsdp(s);
    upcast_trainable = fsdp && fsdp_upcasts_trainable(s, c.zero_stage);
    flat_partitions = shard_optimizer && !fsdp;
    shared = shared_gradient_first_block(g);
    out.block_grads.assign(g.blocks.size(), 0);
    if (fsdp) out.fsdp2_root_grads.assign(g.blocks.size(), 0);
    if (fsdp) fsdp_shard_grads.assign(g.blocks.size(), 0);
  }
  int64_t account_bytes(int64_t bytes) const { return account(bytes, accounting); }
  bool in_root(const graph::Node& node) const { return in_fsdp2_root(graph, node.block, settings); }
};

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
  w.trainable_bytes_16 += param.elements();
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

// optimizer.step()'s temporaries, optimizer-in-backward, and when the states are made.
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

// Host RAM and NVMe of the offloaded states, for every rank of a node, and one checkpoint's bytes.
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
