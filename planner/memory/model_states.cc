#include "planner/memory/model_states.h"

#include <algorithm>

#include "planner/mechanisms/float8_linear.h"
#include "planner/mechanisms/trainability.h"
#include "planner/memory/allocator_rounding.h"
#include "planner/memory/fsdp_units.h"
#include "planner/memory/optimizer_step.h"
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

bool paged(const RunSettings& settings, int64_t elements) {
  return settings.paged_optimizer && elements >= kBnbPagedMinElements;
}

// DeepSpeed NVMe offload keeps pinned staging buffers in host RAM: the
// offload_optimizer default buffer_count 4 and offload_param buffer_count 5 with
// buffer_size 1e8 elements (DeepSpeed config docs, "offload_param"/"offload_optimizer").
constexpr int64_t kNvmeOptimizerBufferBytes = 4LL * 100'000'000 * 4;
constexpr int64_t kNvmeParamBufferBytes = 5LL * 100'000'000 * 2;

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

int64_t largest_block_param_bytes(const graph::LayerGraph& graph, Precision precision) {
  const std::vector<int64_t> per_block = block_param_bytes(graph, precision);
  return per_block.empty() ? 0 : *std::max_element(per_block.begin(), per_block.end());
}

// The largest block FSDP2 all-gathers on its own (a layer); with no layers, the largest block.
int64_t largest_layer_param_bytes(const graph::LayerGraph& graph, const RunSettings& settings) {
  const std::vector<int64_t> per_block = block_gathered_bytes(graph, settings);
  int64_t largest = 0;
  for (size_t b = 0; b < per_block.size(); ++b) {
    if (!in_fsdp2_root(graph.blocks[b], settings)) largest = std::max(largest, per_block[b]);
  }
  return largest > 0 ? largest : largest_block_param_bytes(graph, settings.precision);
}

// The trainable elements of the largest layer FSDP2 reduces on its own.
int64_t largest_layer_trainable_elements(const graph::LayerGraph& graph, const RunSettings& settings) {
  std::vector<int64_t> per_block(graph.blocks.size(), 0);
  for (const graph::Node& node : graph.nodes) {
    for (const Param& param : node.params) {
      if (param.tied_to.empty() && param.trainable && !in_fsdp2_root(graph.blocks[node.block], settings)) {
        per_block[node.block] += param.elements();
      }
    }
  }
  return per_block.empty() ? 0 : *std::max_element(per_block.begin(), per_block.end());
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

}  // namespace

