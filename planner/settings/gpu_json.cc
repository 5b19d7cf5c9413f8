#include "planner/settings/gpu_json.h"

#include <nlohmann/json.hpp>
#include <utility>

#include "graph/atomic_file.h"
#include "graph/json_text.h"
#include "planner/settings/json_fields.h"

namespace headroom::planner {
namespace {

using nlohmann::json;

// Bounds that keep a typo (TFLOPS given as FLOPS, bytes as GiB) from passing:
// ten times the fastest catalogued figure, and 1 PiB of memory.
constexpr double kMaxTflops = 1e5;
constexpr double kMaxGbps = 1e5;
constexpr double kMaxEfficiency = 2.0;  // measured rates run above the spec clock (4070 Ti SUPER: 1.05)
constexpr int64_t kMinMemoryBytes = int64_t{1} << 20;
constexpr int64_t kMaxMemoryBytes = int64_t{1} << 50;
constexpr int kMaxSmCount = 4096;
constexpr size_t kMaxTextChars = 200;
constexpr size_t kMaxAliases = 32;
constexpr int64_t kMaxGpuFileBytes = int64_t{1} << 20;

// One floating-point field: its key, where it goes, whether it must be given,
// whether 0 is allowed (0 means "none" for the optional ones), and its ceiling.
struct RateField {
  const char* key;
  double GpuSpec::*field;
  bool required;
  bool positive;
  double max;
};

constexpr RateField kRates[] = {
    {"bf16_tflops", &GpuSpec::bf16_tflops, true, false, kMaxTflops},  // 0: no bf16 (Volta, Turing)
    {"fp16_tflops", &GpuSpec::fp16_tflops, true, true, kMaxTflops},
    {"fp32_tflops", &GpuSpec::fp32_tflops, true, true, kMaxTflops},
    {"tf32_tflops", &GpuSpec::tf32_tflops, false, false, kMaxTflops},
    {"fp8_tflops", &GpuSpec::fp8_tflops, false, false, kMaxTflops},
    {"memory_bandwidth_gbps", &GpuSpec::memory_bandwidth_gbps, true, true, kMaxGbps},
    {"host_link_gbps", &GpuSpec::host_link_gbps, true, true, kMaxGbps},
    {"nvlink_gbps", &GpuSpec::nvlink_gbps, false, false, kMaxGbps},
    {"matmul_efficiency", &GpuSpec::matmul_efficiency, false, false, kMaxEfficiency},
    {"fp8_matmul_efficiency", &GpuSpec::fp8_matmul_efficiency, false, false, kMaxEfficiency},
    {"attention_forward_efficiency", &GpuSpec::attention_forward_efficiency, false, false, kMaxEfficiency},
    {"attention_backward_efficiency", &GpuSpec::attention_backward_efficiency, false, false, kMaxEfficiency},
};

constexpr const char* kArchitectures[] = {"volta", "turing", "ampere", "ada", "hopper", "blackwell"};

std::string architecture_names() {
  std::string names;
  for (const char* arch : kArchitectures) names += (names.empty() ? "" : ", ") + std::string(arch);
  return names;
}

Status missing(std::string_view origin, const std::string& prefix, const char* key, const std::string& what) {
  return Status::invalid_input(std::string(origin) + ": " + prefix + key + ": expected " + what +
                               "; the field is required");
}

std::string range_text(const RateField& rate) {
  return std::string("a number ") + (rate.positive ? "above 0" : "from 0") + " up to " +
         json(rate.max).dump();
}

Status read_rates(const json& j, JsonFields& r, std::string_view origin, const std::string& prefix, GpuSpec& gpu) {
  for (const RateField& rate : kRates) {
    if (!j.contains(rate.key)) {
      if (rate.required) return missing(origin, prefix, rate.key, range_text(rate));
      continue;
    }
    double value = 0;
    if (Status status = r.read(rate.key, value); !status.is_ok()) return status;
    if (value < 0 || (rate.positive && value == 0) || value > rate.max) {
      return r.expected(rate.key, range_text(rate), j.at(rate.key));
    }
    gpu.*rate.field = value;
  }
  return Status::ok();
}

// An integer field within [min, max]; absent leaves `out` as it is (or fails when required).
Status read_int(const json& j, JsonFields& r, std::string_view origin, const std::string& prefix, const char* key,
                bool required, int64_t min, int64_t max, int64_t& out) {
  const std::string what = "an integer from " + std::to_string(min) + " to " + std::to_string(max);
  if (!j.contains(key)) return required ? missing(origin, prefix, key, what) : Status::ok();
  int64_t value = 0;
  if (Status status = r.read(key, value); !status.is_ok()) return status;
  if (value < min || value > max) return r.expected(key, what, j.at(key));
  out = value;
  return Status::ok();
}

// A required, non-empty string of at most kMaxTextChars.
Status read_text(const json& j, JsonFields& r, std::string_view origin, const std::string& prefix, const char* key,
                 std::string& out) {
  const std::string what = "a non-empty string of at most " + std::to_string(kMaxTextChars) + " characters";
  if (!j.contains(key)) return missing(origin, prefix, key, what);
  if (Status status = r.read(key, out); !status.is_ok()) return status;
  if (out.empty() || out.size() > kMaxTextChars) return r.expected(key, what, j.at(key));
  return Status::ok();
}

Status read_names(const json& j, JsonFields& r, std::string_view origin, const std::string& prefix, GpuSpec& gpu) {
  const std::pair<const char*, std::string*> texts[] = {
      {"id", &gpu.id}, {"name", &gpu.name}, {"architecture", &gpu.architecture}};
  for (const auto& [key, out] : texts) {
    if (Status status = read_text(j, r, origin, prefix, key, *out); !status.is_ok()) return status;
  }
  bool known = false;
  for (const char* arch : kArchitectures) known = known || gpu.architecture == arch;
  if (!known) return r.expected("architecture", "one of " + architecture_names(), j.at("architecture"));
  if (Status status = r.read("source", gpu.source); !status.is_ok()) return status;
  if (gpu.source.size() > 4 * kMaxTextChars) return r.expected("source", "a string of at most 800 characters", j.at("source"));
  if (Status status = r.read("aliases", gpu.aliases); !status.is_ok()) return status;
  if (gpu.aliases.size() > kMaxAliases) {
    return r.expected("aliases", "at most " + std::to_string(kMaxAliases) + " names", j.at("aliases"));
  }
  return Status::ok();
}

Status read_sizes(const json& j, JsonFields& r, std::string_view origin, const std::string& prefix, GpuSpec& gpu) {
  int64_t sm_count = 0;
  gpu.cuda_context_bytes = default_cuda_context_bytes();
  gpu.cublas_workspace_bytes = default_cublas_workspace_bytes(gpu.architecture);
  for (const Status& status :
       {read_int(j, r, origin, prefix, "memory_bytes", true, kMinMemoryBytes, kMaxMemoryBytes, gpu.memory_bytes),
        read_int(j, r, origin, prefix, "sm_count", false, 0, kMaxSmCount, sm_count),
        read_int(j, r, origin, prefix, "cublas_workspace_bytes", false, 0, kMaxMemoryBytes, gpu.cublas_workspace_bytes),
        read_int(j, r, origin, prefix, "cuda_context_bytes", false, 0, kMaxMemoryBytes, gpu.cuda_context_bytes)}) {
    if (!status.is_ok()) return status;
  }
  gpu.sm_count = static_cast<int>(sm_count);
  if (gpu.cuda_context_bytes >= gpu.memory_bytes) {
    return r.expected("cuda_context_bytes", "less than memory_bytes (" + std::to_string(gpu.memory_bytes) + ")",
                      j.at("cuda_context_bytes"));
  }
  return Status::ok();
}

}  // namespace

json gpu_to_json(const GpuSpec& gpu) {
  json j = {{"id", gpu.id},
            {"name", gpu.name},
            {"aliases", gpu.aliases},
            {"architecture", gpu.architecture},
            {"source", gpu.source},
            {"memory_bytes", gpu.memory_bytes},
            {"sm_count", gpu.sm_count},
            {"cuda_context_bytes", gpu.cuda_context_bytes},
            {"cublas_workspace_bytes", gpu.cublas_workspace_bytes}};
  for (const RateField& rate : kRates) j[rate.key] = gpu.*rate.field;
  return j;
}

Result<GpuSpec> gpu_from_json(const json& j, std::string_view origin, const std::string& prefix) {
  if (!j.is_object()) {
    return Status::invalid_input(std::string(origin) + ": " + (prefix.empty() ? "" : prefix.substr(0, prefix.size() - 1) + ": ") +
                                 "expected a JSON object of GPU fields (docs/hardware.md, \"--gpu-file\")");
  }
  GpuSpec gpu;
  JsonFields r(j, origin, prefix);
  for (const Status& status : {read_names(j, r, origin, prefix, gpu), read_sizes(j, r, origin, prefix, gpu),
                               read_rates(j, r, origin, prefix, gpu), r.unknown_keys()}) {
    if (!status.is_ok()) return status;
  }
  return gpu;
}

Result<GpuSpec> read_gpu_file(const std::string& path) {
  Result<std::string> text = graph::read_file(path, kMaxGpuFileBytes);
  if (!text.is_ok()) return text.status();
  Result<json> parsed = graph::parse_json_text(text.value(), path);
  if (!parsed.is_ok()) return parsed.status();
  return gpu_from_json(parsed.value(), path, "");
}

}  // namespace headroom::planner
