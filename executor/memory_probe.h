// Live and peak bytes of the device a run trains on, counted as the planner
// counts them (planner Accounting::kAllocated): the CUDA caching allocator's
// statistics on a GPU; on the CPU the process-wide tracking allocator
// (executor/cpu_memory.h) with torch.cuda.memory_allocated's 512-byte rounding,
// so that a CPU run measures what a GPU run of the same plan allocates.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <optional>

namespace headroom::executor {

class CpuMemoryTracker;  // executor/cpu_memory.h

class MemoryProbe {
 public:
  explicit MemoryProbe(torch::Device device);
  // The tracker is process-wide: later measurements in the process (tests run
  // one after another) count bytes as requested again.
  ~MemoryProbe();
  MemoryProbe(const MemoryProbe&) = delete;
  MemoryProbe& operator=(const MemoryProbe&) = delete;

  int64_t live() const;            // bytes allocated now
  int64_t peak_allocated() const;  // bytes, since the last reset_peak()
  int64_t peak_reserved() const;   // bytes; on the CPU equal to peak_allocated (no cache)
  void reset_peak();
  void synchronize() const;  // waits for the device's queued kernels (CUDA); nothing on the CPU

  // CUDA: allocates cuBLAS's workspaces now, as the first matmul of each handle
  // (the forward thread's and autograd's device thread's) would, so that no
  // category measured later counts them. Nothing on the CPU.
  void claim_cublas_workspaces(torch::ScalarType dtype) const;

  // CUDA: device memory in use outside the caching allocator (CUDA context,
  // kernels), in bytes; nullopt on the CPU or when CUDA cannot say.
  std::optional<int64_t> outside_allocator_bytes() const;

 private:
  torch::Device device_;
  CpuMemoryTracker* cpu_ = nullptr;
};

}  // namespace headroom::executor
