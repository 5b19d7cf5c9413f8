// Workstation rows of the GPU catalogue (hardware.h), with the L40S as it has always stood. docs/hardware.md lists every figure and its source.
#include "planner/settings/gpu_rows.h"

namespace headroom::planner::gpu_data {
namespace {

constexpr GpuRow kRows[] = {
  // GA102 whitepaper v2.0 (RTX A6000) and RTX A6000 datasheet: FP32 38.7, FP16/BF16 tensor
  // 154.8 (full rate with FP32 accumulate on the professional card), TF32 77.4 TFLOPS dense;
  // 768 GB/s GDDR6; PCIe 4.0 x16. NVLink bridge (112.5 GB/s bidirectional, two cards) not
  // counted.
  {
    .id = "a6000",
    .name = "NVIDIA RTX A6000",
    .aliases = {"rtx-a6000", "rtxa6000", "rtx_a6000", "nvidia rtx a6000"},
    .memory_bytes = smi_mib(49140),  // nvidia-smi "49140MiB" (several public logs)
    .bf16_tflops = 154.8,
    .fp16_tflops = 154.8,
    .fp32_tflops = 38.7,
    .tf32_tflops = 77.4,
    .memory_bandwidth_gbps = 768.0,
    .sm_count = 84,  // GA102 whitepaper: RTX A6000, 84 SMs (10,752 CUDA cores)
    .host_link_gbps = kPcie4HostGbps,
    .nvlink_gbps = 0.0,
    .cuda_context_bytes = kCudaContextBytes,
    .cublas_workspace_bytes = kCublasWorkspaceDefaultBytes,
    .architecture = "ampere",
    .source = "GA102 whitepaper v2.0; RTX A6000 datasheet; nvidia-smi 49140 MiB",
  },

  // NVIDIA L40S datasheet: FP32 91.6, TF32 183, BF16 362.05, FP16 362.05 TFLOPS dense
  // (733 with sparsity), FP8 733 dense (1,466 with sparsity); 48 GB GDDR6 at 864 GB/s;
  // PCIe 4.0 x16; no NVLink.
  {
    .id = "l40s",
    .name = "NVIDIA L40S",
    .aliases = {"l40-s", "nvidia l40s"},
    .memory_bytes = smi_mib(46068),  // nvidia-smi "46068 MiB" (akash provider-configs#99)
    .bf16_tflops = 362.05,
    .fp16_tflops = 362.05,
    .fp32_tflops = 91.6,
    .tf32_tflops = 183.0,
    .fp8_tflops = 733.0,
    .memory_bandwidth_gbps = 864.0,
    .sm_count = 142,  // L40S datasheet: 18,176 CUDA cores = 142 SMs
    .host_link_gbps = kPcie4HostGbps,
    .nvlink_gbps = 0.0,
    .cuda_context_bytes = kCudaContextBytes,
    .cublas_workspace_bytes = kCublasWorkspaceDefaultBytes,
    .architecture = "ada",
    .source = "NVIDIA L40S datasheet; nvidia-smi 46068 MiB",
  },

  // Ada whitepaper, Appendix (RTX 6000 Ada Generation, AD102): 142 SMs at 2,505 MHz; FP32 91.1,
  // TF32 182.1, FP16/BF16 with FP32 accumulate 364.2 (full rate on the professional card; 728.5
  // sparse), FP8 728.5 (1,457 sparse) TFLOPS dense; 48 GB GDDR6 at 960 GB/s; PCIe 4.0 x16; no
  // NVLink.
  {
    .id = "rtx6000-ada",
    .name = "NVIDIA RTX 6000 Ada Generation",
    .aliases = {"rtx-6000-ada", "rtx6000ada", "6000-ada", "nvidia rtx 6000 ada generation"},
    .memory_bytes = smi_mib(49140),  // nvidia-smi "49140 MiB" (several public logs)
    .bf16_tflops = 364.2,
    .fp16_tflops = 364.2,
    .fp32_tflops = 91.1,
    .tf32_tflops = 182.1,
    .fp8_tflops = 728.5,
    .memory_bandwidth_gbps = 960.0,
    .sm_count = 142,  // Ada whitepaper: RTX 6000 Ada, 142 SMs (18,176 CUDA cores)
    .host_link_gbps = kPcie4HostGbps,
    .nvlink_gbps = 0.0,
    .cuda_context_bytes = kCudaContextBytes,
    .cublas_workspace_bytes = kCublasWorkspaceDefaultBytes,
    .architecture = "ada",
    .source = "Ada whitepaper App. (RTX 6000 Ada); nvidia-smi 49140 MiB",
  },

  // NVIDIA RTX PRO 6000 Blackwell Workstation Edition datasheet (GB202): 24,064 CUDA cores (188
  // SMs), FP32 125 TFLOPS, 4,000 AI TOPS (FP4 with sparsity), 96 GB GDDR7 on 512 bits at 1,792
  // GB/s, PCIe 5.0 x16, no NVLink. Dense tensor rates with FP32 accumulate (full rate, as the
  // RTX 6000 Ada): FP4 2,000, FP8 1,000, BF16/FP16 500, TF32 250 TFLOPS. A PyTorch bf16 matmul
  // measures 368.43 TFLOPS on this card (zzc0721/torch-performance-test-data#160), above the
  // 250 a half-rate accumulate would cap it at.
  {
    .id = "rtx-pro-6000",
    .name = "NVIDIA RTX PRO 6000 Blackwell Workstation Edition",
    .aliases = {"rtxpro6000", "rtx-pro-6000-blackwell", "pro-6000", "nvidia rtx pro 6000 blackwell workstation edition"},
    .memory_bytes = smi_mib(97887),  // nvidia-smi "97887 MiB" (several public logs)
    .bf16_tflops = 500.0,
    .fp16_tflops = 500.0,
    .fp32_tflops = 125.0,
    .tf32_tflops = 250.0,
    .fp8_tflops = 1000.0,
    .memory_bandwidth_gbps = 1792.0,
    .sm_count = 188,  // datasheet: 24,064 CUDA cores / 128
    .host_link_gbps = kPcie5HostGbps,
    .nvlink_gbps = 0.0,
    .cuda_context_bytes = kCudaContextBytes,
    .cublas_workspace_bytes = kCublasWorkspaceHopperBytes,
    .matmul_efficiency = kRtxPro6000MatmulEfficiency,
    .architecture = "blackwell",
    .source = "NVIDIA RTX PRO 6000 Blackwell datasheet (125 FP32, 4000 AI TOPS sparse FP4, 1792 GB/s); nvidia-smi 97887 MiB",
  },
};
static_assert(rows_named(kRows), "every GPU row gives id, name, architecture and source");

}  // namespace

std::span<const GpuRow> workstation_rows() { return kRows; }

}  // namespace headroom::planner::gpu_data
