// Time of one optimizer step beyond the block chain: the accumulation loop, the
// optimizer step on the GPU, CPU or NVMe, offload transfers and ZeRO
// collectives with a bandwidth model. Constants and sources in
// docs/memory-model.md ("Time model").
#pragma once

#include <cstdint>

#include "planner/hardware.h"
#include "planner/model_states.h"
#include "planner/plan.h"
#include "planner/run_settings.h"

namespace headroom::planner {

// DeepSpeed's CPU Adam is bound by host memory traffic (~28 bytes per parameter:
// fp32 param, grad, two moments read and written, 16-bit copy written); at
// ~28 GB/s of effective host bandwidth that is 1e9 parameters per second. An
// assumption until the executor measures it (calibration).
inline constexpr double kCpuAdamParamsPerSecond = 1e9;

struct StepTimeInputs {
  double micro_fwd_ms = 0;        // forward of the chain, one micro-step
  double micro_bwd_ms = 0;        // backward incl. recompute, one micro-step
  double micro_recompute_ms = 0;
  double micro_offload_ms = 0;    // exposed activation copies, one micro-step
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
