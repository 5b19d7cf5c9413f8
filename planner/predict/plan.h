// Plan and Prediction: what the planner decides and what it predicts for it.
// Both are plain values with a JSON form (docs/cli-json.md).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "planner/memory/model_states.h"
#include "planner/time/time_breakdown.h"
#include "planner/settings/run_settings.h"
#include <nlohmann/json_fwd.hpp>

namespace headroom::planner {

// GPU memory of one rank at the moment of the peak, by category, in bytes
// (reserved accounting unless said otherwise).
struct MemoryBreakdown {
  int64_t cuda_context = 0;     // outside the caching allocator
  int64_t workspaces = 0;       // cuBLAS workspace
  int64_t parameters = 0;       // incl. quantization constants
  int64_t buffers = 0;          // of parameters: not nn.Parameters (module buffers, quantization state)
  int64_t saved_buffers = 0;    // of buffers: kept by autograd for backward as well (RoPE caches)
  int64_t gradients = 0;
  int64_t optimizer_states = 0;
  int64_t master_weights = 0;
  int64_t zero_buffers = 0;     // ZeRO buckets and gathered ZeRO-3 parameters
  // Saved for backward: earlier blocks' saves, the block in flight's still held,
  // checkpointed blocks' inputs, and persistent inputs.
  int64_t activations = 0;
  // In flight: the block's intermediates and recompute, the gradients of its
  // tensors, autocast's cached casts, offload copies.
  int64_t transient = 0;
  int64_t allocator = 0;        // pool slack and simulated fragmentation of the caching allocator
  // GRPO's colocated vLLM engine: its gpu_memory_utilization share (weights, KV cache,
  // activations, CUDA graphs), held all step or, in sleep mode, at generation only
  // (planner/mechanisms/vllm_engine.h).
  int64_t vllm = 0;
  // bitsandbytes paged optimizer states: CUDA unified memory outside the caching
  // allocator, moved to host RAM when the GPU runs short, so not in total().
  int64_t paged_optimizer_states = 0;

  int64_t total() const;        // everything, what nvidia-smi shows for the process
};

// The categories a training run can measure apart, per rank, in allocated
// accounting (torch.cuda.memory_allocated: requests rounded to 512 B): what the
// executor checks its measurement against (executor/prediction_check.h).
struct MeasurableMemory {
  int64_t parameters = 0;             // resident, incl. quantization constants
  int64_t optimizer_states = 0;       // on the GPU, in the caching allocator
  int64_t master_weights = 0;         // fp32 master copies on the GPU
  int64_t gradients = 0;              // all gradients kept at the optimizer step
  int64_t activations = 0;            // saved on the GPU at the end of one micro-batch's forward, inputs included
  int64_t offloaded_activations = 0;  // saved by the offloaded blocks, in host memory instead
};

struct PeakLocation {
  std::string phase;  // "forward", "backward", "optimizer step"
  int block = -1;     // block index, -1 for the optimizer step
  std::string block_name;
};

struct Prediction {
  MemoryBreakdown peak;            // reserved accounting, at the peak
  // Allocated accounting (512 B rounding), at the allocated walk's peak: the bytes of
  // peak_allocated by what holds them (no context, no pool slack), as the oracle counts.
  MemoryBreakdown peak_as_allocated;
  int64_t peak_allocated = 0;      // torch.cuda.max_memory_allocated equivalent
  int64_t peak_reserved = 0;       // torch.cuda.max_memory_reserved equivalent (the larger of the two models)
  int64_t simulated_peak_allocated = 0;  // from the tensor-level allocator simulation
  // Its largest sum of live tensors, without the blocks' unsplit tails (Simulation::peak_live):
  // the simulation's figure for what peak_allocated counts.
  int64_t simulated_peak_live = 0;
  int64_t simulated_peak_reserved = 0;
  bool simulated_out_of_memory = false;  // the allocator simulation failed an allocation within the budget
  int64_t gpu_total = 0;           // peak_reserved + context: what runs out
  int64_t gpu_capacity = 0;        // the GPU's memory
  int64_t gpu_budget = 0;          // capacity minus the safety margin
  PeakLocation where;
  MeasurableMemory allocated;      // by category, as a run measures them
  int64_t host_ram = 0;            // per node
  int64_t host_ram_budget = 0;
  int64_t disk = 0;                // checkpoints kept + one being written + NVMe swap
  int64_t disk_budget = 0;
  // Whether the budget was assumed, not given: it then never decides the verdict
  // (fits_host / fits_disk), and over_assumed_budgets() names what the run needs.
  bool host_ram_assumed = false;
  bool disk_assumed = false;
  int64_t checkpoint_bytes = 0;    // one training-state checkpoint
  TimeBreakdown time;
  ModelSize model;                 // parameter counts and weight bytes by dtype
  bool fits_gpu = false;
  bool fits_host = false;
  bool fits_disk = false;
  // The band (planner/settings/stack.h): gpu_total is its top, what plans are made
  // against; the bottom prices every mechanism the inputs leave open at its
  // cheapest. Equal, with no unknowns, when the stack pins everything.
  int64_t gpu_total_bottom = 0;
  bool fits_gpu_bottom = false;
  std::vector<std::string> band_unknowns;  // what was not known, in words
  // Unpacked batches padded to their longest (RunSettings::shortest_sample): how
  // many of varied length the simulator replayed (0: every batch at seq_len).
  int64_t varied_length_micro_steps = 0;
  bool fits() const { return fits_gpu && fits_host && fits_disk; }
  // The band straddles the budget: the run fits only if the open mechanisms are the cheap ones.
  bool tight() const { return !fits_gpu && fits_gpu_bottom && fits_host && fits_disk; }
  int64_t gpu_margin() const { return gpu_budget - gpu_total; }  // negative when short
  bool host_over_assumed() const { return host_ram_assumed && host_ram > host_ram_budget; }
  bool disk_over_assumed() const { return disk_assumed && disk > disk_budget; }
};

struct Plan {
  std::string model;
  std::string gpu;
  RunSettings settings;          // the run the plan is for (with the chosen globals applied)
  GlobalConfig config;
  std::vector<BlockChoice> blocks;     // one per graph block
  std::vector<std::string> block_names;
  int64_t seq_len = 0;
  Prediction prediction;
};

nlohmann::json breakdown_to_json(const MemoryBreakdown& breakdown);
nlohmann::json prediction_to_json(const Prediction& prediction);
nlohmann::json plan_to_json(const Plan& plan);
Result<Plan> plan_from_json(const nlohmann::json& json, std::string_view origin);

}  // namespace headroom::planner
