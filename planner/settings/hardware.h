// The hardware catalogue: one GpuSpec per supported GPU, with the peak rates, memory and
// fixed per-process overheads the memory and time models need. Every figure and its
// source is listed in docs/hardware.md; gpu_rows_*.cc cite each one next to its value.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "graph/status.h"

namespace headroom::planner {

struct GpuSpec {
  std::string id;                    // short catalogue id, lower case: "a6000"
  std::string name;                  // marketing name: "NVIDIA RTX A6000"
  std::vector<std::string> aliases;  // other accepted spellings, incl. the nvidia-smi name
  // Total device memory as CUDA reports it: nvidia-smi's memory.total in MiB times 2^20
  // (the total of cudaMemGetInfo / torch.cuda.get_device_properties().total_memory).
  int64_t memory_bytes = 0;
  double bf16_tflops = 0;            // dense tensor-core peak, FP32 accumulate (what PyTorch uses)
  double fp16_tflops = 0;            // dense tensor-core peak, FP32 accumulate
  double fp32_tflops = 0;            // non-tensor FP32 peak
  double tf32_tflops = 0;            // dense tensor-core peak
  // Dense fp8 (e4m3/e5m2) tensor-core peak with FP32 accumulate, what torch._scaled_mm
  // runs at; 0 where the GPU has no fp8 tensor cores (Ampere and older).
  double fp8_tflops = 0;
  double memory_bandwidth_gbps = 0;  // device memory, GB/s (1e9 bytes/s)
  // Streaming multiprocessors: a GEMM runs its output tiles in waves of one per SM
  // (planner/time/gemm_waves.h). From the architecture whitepaper or datasheet.
  int sm_count = 0;
  // Achievable host<->device copy bandwidth per direction from pinned memory, GB/s.
  double host_link_gbps = 0;
  // Per-GPU per-direction NVLink bandwidth in GB/s; 0 when the GPU has no NVLink switch
  // fabric (PCIe cards, including those that take an optional two-card bridge).
  double nvlink_gbps = 0;
  // Typical CUDA context + PyTorch kernel images resident outside the caching allocator.
  int64_t cuda_context_bytes = 0;
  // PyTorch's default cuBLAS workspace per (handle, stream) on this architecture.
  int64_t cublas_workspace_bytes = 0;
  // Fraction of bf16_tflops that a large bf16 matmul reaches in a published PyTorch
  // benchmark on this GPU (best shape, as shipped clocks): the rate the time model
  // gives GEMM FLOPs (of fp16_tflops on a GPU without bf16). 0 where no measurement is
  // published: the time model's default.
  double matmul_efficiency = 0;
  // The same for an fp8 matmul against fp8_tflops; 0 where none is published
  // (fp8 GEMMs then run at the bf16 efficiency).
  double fp8_matmul_efficiency = 0;
  // Fraction of bf16_tflops that FlashAttention-2 (PyTorch's SDPA flash backend)
  // reaches per pass on this architecture in its authors' benchmarks; 0 where none
  // is published (attention then runs at the GEMM rate).
  double attention_forward_efficiency = 0;
  double attention_backward_efficiency = 0;
  // "volta", "turing", "ampere", "ada", "hopper" or "blackwell". A GPU without bf16
  // (Volta, Turing) has bf16_tflops 0: supports_bf16 is that test, nothing else.
  std::string architecture;
  std::string source;        // short citation(s) for the figures above
};

// Every catalogued GPU, in a stable order: GeForce, workstation, then data-centre parts.
const std::vector<GpuSpec>& gpu_catalogue();

// Whether the GPU computes in bf16 (bf16_tflops > 0): Volta and Turing do not.
bool supports_bf16(const GpuSpec& gpu);

// Looks a GPU up by id or alias, ignoring case. An unknown name gives an error whose
// message lists the known ids and names --gpu-mem and --gpu-file.
Result<GpuSpec> find_gpu(std::string_view id_or_alias);

// The per-process overheads the catalogue gives every GPU of an architecture
// (hardware.cc cites them): a --gpu-file that leaves them out gets these.
int64_t default_cuda_context_bytes();
int64_t default_cublas_workspace_bytes(std::string_view architecture);

// A GPU with user-given memory (--gpu-mem) and every other figure taken from `base`.
// memory_bytes must be positive; the caller validates user input before calling.
GpuSpec with_memory(const GpuSpec& base, int64_t memory_bytes);

}  // namespace headroom::planner
