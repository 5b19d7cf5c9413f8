#include "executor/memory_probe.h"

#include <c10/cuda/CUDACachingAllocator.h>
#include <cuda_runtime_api.h>
#include <torch/cuda.h>

#include "executor/cpu_memory.h"

namespace headroom::executor {
namespace {

constexpr int64_t kCudaRounding = 512;  // torch.cuda.memory_allocated rounds requests to 512 B
constexpr size_t kAggregate = static_cast<size_t>(c10::CachingAllocator::StatType::AGGREGATE);

c10::CachingDeviceAllocator::DeviceStats stats(torch::Device device) {
  return c10::cuda::CUDACachingAllocator::getDeviceStats(device.index());
}

}  // namespace

MemoryProbe::MemoryProbe(torch::Device device) : device_(device) {
  if (!device.is_cuda()) {
    cpu_ = &CpuMemoryTracker::install();
    cpu_->set_rounding(kCudaRounding);
  }
}

// A free subtracts what its allocation added, so tensors that outlive the run
// stay balanced when the rounding goes back to 1 byte.
MemoryProbe::~MemoryProbe() {
  if (cpu_) cpu_->set_rounding(1);
}

int64_t MemoryProbe::live() const {
  if (cpu_) return cpu_->live_bytes();
  return stats(device_).allocated_bytes[kAggregate].current;
}

int64_t MemoryProbe::peak_allocated() const {
  if (cpu_) return cpu_->peak_bytes();
  return stats(device_).allocated_bytes[kAggregate].peak;
}

int64_t MemoryProbe::peak_reserved() const {
  if (cpu_) return cpu_->peak_bytes();  // the CPU allocator keeps no cache
  return stats(device_).reserved_bytes[kAggregate].peak;
}

void MemoryProbe::reset_peak() {
  if (cpu_) {
    cpu_->reset_peak();
  } else {
    c10::cuda::CUDACachingAllocator::resetPeakStats(device_.index());
  }
}

void MemoryProbe::synchronize() const {
  if (device_.is_cuda()) torch::cuda::synchronize(device_.index());
}

void MemoryProbe::claim_cublas_workspaces(torch::ScalarType dtype) const {
  if (!device_.is_cuda()) return;
  const auto options = torch::TensorOptions().device(device_).dtype(dtype);
  const torch::Tensor a = torch::ones({64, 64}, options.requires_grad(true));
  torch::mm(a, a).sum().backward();
}

std::optional<int64_t> MemoryProbe::outside_allocator_bytes() const {
  if (!device_.is_cuda()) return std::nullopt;
  size_t free = 0;
  size_t total = 0;
  if (cudaMemGetInfo(&free, &total) != cudaSuccess) return std::nullopt;
  return static_cast<int64_t>(total - free) - stats(device_).reserved_bytes[kAggregate].current;
}

}  // namespace headroom::executor
