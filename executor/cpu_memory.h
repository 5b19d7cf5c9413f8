// Live and peak bytes of LibTorch's CPU allocator, through a wrapping
// allocator installed with c10::SetCPUAllocator. Lets tests and CPU runs
// measure the activation and state memory the planner predicts (a GPU run
// measures the CUDA caching allocator instead). Thread-safe counters.
#pragma once

#include <cstdint>

namespace headroom::executor {

class CpuMemoryTracker {
 public:
  // Installs the tracking allocator over the current CPU allocator (once per
  // process; later calls return the same tracker). Only allocations made after
  // installation are counted.
  static CpuMemoryTracker& install();
  int64_t live_bytes() const;
  int64_t peak_bytes() const;
  void reset_peak();  // peak := live
  // Counts each later allocation rounded up to a multiple of `bytes` (1: as
  // requested; 512: as torch.cuda.memory_allocated counts, planner
  // Accounting::kAllocated). Frees subtract what their allocation added.
  void set_rounding(int64_t bytes);
};

}  // namespace headroom::executor
