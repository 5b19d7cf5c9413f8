// Data-centre rows of the GPU catalogue (hardware.h), oldest first. docs/hardware.md lists every figure and its source.
#include "planner/settings/gpu_rows.h"

namespace headroom::planner::gpu_data {
namespace {

constexpr GpuRow kRows[] = {
  // NVIDIA T4 datasheet (Turing TU104): FP32 8.1, mixed precision FP16/FP32 65 TFLOPS; no bf16,
  // no TF32, no fp8; 16 GB GDDR6 at 320 GB/s; PCIe 3.0 x16; 40 SMs (2,560 CUDA cores / 64).
  {
    .id = "t4",
    .name = "NVIDIA T4",
    .aliases = {"tesla-t4", "tesla t4", "nvidia t4"},
    .memory_bytes = cuda_mib(15102),  // torch "Tesla T4, 15102MiB" (nvidia-smi 15360 MiB, modal-client#2797)
    .bf16_tflops = 0.0,
    .fp16_tflops = 65.0,
    .fp32_tflops = 8.1,
    .tf32_tflops = 0.0,
    .memory_bandwidth_gbps = 320.0,
    .sm_count = 40,
    .host_link_gbps = kPcie3HostGbps,
    .nvlink_gbps = 0.0,
    .cuda_context_bytes = kCudaContextBytes,
    .cublas_workspace_bytes = kCublasWorkspaceDefaultBytes,
    .architecture = "turing",
    .source = "NVIDIA T4 datasheet; CUDA total 15102 MiB (nvidia-smi 15360 MiB)",
  },

  // NVIDIA V100 datasheet (SXM2, Volta GV100): FP32 15.7, tensor (FP16 with FP32 accumulate)
  // 125 TFLOPS; no bf16, TF32 or fp8; 16 or 32 GB HBM2 at 900 GB/s; NVLink 300 GB/s (both
  // directions, so 150 per direction); PCIe 3.0 x16; 80 SMs (5,120 CUDA cores / 64).
  {
    .id = "v100-16g",
    .name = "NVIDIA V100 16GB SXM2",
    .aliases = {"v100-16gb", "v100-sxm2-16gb", "tesla v100-sxm2-16gb"},
    .memory_bytes = cuda_mib(16160),  // torch "Tesla V100-SXM2-16GB, 16160MiB" (nvidia-smi 16384 MiB)
    .bf16_tflops = 0.0,
    .fp16_tflops = 125.0,
    .fp32_tflops = 15.7,
    .tf32_tflops = 0.0,
    .memory_bandwidth_gbps = 900.0,
    .sm_count = 80,
    .host_link_gbps = kPcie3HostGbps,
    .nvlink_gbps = 150.0,
    .cuda_context_bytes = kCudaContextBytes,
    .cublas_workspace_bytes = kCublasWorkspaceDefaultBytes,
    .matmul_efficiency = kV100MatmulEfficiency,
    .architecture = "volta",
    .source = "NVIDIA V100 datasheet (SXM2); CUDA total 16160 MiB (nvidia-smi 16384 MiB)",
  },

  // As the 16 GB part, with 32 GB of HBM2.
  {
    .id = "v100-32g",
    .name = "NVIDIA V100 32GB SXM2",
    .aliases = {"v100", "v100-32gb", "v100-sxm2-32gb", "tesla v100-sxm2-32gb"},
    .memory_bytes = cuda_mib(32494),  // torch "Tesla V100-SXM2-32GB, 32494MiB" (nvidia-smi 32768 MiB)
    .bf16_tflops = 0.0,
    .fp16_tflops = 125.0,
    .fp32_tflops = 15.7,
    .tf32_tflops = 0.0,
    .memory_bandwidth_gbps = 900.0,
    .sm_count = 80,
    .host_link_gbps = kPcie3HostGbps,
    .nvlink_gbps = 150.0,
    .cuda_context_bytes = kCudaContextBytes,
    .cublas_workspace_bytes = kCublasWorkspaceDefaultBytes,
    .matmul_efficiency = kV100MatmulEfficiency,
    .architecture = "volta",
    .source = "NVIDIA V100 datasheet (SXM2); CUDA total 32494 MiB (nvidia-smi 32768 MiB)",
  },

  // NVIDIA L4 datasheet (Ada AD104): FP32 30.3, TF32 120, BF16/FP16 242, FP8 485 TFLOPS with
  // sparsity, so 60, 121 and 242.5 dense; 24 GB GDDR6 at 300 GB/s; PCIe 4.0 x16; no NVLink.
  {
    .id = "l4",
    .name = "NVIDIA L4",
    .aliases = {"nvidia l4", "nvidia-l4"},
    .memory_bytes = smi_mib(23034),  // nvidia-smi "23034MiB" (modal-labs/modal-client#2797)
    .bf16_tflops = 121.0,
    .fp16_tflops = 121.0,
    .fp32_tflops = 30.3,
    .tf32_tflops = 60.0,
    .fp8_tflops = 242.5,
    .memory_bandwidth_gbps = 300.0,
    .sm_count = 58,  // 7,424 CUDA cores (public spec tables) / 128
    .host_link_gbps = kPcie4HostGbps,
    .nvlink_gbps = 0.0,
    .cuda_context_bytes = kCudaContextBytes,
    .cublas_workspace_bytes = kCublasWorkspaceDefaultBytes,
    .architecture = "ada",
    .source = "NVIDIA L4 datasheet (sparse rates halved); nvidia-smi 23034 MiB",
  },

  // NVIDIA A40 datasheet (Ampere GA102): FP32 37.4, TF32 74.8, BF16/FP16 149.7 TFLOPS dense
  // (149.6, 299.4 sparse); 48 GB GDDR6 at 696 GB/s; PCIe 4.0 x16. The NVLink bridge (112.5
  // GB/s, two cards) is not counted.
  {
    .id = "a40",
    .name = "NVIDIA A40",
    .aliases = {"nvidia a40", "nvidia-a40"},
    .memory_bytes = smi_mib(46068),  // nvidia-smi "46068 MiB" (several public logs)
    .bf16_tflops = 149.7,
    .fp16_tflops = 149.7,
    .fp32_tflops = 37.4,
    .tf32_tflops = 74.8,
    .memory_bandwidth_gbps = 696.0,
    .sm_count = 84,  // datasheet: 10,752 CUDA cores / 128
    .host_link_gbps = kPcie4HostGbps,
    .nvlink_gbps = 0.0,
    .cuda_context_bytes = kCudaContextBytes,
    .cublas_workspace_bytes = kCublasWorkspaceDefaultBytes,
    .architecture = "ampere",
    .source = "NVIDIA A40 datasheet; nvidia-smi 46068 MiB",
  },

  // NVIDIA A100 datasheet: FP32 19.5, TF32 156, BF16 312, FP16 312 TFLOPS dense; 40 GB HBM2
  // at 1,555 GB/s; NVLink 600 GB/s (both directions together, so 300 per direction);
  // PCIe 4.0 x16.
  {
    .id = "a100-40g",
    .name = "NVIDIA A100 40GB SXM",
    .aliases = {"a100-40gb", "a100-sxm4-40gb", "nvidia a100-sxm4-40gb"},
    .memory_bytes = smi_mib(40960),  // nvidia-smi "40960MiB" (modal-labs/modal-client#2797)
    .bf16_tflops = 312.0,
    .fp16_tflops = 312.0,
    .fp32_tflops = 19.5,
    .tf32_tflops = 156.0,
    .memory_bandwidth_gbps = 1555.0,
    .sm_count = 108,  // A100 whitepaper: 108 SMs
    .host_link_gbps = kPcie4HostGbps,
    .nvlink_gbps = 300.0,
    .cuda_context_bytes = kCudaContextBytes,
    .cublas_workspace_bytes = kCublasWorkspaceDefaultBytes,
    .matmul_efficiency = kA100MatmulEfficiency,
    .attention_forward_efficiency = kAmpereFa2ForwardEfficiency,
    .attention_backward_efficiency = kAmpereFa2BackwardEfficiency,
    .architecture = "ampere",
    .source = "NVIDIA A100 datasheet; nvidia-smi 40960 MiB",
  },

  // NVIDIA A100 datasheet: same compute as the 40 GB part; 80 GB HBM2e at 2,039 GB/s (SXM).
  {
    .id = "a100-80g",
    .name = "NVIDIA A100 80GB SXM",
    .aliases = {"a100", "a100-80gb", "a100-sxm4-80gb", "nvidia a100-sxm4-80gb"},
    .memory_bytes = smi_mib(81920),  // nvidia-smi "81920MiB" (modal-labs/modal-client#2797)
    .bf16_tflops = 312.0,
    .fp16_tflops = 312.0,
    .fp32_tflops = 19.5,
    .tf32_tflops = 156.0,
    .memory_bandwidth_gbps = 2039.0,
    .sm_count = 108,  // A100 whitepaper: 108 SMs
    .host_link_gbps = kPcie4HostGbps,
    .nvlink_gbps = 300.0,
    .cuda_context_bytes = kCudaContextBytes,
    .cublas_workspace_bytes = kCublasWorkspaceDefaultBytes,
    .matmul_efficiency = kA100MatmulEfficiency,
    .attention_forward_efficiency = kAmpereFa2ForwardEfficiency,
    .attention_backward_efficiency = kAmpereFa2BackwardEfficiency,
    .architecture = "ampere",
    .source = "NVIDIA A100 datasheet; nvidia-smi 81920 MiB",
  },

  // NVIDIA A800 datasheet (SXM, the A100 sold in China): the A100 80GB SXM's GA100 (108 SMs,
  // FP32 19.5, TF32 156, BF16/FP16 312 TFLOPS dense) and 80 GB HBM2e at 2,039 GB/s, with
  // NVLink cut to 400 GB/s (both directions, so 200 per direction); PCIe 4.0 x16. The A100's
  // measured matmul and FlashAttention-2 efficiencies carry over: the same silicon and clocks.
  {
    .id = "a800-80g",
    .name = "NVIDIA A800 80GB SXM",
    .aliases = {"a800", "a800-80gb", "a800-sxm4-80gb", "nvidia a800-sxm4-80gb"},
    .memory_bytes = smi_mib(81920),  // nvidia-smi "81920MiB" (dexmal/dexbotic#41)
    .bf16_tflops = 312.0,
    .fp16_tflops = 312.0,
    .fp32_tflops = 19.5,
    .tf32_tflops = 156.0,
    .memory_bandwidth_gbps = 2039.0,
    .sm_count = 108,
    .host_link_gbps = kPcie4HostGbps,
    .nvlink_gbps = 200.0,
    .cuda_context_bytes = kCudaContextBytes,
    .cublas_workspace_bytes = kCublasWorkspaceDefaultBytes,
    .matmul_efficiency = kA100MatmulEfficiency,
    .attention_forward_efficiency = kAmpereFa2ForwardEfficiency,
    .attention_backward_efficiency = kAmpereFa2BackwardEfficiency,
    .architecture = "ampere",
    .source = "NVIDIA A800 datasheet (A100 compute, NVLink 400 GB/s); nvidia-smi 81920 MiB",
  },

  // NVIDIA H100 whitepaper / datasheet (SXM5): FP32 66.9, TF32 494.7, BF16 989.4, FP16 989.4,
  // FP8 1,979 TFLOPS dense (the datasheet prints the sparse rates, 1,979 and 3,958); 80 GB
  // HBM3 at 3,350 GB/s; NVLink 900 GB/s (both directions, so 450 per direction); PCIe 5.0 x16.
  {
    .id = "h100-sxm",
    .name = "NVIDIA H100 80GB SXM",
    .aliases = {"h100", "h100-80g", "h100-sxm5", "nvidia h100 80gb hbm3"},
    .memory_bytes = smi_mib(81559),  // nvidia-smi "81559MiB" (NVIDIA/nccl#1264)
    .bf16_tflops = 989.4,
    .fp16_tflops = 989.4,
    .fp32_tflops = 66.9,
    .tf32_tflops = 494.7,
    .fp8_tflops = 1979.0,
    .memory_bandwidth_gbps = 3350.0,
    .sm_count = 132,  // H100 whitepaper: SXM5, 132 SMs
    .host_link_gbps = kPcie5HostGbps,
    .nvlink_gbps = 450.0,
    .cuda_context_bytes = kCudaContextBytes,
    .cublas_workspace_bytes = kCublasWorkspaceHopperBytes,
    .matmul_efficiency = kH100MatmulEfficiency,
    .fp8_matmul_efficiency = kH100Fp8MatmulEfficiency,
    .attention_forward_efficiency = kHopperFa2Efficiency,
    .attention_backward_efficiency = kHopperFa2Efficiency,
    .architecture = "hopper",
    .source = "NVIDIA H100 whitepaper/datasheet (SXM5); nvidia-smi 81559 MiB",
  },

  // NVIDIA H100 datasheet (PCIe): FP32 51.2, TF32 378, BF16 756.5, FP16 756.5, FP8 1,513
  // TFLOPS dense (1,513 and 3,026 sparse); 80 GB HBM2e at 2,000 GB/s; PCIe 5.0 x16. The NVLink bridge (600 GB/s
  // bidirectional, pairs only) is not counted.
  {
    .id = "h100-pcie",
    .name = "NVIDIA H100 80GB PCIe",
    .aliases = {"h100pcie", "h100-80g-pcie", "nvidia h100 pcie"},
    .memory_bytes = smi_mib(81559),  // 81559 MiB, as the SXM part (public GPU spec table)
    .bf16_tflops = 756.5,
    .fp16_tflops = 756.5,
    .fp32_tflops = 51.2,
    .tf32_tflops = 378.0,
    .fp8_tflops = 1513.0,
    .memory_bandwidth_gbps = 2000.0,
    .sm_count = 114,  // H100 whitepaper: PCIe, 114 SMs
    .host_link_gbps = kPcie5HostGbps,
    .nvlink_gbps = 0.0,
    .cuda_context_bytes = kCudaContextBytes,
    .cublas_workspace_bytes = kCublasWorkspaceHopperBytes,
    .attention_forward_efficiency = kHopperFa2Efficiency,
    .attention_backward_efficiency = kHopperFa2Efficiency,
    .architecture = "hopper",
    .source = "NVIDIA H100 datasheet (PCIe); nvidia-smi 81559 MiB",
  },

  // NVIDIA H800 (SXM5, the H100 sold in China): the H100 SXM's GH100 (132 SMs; FP32 66.9, TF32
  // 494.7, BF16/FP16 989.4, FP8 1,979 TFLOPS dense) and 80 GB HBM3 at 3,350 GB/s, with NVLink
  // cut to 400 GB/s (both directions, so 200 per direction); PCIe 5.0 x16. The H100's measured
  // efficiencies carry over: the same silicon and clocks.
  {
    .id = "h800",
    .name = "NVIDIA H800 80GB SXM",
    .aliases = {"h800-sxm", "h800-80g", "nvidia h800"},
    .memory_bytes = smi_mib(81559),  // nvidia-smi "NVIDIA H800, 81559 MiB" (public run log)
    .bf16_tflops = 989.4,
    .fp16_tflops = 989.4,
    .fp32_tflops = 66.9,
    .tf32_tflops = 494.7,
    .fp8_tflops = 1979.0,
    .memory_bandwidth_gbps = 3350.0,
    .sm_count = 132,
    .host_link_gbps = kPcie5HostGbps,
    .nvlink_gbps = 200.0,
    .cuda_context_bytes = kCudaContextBytes,
    .cublas_workspace_bytes = kCublasWorkspaceHopperBytes,
    .matmul_efficiency = kH100MatmulEfficiency,
    .fp8_matmul_efficiency = kH100Fp8MatmulEfficiency,
    .attention_forward_efficiency = kHopperFa2Efficiency,
    .attention_backward_efficiency = kHopperFa2Efficiency,
    .architecture = "hopper",
    .source = "H100 SXM figures with NVLink 400 GB/s (NVIDIA H800 product brief); nvidia-smi 81559 MiB",
  },

  // NVIDIA H20 (Hopper, sold in China): NVIDIA publishes no datasheet; its partners' spec
  // sheets give BF16/FP16 148, FP8 296, TF32 74, FP32 44 TFLOPS dense, 96 GB HBM3 at 4.0 TB/s,
  // NVLink 900 GB/s (450 per direction), PCIe 5.0 x16. A PyTorch bf16 matmul measures 142.25
  // TFLOPS, TF32 71.8 and FP32 32.0 (zzc0721/torch-performance-test-data#77), consistent with
  // them. The SM count is not published: 0, no wave quantisation.
  {
    .id = "h20",
    .name = "NVIDIA H20",
    .aliases = {"h20-96g", "nvidia h20"},
    .memory_bytes = smi_mib(97871),  // nvidia-smi "NVIDIA H20, 97871 MiB" (several public logs)
    .bf16_tflops = 148.0,
    .fp16_tflops = 148.0,
    .fp32_tflops = 44.0,
    .tf32_tflops = 74.0,
    .fp8_tflops = 296.0,
    .memory_bandwidth_gbps = 4000.0,
    .sm_count = 0,
    .host_link_gbps = kPcie5HostGbps,
    .nvlink_gbps = 450.0,
    .cuda_context_bytes = kCudaContextBytes,
    .cublas_workspace_bytes = kCublasWorkspaceHopperBytes,
    .matmul_efficiency = kH20MatmulEfficiency,
    .attention_forward_efficiency = kHopperFa2Efficiency,
    .attention_backward_efficiency = kHopperFa2Efficiency,
    .architecture = "hopper",
    .source = "partner spec sheets (no NVIDIA datasheet); matmul zzc0721/torch-performance-test-data#77; nvidia-smi 97871 MiB",
  },

  // NVIDIA H200 datasheet (SXM): the H100 SXM compute (BF16/FP16 1,979 sparse = 989.4 dense,
  // FP8 3,958 sparse = 1,979 dense, TF32 494.7, FP32 67); 141 GB HBM3e at 4,800 GB/s;
  // NVLink 900 GB/s (450 per direction); PCIe 5.0 x16.
  {
    .id = "h200",
    .name = "NVIDIA H200 141GB SXM",
    .aliases = {"h200-sxm", "h200-141g", "nvidia h200"},
    .memory_bytes = smi_mib(143771),  // nvidia-smi "143771MiB" (several public logs)
    .bf16_tflops = 989.4,
    .fp16_tflops = 989.4,
    .fp32_tflops = 66.9,
    .tf32_tflops = 494.7,
    .fp8_tflops = 1979.0,
    .memory_bandwidth_gbps = 4800.0,
    .sm_count = 132,  // GH100 as in H100 SXM5: 132 SMs (16,896 CUDA cores)
    .host_link_gbps = kPcie5HostGbps,
    .nvlink_gbps = 450.0,
    .cuda_context_bytes = kCudaContextBytes,
    .cublas_workspace_bytes = kCublasWorkspaceHopperBytes,
    .matmul_efficiency = kH100MatmulEfficiency,
    .fp8_matmul_efficiency = kH200Fp8MatmulEfficiency,
    .attention_forward_efficiency = kHopperFa2Efficiency,
    .attention_backward_efficiency = kHopperFa2Efficiency,
    .architecture = "hopper",
    .source = "NVIDIA H200 datasheet; nvidia-smi 143771 MiB",
  },

  // NVIDIA HGX B200 spec table (eight GPUs; per GPU below): FP8 72 / 8 = 9 PFLOPS, FP16/BF16
  // 4.5, TF32 2.25 with sparsity, so 4,500, 2,250 and 1,125 TFLOPS dense; FP32 600 / 8 = 75
  // TFLOPS; HBM3e at 64 / 8 = 8 TB/s; NVLink 1.8 TB/s per GPU (900 per direction); PCIe 5.0
  // x16 to the host. 148 SMs as the CUDA device query reports them (pytorch/ao#4002), which
  // also finds a 7,680-bit bus at 3,996 MHz, 7.67 TB/s; the catalogue keeps the vendor's 8.
  {
    .id = "b200",
    .name = "NVIDIA B200",
    .aliases = {"b200-sxm", "b200-180g", "nvidia b200"},
    .memory_bytes = smi_mib(183359),  // nvidia-smi "183359MiB" (NVIDIA/TensorRT-LLM#10278)
    .bf16_tflops = 2250.0,
    .fp16_tflops = 2250.0,
    .fp32_tflops = 75.0,
    .tf32_tflops = 1125.0,
    .fp8_tflops = 4500.0,
    .memory_bandwidth_gbps = 8000.0,
    .sm_count = 148,
    .host_link_gbps = kPcie5HostGbps,
    .nvlink_gbps = 900.0,
    .cuda_context_bytes = kCudaContextBytes,
    .cublas_workspace_bytes = kCublasWorkspaceHopperBytes,
    .architecture = "blackwell",
    .source = "NVIDIA HGX B200 spec table (per GPU); 148 SMs (pytorch/ao#4002); nvidia-smi 183359 MiB",
  },
};
static_assert(rows_named(kRows), "every GPU row gives id, name, architecture and source");

}  // namespace

std::span<const GpuRow> datacentre_rows() { return kRows; }

}  // namespace headroom::planner::gpu_data
