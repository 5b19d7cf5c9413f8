// The GPUs issue 39 added to the catalogue: each spot-checked against the figure
// its source gives (docs/hardware.md), the aliases people type, and the memory
// CUDA sees where nvidia-smi's total is larger (T4, V100).
#include <doctest/doctest.h>

#include <string>

#include "planner/settings/hardware.h"

namespace headroom::planner {
namespace {

constexpr int64_t kMiB = int64_t{1} << 20;

GpuSpec gpu(const std::string& id) {
  Result<GpuSpec> found = find_gpu(id);
  REQUIRE(found.is_ok());
  return found.value();
}

TEST_CASE("added GPUs: memory as CUDA reports it, from the public logs docs/hardware.md cites") {
  CHECK(gpu("t4").memory_bytes == 15102 * kMiB);        // torch "Tesla T4, 15102MiB"
  CHECK(gpu("v100-16g").memory_bytes == 16160 * kMiB);  // torch "Tesla V100-SXM2-16GB, 16160MiB"
  CHECK(gpu("v100-32g").memory_bytes == 32494 * kMiB);  // torch "Tesla V100-SXM2-32GB, 32494MiB"
  CHECK(gpu("l4").memory_bytes == 23034 * kMiB);        // modal-labs/modal-client#2797
  CHECK(gpu("a40").memory_bytes == 46068 * kMiB);
  CHECK(gpu("3060").memory_bytes == 12288 * kMiB);
  CHECK(gpu("4060ti-16g").memory_bytes == 16380 * kMiB);
  CHECK(gpu("4080").memory_bytes == 16376 * kMiB);
  CHECK(gpu("4090d").memory_bytes == 24564 * kMiB);
  CHECK(gpu("5090").memory_bytes == 32607 * kMiB);
  CHECK(gpu("rtx6000-ada").memory_bytes == 49140 * kMiB);
  CHECK(gpu("rtx-pro-6000").memory_bytes == 97887 * kMiB);
  CHECK(gpu("a800-80g").memory_bytes == 81920 * kMiB);
  CHECK(gpu("h800").memory_bytes == 81559 * kMiB);
  CHECK(gpu("h20").memory_bytes == 97871 * kMiB);
  CHECK(gpu("b200").memory_bytes == 183359 * kMiB);  // NVIDIA/TensorRT-LLM#10278
}

TEST_CASE("added GPUs: dense tensor rates from the datasheets and whitepapers") {
  // T4 datasheet: mixed precision 65 TFLOPS, FP32 8.1, 320 GB/s; no bf16.
  CHECK(gpu("t4").fp16_tflops == doctest::Approx(65.0));
  CHECK(gpu("t4").fp32_tflops == doctest::Approx(8.1));
  CHECK(gpu("t4").memory_bandwidth_gbps == doctest::Approx(320.0));
  // V100 datasheet (SXM2): tensor 125, FP32 15.7, 900 GB/s, NVLink 300 GB/s total.
  CHECK(gpu("v100-32g").fp16_tflops == doctest::Approx(125.0));
  CHECK(gpu("v100-16g").fp32_tflops == doctest::Approx(15.7));
  CHECK(gpu("v100-16g").nvlink_gbps == doctest::Approx(150.0));
  // L4 datasheet: BF16 242 and FP8 485 with sparsity, 300 GB/s.
  CHECK(gpu("l4").bf16_tflops == doctest::Approx(242.0 / 2));
  CHECK(gpu("l4").fp8_tflops == doctest::Approx(485.0 / 2));
  CHECK(gpu("l4").memory_bandwidth_gbps == doctest::Approx(300.0));
  // A40 datasheet: BF16 149.7 dense, 696 GB/s.
  CHECK(gpu("a40").bf16_tflops == doctest::Approx(149.7));
  CHECK(gpu("a40").memory_bandwidth_gbps == doctest::Approx(696.0));
  // GeForce per-SM rates (512 BF16 FLOPs per SM per clock with FP32 accumulate).
  CHECK(gpu("3060").bf16_tflops == doctest::Approx(28 * 1.777e9 * 512 / 1e12).epsilon(0.002));
  CHECK(gpu("4060ti-16g").bf16_tflops == doctest::Approx(34 * 2.535e9 * 512 / 1e12).epsilon(0.002));
  CHECK(gpu("4090d").bf16_tflops == doctest::Approx(114 * 2.52e9 * 512 / 1e12).epsilon(0.002));
  CHECK(gpu("5090").bf16_tflops == doctest::Approx(170 * 2.407e9 * 512 / 1e12).epsilon(0.002));
  // Ada whitepaper appendix: RTX 4080 97.5, RTX 6000 Ada 364.2 (full rate), 728.5 FP8.
  CHECK(gpu("4080").bf16_tflops == doctest::Approx(97.5));
  CHECK(gpu("4080").memory_bandwidth_gbps == doctest::Approx(22.4 * 256 / 8));
  CHECK(gpu("rtx6000-ada").bf16_tflops == doctest::Approx(364.2));
  CHECK(gpu("rtx6000-ada").fp8_tflops == doctest::Approx(728.5));
  // RTX PRO 6000 datasheet: 4,000 AI TOPS = FP4 with sparsity; BF16 dense is an eighth.
  CHECK(gpu("rtx-pro-6000").bf16_tflops == doctest::Approx(4000.0 / 8));
  CHECK(gpu("rtx-pro-6000").fp32_tflops == doctest::Approx(125.0));
  // HGX B200 table, per GPU: FP16/BF16 36 PFLOPS sparse over 8 GPUs, NVLink 1.8 TB/s.
  CHECK(gpu("b200").bf16_tflops == doctest::Approx(36000.0 / 8 / 2));
  CHECK(gpu("b200").nvlink_gbps == doctest::Approx(900.0));
  // The China parts: A100 and H100 compute with NVLink cut to 400 GB/s; the H20's 148.
  CHECK(gpu("a800-80g").bf16_tflops == gpu("a100-80g").bf16_tflops);
  CHECK(gpu("a800-80g").nvlink_gbps == doctest::Approx(200.0));
  CHECK(gpu("h800").bf16_tflops == gpu("h100-sxm").bf16_tflops);
  CHECK(gpu("h800").nvlink_gbps == doctest::Approx(200.0));
  CHECK(gpu("h20").bf16_tflops == doctest::Approx(148.0));
  CHECK(gpu("h20").matmul_efficiency == doctest::Approx(142.25 / 148.0));
}

TEST_CASE("added GPUs: bf16 support, host links and workspaces by architecture") {
  for (const char* id : {"t4", "v100-16g", "v100-32g"}) {
    CAPTURE(id);
    CHECK_FALSE(supports_bf16(gpu(id)));
    CHECK(gpu(id).host_link_gbps == doctest::Approx(12.6));  // PCIe 3.0 x16
  }
  for (const char* id : {"l4", "a40", "3060", "4080", "5090", "rtx-pro-6000", "a800-80g", "h20", "b200"}) {
    CAPTURE(id);
    CHECK(supports_bf16(gpu(id)));
  }
  CHECK(gpu("4060ti-16g").host_link_gbps == doctest::Approx(12.5));  // PCIe 4.0 x8
  CHECK(gpu("5090").host_link_gbps == doctest::Approx(50.0));        // PCIe 5.0 x16
  // PyTorch's 32 MiB cuBLAS workspace on sm_90 and later; 8.125 MiB before.
  CHECK(gpu("b200").cublas_workspace_bytes == 32 * kMiB);
  CHECK(gpu("5090").cublas_workspace_bytes == 32 * kMiB);
  CHECK(gpu("t4").cublas_workspace_bytes == 8519680);
  CHECK(default_cublas_workspace_bytes("blackwell") == 32 * kMiB);
  CHECK(default_cublas_workspace_bytes("volta") == 8519680);
  CHECK(default_cuda_context_bytes() == gpu("a6000").cuda_context_bytes);
}

TEST_CASE("added GPUs: the spellings people type find them") {
  CHECK(gpu("rtx 4090d").id == "4090d");
  CHECK(gpu("4090D").id == "4090d");
  CHECK(gpu("NVIDIA GeForce RTX 4090 D").id == "4090d");
  CHECK(gpu("H20").id == "h20");
  CHECK(gpu("NVIDIA H20").id == "h20");
  CHECK(gpu("Tesla T4").id == "t4");
  CHECK(gpu("v100").id == "v100-32g");
  CHECK(gpu("a800").id == "a800-80g");
  CHECK(gpu("NVIDIA A800-SXM4-80GB").id == "a800-80g");
  CHECK(gpu("4060ti").id == "4060ti-16g");
  CHECK(gpu("NVIDIA RTX 6000 Ada Generation").id == "rtx6000-ada");
  CHECK(gpu("NVIDIA RTX PRO 6000 Blackwell Workstation Edition").id == "rtx-pro-6000");
  CHECK(gpu("NVIDIA B200").id == "b200");
}

TEST_CASE("an unknown GPU's message names --gpu-mem, --gpu-file and headroom gpus") {
  Result<GpuSpec> result = find_gpu("a10g");
  REQUIRE_FALSE(result.is_ok());
  CHECK(result.message().find("--gpu-mem") != std::string::npos);
  CHECK(result.message().find("--gpu-file") != std::string::npos);
  CHECK(result.message().find("headroom gpus") != std::string::npos);
}

}  // namespace
}  // namespace headroom::planner