ModelStates model_states(const graph::LayerGraph& graph, const RunSettings& settings,
                         const GlobalConfig& config, Accounting accounting) {
  ModelStates out;
  // What ZeRO divides by: the shard group (every GPU unless hybrid sharding).
  const int world = settings.shard_group_size();
  const Precision precision = settings.precision;
  const bool shard_optimizer = config.zero_stage >= 1;
  const bool shard_grads = config.zero_stage >= 2;
  const bool shard_params = config.zero_stage >= 3;
  const bool optimizer_on_gpu = config.offload_optimizer == Offload::kNone;
  const bool params_on_gpu = config.offload_param == Offload::kNone;
  // torchao's CPUOffloadOptimizer: host optimizer per large parameter, no ZeRO.
  const bool torchao_offload = !optimizer_on_gpu && settings.cpu_offload != CpuOffloadImpl::kZeroOffload;
  const bool keep_gpu_grads = settings.cpu_offload == CpuOffloadImpl::kTorchao;
  out.block_grads.assign(graph.blocks.size(), 0);
  // torch's FSDPs (1 and 2) shard the same units: each layer, and the root (in_fsdp2_root).
  const bool fsdp = shard_params && shards_with_fsdp(settings);
  if (fsdp) out.fsdp2_root_grads.assign(graph.blocks.size(), 0);

  int64_t trainable_bytes_16 = 0;  // trainable elements, for buckets and host buffers
  int64_t host_optimizer = 0;
  int64_t host_params = 0;
  int64_t checkpoint_weights = 0;
  int64_t checkpoint_optimizer = 0;
  int64_t largest_state = 0;  // one state tensor of the largest trainable parameter (rank share)
  int64_t largest_grad = 0;
  bool bnb_maps = false;  // an 8-bit state on the device: the optimizer's two quantization maps there
  // DeepSpeed's ZeRO keeps a rank's partition of the fp32 master weights, of
  // each optimizer state and of the gradients as one flat buffer each (stage
  // 1/2: single_partition_of_fp32_groups and its states, the averaged gradient
  // partition, runtime/zero/stage_1_and_2.py; stage 3: fp32_partitioned_groups_flat
  // per sub-group and grad_partitions_flat_buffer, runtime/zero/stage3.py), so
  // the allocator rounds each once, not once per parameter. FSDP's shards are
  // tensors of their own (FSDP2's DTensors, FSDP1's FlatParameter per unit).
  const bool flat_partitions = shard_optimizer && !fsdp;
  int64_t flat_states = 0, flat_master = 0, flat_grads = 0;
  const std::map<std::string, int> shared = shared_gradient_first_block(graph);
  for (const graph::Node& node : graph.nodes) {
    for (const Param& param : node.params) {
      if (!param.tied_to.empty()) continue;
      const int64_t elements = param.elements();
      out.total_params += elements;
      if (shard_params && gathered_in_fp8(node, param, settings)) out.float8_gathered_params += elements;
      const int64_t storage = param_storage_bytes(param, precision);
      // FSDP2 keeps the sharded parameter in its original dtype and casts only the
      // all-gather input (MixedPrecisionPolicy.param_dtype, _fsdp_param.py
      // all_gather_inputs): under mixed precision the fp32 shard is the master copy.
      // FSDP1 likewise (MixedPrecision.param_dtype casts a copy of the shard,
      // _flat_param.py _use_low_precision_shard).
      const bool fp32_shard = fsdp && master_bytes_per_element(precision) > 0 &&
                              !is_quantized_storage(stored_dtype(param, precision));
      const int64_t resident =
          shard_params ? ceil_div(fp32_shard ? elements * 4 : storage, world) : storage;
      if (fsdp && in_fsdp2_root(graph.blocks[node.block], settings)) out.fsdp2_root_params += storage;
      if (params_on_gpu) out.params += account(resident, accounting);
      host_params += params_on_gpu ? 0 : resident;
      if (fsdp && !params_on_gpu) out.host_shard_bytes += resident;
      if (fsdp && !params_on_gpu && in_fsdp2_root(graph.blocks[node.block], settings)) {
        out.host_root_shard_bytes += resident;
      }
      const bool full_finetune = settings.mode == TrainMode::kFull;
      // FSDP2's state dict holds the sharded parameters in their own (fp32) dtype.
      if (full_finetune || param.trainable) checkpoint_weights += fp32_shard ? elements * 4 : storage;
      if (!param.trainable) continue;

      out.trainable_params += elements;
      trainable_bytes_16 += elements;
      // A parameter whose output nothing reads (LLaVA's vision layers past the
      // feature layer, one "unused" node) never gets a gradient, and torch.optim
      // creates no state for it (its step skips parameters whose grad is None).
      if (node.op == "unused") continue;
      // FSDP2's sharded gradient takes the sharded parameter's dtype (fp32 under
      // mixed precision: foreach_reduce reduces in reduce_dtype, then casts to it).
      const int64_t grad = fp32_shard ? elements * 4 : grad_bytes(param, precision);
      if (fsdp && in_fsdp2_root(graph.blocks[node.block], settings)) {
        out.fsdp2_root_grads[node.block] += account(grad_bytes(param, precision), accounting);
        out.fsdp2_root_trainable += elements;
      }
      // bitsandbytes' 32-bit PagedAdamW keeps fp32 states whatever the parameter's dtype.
      const bool fp32_states = fp32_adapter(param, precision) ||
                               (settings.paged_optimizer && settings.optimizer == OptimizerKind::kAdamW);
      const int64_t states =
          optimizer_state_bytes(settings.optimizer, fp32_states ? Precision::kFp32 : precision, param.shape);
      const int64_t master = fp32_shard ? 0 : elements * master_bytes_per_element(precision);
      const int64_t states_rank = shard_optimizer ? ceil_div(states, world) : states;
      const int64_t master_rank = shard_optimizer ? ceil_div(master, world) : master;
      const int64_t grad_rank = shard_grads ? ceil_div(grad, world) : grad;
      checkpoint_optimizer += states + master;
      const int states_per_param = settings.optimizer == OptimizerKind::kAdamW ? 2 : 1;
      largest_state = std::max(largest_state, account(states_rank / states_per_param, accounting));
      largest_grad = std::max(largest_grad, account(grad, accounting));
      const auto add_gpu_grad = [&] {
        if (flat_partitions && shard_grads) {
          flat_grads += grad_rank;
        } else {
          out.grads_full += account(grad_rank, accounting);
        }
        // A shared weight's gradient exists from its first use in backward on.
        const auto first = shared.find(param.name);
        out.block_grads[first == shared.end() ? node.block : first->second] += account(grad, accounting);
      };
      if (torchao_offload && elements >= kTorchaoOffloadMinSize) {
        // A pinned host copy of the parameter and of its gradient, and the wrapped
        // optimizer's states on the host in the parameter's dtype. The GPU gradient
        // is copied out by a post-accumulate-grad hook; with offload_gradients it
        // is then freed, otherwise it stays until zero_grad.
        host_optimizer += param_storage_bytes(param, precision) + grad + states;
        if (keep_gpu_grads) add_gpu_grad();
      } else if (optimizer_on_gpu || torchao_offload) {
        // Paged states live in unified memory, outside the caching allocator.
        if (paged(settings, elements)) {
          out.paged_optimizer += states_rank;
        } else {
          // Each state is a tensor of its own (torch.optim's zeros_like per state,
          // bitsandbytes' codes and absmax), each rounded by the allocator; ZeRO's
          // partitions are flat buffers.
          if (settings.optimizer == OptimizerKind::kAdamW8bit && elements >= kBnbMin8bitSize) bnb_maps = true;
          if (flat_partitions) {
            flat_states += states_rank;
          } else if (shard_optimizer) {
            // FSDP: torch.optim's states of each sharded parameter, one tensor per state.
            const int64_t tensor = ceil_div(states_rank, states_per_param);
            out.optimizer += states_per_param * account(tensor, accounting);
            out.state_tensors.insert(out.state_tensors.end(), states_per_param, tensor);
          } else {
            for (int64_t tensor : optimizer_state_tensors(
                     settings.optimizer, fp32_states ? Precision::kFp32 : precision, param.shape)) {
              out.optimizer += account(tensor, accounting);
              out.state_tensors.push_back(tensor);
            }
          }
        }
        if (flat_partitions) {
          flat_master += master_rank;
        } else {
          out.master += account(master_rank, accounting);
        }
        add_gpu_grad();
      } else if (fsdp) {
        // FSDP2's CPUOffloadPolicy: the sharded gradient copied to the host in the
        // sharded parameter's dtype (foreach_reduce: reduce_output cast to orig_dtype,
        // then .to("cpu")), and torch.optim's states beside the host parameters, in
        // their dtype (_init_group: zeros_like(p)); no master copy. FSDP1's CPUOffload
        // likewise: the pinned _cpu_grad beside the pinned shard, both in the
        // FlatParameter's dtype (_flat_param.py init_flat_param_attributes).
        host_optimizer += states_rank + grad_rank + master_rank;
        out.host_grad_bytes += grad_rank;
      } else {
        // ZeRO-Offload keeps fp32 master weights, optimizer states and fp32
        // gradients on the host (Ren et al. 2021, Sec. 4.1): 4 + states + 4 bytes.
        host_optimizer += states_rank + elements * 4 / (shard_optimizer ? world : 1) +
                          (master > 0 ? master_rank : elements * 4 / (shard_optimizer ? world : 1));
      }
    }
  }

  if (flat_partitions) {
    const int64_t states_per_param = settings.optimizer == OptimizerKind::kAdamW ? 2 : 1;
    out.optimizer += states_per_param * account(ceil_div(flat_states, states_per_param), accounting);
    out.master += account(flat_master, accounting);
    out.grads_full += account(flat_grads, accounting);
  }

  // bitsandbytes' 8-bit optimizers move their two 256-value fp32 maps (signed
  // and unsigned dynamic) to the device once and share them among all states
  // (optim/optimizer.py Optimizer2State.init_state, name2qmap).
  if (bnb_maps) out.optimizer += 2 * account(256 * 4, accounting);

  // Gradients appear block by block only in plain data parallelism: ZeRO-2/3
  // keep a preallocated partition, and offload sends them to the host per bucket.
  out.grads_progressive = (optimizer_on_gpu || torchao_offload) && !shard_grads;
  const int64_t grad_width = grad_bytes_per_element(precision);
  if ((shard_grads && !fsdp) || (!optimizer_on_gpu && !torchao_offload && !fsdp)) {
    // DeepSpeed's reduce bucket (reduce_bucket_size elements, 16-bit) holds
    // gradients while they are reduced/partitioned or copied to the host. At
    // stages 1 and 2 backward() allocates it twice under overlap_comm, "double
    // buffers to avoid data access conflict" (runtime/zero/stage_1_and_2.py,
    // ipg_buffer buf_0 and buf_1, with contiguous_gradients, its default).
    const int64_t bucket = std::min(settings.reduce_bucket_elements, trainable_bytes_16) * grad_width;
    const bool double_buffered = settings.overlap_comm && config.zero_stage <= 2 && !shards_with_fsdp(settings);
    out.comm_buckets += (double_buffered ? 2 : 1) * account(bucket, accounting);
    if (!optimizer_on_gpu) out.grads_full = 0;
  }
  if (config.zero_stage >= 1 && world > 1 && !shard_params) {
    // Stage 1/2 all-gather updated 16-bit parameters in allgather_bucket_size chunks.
    const int64_t bucket = std::min(settings.allgather_bucket_elements, out.total_params) * 2;
    out.comm_buckets += account(bucket, accounting);
  }
  if (shard_params && !fsdp) {
    // ZeRO-3 gathers the parameters of the block being computed and prefetches the
    // next (stage3_prefetch_bucket_size), never beyond stage3_max_live_parameters.
    const int64_t block_bytes = largest_block_param_bytes(graph, precision);
    const int64_t prefetch = settings.prefetch_bucket_elements * 2;
    const int64_t live_cap = settings.max_live_parameters * 2;
    out.gathered_params = account(std::min(block_bytes + std::min(prefetch, block_bytes), live_cap), accounting);
  }
  if (fsdp) {
    // FSDP2 (torch/distributed/fsdp/_fully_shard): the block computing and the next
    // one, all-gathered ahead on its own stream (implicit forward prefetching,
    // explicit backward prefetching of one), with no live-parameter cap. FSDP1
    // with limit_all_gathers: at most two unsharded units not yet freed
    // (_limiter_utils.py _FreeEventQueue, _max_num_inflight_all_gathers = 2), the
    // unit computing and the one prefetched in backward.
    // The root group is all-gathered once at the root's pre-forward and stays
    // unsharded until the end of backward: torch never reshards the root after
    // forward (_fsdp_state.py _lazy_init, post_forward_mesh_info = None), and its
    // post-backward runs in the final callback (_root_post_backward_final_callback).
    out.fsdp2_root_params = account(out.fsdp2_root_params, accounting);
    // The whole model one unit (fsdp_wrap model) leaves no layer unit to gather.
    const bool layer_units = settings.fsdp_wrap != FsdpWrap::kModel;
    out.gathered_params =
        (layer_units ? account(2 * largest_layer_param_bytes(graph, settings), accounting) : 0) + out.fsdp2_root_params;
    // foreach_reduce (_fsdp_collectives.py) allocates the reduce-scatter input in
    // reduce_dtype and copies the block's unsharded gradients (param dtype) into it
    // before freeing them: both live at the end of the block's backward. torchtitan's
    // mixed precision reduces in fp32; a pure 16-bit model reduces in its dtype.
    const int64_t reduce_width = fsdp_reduce_bytes_per_element(settings);
    out.reduce_scatter_bytes = account(largest_layer_trainable_elements(graph, settings) * (grad_width + reduce_width), accounting);
    // The root group reduces once, in the final callback: its reduce-scatter input
    // beside its unsharded gradients (fsdp2_root_grads), after the last block's backward.
    out.fsdp2_root_reduce_scatter = account(out.fsdp2_root_trainable * reduce_width, accounting);
    if (sharding_of(settings) == Sharding::kFsdp1) apply_flat_params(graph, settings, config, accounting, out);
  }
  if (accumulates_unsharded(settings, config)) {
    out.unsynced_block_grads.assign(graph.blocks.size(), 0);
    if (sharding_of(settings) == Sharding::kFsdp1) {
      for (const FlatParamUnit& unit : flat_param_units(graph, settings)) {
        if (unit.trainable_elements == 0) continue;
        const int64_t bytes = account(unit.elements * grad_width, accounting);
        (unit.root ? out.root_unsynced_grads : out.unsynced_block_grads[unit.block]) += bytes;
      }
    } else {
      const int64_t width = fsdp_reduce_bytes_per_element(settings);
      for (const graph::Node& node : graph.nodes) {
        if (node.op == "unused") continue;
        for (const Param& param : node.params) {
          if (!param.trainable || !param.tied_to.empty()) continue;
          const int64_t bytes = account(param.elements() * width, accounting);
          (in_fsdp2_root(graph.blocks[node.block], settings) ? out.root_unsynced_grads
                                                              : out.unsynced_block_grads[node.block]) += bytes;
        }
      }
    }
    out.unsynced_grads = out.root_unsynced_grads;
    for (int64_t bytes : out.unsynced_block_grads) out.unsynced_grads += bytes;
  }

  OptimizerStepInputs step;
  step.optimizer = settings.optimizer;
  step.impl = resolve_stack(settings).top.optimizer_impl;
  step.optimizer_on_gpu = optimizer_on_gpu;
  step.gpu_state_bytes = out.optimizer;
  step.state_tensors = out.state_tensors;
  step.largest_state_bytes = largest_state;
  step.largest_grad_bytes = largest_grad;
  // ZeRO-3 means DeepSpeed's stage 3 unless the stack shards with FSDP2, whose
  // reduce-scatter writes fp32 sharded gradients directly (torchtitan, torchtune, litgpt).
  if (shard_params && optimizer_on_gpu && !fsdp) {
    // flatten() concatenates the 16-bit partition (a copy), .to(fp32) converts it:
    // both exist for a moment, then the fp32 copy lives through the sub-group's step.
    const int64_t partition = ceil_div(out.trainable_params, world);
    const int64_t per_element = 4 + (grad_width < 4 ? grad_width : 0);
    step.zero3_fp32_subgroup_grad_bytes =
        account(std::min(partition, settings.sub_group_elements) * per_element, accounting);
  }
  const OptimizerStepMemory step_memory = optimizer_step_memory(step);
  out.step_transient = step_memory.step_transient;
  out.grads_in_backward = step_memory.in_backward;
  out.in_backward_bytes = step_memory.in_backward_bytes;
  out.step_transient_tensors = step_memory.step_transient_tensors;
  // Optimizer-in-backward makes each state in its gradient hook: not replayed.
  out.states_created_lazily =
      creates_states_at_first_step(settings) && !step_memory.in_backward && !out.state_tensors.empty();
  if (torchao_offload && !keep_gpu_grads) {
    // offload_gradients: each gradient lives from its production to the end of
    // its copy out (record_stream), one at a time; the few kept for parameters
    // under 4096 elements are priced the same way.
    out.grads_in_backward = true;
    out.in_backward_bytes = largest_grad;
  }

  const int ranks_per_node = settings.gpus_per_node;
  if (config.offload_optimizer == Offload::kCpu) out.host_offload += host_optimizer * ranks_per_node;
  if (config.offload_optimizer == Offload::kNvme) {
    out.nvme += host_optimizer * ranks_per_node;
    out.host_offload += kNvmeOptimizerBufferBytes * ranks_per_node;
  }
  if (config.offload_param == Offload::kCpu) out.host_offload += host_params * ranks_per_node;
  if (config.offload_param == Offload::kNvme) {
    out.nvme += host_params * ranks_per_node;
    out.host_offload += kNvmeParamBufferBytes * ranks_per_node;
  }
  out.checkpoint = checkpoint_weights + (settings.save_optimizer_state ? checkpoint_optimizer : 0);
  return out;
}

}  // namespace headroom::planner
