#include "planner/settings/hardware.h"

#include <array>
#include <cassert>
#include <cctype>
#include <utility>

namespace headroom::planner {
namespace {

constexpr int64_t kMiB = int64_t{1} << 20;

// Total memory: nvidia-smi's "memory.total" in MiB, times 2^20. The MiB counts are read
// off nvidia-smi output posted in public issues (see docs/hardware.md for each one).
constexpr int64_t smi_mib(int64_t mib) { return mib * kMiB; }

// Host link, per direction, pinned memory. PCIe 4.0 x16: nvbandwidth measures 25.13 GB/s
// host->device on an A100-SXM4-40GB (NVIDIA/nvbandwidth#42) and 24-26 GB/s on RTX 4090s
// (NVIDIA/nvbandwidth#15), about 0.8 of the 31.5 GB/s link rate. PCIe 5.0 x16: the link
// rate (63 GB/s) times the same 0.8, rounded to 50 GB/s; H100 device->host copies measure
// 52.8 GB/s (NVIDIA/nvbandwidth#24).
constexpr double kPcie4HostGbps = 25.0;
constexpr double kPcie5HostGbps = 50.0;

// CUDA context + PyTorch kernels outside the caching allocator. With lazy module loading
// (CUDA >= 11.7, PyTorch's default since 1.13, pytorch/pytorch#86509) a process with one
// tensor uses ~274 MiB (#86509) and "around 400MB" after the first CUDA op
// (pytorch/pytorch#109888, ptrblck). We take 400 MiB: a training step lazily loads more
// kernels (cuBLAS, cuDNN, NCCL) than the one-tensor measurements. Calibration overrides it.
constexpr int64_t kCudaContextBytes = 400 * kMiB;

// PyTorch's default cuBLAS workspace (aten/src/ATen/cuda/CublasHandlePool.cpp,
// parseChosenWorkspaceSize): ":4096:2:16:8" = 2 x 4096 KiB + 8 x 16 KiB in general, and
// ":4096:8" = 32 MiB when the device is sm_90 (Hopper); later releases extend the 32 MiB
// rule to sm_100/sm_120. cuBLASLt shares this workspace by default in current releases.
constexpr int64_t kCublasWorkspaceDefaultBytes = (2 * 4096 + 8 * 16) * int64_t{1024};
constexpr int64_t kCublasWorkspaceHopperBytes = 8 * 4096 * int64_t{1024};

// Achieved bf16 matmul rate over the catalogued dense peak (GpuSpec::matmul_efficiency).
// Data-centre parts: Bekman, "Machine Learning Engineering", compute/accelerator/README.md,
// "Maximum Achievable Matmul FLOPS comparison table" (mamf-finder.py, mean of 100
// iterations at the best shape): A100 SXM 271.2 of 312 TFLOPS (86.9%, torch 2.6 cu126),
// H100 SXM 794.5 of 989 (80.3%, torch 2.7 cu126; "H200 is the same"). GeForce parts run
// above their spec boost clock: zzc0721/torch-performance-test-data#78 measures 164.81
// TFLOPS bf16 on an RTX 4090 (2048^3, torch 2.7 cu128; 99.8% of 165.2) and #70 92.74 on a
// stock RTX 4070 Ti SUPER (10240^3, torch 2.2.1; 105% of 88.2; #71 is overclocked).
constexpr double kA100MatmulEfficiency = 271.2 / 312.0;
constexpr double kH100MatmulEfficiency = 794.5 / 989.0;
constexpr double k4090MatmulEfficiency = 164.81 / 165.2;
constexpr double k4070TiSuperMatmulEfficiency = 92.74 / 88.2;
// The same table's FP8 (float8_e4m3fn) rows: H100 SXM 1402.6 of 1979 TFLOPS (70.9%, torch
// 2.7.0 cu126), H200 SXM 1453.4 of 1979 (73.4%, torch 2.7.1 cu128).
constexpr double kH100Fp8MatmulEfficiency = 1402.6 / 1979.0;
constexpr double kH200Fp8MatmulEfficiency = 1453.4 / 1979.0;

// FlashAttention-2 (PyTorch's SDPA flash backend is FA2's code). Dao, "FlashAttention-2",
// arXiv 2307.08691, abstract and Sec. 4.1: 50-73% of the A100's peak, the forward pass at
// the top of the range and the backward pass (2.5x the forward's FLOPs) at the bottom.
// Shah et al., "FlashAttention-3", arXiv 2407.08608, abstract: FA2 reaches only 35% of
// the H100's peak (it uses no Hopper instructions: no TMA, no wgmma).
constexpr double kAmpereFa2ForwardEfficiency = 0.73;
constexpr double kAmpereFa2BackwardEfficiency = 0.50;
constexpr double kHopperFa2Efficiency = 0.35;

// Most aliases a row holds; unused slots stay null.
constexpr size_t kMaxAliases = 6;

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

// The catalogue, in the order gpu_catalogue() promises: GeForce, workstation, then
// data-centre parts.
constexpr GpuRow kGpus[] = {
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
};

// Every row names what GpuSpec holds as strings (a null one would not convert).
constexpr bool rows_named() {
  for (const GpuRow& row : kGpus) {
    if (row.id == nullptr || row.name == nullptr || row.architecture == nullptr || row.source == nullptr) return false;
  }
  return true;
}
static_assert(rows_named(), "every GPU row gives id, name, architecture and source");

GpuSpec to_spec(const GpuRow& row) {
  GpuSpec gpu;
  gpu.id = row.id;
  gpu.name = row.name;
  for (const char* alias : row.aliases) {
    if (alias != nullptr) gpu.aliases.emplace_back(alias);
  }
  gpu.memory_bytes = row.memory_bytes;
  gpu.bf16_tflops = row.bf16_tflops;
  gpu.fp16_tflops = row.fp16_tflops;
  gpu.fp32_tflops = row.fp32_tflops;
  gpu.tf32_tflops = row.tf32_tflops;
  gpu.fp8_tflops = row.fp8_tflops;
  gpu.memory_bandwidth_gbps = row.memory_bandwidth_gbps;
  gpu.sm_count = row.sm_count;
  gpu.host_link_gbps = row.host_link_gbps;
  gpu.nvlink_gbps = row.nvlink_gbps;
  gpu.cuda_context_bytes = row.cuda_context_bytes;
  gpu.cublas_workspace_bytes = row.cublas_workspace_bytes;
  gpu.matmul_efficiency = row.matmul_efficiency;
  gpu.fp8_matmul_efficiency = row.fp8_matmul_efficiency;
  gpu.attention_forward_efficiency = row.attention_forward_efficiency;
  gpu.attention_backward_efficiency = row.attention_backward_efficiency;
  gpu.architecture = row.architecture;
  gpu.source = row.source;
  return gpu;
}

std::vector<GpuSpec> build_catalogue() {
  std::vector<GpuSpec> gpus;
  for (const GpuRow& row : kGpus) gpus.push_back(to_spec(row));
  return gpus;
}

std::string to_lower(std::string_view text) {
  std::string lower(text);
  for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return lower;
}

}  // namespace

const std::vector<GpuSpec>& gpu_catalogue() {
  static const std::vector<GpuSpec> catalogue = build_catalogue();
  return catalogue;
}

Result<GpuSpec> find_gpu(std::string_view id_or_alias) {
  const std::string wanted = to_lower(id_or_alias);
  for (const GpuSpec& gpu : gpu_catalogue()) {
    if (to_lower(gpu.id) == wanted) return gpu;
    for (const std::string& alias : gpu.aliases) {
      if (to_lower(alias) == wanted) return gpu;
    }
  }
  std::string known;
  for (const GpuSpec& gpu : gpu_catalogue()) {
    if (!known.empty()) known += ", ";
    known += gpu.id;
  }
  return Status::unsupported("gpu: unknown GPU '" + std::string(id_or_alias) +
                             "' (expected one of: " + known + ")");
}

GpuSpec with_memory(const GpuSpec& base, int64_t memory_bytes) {
  assert(memory_bytes > 0 && "with_memory: memory_bytes must be positive");
  GpuSpec gpu = base;
  gpu.memory_bytes = memory_bytes;
  return gpu;
}

}  // namespace headroom::planner
