// A GpuSpec's JSON form (--gpu-file, a plan's settings.gpu_spec) and the run's GPU
// resolver: round trips, defaults, refusals, and bf16 refused where there is none.
#include <doctest/doctest.h>

#include <nlohmann/json.hpp>
#include <string>

#include "planner/settings/gpu_json.h"
#include "planner/settings/run_gpu.h"
#include "planner/settings/settings_json.h"

namespace headroom::planner {
namespace {

bool same(const GpuSpec& a, const GpuSpec& b) { return gpu_to_json(a) == gpu_to_json(b); }

nlohmann::json lab_card() {
  return {{"id", "lab-card"},         {"name", "Lab Card"},      {"architecture", "hopper"},
          {"memory_bytes", 1LL << 34}, {"bf16_tflops", 100.0},   {"fp16_tflops", 100.0},
          {"fp32_tflops", 25.0},       {"memory_bandwidth_gbps", 700.0}, {"host_link_gbps", 25.0}};
}

TEST_CASE("every catalogued GPU reads back from its JSON unchanged") {
  for (const GpuSpec& gpu : gpu_catalogue()) {
    CAPTURE(gpu.id);
    Result<GpuSpec> back = gpu_from_json(gpu_to_json(gpu), "test", "");
    REQUIRE(back.is_ok());
    CHECK(same(back.value(), gpu));
    CHECK(back->aliases == gpu.aliases);
    CHECK(back->source == gpu.source);
  }
}

TEST_CASE("a GPU file's optional fields take the catalogue's defaults for its architecture") {
  Result<GpuSpec> gpu = gpu_from_json(lab_card(), "card.json", "");
  REQUIRE(gpu.is_ok());
  CHECK(gpu->cuda_context_bytes == default_cuda_context_bytes());
  CHECK(gpu->cublas_workspace_bytes == 32 * (int64_t{1} << 20));  // Hopper's 32 MiB
  CHECK(gpu->fp8_tflops == 0.0);
  CHECK(gpu->sm_count == 0);
  CHECK(gpu->nvlink_gbps == 0.0);
}

TEST_CASE("a GPU file's errors name the origin, the prefix and the field") {
  nlohmann::json bad = lab_card();
  bad["host_link_gbps"] = 0;
  Result<GpuSpec> zero = gpu_from_json(bad, "card.json", "");
  REQUIRE_FALSE(zero.is_ok());
  CHECK(zero.message() == "card.json: host_link_gbps: expected a number above 0 up to 100000.0, got 0");
  bad = lab_card();
  bad.erase("bf16_tflops");
  Result<GpuSpec> missing = gpu_from_json(bad, "plan.json", "settings.gpu_spec.");
  REQUIRE_FALSE(missing.is_ok());
  CHECK(missing.message() ==
        "plan.json: settings.gpu_spec.bf16_tflops: expected a number from 0 up to 100000.0; the field is required");
  Result<GpuSpec> not_object = gpu_from_json(nlohmann::json::array(), "plan.json", "settings.gpu_spec.");
  REQUIRE_FALSE(not_object.is_ok());
  CHECK(not_object.message().find("plan.json: settings.gpu_spec: expected a JSON object") == 0);
}

TEST_CASE("settings carry gpu_spec through their JSON, and refuse one that disagrees with gpu") {
  RunSettings settings;
  settings.model = "tiny-llama";
  settings.gpu_spec = gpu_from_json(lab_card(), "card.json", "").value();
  settings.gpu = "lab-card";
  const nlohmann::json written = settings_to_json(settings);
  Result<RunSettings> back = settings_from_json(written, "plan.json");
  REQUIRE(back.is_ok());
  REQUIRE(back->gpu_spec.has_value());
  CHECK(same(*back->gpu_spec, *settings.gpu_spec));
  nlohmann::json edited = written;
  edited["gpu"] = "a6000";
  Result<RunSettings> mixed = settings_from_json(edited, "plan.json");
  REQUIRE_FALSE(mixed.is_ok());
  CHECK(mixed.message() == "plan.json: settings.gpu: expected \"lab-card\", the id of settings.gpu_spec, got \"a6000\"");
  // Without a gpu_spec nothing is written: catalogue plans stay as they were.
  CHECK_FALSE(settings_to_json(RunSettings{}).contains("gpu_spec"));
}

TEST_CASE("run_gpu: the custom GPU over the catalogue, --gpu-mem over both") {
  RunSettings settings;
  settings.gpu_spec = gpu_from_json(lab_card(), "card.json", "").value();
  settings.gpu = "lab-card";
  CHECK(run_gpu(settings)->name == "Lab Card");
  settings.gpu_memory_bytes = int64_t{8} << 30;
  CHECK(run_gpu(settings)->memory_bytes == int64_t{8} << 30);
  RunSettings catalogue;
  catalogue.gpu = "a40";
  CHECK(run_gpu(catalogue)->name == "NVIDIA A40");
  catalogue.gpu = "nope";
  CHECK_FALSE(run_gpu(catalogue).is_ok());
}

TEST_CASE("bf16 precisions are refused on a GPU without bf16, fp16 and fp32 are not") {
  const GpuSpec t4 = find_gpu("t4").value();
  const GpuSpec a100 = find_gpu("a100").value();
  for (Precision bf16 : {Precision::kBf16Mixed, Precision::kBf16Pure, Precision::kBf16Amp}) {
    CAPTURE(precision_name(bf16));
    const Status refused = check_gpu_precision(t4, bf16);
    REQUIRE_FALSE(refused.is_ok());
    CHECK(refused.message().find("NVIDIA T4") != std::string::npos);
    CHECK(refused.message().find("--precision fp16-amp") != std::string::npos);
    CHECK(refused.message().find("fp16-mixed") != std::string::npos);
    CHECK(check_gpu_precision(a100, bf16).is_ok());
  }
  for (Precision other : {Precision::kFp16Mixed, Precision::kFp16Amp, Precision::kFp32}) {
    CHECK(check_gpu_precision(t4, other).is_ok());
  }
  RunSettings on_v100;
  on_v100.gpu = "v100";  // the default precision is bf16-mixed
  CHECK_FALSE(run_gpu(on_v100).is_ok());
  on_v100.precision = Precision::kFp16Amp;
  CHECK(run_gpu(on_v100).is_ok());
}

TEST_CASE("16-bit matmuls run at the fp16 rate under fp16 precisions, else at the bf16 rate") {
  const GpuSpec t4 = find_gpu("t4").value();
  CHECK(tensor16_tflops(t4, Precision::kFp16Amp) == doctest::Approx(65.0));
  CHECK(tensor16_tflops(t4, Precision::kFp16Mixed) == doctest::Approx(65.0));
  const GpuSpec h100 = find_gpu("h100").value();
  CHECK(tensor16_tflops(h100, Precision::kBf16Mixed) == doctest::Approx(989.4));
}

}  // namespace
}  // namespace headroom::planner
