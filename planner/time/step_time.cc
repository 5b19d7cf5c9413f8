#include "planner/time/step_time.h"

#include "planner/settings/run_gpu.h"
#include "planner/settings/stack.h"
#include "planner/mechanisms/preference_pairs.h"

#include <algorithm>

namespace headroom::planner {
namespace {

// Bytes a GPU optimizer step reads and writes per trainable parameter: params,
// gradients, master weights and states, each read and (but gradients) written.
// Under ZeRO-3 by torch's FSDPs with mixed precision the optimizer steps the fp32
// shards themselves (the master copy) with fp32 gradients: no 16-bit copy to write.
double optimizer_traffic_bytes(const RunSettings& settings, bool fsdp) {
  const bool mixed = settings.precision == Precision::kBf16Mixed || settings.precision == Precision::kFp16Mixed;
  double states = 8;
  switch (settings.optimizer) {
    case OptimizerKind::kAdamW: states = settings.precision == Precision::kBf16Pure ? 4 : 8; break;
    case OptimizerKind::kAdamW8bit: states = 2; break;
    case OptimizerKind::kAdamW8bitTorchao: states = 2; break;
    case OptimizerKind::kAdamW4bit: states = 1; break;
    case OptimizerKind::kSgdMomentum: states = 4; break;
    case OptimizerKind::kSgd: states = 0; break;
    case OptimizerKind::kAdafactor: states = 0.1; break;
  }
  if (fsdp && mixed) return 2 * 4 + 4 + 2 * states;
  // Under AMP the parameters and their gradients are the fp32 model's own.
  const double param = static_cast<double>(param_bytes_per_element(settings.precision, true));
  const double grad = static_cast<double>(grad_bytes_per_element(settings.precision));
  const double master = mixed ? 4 : 0;
  return 2 * param + grad + 2 * master + 2 * states;
}

// GPUs of `group` consecutive ranks talk over the network once the group spans
// nodes, otherwise over NVLink, or PCIe peer-to-peer without it.
double group_gbps(const RunSettings& settings, const GpuSpec& gpu, int group) {
  if (group > settings.gpus_per_node) return settings.network_gbps;
  return gpu.nvlink_gbps > 0 ? gpu.nvlink_gbps : gpu.host_link_gbps;
}

}  // namespace

double host_adam_bytes_per_param(const RunSettings& settings, const GlobalConfig& config) {
  const bool own_dtype = settings.cpu_offload != CpuOffloadImpl::kZeroOffload || fsdp_cpu_offload(settings, config);
  const double element = own_dtype && settings.precision == Precision::kBf16Pure ? 2 : 4;
  return 7 * element;  // param read + written, gradient read, two moments read + written
}

double transfer_ms(double bytes, double gbps) { return gbps > 0 ? bytes / (gbps * 1e9) * 1e3 : 0; }

double collective_gbps(const RunSettings& settings, const GpuSpec& gpu) {
  return group_gbps(settings, gpu, settings.world_size());
}

double shard_group_gbps(const RunSettings& settings, const GpuSpec& gpu) {
  return group_gbps(settings, gpu, settings.shard_group_size());
}

double gradient_collective_ms(const RunSettings& settings, const GpuSpec& gpu, int zero_stage, double grad_bytes) {
  const int world = settings.world_size();
  if (world <= 1 || grad_bytes <= 0) return 0;
  if (zero_stage <= 1) {
    const double ring = static_cast<double>(world - 1) / world;
    return transfer_ms(2 * ring * grad_bytes, collective_gbps(settings, gpu));
  }
  const int shard = settings.shard_group_size();
  const int replicas = world / shard;
  double ms = transfer_ms(static_cast<double>(shard - 1) / shard * grad_bytes, shard_group_gbps(settings, gpu));
  if (replicas > 1) {
    ms += transfer_ms(2.0 * (replicas - 1) / replicas * grad_bytes / shard, settings.network_gbps);
  }
  return ms;
}

namespace {

// What the step-time formula's parts share: the run's widths and counts.
struct StepShape {
  int world = 1;
  double shard = 1;      // what ZeRO divides the optimizer's partition by
  double trainable = 0;  // trainable parameters
  double total = 0;      // every parameter
  // Widths as the memory model stores them: under AMP (autocast over fp32 weights)
  // parameters and gradients are fp32, so DDP and ZeRO move 4 bytes per element.
  double param_width = 2;
  double grad_width = 2;
  // torch's FSDPs reduce-scatter in their reduce dtype (fp32 under Composer's
  // mixed_precision DEFAULT and torchtitan's mixed precision: reduce_dtype_of).
  bool fsdp = false;
  double reduce_width = 2;
};

StepShape step_shape(const RunSettings& settings, const GlobalConfig& config, const ModelStates& states) {
  StepShape sh;
  sh.world = settings.world_size();
  sh.shard = config.zero_stage >= 1 ? settings.shard_group_size() : 1;
  sh.trainable = static_cast<double>(states.trainable_params);
  sh.total = static_cast<double>(states.total_params);
  sh.param_width = static_cast<double>(param_bytes_per_element(settings.precision, true));
  sh.grad_width = static_cast<double>(grad_bytes_per_element(settings.precision));
  sh.fsdp = fsdp_shards_params(settings, config.zero_stage);
  sh.reduce_width = sh.fsdp ? static_cast<double>(fsdp_reduce_bytes_per_element(settings)) : sh.grad_width;
  return sh;
}

// The optimizer step: on the GPU, or CPU Adam (and NVMe) with the parameters
// copied back; paged states' migration included.
double optimizer_ms(const RunSettings& settings, const GlobalConfig& config, const GpuSpec& gpu,
                    const StepShape& sh, double paged_migration_ms) {
  const double trainable = sh.trainable;
  const double shard = sh.shard;
  const bool fsdp = sh.fsdp;
  double ms = 0;
  if (config.offload_optimizer == Offload::kNone) {
    ms = transfer_ms(trainable / shard * optimizer_traffic_bytes(settings, fsdp), gpu.memory_bandwidth_gbps * 0.7);
  } else {
    // CPU Adam on this rank's partition, then the updated 16-bit parameters go
    // back over the host link; gradient copies overlap backward (per bucket).
    // FSDP2's offload keeps the parameters on the host: nothing goes back after the
    // step (the next all-gather copies the shards in, below).
    const double copy_back = fsdp_cpu_offload(settings, config) ? 0 : trainable / shard * 2;
    ms = transfer_ms(trainable / shard * host_adam_bytes_per_param(settings, config), kHostOptimizerGbps) +
         transfer_ms(copy_back, gpu.host_link_gbps);
    if (config.offload_optimizer == Offload::kNvme) {
      // Read and write back the fp32 master and states (ZeRO-Infinity).
      ms += transfer_ms(2.0 * trainable / shard * 12, settings.nvme_gbps);
    }
  }
  return ms + paged_migration_ms;
}

// Collective time per micro-step and per optimizer step (ring algorithms: each
// moves (N-1)/N of the buffer per phase).
struct CommMs {
  double micro = 0;
  double step = 0;
};

CommMs collectives_ms(const RunSettings& settings, const GlobalConfig& config, const GpuSpec& gpu,
                      const ModelStates& states, const StepShape& sh) {
  CommMs comm;
  const double trainable = sh.trainable;
  const double total = sh.total;
  const double param_width = sh.param_width;
  const bool fsdp = sh.fsdp;
  double& comm_micro = comm.micro;
  double& comm_step = comm.step;
  if (sh.world > 1) {
    const double grad_bytes = trainable * sh.reduce_width;
    const double reduce = gradient_collective_ms(settings, gpu, config.zero_stage, grad_bytes);
    if (config.zero_stage <= 1 || accumulates_unsharded(settings, config)) {
      comm_step += reduce;  // all-reduce, or FSDP's reduce-scatter after no_sync, at the boundary
    } else {
      comm_micro += reduce;  // reduce-scatter (and the replicas' all-reduce) every micro-step
    }
    const int group = settings.shard_group_size();
    const double group_ring = static_cast<double>(group - 1) / group;
    const double group_gbps = shard_group_gbps(settings, gpu);
    if ((config.zero_stage == 1 || config.zero_stage == 2) && !fsdp) {
      comm_step += transfer_ms(group_ring * trainable * param_width, group_gbps);  // all-gather updated params
    }
    if (config.zero_stage == 3 || fsdp) {
      // Gather for forward and backward: parameters as stored (16-bit, fp32 under
      // AMP), fp8 weights at one byte under the fp8 all-gather. FSDP's root is
      // gathered once, at its pre-forward, and kept through backward.
      const double gathered_bytes =
          total * param_width - static_cast<double>(states.float8_gathered_params) * (param_width - 1);
      const double root_bytes = fsdp ? std::min(static_cast<double>(states.fsdp2_root_params), gathered_bytes) : 0;
      // FSDP at ZeRO-2 keeps each unit unsharded from its forward to its backward: one gather.
      const double regathered = fsdp_keeps_unsharded(settings, config.zero_stage) ? 0 : gathered_bytes - root_bytes;
      comm_micro += transfer_ms(group_ring * (gathered_bytes + regathered), group_gbps);
    }
  }
  return comm;
}

// Host traffic of parameter offload per micro-step: FSDP's shards in and
// gradients out (once a step under no_sync, added to comm.step), or ZeRO-3's
// offloaded parameters brought in for forward and backward.
double param_fetch_ms(const RunSettings& settings, const GlobalConfig& config, const GpuSpec& gpu,
                      const ModelStates& states, const StepShape& sh, CommMs& comm) {
  const double total = sh.total;
  const int world = sh.world;
  const double param_width = sh.param_width;
  double& comm_step = comm.step;
  double param_fetch_micro = 0;
  if (fsdp_cpu_offload(settings, config)) {
    // The shards copied in before the forward and the backward all-gathers, in
    // their stored dtype, and each reduce-scattered gradient shard copied out.
    // The root stays unsharded from forward to backward: its shards come in once,
    // unless FSDP1's MixedPrecision casts them again (fsdp_restages_root).
    const double shard_bytes = 2.0 * static_cast<double>(states.host_shard_bytes) -
                               (fsdp_restages_root(settings, config.zero_stage) ? 0.0 : static_cast<double>(states.host_root_shard_bytes));
    // Gradient shards go out after each reduce-scatter: once a step under no_sync.
    const double grads_out = transfer_ms(static_cast<double>(states.host_grad_bytes), gpu.host_link_gbps);
    param_fetch_micro = transfer_ms(shard_bytes, gpu.host_link_gbps);
    if (accumulates_unsharded(settings, config)) {
      comm_step += grads_out;
    } else {
      param_fetch_micro += grads_out;
    }
  } else if (config.offload_param == Offload::kCpu) {
    param_fetch_micro = transfer_ms(2.0 * total / world * param_width, gpu.host_link_gbps);
  } else if (config.offload_param == Offload::kNvme) {
    param_fetch_micro =
        transfer_ms(2.0 * total / world * param_width, std::min(gpu.host_link_gbps, settings.nvme_gbps));
  }
  return param_fetch_micro;
}

}  // namespace

TimeBreakdown step_time(const RunSettings& settings, const GlobalConfig& config,
                        const GpuSpec& gpu, const ModelStates& states,
                        const StepTimeInputs& in) {
  TimeBreakdown out;
  const StepShape sh = step_shape(settings, config, states);
  const int world = sh.world;
  const double accum = static_cast<double>(config.grad_accum);
  const bool fsdp = sh.fsdp;
  // Paged states the GPU cannot hold migrate over the host link during the step,
  // each state prefetched before its update and synchronised after it
  // (bitsandbytes optim/optimizer.py, Optimizer8bit.step): nothing hides them.
  out.paged_migration_ms = transfer_ms(in.paged_migrated_bytes, gpu.host_link_gbps);

  out.optimizer_ms = optimizer_ms(settings, config, gpu, sh, out.paged_migration_ms);
  CommMs comm = collectives_ms(settings, config, gpu, states, sh);
  const double param_fetch_micro = param_fetch_ms(settings, config, gpu, states, sh, comm);
  const double comm_micro = comm.micro;
  const double comm_step = comm.step;

  const double compute_micro = in.micro_fwd_ms + in.micro_bwd_ms;
  // FSDP1 wrapping the whole model has one unit: its all-gather (and shard copy)
  // precedes all compute and its reduce-scatter follows it, so nothing hides them.
  const bool one_unit = fsdp && settings.fsdp_wrap == FsdpWrap::kModel;
  const double hidden = settings.overlap_comm && !one_unit ? compute_micro : 0;
  const double exposed_micro = std::max(0.0, comm_micro + param_fetch_micro - hidden);
  const double exposed_step = std::max(0.0, comm_step - (settings.overlap_comm && !one_unit ? in.micro_bwd_ms : 0));

  out.forward_ms = accum * in.micro_fwd_ms;
  out.backward_ms = accum * (in.micro_bwd_ms - in.micro_recompute_ms);
  out.recompute_ms = accum * in.micro_recompute_ms;
  out.offload_exposed_ms = accum * in.micro_offload_ms;
  // FSDP2's all-gather copy-outs and reduce-scatter copy-ins run on the compute
  // stream: never hidden.
  const double reductions = accumulates_unsharded(settings, config) ? 1 : accum;
  out.comm_exposed_ms =
      accum * (exposed_micro + in.micro_gather_copy_ms) + reductions * in.reduce_copy_ms + exposed_step;
  out.step_ms = out.forward_ms + out.backward_ms + out.recompute_ms + out.offload_exposed_ms +
                out.comm_exposed_ms + out.optimizer_ms;
  const double samples = accum * static_cast<double>(config.micro_batch) * world;
  out.samples_per_s = out.step_ms > 0 ? samples / (out.step_ms / 1e3) : 0;
  // A DPO or reward-modelling sample is a pair: a chosen and a rejected row of seq_len tokens each.
  const bool pairs = resolve_stack(settings).top.recipe != Recipe::kSupervised;
  out.tokens_per_s = out.samples_per_s * static_cast<double>(in.seq_len) * (pairs ? kDpoRowsPerPair : 1);
  const double peak_flops = (settings.precision == Precision::kFp32 ? gpu.fp32_tflops : tensor16_tflops(gpu, settings.precision)) * 1e12;
  out.mfu = out.step_ms > 0 ? accum * in.model_flops / (out.step_ms / 1e3) / peak_flops : 0;
  return out;
}

}  // namespace headroom::planner
