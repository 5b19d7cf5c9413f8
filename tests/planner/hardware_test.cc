#include "planner/settings/hardware.h"

#include <doctest/doctest.h>

#include <algorithm>
#include <cctype>
#include <set>
#include <string>
#include <vector>

namespace headroom::planner {
namespace {

constexpr int64_t kMiB = int64_t{1} << 20;
constexpr int64_t kGiB = int64_t{1} << 30;

// GeForce, workstation, then data-centre parts; the first ten in their old order.
const std::vector<std::string> kExpectedIds = {
    "3090",     "4090",     "4070ti-super", "3060",     "4060ti-16g", "4080",     "4090d",
    "5090",     "a6000",    "l40s",         "rtx6000-ada", "rtx-pro-6000", "t4",   "v100-16g",
    "v100-32g", "l4",       "a40",          "a100-40g", "a100-80g",   "a800-80g", "h100-sxm",
    "h100-pcie", "h800",    "h20",          "h200",     "b200"};

std::string upper(std::string text) {
  for (char& c : text) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return text;
}

const GpuSpec& gpu(const std::string& id) {
  for (const GpuSpec& spec : gpu_catalogue()) {
    if (spec.id == id) return spec;
  }
  FAIL("no GPU with id " << id);
  return gpu_catalogue().front();
}

TEST_CASE("the catalogue holds every GPU once, in a stable order") {
  std::vector<std::string> ids;
  for (const GpuSpec& spec : gpu_catalogue()) ids.push_back(spec.id);
  CHECK(ids == kExpectedIds);
  // The same object on every call: callers may keep references.
  CHECK(&gpu_catalogue() == &gpu_catalogue());
}

TEST_CASE("every GPU is found by id and by each alias, ignoring case") {
  for (const GpuSpec& spec : gpu_catalogue()) {
    CAPTURE(spec.id);
    Result<GpuSpec> by_id = find_gpu(spec.id);
    REQUIRE(by_id.is_ok());
    CHECK(by_id->id == spec.id);
    Result<GpuSpec> by_upper_id = find_gpu(upper(spec.id));
    REQUIRE(by_upper_id.is_ok());
    CHECK(by_upper_id->id == spec.id);
    for (const std::string& alias : spec.aliases) {
      CAPTURE(alias);
      Result<GpuSpec> by_alias = find_gpu(alias);
      REQUIRE(by_alias.is_ok());
      CHECK(by_alias->id == spec.id);
      Result<GpuSpec> by_upper_alias = find_gpu(upper(alias));
      REQUIRE(by_upper_alias.is_ok());
      CHECK(by_upper_alias->id == spec.id);
    }
  }
}

TEST_CASE("the short aliases the CLI documents resolve to the intended part") {
  CHECK(find_gpu("a100")->id == "a100-80g");
  CHECK(find_gpu("h100")->id == "h100-sxm");
  CHECK(find_gpu("RTX-A6000")->id == "a6000");
  CHECK(find_gpu("rtxa6000")->id == "a6000");
  // The names nvidia-smi and torch.cuda.get_device_name() print.
  CHECK(find_gpu("NVIDIA H100 80GB HBM3")->id == "h100-sxm");
  CHECK(find_gpu("NVIDIA GeForce RTX 4090")->id == "4090");
  CHECK(find_gpu("NVIDIA A100-SXM4-80GB")->id == "a100-80g");
}

TEST_CASE("ids and aliases never collide across GPUs") {
  std::set<std::string> seen;
  for (const GpuSpec& spec : gpu_catalogue()) {
    std::vector<std::string> names = spec.aliases;
    names.push_back(spec.id);
    for (std::string name : names) {
      for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      CAPTURE(name);
      CHECK(seen.insert(name).second);
    }
  }
}

TEST_CASE("an unknown GPU is an error that lists the known ids") {
  Result<GpuSpec> result = find_gpu("k80");
  REQUIRE_FALSE(result.is_ok());
  CHECK(result.message().find("'k80'") != std::string::npos);
  for (const std::string& id : kExpectedIds) {
    CAPTURE(id);
    CHECK(result.message().find(id) != std::string::npos);
  }
  CHECK_FALSE(find_gpu("").is_ok());
  CHECK_FALSE(find_gpu("a100 ").is_ok());  // no silent trimming
}

TEST_CASE("every GPU's figures are filled in and consistent") {
  for (const GpuSpec& spec : gpu_catalogue()) {
    CAPTURE(spec.id);
    CHECK_FALSE(spec.name.empty());
    CHECK_FALSE(spec.source.empty());
    CHECK((spec.architecture == "volta" || spec.architecture == "turing" || spec.architecture == "ampere" ||
           spec.architecture == "ada" || spec.architecture == "hopper" || spec.architecture == "blackwell"));
    CHECK(spec.memory_bytes >= 12 * kGiB);  // the smallest catalogued card, the RTX 3060, has 12288 MiB
    CHECK(spec.memory_bytes % kMiB == 0);  // nvidia-smi reports whole MiB
    CHECK(spec.memory_bytes > spec.cuda_context_bytes + spec.cublas_workspace_bytes);
    CHECK(spec.cuda_context_bytes >= 100 * kMiB);
    CHECK(spec.cuda_context_bytes <= 2 * kGiB);
    // Tensor cores beat the plain FP32 pipe; TF32 sits between FP32 and BF16. Volta and
    // Turing have neither bf16 nor TF32 (0), only fp16 tensor cores.
    const bool pre_ampere = spec.architecture == "volta" || spec.architecture == "turing";
    CHECK(supports_bf16(spec) == !pre_ampere);
    CHECK(spec.fp16_tflops >= spec.fp32_tflops);
    if (pre_ampere) {
      CHECK(spec.bf16_tflops == 0.0);
      CHECK(spec.tf32_tflops == 0.0);
    } else {
      CHECK(spec.bf16_tflops >= spec.fp32_tflops);
      CHECK(spec.tf32_tflops >= spec.fp32_tflops);
      CHECK(spec.bf16_tflops >= spec.tf32_tflops);
      CHECK(spec.fp16_tflops == spec.bf16_tflops);  // same rate with FP32 accumulate
    }
    CHECK(spec.memory_bandwidth_gbps > 250.0);
    CHECK(spec.host_link_gbps > 10.0);
    CHECK(spec.host_link_gbps < spec.memory_bandwidth_gbps);
    CHECK(spec.nvlink_gbps >= 0.0);
    if (spec.nvlink_gbps > 0.0) CHECK(spec.nvlink_gbps > spec.host_link_gbps);
  }
}

TEST_CASE("fp8 tensor rates: dense with FP32 accumulate on Ada and Hopper, none on Ampere") {
  // NVIDIA H100 SXM / H200 datasheets: FP8 3,958 TFLOPS with sparsity = 1,979 dense;
  // H100 PCIe 3,026 = 1,513 dense; L40S datasheet 1,466 = 733 dense.
  CHECK(gpu("h100-sxm").fp8_tflops == doctest::Approx(1979.0));
  CHECK(gpu("h200").fp8_tflops == doctest::Approx(1979.0));
  CHECK(gpu("h100-pcie").fp8_tflops == doctest::Approx(1513.0));
  CHECK(gpu("l40s").fp8_tflops == doctest::Approx(733.0));
  // Ada whitepaper, RTX 4090: FP8 with FP32 accumulate 330.3 dense (660.6 with FP16
  // accumulate); the 4070 Ti SUPER at the same 1,024 FLOPs per SM per clock.
  CHECK(gpu("4090").fp8_tflops == doctest::Approx(330.3));
  CHECK(gpu("4070ti-super").fp8_tflops == doctest::Approx(66 * 2.61e9 * 1024 / 1e12).epsilon(0.001));
  for (const char* ampere : {"3090", "a6000", "a100-40g", "a100-80g"}) {
    CAPTURE(ampere);
    CHECK(gpu(ampere).fp8_tflops == 0.0);
  }
  // Every fp8 part doubles its 16-bit rate (the L40S datasheet prints 733 against 2 x 362.05).
  for (const GpuSpec& spec : gpu_catalogue()) {
    CAPTURE(spec.id);
    if (spec.architecture != "ampere") CHECK(spec.fp8_tflops == doctest::Approx(2 * spec.bf16_tflops).epsilon(0.02));
  }
  // Bekman's MAMF table, FP8 rows: H100 SXM 1,402.6 and H200 SXM 1,453.4 of 1,979 TFLOPS.
  CHECK(gpu("h100-sxm").fp8_matmul_efficiency == doctest::Approx(1402.6 / 1979.0));
  CHECK(gpu("h200").fp8_matmul_efficiency == doctest::Approx(1453.4 / 1979.0));
  CHECK(gpu("4090").fp8_matmul_efficiency == 0.0);
}

TEST_CASE("relations between parts") {
  CHECK(gpu("h200").memory_bytes > gpu("h100-sxm").memory_bytes);
  CHECK(gpu("a100-80g").memory_bytes > gpu("a100-40g").memory_bytes);
  CHECK(gpu("a6000").memory_bytes > gpu("3090").memory_bytes);
  CHECK(gpu("h100-sxm").bf16_tflops > gpu("h100-pcie").bf16_tflops);
  CHECK(gpu("h100-sxm").bf16_tflops > gpu("a100-80g").bf16_tflops);
  CHECK(gpu("h200").memory_bandwidth_gbps > gpu("h100-sxm").memory_bandwidth_gbps);
  CHECK(gpu("h100-sxm").host_link_gbps > gpu("a100-80g").host_link_gbps);  // Gen5 vs Gen4
  // GeForce parts run FP32-accumulate tensor math at half rate: the A6000 (same GA102 die)
  // out-runs the 3090 in BF16 although its FP32 rate is close.
  CHECK(gpu("a6000").bf16_tflops > 2.0 * gpu("3090").bf16_tflops);
  CHECK(gpu("3090").nvlink_gbps == 0.0);
  CHECK(gpu("4090").nvlink_gbps == 0.0);
  CHECK(gpu("l40s").nvlink_gbps == 0.0);
}

TEST_CASE("known values from public sources") {
  // NVIDIA A100 datasheet: BF16 tensor 312 TFLOPS dense, TF32 156, FP32 19.5; 2,039 GB/s
  // for the 80 GB SXM part; NVLink 600 GB/s total = 300 per direction.
  CHECK(gpu("a100-80g").bf16_tflops == doctest::Approx(312.0));
  CHECK(gpu("a100-80g").tf32_tflops == doctest::Approx(156.0));
  CHECK(gpu("a100-80g").fp32_tflops == doctest::Approx(19.5));
  CHECK(gpu("a100-80g").memory_bandwidth_gbps == doctest::Approx(2039.0));
  CHECK(gpu("a100-80g").nvlink_gbps == doctest::Approx(300.0));
  // NVIDIA H100 whitepaper (SXM5): BF16 989.4 TFLOPS dense (1,978.9 sparse), 3.35 TB/s;
  // NVLink 900 GB/s total = 450 per direction.
  CHECK(gpu("h100-sxm").bf16_tflops == doctest::Approx(989.4));
  CHECK(gpu("h100-sxm").memory_bandwidth_gbps == doctest::Approx(3350.0));
  CHECK(gpu("h100-sxm").nvlink_gbps == doctest::Approx(450.0));
  // GA102 whitepaper App. A: RTX 3090 BF16 with FP32 accumulate 71 TFLOPS dense.
  CHECK(gpu("3090").bf16_tflops == doctest::Approx(71.0));
  // Ada whitepaper: RTX 4090 FP16/BF16 with FP32 accumulate 165.2 TFLOPS dense.
  CHECK(gpu("4090").bf16_tflops == doctest::Approx(165.2));
  // The same per-SM rate at 66 SMs and 2,610 MHz: RTX 4070 Ti SUPER 88.2; 21 Gbps x 256 bits.
  CHECK(gpu("4070ti-super").bf16_tflops == doctest::Approx(66 * 2.61e9 * 512 / 1e12).epsilon(0.001));
  CHECK(gpu("4070ti-super").memory_bandwidth_gbps == doctest::Approx(21.0 * 256 / 8));
  CHECK(gpu("4070ti-super").memory_bytes == 16376 * kMiB);
  // nvidia-smi memory.total: H100 80GB HBM3 81559 MiB, A6000 49140 MiB (48 GB class),
  // RTX 3090 24576 MiB, H200 143771 MiB.
  CHECK(gpu("h100-sxm").memory_bytes == 81559 * kMiB);
  CHECK(gpu("a6000").memory_bytes == 49140 * kMiB);
  CHECK(gpu("3090").memory_bytes == 24576 * kMiB);
  CHECK(gpu("h200").memory_bytes == 143771 * kMiB);
  // PyTorch CublasHandlePool.cpp: ":4096:2:16:8" by default, ":4096:8" (32 MiB) on sm_90.
  CHECK(gpu("a100-80g").cublas_workspace_bytes == (2 * 4096 + 8 * 16) * int64_t{1024});
  CHECK(gpu("4090").cublas_workspace_bytes == 8519680);
  CHECK(gpu("h100-sxm").cublas_workspace_bytes == 32 * kMiB);
  CHECK(gpu("h200").cublas_workspace_bytes == 32 * kMiB);
}

TEST_CASE("with_memory changes the memory and nothing else") {
  const GpuSpec& base = gpu("a6000");
  const int64_t memory = 40 * kGiB;
  GpuSpec custom = with_memory(base, memory);
  CHECK(custom.memory_bytes == memory);
  CHECK(custom.id == base.id);
  CHECK(custom.name == base.name);
  CHECK(custom.aliases == base.aliases);
  CHECK(custom.bf16_tflops == base.bf16_tflops);
  CHECK(custom.fp16_tflops == base.fp16_tflops);
  CHECK(custom.fp32_tflops == base.fp32_tflops);
  CHECK(custom.tf32_tflops == base.tf32_tflops);
  CHECK(custom.memory_bandwidth_gbps == base.memory_bandwidth_gbps);
  CHECK(custom.host_link_gbps == base.host_link_gbps);
  CHECK(custom.nvlink_gbps == base.nvlink_gbps);
  CHECK(custom.cuda_context_bytes == base.cuda_context_bytes);
  CHECK(custom.cublas_workspace_bytes == base.cublas_workspace_bytes);
  CHECK(custom.architecture == base.architecture);
  CHECK(custom.source == base.source);
  // The catalogue entry itself is untouched.
  CHECK(gpu("a6000").memory_bytes == 49140 * kMiB);
}

}  // namespace
}  // namespace headroom::planner
