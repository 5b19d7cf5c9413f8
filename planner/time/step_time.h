// Time of one optimizer step beyond the block chain: the accumulation loop, the
// optimizer step on the GPU, CPU or NVMe, offload transfers and ZeRO
// collectives with a bandwidth model. Constants and sources in
// docs/memory-model.md ("Time model").
#pragma once

#include <cstdint>

#include "planner/settings/hardware.h"
#include "planner/memory/model_states.h"
#include "planner/time/time_breakdown.h"
#include "planner/settings/run_settings.h"

namespace headroom::planner {

// A host AdamW step is bound by host memory traffic: ~28 GB/s of effective host
// bandwidth, 1e9 parameters per second at DeepSpeed CPU Adam's 28 bytes per
// parameter. An assumption until the executor measures it (calibration).
inline constexpr double kHostOptimizerGbps = 28.0;

// Bytes a host AdamW step reads and writes per parameter: the parameter read and
// written, its gradient read, both moments read and written. DeepSpeed's CPU Adam
// (ZeRO-Offload) holds them all fp32: 28 B. torchao's CPUOffloadOptimizer steps
// torch.optim.AdamW on a host copy in the parameter's own dtype
// (torchao/optim/cpu_offload.py: torch.empty_like(p_device, device="cpu")), whose
// moments are zeros_like the parameter (torch/optim/adam.py _init_group): 14 B for
// a pure-bf16 model, 28 B for an fp32 one.
// FSDP2's CPUOffloadPolicy steps torch.optim on the host's sharded parameters in their
// own dtype likewise: 14 B under pure bf16, 28 B with fp32 shards.
double host_adam_bytes_per_param(const RunSettings& settings, const GlobalConfig& config = {});

struct StepTimeInputs {
  double micro_fwd_ms = 0;        // forward of the chain, one micro-step
  double micro_bwd_ms = 0;        // backward incl. recompute, one micro-step
  double micro_recompute_ms = 0;
  double micro_offload_ms = 0;    // exposed activation copies, one micro-step
  // FSDP2's copies on the compute stream (planner/time/fsdp2_stream_copies.h), counted as
  // exposed communication: the all-gather copy-outs of one micro-step, and the
  // reduce-scatter copy-ins of one backward that reduces (every micro-step, or the
  // last one only when FSDP accumulates unsharded gradients).
  double micro_gather_copy_ms = 0;
  double reduce_copy_ms = 0;
  double paged_migrated_bytes = 0;  // unified-memory optimizer states moved per step, both ways
  double model_flops = 0;         // forward + backward FLOPs of one micro-step (no recompute)
  int64_t seq_len = 0;
};

// Milliseconds to move `bytes` at `gbps` GB/s (0 when the rate is 0).
double transfer_ms(double bytes, double gbps);

// Bandwidth of the ZeRO collectives: the network between nodes, NVLink inside
// one when the GPU has it, otherwise PCIe peer-to-peer at the host-link rate.
double collective_gbps(const RunSettings& settings, const GpuSpec& gpu);

// Bandwidth inside one shard group: NVLink or PCIe when the group fits in a
// node, the network otherwise.
double shard_group_gbps(const RunSettings& settings, const GpuSpec& gpu);

// Milliseconds of the collective that reduces `grad_bytes` of gradients: an
// all-reduce over every GPU at stages 0-1, a reduce-scatter within the shard
// group at stages 2-3 followed, under hybrid sharding, by an all-reduce of each
// rank's shard across the replicas over the network (ring algorithms: (N-1)/N
// of the buffer per phase).
double gradient_collective_ms(const RunSettings& settings, const GpuSpec& gpu, int zero_stage, double grad_bytes);

TimeBreakdown step_time(const RunSettings& settings, const GlobalConfig& config,
                        const GpuSpec& gpu, const ModelStates& states,
                        const StepTimeInputs& inputs);

}  // namespace headroom::planner
