// The catalogue's rows as literal data, and the figures rows share, each with its
// source. Only hardware.cc and the gpu_rows_*.cc files include this: the rest of
// the planner sees GpuSpec (hardware.h).
#pragma once

#include <array>
#include <cstdint>
#include <span>

namespace headroom::planner::gpu_data {

inline constexpr int64_t kMiB = int64_t{1} << 20;

// Total memory: nvidia-smi's "memory.total" in MiB, times 2^20. The MiB counts are read
// off nvidia-smi output posted in public issues (see docs/hardware.md for each one).
constexpr int64_t smi_mib(int64_t mib) { return mib * kMiB; }
// On the T4 and V100 nvidia-smi's total (15360, 16384, 32768 MiB on current drivers)
// includes memory CUDA never hands out; there the catalogue holds CUDA's own total,
// torch.cuda.get_device_properties().total_memory in MiB as public training logs print it.
constexpr int64_t cuda_mib(int64_t mib) { return mib * kMiB; }

// Host link, per direction, pinned memory. PCIe 4.0 x16: nvbandwidth measures 25.13 GB/s
// host->device on an A100-SXM4-40GB (NVIDIA/nvbandwidth#42) and 24-26 GB/s on RTX 4090s
// (NVIDIA/nvbandwidth#15), about 0.8 of the 31.5 GB/s link rate. PCIe 5.0 x16: the link
// rate (63 GB/s) times the same 0.8, rounded to 50 GB/s; H100 device->host copies measure
// 52.8 GB/s (NVIDIA/nvbandwidth#24).
inline constexpr double kPcie4HostGbps = 25.0;
inline constexpr double kPcie5HostGbps = 50.0;

// PCIe 3.0 x16 (T4, V100): the link rate (15.75 GB/s) times the same 0.8. PCIe 4.0 x8 (RTX
// 4060 Ti): half the x16 figure.
inline constexpr double kPcie3HostGbps = 12.6;
inline constexpr double kPcie4x8HostGbps = kPcie4HostGbps / 2;

// CUDA context + PyTorch kernels outside the caching allocator. With lazy module loading
// (CUDA >= 11.7, PyTorch's default since 1.13, pytorch/pytorch#86509) a process with one
// tensor uses ~274 MiB (#86509) and "around 400MB" after the first CUDA op
// (pytorch/pytorch#109888, ptrblck). We take 400 MiB: a training step lazily loads more
// kernels (cuBLAS, cuDNN, NCCL) than the one-tensor measurements. Calibration overrides it.
inline constexpr int64_t kCudaContextBytes = 400 * kMiB;

// PyTorch's default cuBLAS workspace (aten/src/ATen/cuda/CublasHandlePool.cpp,
// parseChosenWorkspaceSize): ":4096:2:16:8" = 2 x 4096 KiB + 8 x 16 KiB in general, and
// ":4096:8" = 32 MiB when the device is sm_90 (Hopper); later releases extend the 32 MiB
// rule to sm_100/sm_120 (Blackwell), which the catalogue follows. cuBLASLt shares this
// workspace by default in current releases.
inline constexpr int64_t kCublasWorkspaceDefaultBytes = (2 * 4096 + 8 * 16) * int64_t{1024};
inline constexpr int64_t kCublasWorkspaceHopperBytes = 8 * 4096 * int64_t{1024};

// Achieved bf16 matmul rate over the catalogued dense peak (GpuSpec::matmul_efficiency).
// Data-centre parts: Bekman, "Machine Learning Engineering", compute/accelerator/README.md,
// "Maximum Achievable Matmul FLOPS comparison table" (mamf-finder.py, mean of 100
// iterations at the best shape): A100 SXM 271.2 of 312 TFLOPS (86.9%, torch 2.6 cu126),
// H100 SXM 794.5 of 989 (80.3%, torch 2.7 cu126; "H200 is the same"). GeForce parts run
// above their spec boost clock: zzc0721/torch-performance-test-data#78 measures 164.81
// TFLOPS bf16 on an RTX 4090 (2048^3, torch 2.7 cu128; 99.8% of 165.2) and #70 92.74 on a
// stock RTX 4070 Ti SUPER (10240^3, torch 2.2.1; 105% of 88.2; #71 is overclocked).
inline constexpr double kA100MatmulEfficiency = 271.2 / 312.0;
inline constexpr double kH100MatmulEfficiency = 794.5 / 989.0;
inline constexpr double k4090MatmulEfficiency = 164.81 / 165.2;
inline constexpr double k4070TiSuperMatmulEfficiency = 92.74 / 88.2;

// The same kind of measurement for added GPUs, zzc0721/torch-performance-test-data (10240^3
// or 8192^3, the best shape, torch 2.7 cu128): H20 142.25 TFLOPS bf16 of 148 (#77); RTX PRO
// 6000 Blackwell Workstation Edition 368.43 bf16 of 500 (#160); V100-SXM2-16GB 97.36 fp16 of
// 125 (#140; no bf16 there, so the fraction is of fp16_tflops, the rate its 16-bit runs use).
inline constexpr double kH20MatmulEfficiency = 142.25 / 148.0;
inline constexpr double kRtxPro6000MatmulEfficiency = 368.43 / 500.0;
inline constexpr double kV100MatmulEfficiency = 97.36 / 125.0;
// The same table's FP8 (float8_e4m3fn) rows: H100 SXM 1402.6 of 1979 TFLOPS (70.9%, torch
// 2.7.0 cu126), H200 SXM 1453.4 of 1979 (73.4%, torch 2.7.1 cu128).
inline constexpr double kH100Fp8MatmulEfficiency = 1402.6 / 1979.0;
inline constexpr double kH200Fp8MatmulEfficiency = 1453.4 / 1979.0;

// FlashAttention-2 (PyTorch's SDPA flash backend is FA2's code). Dao, "FlashAttention-2",
// arXiv 2307.08691, abstract and Sec. 4.1: 50-73% of the A100's peak, the forward pass at
// the top of the range and the backward pass (2.5x the forward's FLOPs) at the bottom.
// Shah et al., "FlashAttention-3", arXiv 2407.08608, abstract: FA2 reaches only 35% of
// the H100's peak (it uses no Hopper instructions: no TMA, no wgmma).
inline constexpr double kAmpereFa2ForwardEfficiency = 0.73;
inline constexpr double kAmpereFa2BackwardEfficiency = 0.50;
inline constexpr double kHopperFa2Efficiency = 0.35;

// Most aliases a row holds; unused slots stay null.
inline constexpr size_t kMaxAliases = 6;

// One catalogue row as literal data, the fields of GpuSpec in its order (see
// hardware.h for what each means); gpu_catalogue() turns each into a GpuSpec.
struct GpuRow {
  const char* id = nullptr;
  const char* name = nullptr;
  std::array<const char*, kMaxAliases> aliases = {};
  int64_t memory_bytes = 0;
  double bf16_tflops = 0;
  double fp16_tflops = 0;
  double fp32_tflops = 0;
  double tf32_tflops = 0;
  double fp8_tflops = 0;
  double memory_bandwidth_gbps = 0;
  int sm_count = 0;
  double host_link_gbps = 0;
  double nvlink_gbps = 0;
  int64_t cuda_context_bytes = 0;
  int64_t cublas_workspace_bytes = 0;
  double matmul_efficiency = 0;
  double fp8_matmul_efficiency = 0;
  double attention_forward_efficiency = 0;
  double attention_backward_efficiency = 0;
  const char* architecture = nullptr;
  const char* source = nullptr;
};

// Every row names what GpuSpec holds as strings (a null one would not convert).
template <size_t N>
constexpr bool rows_named(const GpuRow (&rows)[N]) {
  for (const GpuRow& row : rows) {
    if (row.id == nullptr || row.name == nullptr || row.architecture == nullptr || row.source == nullptr) return false;
  }
  return true;
}

// The rows of each part of the catalogue, in the order gpu_catalogue() lists them.
std::span<const GpuRow> geforce_rows();
std::span<const GpuRow> workstation_rows();
std::span<const GpuRow> datacentre_rows();

}  // namespace headroom::planner::gpu_data
