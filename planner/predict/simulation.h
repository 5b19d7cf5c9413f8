// The step simulator's output: one training step of a Plan replayed as a
// timeline of kernels, copies, collectives and allocations, with the memory
// curve (allocated and reserved) over the step. Produced by simulate()
// (simulator.h); rendered by reports/. Times in ms from the start of the step.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "planner/predict/plan.h"
#include <nlohmann/json_fwd.hpp>

namespace headroom::planner {

enum class Stream {
  kCompute,   // forward, backward, recompute kernels and the GPU optimizer step
  kCopyOut,   // device -> host (activation offload, gradients to a CPU optimizer)
  kCopyIn,    // host -> device (prefetch of offloaded activations, parameters)
  kComm,      // ZeRO collectives
  kCpu,       // the CPU optimizer step
};

enum class Phase { kForward, kBackward, kRecompute, kOptimizer, kOffload, kComm };

struct TimelineEvent {
  Stream stream = Stream::kCompute;
  Phase phase = Phase::kForward;
  double start_ms = 0;
  double end_ms = 0;
  int micro_step = 0;     // 0-based accumulation step
  int block = -1;         // block index, -1 when not about one block
  std::string label;      // e.g. "forward model.layers.3"
  int64_t bytes = 0;      // bytes moved (copies, collectives)
  double flops = 0;       // kernels
};

struct MemorySample {
  double time_ms = 0;
  int64_t allocated = 0;  // live tensor bytes (rounded as the allocator does)
  int64_t reserved = 0;   // segments held by the caching allocator
  std::string label;      // what just happened
};

// A named share of the memory live at the peak.
struct LiveItem {
  std::string name;   // a category ("parameters") or a block's tensors ("saved: model.layers.3")
  int64_t bytes = 0;
};

struct Simulation {
  std::vector<TimelineEvent> events;
  std::vector<MemorySample> memory;   // after every allocation and free, in time order
  int64_t peak_allocated = 0;
  int64_t peak_reserved = 0;
  // The largest sum of live tensors' sizes (requests rounded to 512 B) over every step
  // and batch replayed. peak_allocated counts whole blocks, as torch.cuda's
  // allocated_bytes does: a large-pool block is not split when what would remain is
  // 1 MiB or less, and that tail counts as allocated. The walk and the meta-device
  // oracle count tensors only, so this is the figure to put beside them.
  int64_t peak_live = 0;
  int64_t cuda_context = 0;           // outside the allocator; add for nvidia-smi
  double peak_time_ms = 0;             // when the allocated peak happens
  std::string peak_label;             // the operation at which the allocated peak happens
  std::vector<LiveItem> live_at_peak; // what is allocated at that moment, largest first
  TimeBreakdown time;                 // from the timeline
  int64_t allocations = 0;            // number of allocation events simulated
  // Optimizer steps replayed: 1, or until one reserved nothing new when the
  // optimizer makes its states at its first step (ModelStates::states_created_lazily).
  // The fields above describe the last; the first step's peaks are these.
  int steps_simulated = 1;
  bool reserved_still_growing = false;  // the last step replayed still reserved more (the cap was reached)
  int64_t first_step_peak_allocated = 0;
  int64_t first_step_peak_reserved = 0;
  int64_t segments_at_peak = 0;       // cudaMalloc'd segments held at the allocated peak
  // Unpacked data padded per batch (RunSettings::shortest_sample): micro-batches of
  // varied length replayed after the steps at seq_len, and the peaks over them
  // (reserved: what the cache grew to; 0 when none were replayed).
  int64_t varied_length_micro_steps = 0;
  int64_t varied_peak_reserved = 0;
  int64_t varied_peak_allocated = 0;
  bool varied_out_of_memory = false;  // the out-of-memory happened only in a batch of varied length
  // An allocation failed even after the cached free segments were released
  // (what PyTorch reports as CUDA out of memory), with the allocator limited to
  // the GPU budget minus the context. The simulation goes on without the limit.
  bool out_of_memory = false;
  std::string out_of_memory_at;
};

nlohmann::json simulation_to_json(const Simulation& simulation, bool with_events);
std::string_view stream_name(Stream stream);
std::string_view phase_name(Phase phase);

}  // namespace headroom::planner
