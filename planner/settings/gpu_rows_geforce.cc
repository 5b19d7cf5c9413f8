// GeForce rows of the GPU catalogue (hardware.h), oldest first. docs/hardware.md lists every figure and its source.
#include "planner/settings/gpu_rows.h"

namespace headroom::planner::gpu_data {
namespace {

constexpr GpuRow kRows[] = {
  // NVIDIA Ampere GA102 GPU Architecture whitepaper v2.0, Appendix A (RTX 3090): FP32 35.6,
  // FP16 tensor with FP32 accumulate 71 (GeForce runs FP32 accumulate at half the FP16-
  // accumulate rate of 142), BF16 tensor 71, TF32 tensor 35.6 TFLOPS dense; 936 GB/s GDDR6X.
  // PCIe 4.0 x16. The NVLink bridge (two cards only) is not counted.
  {
    .id = "3090",
    .name = "NVIDIA GeForce RTX 3090",
    .aliases = {"rtx3090", "rtx-3090", "geforce-rtx-3090", "nvidia geforce rtx 3090"},
    .memory_bytes = smi_mib(24576),  // nvidia-smi "24576MiB" (noonghunna/club-3090#1128)
    .bf16_tflops = 71.0,
    .fp16_tflops = 71.0,
    .fp32_tflops = 35.6,
    .tf32_tflops = 35.6,
    .memory_bandwidth_gbps = 936.0,
    .sm_count = 82,  // GA102 whitepaper: RTX 3090, 82 SMs
    .host_link_gbps = kPcie4HostGbps,
    .nvlink_gbps = 0.0,
    .cuda_context_bytes = kCudaContextBytes,
    .cublas_workspace_bytes = kCublasWorkspaceDefaultBytes,
    .architecture = "ampere",
    .source = "GA102 whitepaper v2.0 App. A; nvidia-smi 24576 MiB",
  },

  // NVIDIA Ada GPU Architecture whitepaper, Appendix (RTX 4090): FP32 82.6, FP16 tensor with
  // FP32 accumulate 165.2 (half the FP16-accumulate 330.3 on GeForce), BF16 165.2, TF32 82.6,
  // FP8 tensor with FP32 accumulate 330.3 (half the FP16-accumulate 660.6) TFLOPS dense;
  // 1,008 GB/s GDDR6X; PCIe 4.0 x16; no NVLink.
  {
    .id = "4090",
    .name = "NVIDIA GeForce RTX 4090",
    .aliases = {"rtx4090", "rtx-4090", "geforce-rtx-4090", "nvidia geforce rtx 4090"},
    .memory_bytes = smi_mib(24564),  // nvidia-smi "24564MiB" (RLinf/RLinf#255)
    .bf16_tflops = 165.2,
    .fp16_tflops = 165.2,
    .fp32_tflops = 82.6,
    .tf32_tflops = 82.6,
    .fp8_tflops = 330.3,
    .memory_bandwidth_gbps = 1008.0,
    .sm_count = 128,  // Ada whitepaper: RTX 4090, 128 SMs
    .host_link_gbps = kPcie4HostGbps,
    .nvlink_gbps = 0.0,
    .cuda_context_bytes = kCudaContextBytes,
    .cublas_workspace_bytes = kCublasWorkspaceDefaultBytes,
    .matmul_efficiency = k4090MatmulEfficiency,
    .architecture = "ada",
    .source = "Ada whitepaper App. (RTX 4090); nvidia-smi 24564 MiB",
  },

  // RTX 4070 Ti SUPER (AD103, January 2024; after the Ada whitepaper): NVIDIA's product page
  // gives 8,448 CUDA cores (66 SMs), a 2,610 MHz boost clock and 16 GB of 21 Gbps GDDR6X on a
  // 256-bit bus (672 GB/s), PCIe 4.0 x16. The Ada whitepaper's per-SM rates (RTX 4090: 165.2
  // TFLOPS BF16/FP16 with FP32 accumulate, 82.6 FP32 over 128 SMs at 2,520 MHz: 512 and 256
  // FLOPs per SM per clock) at 66 SMs and 2,610 MHz give 88.2 and 44.1 TFLOPS; its FP8 with
  // FP32 accumulate (330.3 over 128 SMs at 2,520 MHz: 1,024 per SM per clock) gives 176.4. A PyTorch
  // bf16 matmul on this card measures 91-99 TFLOPS at its above-boost running clocks
  // (zzc0721/torch-performance-test-data#70, #71), consistent with the half-rate FP32
  // accumulate of GeForce parts.
  {
    .id = "4070ti-super",
    .name = "NVIDIA GeForce RTX 4070 Ti SUPER",
    .aliases = {"rtx4070ti-super", "rtx-4070-ti-super", "4070-ti-super", "geforce-rtx-4070-ti-super",
                "nvidia geforce rtx 4070 ti super"},
    .memory_bytes = smi_mib(16376),  // nvidia-smi "16376MiB" at 285 W (public run logs)
    .bf16_tflops = 88.2,
    .fp16_tflops = 88.2,
    .fp32_tflops = 44.1,
    .tf32_tflops = 44.1,
    .fp8_tflops = 176.4,
    .memory_bandwidth_gbps = 672.0,
    .sm_count = 66,  // product page: 66 SMs
    .host_link_gbps = kPcie4HostGbps,
    .nvlink_gbps = 0.0,
    .cuda_context_bytes = kCudaContextBytes,
    .cublas_workspace_bytes = kCublasWorkspaceDefaultBytes,
    .matmul_efficiency = k4070TiSuperMatmulEfficiency,
    .architecture = "ada",
    .source = "NVIDIA product page (66 SMs, 2610 MHz, 672 GB/s); Ada whitepaper per-SM rates; nvidia-smi 16376 MiB",
  },

  // RTX 3060 12 GB (GA106): NVIDIA's product page gives 3,584 CUDA cores (28 SMs), a 1.78 GHz
  // (1,777 MHz) boost clock and 12 GB of 15 Gbps GDDR6 on a 192-bit bus (360 GB/s), PCIe 4.0
  // x16. The GA102 whitepaper's per-SM rates for GeForce Ampere (RTX 3090: 71 TFLOPS FP16/BF16
  // with FP32 accumulate and 35.6 FP32 over 82 SMs at 1,695 MHz: 512 and 256 FLOPs per SM per
  // clock) at 28 SMs and 1,777 MHz give 25.5 and 12.7 TFLOPS; TF32 runs at the FP32 rate there.
  {
    .id = "3060",
    .name = "NVIDIA GeForce RTX 3060",
    .aliases = {"rtx3060", "rtx-3060", "geforce-rtx-3060", "nvidia geforce rtx 3060"},
    .memory_bytes = smi_mib(12288),  // nvidia-smi "12288MiB" (geerlingguy/raspberry-pi-pcie-devices#790)
    .bf16_tflops = 25.5,
    .fp16_tflops = 25.5,
    .fp32_tflops = 12.7,
    .tf32_tflops = 12.7,
    .memory_bandwidth_gbps = 360.0,
    .sm_count = 28,  // product page: 3,584 CUDA cores / 128
    .host_link_gbps = kPcie4HostGbps,
    .nvlink_gbps = 0.0,
    .cuda_context_bytes = kCudaContextBytes,
    .cublas_workspace_bytes = kCublasWorkspaceDefaultBytes,
    .architecture = "ampere",
    .source = "NVIDIA product page (28 SMs, 1777 MHz, 360 GB/s); GA102 whitepaper per-SM rates; nvidia-smi 12288 MiB",
  },

  // RTX 4060 Ti 16 GB (AD106): NVIDIA's product page gives 4,352 CUDA cores (34 SMs), a 2.54
  // GHz (2,535 MHz) boost clock, 16 GB of 18 Gbps GDDR6 on a 128-bit bus (288 GB/s) and a
  // PCIe 4.0 x8 link. The Ada whitepaper's GeForce per-SM rates (512 BF16/FP16 FLOPs with
  // FP32 accumulate, 256 FP32 and 1,024 FP8 with FP32 accumulate per SM per clock; see the
  // 4070 Ti SUPER) at 34 SMs and 2,535 MHz give 44.1, 22.1 and 88.3 TFLOPS.
  {
    .id = "4060ti-16g",
    .name = "NVIDIA GeForce RTX 4060 Ti 16GB",
    .aliases = {"4060ti", "rtx4060ti", "rtx-4060-ti", "4060-ti", "geforce-rtx-4060-ti", "nvidia geforce rtx 4060 ti"},
    .memory_bytes = smi_mib(16380),  // nvidia-smi "16380 MiB" (public run logs)
    .bf16_tflops = 44.1,
    .fp16_tflops = 44.1,
    .fp32_tflops = 22.1,
    .tf32_tflops = 22.1,
    .fp8_tflops = 88.3,
    .memory_bandwidth_gbps = 288.0,
    .sm_count = 34,  // product page: 4,352 CUDA cores / 128
    .host_link_gbps = kPcie4x8HostGbps,
    .nvlink_gbps = 0.0,
    .cuda_context_bytes = kCudaContextBytes,
    .cublas_workspace_bytes = kCublasWorkspaceDefaultBytes,
    .architecture = "ada",
    .source = "NVIDIA product page (34 SMs, 2535 MHz, 288 GB/s, PCIe 4.0 x8); Ada whitepaper per-SM rates; nvidia-smi 16380 MiB",
  },

  // Ada whitepaper, Appendix (RTX 4080 16 GB, AD103): 76 SMs at 2,505 MHz; FP32 48.7, FP16/BF16
  // with FP32 accumulate 97.5 (195 with FP16 accumulate), FP8 with FP32 accumulate 194.9, TF32
  // 48.7 TFLOPS dense; 22.4 Gbps GDDR6X on 256 bits, 716.8 GB/s; PCIe 4.0 x16; no NVLink.
  {
    .id = "4080",
    .name = "NVIDIA GeForce RTX 4080",
    .aliases = {"rtx4080", "rtx-4080", "geforce-rtx-4080", "nvidia geforce rtx 4080"},
    .memory_bytes = smi_mib(16376),  // nvidia-smi "16376 MiB" (public run logs)
    .bf16_tflops = 97.5,
    .fp16_tflops = 97.5,
    .fp32_tflops = 48.7,
    .tf32_tflops = 48.7,
    .fp8_tflops = 194.9,
    .memory_bandwidth_gbps = 716.8,
    .sm_count = 76,  // Ada whitepaper: RTX 4080, 76 SMs
    .host_link_gbps = kPcie4HostGbps,
    .nvlink_gbps = 0.0,
    .cuda_context_bytes = kCudaContextBytes,
    .cublas_workspace_bytes = kCublasWorkspaceDefaultBytes,
    .architecture = "ada",
    .source = "Ada whitepaper App. (RTX 4080); nvidia-smi 16376 MiB",
  },

  // RTX 4090 D (AD102, the RTX 4090 sold in China): NVIDIA's product page gives 14,592 CUDA
  // cores (114 SMs), a 2.52 GHz boost clock and the 4090's 24 GB of 21 Gbps GDDR6X on 384 bits
  // (1,008 GB/s), PCIe 4.0 x16. The Ada GeForce per-SM rates (as for the 4070 Ti SUPER) at 114
  // SMs and 2,520 MHz give 147.1 BF16/FP16 and 294.2 FP8 with FP32 accumulate, 73.5 FP32.
  {
    .id = "4090d",
    .name = "NVIDIA GeForce RTX 4090 D",
    .aliases = {"rtx4090d", "rtx-4090d", "rtx 4090d", "rtx-4090-d", "geforce-rtx-4090-d", "nvidia geforce rtx 4090 d"},
    .memory_bytes = smi_mib(24564),  // nvidia-smi "24564 MiB" (public run logs), as the 4090
    .bf16_tflops = 147.1,
    .fp16_tflops = 147.1,
    .fp32_tflops = 73.5,
    .tf32_tflops = 73.5,
    .fp8_tflops = 294.2,
    .memory_bandwidth_gbps = 1008.0,
    .sm_count = 114,  // product page: 14,592 CUDA cores / 128
    .host_link_gbps = kPcie4HostGbps,
    .nvlink_gbps = 0.0,
    .cuda_context_bytes = kCudaContextBytes,
    .cublas_workspace_bytes = kCublasWorkspaceDefaultBytes,
    .architecture = "ada",
    .source = "NVIDIA product page (114 SMs, 2520 MHz, 1008 GB/s); Ada whitepaper per-SM rates; nvidia-smi 24564 MiB",
  },

  // NVIDIA RTX Blackwell GPU Architecture whitepaper, Appendix (RTX 5090, GB202): 170 SMs at
  // 2,407 MHz; FP32 104.8 TFLOPS; 32 GB of 28 Gbps GDDR7 on 512 bits, 1,792 GB/s; PCIe 5.0
  // x16; no NVLink. Tensor rates with FP32 accumulate at the GeForce per-SM rates (512 BF16/
  // FP16, 1,024 FP8 FLOPs per SM per clock, as Ada): 209.5 and 419.0 TFLOPS dense.
  {
    .id = "5090",
    .name = "NVIDIA GeForce RTX 5090",
    .aliases = {"rtx5090", "rtx-5090", "geforce-rtx-5090", "nvidia geforce rtx 5090"},
    .memory_bytes = smi_mib(32607),  // nvidia-smi "32607MiB" (noonghunna/club-3090#617, #1229)
    .bf16_tflops = 209.5,
    .fp16_tflops = 209.5,
    .fp32_tflops = 104.8,
    .tf32_tflops = 104.8,
    .fp8_tflops = 419.0,
    .memory_bandwidth_gbps = 1792.0,
    .sm_count = 170,  // RTX Blackwell whitepaper: RTX 5090, 170 SMs (21,760 CUDA cores)
    .host_link_gbps = kPcie5HostGbps,
    .nvlink_gbps = 0.0,
    .cuda_context_bytes = kCudaContextBytes,
    .cublas_workspace_bytes = kCublasWorkspaceHopperBytes,
    .architecture = "blackwell",
    .source = "RTX Blackwell whitepaper App. (RTX 5090: 170 SMs, 2407 MHz, 104.8 FP32, 1792 GB/s); per-SM tensor rates; nvidia-smi 32607 MiB",
  },
};
static_assert(rows_named(kRows), "every GPU row gives id, name, architecture and source");

}  // namespace

std::span<const GpuRow> geforce_rows() { return kRows; }

}  // namespace headroom::planner::gpu_data
